"""A partition folder's listing as the commit and the merge job read it: which entries are data
files (Hive and Spark skip hidden names), which folders are writers' staging, and the identity of
a file that a journal records and checks before every move."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# The names of this package's merged files (a merge job's outputs): ``part-compacted-<tag>-...``.
MERGED_PREFIX = "part-compacted-"
# Folders writers keep in a partition while they write (Hive, MapReduce, Spark).
WRITER_STAGING = (".hive-staging", "_temporary", ".spark-staging")


@dataclass(frozen=True)
class RecordedFile:
    """A file as a journal or manifest records it (``FileIdentity.identity``): its name, size and,
    where recorded, its modification time (epoch milliseconds) and version (an etag or file id)."""

    name: str
    size: int
    mtime: int | None = None
    version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "size": self.size,
            **({"mtime": self.mtime} if self.mtime is not None else {}),
            **({"version": self.version} if self.version else {}),
        }


class FileIdentity:
    """What a journal records of a file it will move (``identity``), checked again before every
    move and replay (``matches``). Needs ``name``, ``size``, ``modification_time``, ``version``."""

    if TYPE_CHECKING:  # what the classes that mix it in have

        @property
        def name(self) -> str: ...
        @property
        def size(self) -> int: ...
        @property
        def modification_time(self) -> int: ...
        @property
        def version(self) -> str | None: ...

    def identity(self) -> RecordedFile:
        return RecordedFile(self.name, self.size, self.modification_time, self.version or None)

    def matches(self, recorded: RecordedFile | None, mtime: bool = True) -> bool:
        """Whether this is the file ``recorded`` names: same size, time (unless ``mtime`` is
        False) and version, each as far as the record has it."""
        return (
            recorded is not None
            and self.size == recorded.size
            and (not mtime or recorded.mtime is None or recorded.mtime == self.modification_time)
            and (recorded.version is None or recorded.version == self.version)
        )


@dataclass(frozen=True)
class DataFile(FileIdentity):
    path: str
    size: int
    modification_time: int = 0  # epoch milliseconds, as Hadoop's FileStatus reports it
    # What tells this file from another of the same name, size and time written since, where the
    # storage has it (kept by renames): "etag:..." (S3A, ABFS), "id:..." (HDFS's file id),
    # "ino:..." (a local file's inode); None elsewhere.
    version: str | None = None

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


def is_hidden(name: str) -> bool:
    """Hive and Spark skip names starting with '_' or '.' (_SUCCESS, .crc, staging folders)."""
    return name.startswith(("_", "."))


def data_files(entries: Any) -> tuple[list[DataFile], list[str]]:
    """From a partition folder's listing (entries with path, name, size, modification_time,
    is_dir): its visible data files, and its sub-folders that matter (visible ones and writers'
    staging folders)."""
    files = [
        DataFile(e.path, e.size, e.modification_time, e.version)
        for e in entries
        if not e.is_dir and not is_hidden(e.name)
    ]
    folders = [e.name for e in entries if e.is_dir and (not is_hidden(e.name) or e.name.startswith(WRITER_STAGING))]
    return files, folders
