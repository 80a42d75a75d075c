"""The Hadoop FileSystem API reached from PySpark through py4j.

All file work of the Spark job goes through here, so the same code runs on HDFS, S3A, ABFS or
the local file system: whatever scheme the partition location has.
"""
from __future__ import annotations

from dataclasses import dataclass

from .sizing import DataFile


def is_hidden(name: str) -> bool:
    """Hive and Spark skip names starting with '_' or '.' (_SUCCESS, .crc, staging folders)."""
    return name.startswith(("_", "."))


@dataclass(frozen=True)
class Entry:
    path: str
    name: str
    size: int
    modification_time: int
    is_dir: bool

    def as_data_file(self) -> DataFile:
        return DataFile(self.path, self.size, self.modification_time)


class HadoopFS:
    def __init__(self, spark):
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()
        self._cache: dict[str, object] = {}

    def path(self, uri: str):
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def fs(self, uri: str):
        p = self.path(uri)
        key = str(p.toUri().getScheme()) + "://" + str(p.toUri().getAuthority())
        if key not in self._cache:
            self._cache[key] = p.getFileSystem(self._conf)
        return self._cache[key]

    def list(self, uri: str) -> list[Entry]:
        """Direct children of a folder (empty when it does not exist), sorted by name."""
        fs = self.fs(uri)
        p = self.path(uri)
        if not fs.exists(p):
            return []
        out = []
        for st in fs.listStatus(p):
            sp = st.getPath()
            out.append(Entry(sp.toString(), sp.getName(), int(st.getLen()),
                             int(st.getModificationTime()), bool(st.isDirectory())))
        return sorted(out, key=lambda e: e.name)

    def status(self, uri: str) -> Entry | None:
        fs = self.fs(uri)
        p = self.path(uri)
        if not fs.exists(p):
            return None
        st = fs.getFileStatus(p)
        return Entry(st.getPath().toString(), st.getPath().getName(), int(st.getLen()),
                     int(st.getModificationTime()), bool(st.isDirectory()))

    def exists(self, uri: str) -> bool:
        return bool(self.fs(uri).exists(self.path(uri)))

    def mkdirs(self, uri: str) -> None:
        if not self.fs(uri).mkdirs(self.path(uri)):
            raise OSError(f"could not create folder {uri}")

    def rename(self, src: str, dst: str) -> None:
        """Move one file; the target must not exist (a rename never overwrites here)."""
        fs = self.fs(src)
        d = self.path(dst)
        if fs.exists(d):
            raise FileExistsError(f"will not overwrite {dst} (moving {src})")
        parent = d.getParent()
        if not fs.exists(parent):
            fs.mkdirs(parent)
        if not fs.rename(self.path(src), d):
            raise OSError(f"rename {src} -> {dst} failed")

    def delete(self, uri: str, recursive: bool = False) -> bool:
        return bool(self.fs(uri).delete(self.path(uri), recursive))

    def read_text(self, uri: str) -> str:
        fs = self.fs(uri)
        stream = fs.open(self.path(uri))
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()

    def create_exclusive(self, uri: str, text: str) -> bool:
        """Create a small file only if it does not exist (an atomic create on HDFS); False if it did."""
        fs = self.fs(uri)
        p = self.path(uri)
        if not fs.exists(p.getParent()):
            fs.mkdirs(p.getParent())
        try:
            out = fs.create(p, False)
        except Exception as e:  # py4j wraps FileAlreadyExistsException
            if "FileAlreadyExists" in str(e) or fs.exists(p):
                return False
            raise
        try:
            out.write(bytearray(text.encode("utf-8")))
            out.hsync()
        finally:
            out.close()
        return True

    def write_text_atomic(self, uri: str, text: str) -> None:
        """Write to a hidden temporary name, close (durable), then rename over nothing."""
        p = self.path(uri)
        tmp = f"{p.getParent().toString()}/.{p.getName()}.tmp"
        fs = self.fs(uri)
        if fs.exists(self.path(tmp)):
            fs.delete(self.path(tmp), False)
        out = fs.create(self.path(tmp), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
            out.hsync()
        finally:
            out.close()
        if fs.exists(p):
            fs.delete(p, False)
        if not fs.rename(self.path(tmp), p):
            raise OSError(f"rename {tmp} -> {uri} failed")
