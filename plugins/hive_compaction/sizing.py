"""Which files of one partition are merged together: Hudi's file-sizing rules, after the write.

A file below ``small_file_limit`` is small; small files are bin-packed into groups of at most
``target_file_size`` bytes; files at or above the limit are never rewritten; a partition with
fewer than ``min_small_files`` small files is left alone; ``small_file_limit = 0`` turns it off.
"""
from __future__ import annotations

from dataclasses import dataclass


class FileIdentity:
    """What a journal records of a file it will move (``identity``), checked again before every
    move and replay (``matches``). Needs ``name``, ``size``, ``modification_time``, ``version``."""

    def identity(self) -> dict:
        return {"name": self.name, "size": self.size, "mtime": self.modification_time,
                **({"version": self.version} if self.version else {})}

    def matches(self, recorded: dict | None, mtime: bool = True) -> bool:
        """Whether this is the file ``recorded`` (an ``identity()``) names: same size, time (unless
        ``mtime`` is False) and version, each as far as the record has it."""
        return (recorded is not None and self.size == recorded["size"]
                and (not mtime or recorded.get("mtime", self.modification_time) == self.modification_time)
                and recorded.get("version", self.version) == self.version)


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


def small_files(files: list[DataFile], small_file_limit: int) -> list[DataFile]:
    if small_file_limit <= 0:
        return []
    return [f for f in files if f.size < small_file_limit]


def enough_small_files(small: list[DataFile], min_small_files: int) -> bool:
    """Whether a partition's small files are worth merging: at least ``min_small_files``, and two."""
    return len(small) >= max(min_small_files, 2)


def pack_small_files(
    files: list[DataFile],
    *,
    small_file_limit: int,
    target_file_size: int,
    min_small_files: int = 2,
) -> list[list[DataFile]]:
    """Groups of small files, each to become one output file of about ``target_file_size``.

    First-fit decreasing: the largest small file opens a group, smaller ones fill it up to the
    target. A group of one file is dropped (rewriting a file alone changes nothing), so every
    returned group holds at least two files and no group exceeds the target.
    """
    small = small_files(files, small_file_limit)
    if not enough_small_files(small, min_small_files):
        return []
    groups: list[list[DataFile]] = []
    sizes: list[int] = []
    for f in sorted(small, key=lambda f: (-f.size, f.path)):
        for i, used in enumerate(sizes):
            if used + f.size <= target_file_size:
                groups[i].append(f)
                sizes[i] += f.size
                break
        else:
            groups.append([f])
            sizes.append(f.size)
    return [sorted(g, key=lambda f: f.path) for g in groups if len(g) > 1]


# The file-size distribution the report shows: four buckets around the table's small-file
# limit L and target T: tiny (< L/4), small (L/4 to L: merged when there are enough), fine
# (L to T), at or above the target.
BUCKETS = 4


def bucket_edges(small_file_limit: int, target_file_size: int) -> tuple[int, int, int]:
    return small_file_limit // 4, small_file_limit, target_file_size


def size_histogram(sizes, small_file_limit: int, target_file_size: int) -> list[int]:
    """Counts of ``sizes`` per bucket: a compact form of a partition's file sizes (4 integers),
    meant to travel in a PartitionResult as ``sizes_before`` / ``sizes_after``."""
    edges = bucket_edges(small_file_limit, target_file_size)
    counts = [0] * BUCKETS
    for s in sizes:
        counts[sum(1 for e in edges if s >= e)] += 1
    return counts
