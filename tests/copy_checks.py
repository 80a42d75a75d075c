"""Test-side checks of copy merges: footers read alone, the grouping a copy would accept, and
an independent verification of a merged file (its footer and the SHA-256 of every copied byte
range, read afresh, compared with its inputs' in order)."""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from hive_compaction.merge import copy as cm
from hive_compaction.merge.grouping import FileFooter, tiny_blocks


def read_one(spark, fmt: str, path: str, statistics: bool = False) -> cm.Read:
    """(footer, copy units, file statistics check) of one file; raises CopyMergeError if it
    cannot be read."""
    got = cm.read_many(spark, fmt, [path], statistics)[0]
    if isinstance(got, cm.CopyMergeError):
        raise got
    return got


def footer_info(spark, fmt: str, path: str) -> FileFooter:
    return read_one(spark, fmt, path)[0]


def copy_groups(
    spark, fmt: str, files: list[str], min_block_rows: int = 0, min_avg_block_bytes: int = 0
) -> tuple[list[list[str]], list[str]]:
    """Files a copy could merge together (equal copy keys, blocks above the floor), in order,
    and the files it rejects as made of tiny blocks."""
    groups: dict[tuple, list[str]] = {}
    rejected: list[str] = []
    for f in files:
        ft = footer_info(spark, fmt, f)
        if tiny_blocks(ft, min_avg_block_bytes, min_block_rows):
            rejected.append(f)
        else:
            groups.setdefault(ft.copy_key, []).append(f)
    return list(groups.values()), rejected


def _local(path: str) -> str:
    return urlsplit(path).path if "://" in path or path.startswith("file:") else path


def _digests(path: str, units) -> list[str]:
    with open(_local(path), "rb") as fh:
        out = []
        for u in units:
            fh.seek(u.offset)
            out.append(hashlib.sha256(fh.read(u.length)).hexdigest())
        return out


def verify_copy(spark, fmt: str, inputs: list[str], output: str) -> None:
    """Raise CopyMergeError unless ``output`` is exactly the blocks of ``inputs`` in order, under
    the footer metadata they share, with their statistics."""
    read = [read_one(spark, fmt, p, statistics=True) for p in inputs]
    out = read_one(spark, fmt, output, statistics=True)
    cm._compare(
        fmt.lower(),
        inputs,
        read,
        output,
        out,
        [_digests(p, r.units) for p, r in zip(inputs, read)],
        _digests(output, out.units),
    )
