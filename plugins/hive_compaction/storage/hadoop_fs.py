"""The Hadoop FileSystem API reached from PySpark through py4j.

All file work of the Spark job goes through here, so the same code runs on HDFS, viewfs, S3A or
the local file system: whatever scheme the partition location has (``capabilities`` says which
ones a commit may use).
"""

from __future__ import annotations

import builtins
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError

from hive_compaction.storage import jvm_helper
from hive_compaction.storage.capabilities import MOUNT_SCHEMES
from hive_compaction.storage.listing import FileIdentity
from hive_compaction.storage.small_files import SmallFiles

# Work areas hold journals whose names decide which files move: only their owner may write them.
_OWNER_ONLY = 0o700
# HiveCompactionHelper.MISSING_FOLDER: how a move into a folder that does not exist fails.
_MISSING_FOLDER = "no such folder to move into: "


# How the storage refuses a permission, as seen from the JVM: Hadoop's AccessControlException
# (HDFS, and the object stores' connectors), java.nio's AccessDeniedException (the local disk).
_DENIED = ("AccessControlException", "AccessDeniedException")


def permission_denied(e: Py4JJavaError) -> str | None:
    """The storage's own words when ``e`` is a refused permission (first line), else None. On
    HDFS they name the user, the access and the folder: ``Permission denied: user=etl,
    access=WRITE, inode="/wh/db.db":hive:hive:drwxr-xr-x``; py4j's message names only the call."""
    java = e.java_exception
    for _ in range(8):  # the exception and its causes
        if java is None:
            return None
        if str(java.getClass().getSimpleName()) in _DENIED:
            return str(java.getMessage() or java.toString()).splitlines()[0]
        java = java.getCause()
    return None


class FolderGone(FileNotFoundError):
    """A move's target folder does not exist (a partition dropped meanwhile); it was not created."""


@dataclass(frozen=True)
class Entry(FileIdentity):
    path: str
    name: str
    size: int
    modification_time: int
    is_dir: bool
    version: str | None = None  # as listing.DataFile's


class HadoopFS(SmallFiles):
    """File operations on Hadoop URIs. Listing, status and moves of many files go through the
    JVM helper (``jvm_helper``): one py4j round trip per batch instead of several per file.

    Every storage operation of the job is one method call here, the steps of publishing a small
    file included (``small_files``: write, publish, delete the temporary name), so the job's
    storage traffic can be traced or wrapped at this one boundary."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()
        self._path_class = self.java_class("org.apache.hadoop.fs.Path")
        self._cache: dict[str, object] = {}
        self._publish: dict[str, str] = {}  # folder -> the scheme its storage resolves to

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return jvm_helper.call(self._spark, method, *args)
        except Py4JJavaError as e:
            denied = permission_denied(e)
            if denied:
                raise PermissionError(denied) from e
            raise

    def java_class(self, name: str) -> JavaClass:
        """A Java class by its full name (``Outer$Inner`` for a nested one), without a round trip.
        Reaching it as ``spark._jvm.java.io.File`` asks the JVM about each package on the way,
        and each name that is not a class makes the class loader search every jar on Spark's
        classpath (and py4j's imports): about 1 ms a walk, several per commit (2026-11-27)."""
        return JavaClass(name, self._jvm._gateway_client)

    def path(self, uri: str) -> Any:
        return self._path_class(uri)

    def fs(self, uri: str) -> Any:
        parts = urlsplit(uri)
        key = f"{parts.scheme}://{parts.netloc}"
        if key not in self._cache:
            self._cache[key] = self.path(uri).getFileSystem(self._conf)
        return self._cache[key]

    @staticmethod
    def _entry(doc: dict[str, Any]) -> Entry:
        return Entry(
            doc["path"], doc["name"], int(doc["size"]), int(doc["mtime"]), bool(doc["dir"]), doc.get("version")
        )

    def list(self, uri: str) -> list[Entry]:
        """Direct children of a folder (empty when it does not exist), sorted by name."""
        return [self._entry(d) for d in self._call("list", uri)]

    def statuses(self, uris: builtins.list[str]) -> builtins.list[Entry | None]:  # list: the method above
        """The status of each path (None where it does not exist), in one call."""
        if not uris:
            return []
        return [self._entry(d) if d else None for d in self._call("statuses", list(uris))]

    def status(self, uri: str) -> Entry | None:
        return self.statuses([uri])[0]

    def exists(self, uri: str) -> bool:
        return self.status(uri) is not None

    def move_all(self, pairs: builtins.list[tuple[Any, ...]], create_folders: bool = True) -> int:
        """Move files (src, dst[, size, mtime[, version]]) in order, creating folders; a missing src
        is skipped (replays are idempotent), and so is one whose size, modification time or
        version (``Entry.version``) is not the one given; an existing dst raises (a move never
        overwrites). Returns how many moved.
        ``create_folders=False`` for moves into a partition: a dst folder that does not exist
        (dropped meanwhile) is never re-created, FolderGone is raised instead."""
        if not pairs:
            return 0
        try:
            return int(self._call("moveAll", [list(p) for p in pairs], create_folders))
        except Py4JJavaError as e:
            message = str(e.java_exception.getMessage() or "")
            if message.startswith(_MISSING_FOLDER):
                raise FolderGone(message) from None
            raise

    def rename(self, src: str, dst: str, create_folders: bool = True) -> None:
        """Move one file; the target must not exist (a rename never overwrites here)."""
        if self.exists(dst):
            raise FileExistsError(f"will not overwrite {dst} (moving {src})")
        if not self.move_all([(src, dst)], create_folders):
            raise FileNotFoundError(f"rename {src} -> {dst}: {src} does not exist")

    def copy(self, src: str, dst: str) -> None:
        """Copy one file byte for byte (Hadoop's FileUtil.copy); the target must not exist."""
        file_util = self.java_class("org.apache.hadoop.fs.FileUtil")
        if not file_util.copy(self.fs(src), self.path(src), self.fs(dst), self.path(dst), False, False, self._conf):
            raise OSError(f"copy {src} -> {dst} failed")

    def make_folders(self, uri: str) -> None:
        """Create a folder and its missing parents, if missing."""
        self._make_folder(uri)

    def rename_folder(self, src: str, dst: str) -> bool:
        """Rename a folder with what it holds, in one step; False (nothing changed) when ``src``
        does not exist or ``dst`` does (Hadoop's rename would move ``src`` into an existing folder)."""
        fs = self.fs(src)
        if not fs.exists(self.path(src)) or fs.exists(self.path(dst)):
            return False
        return bool(fs.rename(self.path(src), self.path(dst)))

    def touch(self, uri: str) -> None:
        """Set a file's modification time to now (a lease's renewal; a no-op on object stores)."""
        self.fs(uri).setTimes(self.path(uri), int(time.time() * 1000), -1)

    def delete(self, uri: str, recursive: bool = False) -> bool:
        """Delete a file (with its checksum file on the local disk), or a folder and what it
        holds with ``recursive``; False when nothing was there."""
        return bool(self._call("delete", uri, recursive))

    def read_text(self, uri: str) -> str:
        text = self.read_text_if_exists(uri)
        if text is None:
            raise FileNotFoundError(uri)
        return text

    def read_text_if_exists(self, uri: str) -> str | None:
        """A small file's text, or None when it does not exist (one round trip)."""
        text: str | None = self._call("readText", uri)
        return text

    def resolved_scheme(self, uri: str) -> str:
        """The scheme the data really lives on: the URI's own, but for a mount (viewfs), that of
        its target (for a path that does not exist yet, its nearest existing ancestor's)."""
        own = urlsplit(uri).scheme.lower()
        if own and own not in MOUNT_SCHEMES:
            return own
        fs = self.fs(uri)
        return str(fs.resolvePath(self.existing_ancestor(fs, uri)).toUri().getScheme() or "file").lower()

    def existing_ancestor(self, fs: Any, uri: str) -> Any:
        """The Path of ``uri``, or of its nearest ancestor that exists (on ``fs``, its file system)."""
        existing = self.path(uri)
        while existing.getParent() is not None and not fs.exists(existing):
            existing = existing.getParent()
        return existing

    def make_private_folder(self, uri: str) -> bool:
        """Create ``uri`` readable and writable by its owner only (0700; mkdirs alone would
        apply the umask). Returns False, changing nothing, when it already exists."""
        fs, p = self.fs(uri), self.path(uri)
        try:
            if fs.exists(p):
                return False
            fs.mkdirs(p)
            fs.setPermission(p, self.java_class("org.apache.hadoop.fs.permission.FsPermission")(_OWNER_ONLY))
        except Py4JJavaError as e:
            denied = permission_denied(e)
            if denied is None:
                raise
            # Its one use is the work area: by default a folder beside the table, in its parent.
            raise PermissionError(
                f"cannot create {uri} ({denied}): the account that runs the merges needs write "
                "access to the folder it goes in, or a work_dir in the config that it owns"
            ) from e
        return True

    def permission(self, uri: str) -> int:
        """The folder's or file's permission bits (e.g. 0o700)."""
        return int(self.fs(uri).getFileStatus(self.path(uri)).getPermission().toShort())
