"""Merge small ORC / Parquet files by copying their encoded blocks, never decoding a row.

ORC stripes and Parquet row groups are self-contained: a merged file can take them byte for byte
from its inputs and only needs a new footer. That is far cheaper than a Spark rewrite (no decode,
no encode, no shuffle) but only valid when every input agrees on what the footer describes
(schema, compression, format/writer version, ...), and it keeps the inputs' block sizes, so files
made of tiny blocks gain little and should be rewritten instead.

Everything runs in the driver's JVM, in the JVM helper (``jvm_helper``: one py4j call per batch
of files or per merge), with the classes shipped in every Spark distribution: ORC's reader and
writer (``Writer.appendStripe``, as ``OrcFile.mergeFiles`` uses them) and parquet-hadoop's
``ParquetRewriter``. All file I/O goes through the Hadoop FileSystem API, so
paths are Hadoop URIs (``hdfs://``, ``s3a://``, ``file:``) and no byte of data passes through Python.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

from hive_compaction.commit.record import StagedOutput
from hive_compaction.merge.grouping import FileFooter, Group
from hive_compaction.storage import jvm_helper
from hive_compaction.storage.hadoop_fs import HadoopFS

FORMATS = ("orc", "parquet")


class CopyMergeError(RuntimeError):
    """The inputs cannot be copy-merged, the merge was partial, or its output does not match."""


@dataclass(frozen=True)
class _Unit:
    """One contiguous byte range that a copy-merge moves unchanged: an ORC stripe or a Parquet
    column chunk. ``what`` describes it (compared between input and output besides the bytes);
    ``stats``: SHA-256 of its statistics (ORC stripe statistics, Parquet chunk statistics) when
    they were read, else None."""

    what: tuple
    offset: int
    length: int
    stats: str | None = None


class Read(NamedTuple):
    """One file's footer as a copy sees it: the facts, the copy units, and (ORC, statistics read)
    "" when its file-level column statistics are the merge of its stripes', else what is wrong."""

    footer: FileFooter
    units: list[_Unit]
    file_stats: str | None = None


def error_text(e: Exception) -> str:
    """The Java exception's own message for py4j errors (their str() is a long stack trace)."""
    java = getattr(e, "java_exception", None)
    return str(java.toString()) if java is not None else str(e).splitlines()[0]


def _check_fmt(fmt: str) -> str:
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise ValueError(f"copy-merge supports {FORMATS}, not {fmt!r}")
    return fmt


def _footer(fmt: str, doc: dict) -> Read:
    footer = FileFooter(
        rows=int(doc["rows"]),
        block_rows=tuple(doc["block_rows"]),
        schema=doc["schema"],
        compression=doc["compression"],
        version=doc["version"],
        block_bytes=tuple(doc["block_bytes"]),
        extra=tuple(tuple(kv) for kv in doc["extra"]),
        no_copy=doc.get("no_copy") or "",
    )
    return Read(
        footer,
        [_Unit(tuple(u[0]), u[1], u[2], u[3] if len(u) > 3 else None) for u in doc["units"]],
        doc.get("file_stats"),
    )


def read_many(spark, fmt: str, paths: list[str], statistics: bool = False) -> list[Read | CopyMergeError]:
    """Footer and copy units of each file, in one JVM call, or the CopyMergeError saying why the
    file is not a readable ``fmt`` file. ORC: the reader's stripes, schema, codec, versions,
    calendar, row index stride and user metadata. Parquet: ParquetMetadata's row groups and
    column chunks (path, codec, value count, position, size), created_by and key-value metadata.
    ``statistics``: also each unit's statistics digest and (ORC) the file statistics check,
    from the footer already read (what a copy's verification compares)."""
    fmt = _check_fmt(fmt)
    if not paths:
        return []
    out = []
    for path, doc in zip(paths, jvm_helper.call(spark, "footers", fmt, list(paths), bool(statistics))):
        out.append(
            CopyMergeError(f"cannot read the {fmt} footer of {path}: {doc['error']}")
            if "error" in doc
            else _footer(fmt, doc)
        )
    return out


def read_footers(spark, fmt: str, paths: list[str]) -> list[FileFooter | CopyMergeError]:
    """What each file's footer says (or why it cannot be read), read without touching data."""
    return [r if isinstance(r, CopyMergeError) else r.footer for r in read_many(spark, fmt, paths)]


def readable_footers(spark, fmt: str, files: list, small: list) -> tuple[dict[str, FileFooter], list[str]]:
    """Footers of ``files`` (DataFile) by path, and the small files whose footer cannot be read
    ("name (why)"): those stop a merge; a big file, never touched, may be anything."""
    footers, bad, small_set = {}, [], set(small)
    for f, ft in zip(files, read_footers(spark, fmt, [f.path for f in files])):
        if not isinstance(ft, CopyMergeError):
            footers[f.path] = ft
        elif f in small_set:
            bad.append(f"{f.name} ({str(ft).split(': ', 1)[-1][:160]})")
    return footers, bad


def partition_rows(spark, fmt: str, files: list, known: dict[str, FileFooter] | None = None) -> int:
    """Rows in ``files`` (DataFile), from their footers (no data is read); ``known``: footers
    already read, by file name. Raises CopyMergeError for a footer that cannot be read."""
    known = dict(known or {})
    unknown = [f for f in files if f.name not in known]
    for f, ft in zip(unknown, read_footers(spark, fmt, [f.path for f in unknown])):
        if isinstance(ft, CopyMergeError):
            raise ft
        known[f.name] = ft
    return sum(known[f.name].rows for f in files)


def copy_merge(spark, fmt: str, inputs: list[str], output: str) -> tuple[FileFooter, int]:
    """``copy_and_verify`` without its verification time: (the output's footer, its size)."""
    return copy_and_verify(spark, fmt, inputs, output)[:2]


def copy_and_verify(spark, fmt: str, inputs: list[str], output: str) -> tuple[FileFooter, int, float]:
    """Write ``output`` (which must not exist) from the blocks of ``inputs``, in order, and verify
    it against them before returning its footer and size in bytes.

    One JVM call (``HiveCompactionHelper.copyMerge``) opens each input once, refuses a list whose
    footers differ in ``copy_key`` or that holds a file that must not be copied
    (``FileFooter.no_copy``; nothing is written), copies the blocks (ORC: stripes with their
    statistics, as ``OrcFile.mergeFiles`` does, hashing each stripe from the bytes appended,
    under the inputs' calendar, file and writer version and user metadata; Parquet:
    ``ParquetRewriter``, which copies column chunks verbatim with their statistics and indexes
    and keeps the key-value metadata, then the inputs' chunks are hashed), closes the output and
    reads its footer and every copied unit back. The comparison (``_compare``) happens here; any
    failure deletes the output and raises CopyMergeError. Returns the output's footer, its size
    and the seconds spent only on verification (the read-back, Parquet's second read of the
    inputs, the comparison; ORC hashes its inputs while copying, which is not counted).
    """
    fmt = _check_fmt(fmt)
    if not inputs:
        raise CopyMergeError("copy_merge needs at least one input")
    return checked_copy(spark, fmt, inputs, output, jvm_helper.call(spark, "copyMerge", fmt, list(inputs), output))


def checked_copy(spark, fmt: str, inputs: list[str], output: str, got: dict) -> tuple[FileFooter, int, float]:
    """``copy_and_verify``'s verdict on what the copy merge reported (``got``: the JVM helper's
    ``copyMerge`` result, in the driver or in an executor's task): the output's footer, size and
    verification seconds, or CopyMergeError with the output deleted."""
    if "error" in got:
        if got["refused"]:
            raise CopyMergeError(f"{fmt} copy-merge into {output} refused: {got['error']}")
        raise CopyMergeError(f"{fmt} copy-merge of {inputs} into {output} failed: {got['error']}")
    comparing = time.monotonic()
    read = [_footer(fmt, doc) for doc in got["inputs"]]
    out = _footer(fmt, got["output"])
    try:
        _compare(fmt, inputs, read, output, out, [doc["digests"] for doc in got["inputs"]], got["output"]["digests"])
    except CopyMergeError:
        HadoopFS(spark).delete(output)  # ours: the JVM call refused to write over an existing file
        raise
    verified = int(got.get("verify_nanos", 0)) / 1e9 + time.monotonic() - comparing
    return out.footer, int(got["output"]["size"]), verified


def stage(spark, fmt: str, group: Group, staging: str, name: str, copied: dict | None = None) -> float:
    """The copy engine: ``group``'s files copy-merged into ``staging/name``, verified
    (``copy_merge``); the group records its staged output, rows and footer. Returns the seconds
    spent verifying. ``copied``: what an executor's task that made the copy reported (its JVM
    helper's result), checked here instead of copying in the driver."""
    staged, inputs = f"{staging}/{name}", [f.path for f in group.files]
    if copied is None:
        footer, size, verified = copy_and_verify(spark, fmt, inputs, staged)
    else:
        footer, size, verified = checked_copy(spark, fmt, inputs, staged, copied)
    group.staged = [StagedOutput(staged, name, size)]
    group.rows, group.footers = footer.rows, [footer]
    return verified


def _compare(
    fmt: str,
    inputs: list[str],
    read: list[Read],
    output: str,
    out: Read,
    in_digests: list[list[str]],
    out_digests: list[str],
) -> None:
    """Whether ``output`` is exactly the blocks of ``inputs`` in order, under the footer metadata
    they share, from their footers and the digest of every copied byte range (the JVM's
    ``Digests.RangeHash``: CRC-32C and CRC-32).

    Footers: rows, per-block rows and bytes, schema and compression (and for ORC the version,
    which the stripe copy carries over), and every other footer fact the inputs share
    (``FileFooter.extra``: ORC calendar, row index stride and user metadata; Parquet key-value
    metadata but original.created.by). Statistics, where read: each stripe's / column chunk's,
    compared in order, and (ORC) the output's file statistics must be the merge of its stripes'.
    Content: the digest of every copied range, compared in order. ORC: each stripe
    (StripeInformation offset/length). Parquet: each column chunk (ColumnChunkMetaData
    startingPos/totalSize) plus its column path, codec and value count; the rewriter copies chunk
    bytes verbatim, so no statistics fallback is needed.
    """

    def fail(what: str):
        raise CopyMergeError(f"{fmt} copy {output} does not match its inputs: {what}")

    fts = [r.footer for r in read]
    ft_out = out.footer
    if ft_out.rows != sum(ft.rows for ft in fts):
        fail(f"{ft_out.rows} rows, inputs have {sum(ft.rows for ft in fts)}")
    if ft_out.block_rows != tuple(r for ft in fts for r in ft.block_rows):
        fail("rows per block differ from the inputs' blocks in order")
    if ft_out.block_bytes != tuple(b for ft in fts for b in ft.block_bytes):
        fail("bytes per block differ from the inputs' blocks in order")
    for p, ft in zip(inputs, fts):
        if ft.schema != ft_out.schema:
            fail(f"schema differs from {p}: {ft.schema} vs {ft_out.schema}")
        if ft.compression != ft_out.compression:
            fail(f"compression {ft_out.compression} differs from {p}: {ft.compression}")
        if fmt == "orc" and ft.version != ft_out.version:
            fail(f"version {ft_out.version} differs from {p}: {ft.version}")
        if ft.extra != ft_out.extra:
            fail(f"footer metadata differs from {p}'s: {describe_extra_difference(ft.extra, ft_out.extra)}")
    in_units = [u for r in read for u in r.units]
    if [(u.what, u.length) for u in in_units] != [(u.what, u.length) for u in out.units]:
        fail("the copied stripes / column chunks differ in layout from the inputs'")
    kind = "stripe" if fmt == "orc" else "column chunk"
    out_iter = iter(out.units)
    for p, r in zip(inputs, read):
        for i, (want, got) in enumerate(zip(r.units, out_iter)):
            if want.stats is not None and got.stats is not None and want.stats != got.stats:
                fail(f"statistics of {kind} {i} of {p} {want.what} differ in the output")
    if out.file_stats:
        fail(out.file_stats)
    digest_iter = iter(out_digests)
    for p, r, digests in zip(inputs, read, in_digests):
        for i, (want_digest, got_digest) in enumerate(zip(digests, digest_iter)):
            if want_digest != got_digest:
                fail(f"bytes of {kind} {i} of {p} {r.units[i].what} differ in the output")


def describe_extra_difference(want: tuple, got: tuple) -> str:
    """Which keys of two ``FileFooter.extra`` differ, with both values (cut short)."""
    a, b = dict(want), dict(got)
    cut = lambda v: "absent" if v is None else '""' if v == "" else v if len(v) <= 60 else v[:57] + "..."
    return ", ".join(
        f"{k} ({cut(a.get(k))} in the input, {cut(b.get(k))} in the output)"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    )
