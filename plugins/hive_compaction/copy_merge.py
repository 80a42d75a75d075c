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

from dataclasses import dataclass

from . import jvm_helper
from .hadoop_fs import HadoopFS

FORMATS = ("orc", "parquet")


class CopyMergeError(RuntimeError):
    """The inputs cannot be copy-merged, the merge was partial, or its output does not match."""


@dataclass(frozen=True)
class FileFooter:
    rows: int
    block_rows: tuple[int, ...]  # rows of each stripe (ORC) / row group (Parquet), in file order
    schema: str  # ORC TypeDescription / Parquet MessageType, as text
    compression: str  # ORC CompressionKind; Parquet codec of the column chunks ("" if none)
    version: str  # ORC "<file version> <writer version>"; Parquet created_by
    block_bytes: tuple[int, ...]  # on-disk bytes of each stripe / row group
    # Other footer facts a copy must agree on: ORC row index stride and user metadata,
    # Parquet key-value metadata (e.g. Spark's schema JSON, which Spark reads back).
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def copy_key(self) -> tuple:
        """Files with equal keys can share one merged footer."""
        return (self.schema, self.compression, self.version, self.extra)


@dataclass(frozen=True)
class _Unit:
    """One contiguous byte range that a copy-merge moves unchanged: an ORC stripe or a Parquet
    column chunk. ``what`` describes it (compared between input and output besides the bytes)."""
    what: tuple
    offset: int
    length: int


def error_text(e: Exception) -> str:
    """The Java exception's own message for py4j errors (their str() is a long stack trace)."""
    java = getattr(e, "java_exception", None)
    return str(java.toString()) if java is not None else str(e).splitlines()[0]


def _check_fmt(fmt: str) -> str:
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise ValueError(f"copy-merge supports {FORMATS}, not {fmt!r}")
    return fmt


def _footer(fmt: str, doc: dict) -> tuple[FileFooter, list[_Unit]]:
    footer = FileFooter(rows=int(doc["rows"]), block_rows=tuple(doc["block_rows"]), schema=doc["schema"],
                        compression=doc["compression"], version=doc["version"],
                        block_bytes=tuple(doc["block_bytes"]), extra=tuple(tuple(kv) for kv in doc["extra"]))
    return footer, [_Unit(tuple(what), offset, length) for what, offset, length in doc["units"]]


def read_many(spark, fmt: str, paths: list[str]) -> list[tuple[FileFooter, list[_Unit]] | CopyMergeError]:
    """Footer and copy units of each file, in one JVM call: (footer, units), or the CopyMergeError
    saying why the file is not a readable ``fmt`` file. ORC: the reader's stripes, schema, codec,
    versions, row index stride and user metadata. Parquet: ParquetMetadata's row groups and
    column chunks (path, codec, value count, position, size), created_by and key-value metadata."""
    fmt = _check_fmt(fmt)
    if not paths:
        return []
    out = []
    for path, doc in zip(paths, jvm_helper.call(spark, "footers", fmt, list(paths))):
        out.append(CopyMergeError(f"cannot read the {fmt} footer of {path}: {doc['error']}") if "error" in doc
                   else _footer(fmt, doc))
    return out


def _read(spark, fmt: str, path: str) -> tuple[FileFooter, list[_Unit]]:
    got = read_many(spark, fmt, [path])[0]
    if isinstance(got, CopyMergeError):
        raise got
    return got


def read_footers(spark, fmt: str, paths: list[str]) -> list[FileFooter | CopyMergeError]:
    """What each file's footer says (or why it cannot be read), read without touching data."""
    return [r if isinstance(r, CopyMergeError) else r[0] for r in read_many(spark, fmt, paths)]


def footer_info(spark, fmt: str, path: str) -> FileFooter:
    """What a file's footer says, read without touching its data."""
    return _read(spark, fmt, path)[0]


def tiny_blocks(ft: FileFooter, min_avg_block_bytes: int = 0, min_block_rows: int = 0) -> bool:
    """Whether a file's stripes / row groups average below the floor (copying would keep them tiny)."""
    n = len(ft.block_rows)
    return bool(n) and (sum(ft.block_bytes) / n < min_avg_block_bytes or ft.rows / n < min_block_rows)


def copy_groups(spark, fmt: str, files: list[str], min_block_rows: int = 0,
                min_avg_block_bytes: int = 0) -> tuple[list[list[str]], list[str]]:
    """Split ``files`` into groups that can be copy-merged together, plus the files to rewrite.

    A copy keeps block sizes, so a file whose blocks average fewer than ``min_block_rows`` rows or
    ``min_avg_block_bytes`` bytes is rejected: copying would make a big file of tiny blocks
    (slow scans, poor compression). Groups keep the order of ``files`` and appear in order of
    their first file; single-file groups are kept (nothing to merge, the caller decides).
    """
    groups: dict[tuple, list[str]] = {}
    rejected: list[str] = []
    for f, ft in zip(files, read_footers(spark, fmt, files)):
        if isinstance(ft, CopyMergeError):
            raise ft
        if tiny_blocks(ft, min_avg_block_bytes, min_block_rows):
            rejected.append(f)
        else:
            groups.setdefault(ft.copy_key, []).append(f)
    return list(groups.values()), rejected


def copy_merge(spark, fmt: str, inputs: list[str], output: str) -> tuple[FileFooter, int]:
    """Write ``output`` (which must not exist) from the blocks of ``inputs``, in order, and verify
    it against them before returning its footer and size in bytes.

    One JVM call (``HiveCompactionHelper.copyMerge``) opens each input once, refuses a list whose
    footers differ in ``copy_key`` (nothing is written), copies the blocks (ORC: stripes with
    their statistics, as ``OrcFile.mergeFiles`` does, hashing each stripe from the bytes
    appended; Parquet: ``ParquetRewriter``, which copies column chunks verbatim, then the inputs'
    chunks are hashed), closes the output and reads its footer and every copied unit back. The
    comparison (see ``verify_copy``) happens here; any failure deletes the output and raises
    CopyMergeError.
    """
    fmt = _check_fmt(fmt)
    if not inputs:
        raise CopyMergeError("copy_merge needs at least one input")
    got = jvm_helper.call(spark, "copyMerge", fmt, list(inputs), output)
    if "error" in got:
        if got["refused"]:
            raise CopyMergeError(f"{fmt} copy-merge into {output} refused: {got['error']}")
        raise CopyMergeError(f"{fmt} copy-merge of {inputs} into {output} failed: {got['error']}")
    read = [_footer(fmt, doc) for doc in got["inputs"]]
    out, out_units = _footer(fmt, got["output"])
    try:
        _compare(fmt, inputs, read, output, out, out_units, [doc["digests"] for doc in got["inputs"]],
                 got["output"]["digests"])
    except CopyMergeError:
        HadoopFS(spark).delete(output)  # ours: the JVM call refused to write over an existing file
        raise
    return out, int(got["output"]["size"])


def _digests(spark, files: list[tuple[str, list[_Unit]]]) -> list[list[str]]:
    """SHA-256 of each unit's bytes of each file, read through the Hadoop FS in the JVM helper
    (one call for all files): no data bytes cross into Python, only digests come back."""
    spec = [{"path": path, "ranges": [[u.offset, u.length] for u in units]} for path, units in files]
    out = []
    for (path, _), got in zip(files, jvm_helper.call(spark, "digests", spec)):
        if isinstance(got, dict):  # e.g. a ChecksumException or EOF: unreadable, so not a good copy
            raise CopyMergeError(f"cannot read the blocks of {path}: {got['error']}")
        out.append(got)
    return out


def verify_copy(spark, fmt: str, inputs: list[str], output: str) -> None:
    """Check, without decoding a row, that ``output`` is exactly the blocks of ``inputs`` in order
    (what ``copy_merge`` checks as it merges; this reads everything afresh).

    Raises CopyMergeError naming the files on the first difference.
    """
    fmt = _check_fmt(fmt)
    got = read_many(spark, fmt, [*inputs, output])
    for r in got:
        if isinstance(r, CopyMergeError):
            raise r
    read, (out, out_units) = got[:-1], got[-1]
    *in_digests, out_digests = _digests(spark, [*((p, units) for p, (_, units) in zip(inputs, read)),
                                                 (output, out_units)])
    _compare(fmt, inputs, read, output, out, out_units, in_digests, out_digests)


def _compare(fmt: str, inputs: list[str], read: list[tuple[FileFooter, list[_Unit]]], output: str,
             out: FileFooter, out_units: list[_Unit], in_digests: list[list[str]], out_digests: list[str]) -> None:
    """Whether ``output`` is exactly the blocks of ``inputs`` in order, from their footers and
    the SHA-256 of every copied byte range.

    Footers: rows, per-block rows and bytes, schema and compression (and for ORC the version,
    which the stripe copy carries over). Content: the digest of every copied range, compared in
    order. ORC: each stripe (StripeInformation offset/length). Parquet: each column chunk
    (ColumnChunkMetaData startingPos/totalSize) plus its column path, codec and value count;
    the rewriter copies chunk bytes verbatim, so no statistics fallback is needed.
    """
    def fail(what: str):
        raise CopyMergeError(f"{fmt} copy {output} does not match its inputs: {what}")

    if out.rows != sum(ft.rows for ft, _ in read):
        fail(f"{out.rows} rows, inputs have {sum(ft.rows for ft, _ in read)}")
    if out.block_rows != tuple(r for ft, _ in read for r in ft.block_rows):
        fail("rows per block differ from the inputs' blocks in order")
    if out.block_bytes != tuple(b for ft, _ in read for b in ft.block_bytes):
        fail("bytes per block differ from the inputs' blocks in order")
    for p, (ft, _) in zip(inputs, read):
        if ft.schema != out.schema:
            fail(f"schema differs from {p}: {ft.schema} vs {out.schema}")
        if ft.compression != out.compression:
            fail(f"compression {out.compression} differs from {p}: {ft.compression}")
        if fmt == "orc" and ft.version != out.version:
            fail(f"version {out.version} differs from {p}: {ft.version}")
    in_units = [u for _, units in read for u in units]
    if [(u.what, u.length) for u in in_units] != [(u.what, u.length) for u in out_units]:
        fail("the copied stripes / column chunks differ in layout from the inputs'")
    out_iter = iter(out_digests)
    for p, (_, units), digests in zip(inputs, read, in_digests):
        for i, (want, got) in enumerate(zip(digests, out_iter)):
            if want != got:
                fail(f"bytes of {'stripe' if fmt == 'orc' else 'column chunk'} {i} of {p} "
                     f"{units[i].what} differ in the output")
