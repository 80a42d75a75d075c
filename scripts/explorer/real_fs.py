"""The explorer's file system on the local disk, through the real ``HadoopFS`` (the JVM helper,
Hadoop's local file system): the same calls and scheduling points as ``world.MemoryFS``, so that
one schedule run on both must end in the same state (``twin_differences``), and the double
cannot drift from the real thing.

The commit code sees the same paths as on the double (``file:///w/...``); they stand for a
folder on the local disk. Every file the world writes gets the virtual clock's time, so that
the ages the commit code reads (orphaned journals, switches in flight) are the double's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from explorer.world import FileNode, _norm, _parent, rows_in
from hive_compaction.storage.hadoop_fs import Entry, HadoopFS

VIRTUAL = "file:///w"
ROWS = "rows:"  # a data file's text: its row ids


class RealFS:
    def __init__(self, sched, clock, spark, root: Path):
        self.sched, self.clock = sched, clock
        self.hfs = HadoopFS(spark)
        self.root = root
        (root / "w").mkdir(parents=True, exist_ok=True)

    # -- paths: virtual (what the commit code sees) and real --
    def _real(self, uri: str) -> str:
        return f"file://{self.root}/w" + uri[len(VIRTUAL) :] if uri.startswith(VIRTUAL) else uri

    def _local(self, uri: str) -> Path:
        return Path(str(self.root / "w") + _norm(uri)[len(VIRTUAL) :])

    def _virtual(self, path: str) -> str:
        local = str(self.root / "w")
        for prefix in (f"file://{local}", f"file:{local}"):
            if path.startswith(prefix):
                return VIRTUAL + path[len(prefix) :]
        return path

    def _entry(self, e: Entry | None) -> Entry | None:
        return (
            None
            if e is None
            else Entry(self._virtual(e.path), e.name, e.size, e.modification_time, e.is_dir, e.version)
        )

    def _stamp(self, uri: str) -> None:
        p = self._local(uri)
        if p.exists():
            os.utime(p, (self.clock.now, self.clock.now))

    # -- HadoopFS's calls, each after its scheduling point --
    def list(self, uri: str) -> list[Entry]:
        self.sched.point("list {}", uri)
        return [self._entry(e) for e in self.hfs.list(self._real(uri)) if not e.name.endswith(".crc")]

    def statuses(self, uris: list[str]) -> list[Entry | None]:
        if not uris:
            return []
        self.sched.point("statuses of {}", len(uris))
        return [self._entry(e) for e in self.hfs.statuses([self._real(u) for u in uris])]

    status, exists, rename, read_text = HadoopFS.status, HadoopFS.exists, HadoopFS.rename, HadoopFS.read_text

    def move_all(self, pairs: list[tuple], create_folders: bool = True) -> int:
        moved = 0
        for pair in pairs:
            self.sched.point("move {} -> {}", _norm(pair[0]), _norm(pair[1]))
            moved += self.hfs.move_all([(self._real(pair[0]), self._real(pair[1]), *pair[2:])], create_folders)
        return moved

    def rename_folder(self, src: str, dst: str) -> bool:
        self.sched.point("rename folder {} -> {}", _norm(src), _norm(dst))
        if not self._local(_parent(dst)).is_dir():  # as HDFS: never into a folder that is not there
            return False
        return self.hfs.rename_folder(self._real(src), self._real(dst))

    def make_folders(self, uri: str) -> None:
        self.sched.point("mkdirs {}", uri)
        self.hfs.make_folders(self._real(uri))

    def copy(self, src: str, dst: str) -> None:
        self.sched.point("copy {} -> {}", _norm(src), _norm(dst))
        self.hfs.copy(self._real(src), self._real(dst))
        self._stamp(dst)

    def touch(self, uri: str) -> None:
        self.sched.point("touch {}", uri)
        self.hfs.touch(self._real(uri))

    def delete(self, uri: str, recursive: bool = False) -> bool:
        self.sched.point("delete {}", _norm(uri))
        return self.hfs.delete(self._real(uri), recursive)

    def read_text_if_exists(self, uri: str) -> str | None:
        self.sched.point("read {}", uri)
        return self.hfs.read_text_if_exists(self._real(uri))

    def create_exclusive(self, uri: str, text: str) -> bool:
        self.sched.point("create exclusive {}", uri)
        made = self.hfs.create_exclusive(self._real(uri), text)
        if made:
            self._stamp(uri)
        return made

    def write_text_atomic(self, uri: str, text: str) -> None:
        self.sched.point("write {}", uri)
        self.hfs.write_text_atomic(self._real(uri), text)
        self._stamp(uri)

    def write_data(self, uri: str, rows: tuple[str, ...]) -> None:
        self.sched.point("stage {}", uri)
        self.put(uri, rows)

    def resolved_scheme(self, uri: str) -> str:
        return "file"

    def make_private_folder(self, uri: str) -> bool:
        self.sched.point("mkdirs {}", uri)
        return self.hfs.make_private_folder(self._real(uri))

    def permission(self, uri: str) -> int:
        return self.hfs.permission(self._real(uri))

    # -- the world's own steps and looks (no scheduling point) --
    def mkdirs(self, uri: str) -> None:
        self._local(uri).mkdir(parents=True, exist_ok=True)

    def put(self, uri: str, rows: tuple[str, ...] = (), text: str | None = None, size: int | None = None) -> None:
        p = self._local(uri)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text if text is not None else ROWS + ",".join(rows))
        self._stamp(uri)

    def remove_tree(self, uri: str) -> None:
        p = self._local(uri)
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()

    def drop_file(self, uri: str) -> None:
        self._local(uri).unlink()

    def _node(self, p: Path) -> FileNode:
        text = p.read_text()
        st = p.stat()
        rows = tuple(r for r in text[len(ROWS) :].split(",") if r) if text.startswith(ROWS) else ()
        return FileNode(st.st_size, int(st.st_mtime * 1000), st.st_ino, rows, None if text.startswith(ROWS) else text)

    def children(self, uri: str) -> list[tuple[str, FileNode | None]]:
        p = self._local(uri)
        if not p.is_dir():
            return []
        return sorted(
            (f"{_norm(uri)}/{c.name}", None if c.is_dir() else self._node(c))
            for c in p.iterdir()
            if not c.name.endswith(".crc")
        )

    def rows_under(self, uri: str) -> list[str]:
        return rows_in(self.children(uri))

    @property
    def files(self) -> dict[str, FileNode]:
        base = self.root / "w"
        return {
            VIRTUAL + "/" + str(p.relative_to(base)): self._node(p)
            for p in base.rglob("*")
            if p.is_file() and not p.name.endswith(".crc")
        }

    @property
    def dirs(self) -> set[str]:
        base = self.root / "w"
        return {VIRTUAL + "/" + str(p.relative_to(base)) for p in base.rglob("*") if p.is_dir()}
