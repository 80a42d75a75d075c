"""Which files of one partition are merged together: Hudi's file-sizing rules, after the write.

A file below ``small_file_limit`` is small; small files are bin-packed into groups of at most
``target_file_size`` bytes; files at or above the limit are never rewritten; a partition with
fewer than ``min_small_files`` small files is left alone; ``small_file_limit = 0`` turns it off.
"""

from __future__ import annotations

from hive_compaction.storage.listing import DataFile


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
