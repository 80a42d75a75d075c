"""Merge small ORC / Parquet files by copying their encoded blocks, never decoding a row.

ORC stripes and Parquet row groups are self-contained: a merged file can take them byte for byte
from its inputs and only needs a new footer. That is far cheaper than a Spark rewrite (no decode,
no encode, no shuffle) but only valid when every input agrees on what the footer describes
(schema, compression, format/writer version, ...), and it keeps the inputs' block sizes, so files
made of tiny blocks gain little and should be rewritten instead.

Everything runs in the driver's JVM, in the JVM helper (``jvm_helper``: one py4j call per batch
of files), with the classes shipped in every Spark distribution: ``org.apache.orc.OrcFile.mergeFiles``
and parquet-hadoop's ``ParquetRewriter``. All file I/O goes through the Hadoop FileSystem API, so
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


def _merge_orc(spark, inputs: list[str], output: str) -> None:
    """OrcFile.mergeFiles copies stripes; it silently skips inputs that differ from the first one
    (schema, compression, file/writer version, row index stride, user metadata), so any skipped
    input is a failure here."""
    skipped = jvm_helper.call(spark, "mergeOrc", list(inputs), output)
    if skipped:
        raise CopyMergeError(f"ORC merge into {output} refused {skipped} (incompatible with {inputs[0]})")


def _merge_parquet(spark, inputs: list[str], output: str) -> None:
    """ParquetRewriter without prune/mask/encrypt/codec options streams each column chunk's bytes
    as they are (ParquetFileWriter.appendColumnChunk), keeping column/offset indexes and bloom
    filters; no page is decoded. It opens every input up front (and refuses differing schemas).
    The output is stamped with this parquet-mr's created_by (the inputs' go to
    "original.created.by"), one reason why inputs must share one created_by."""
    jvm_helper.call(spark, "mergeParquet", list(inputs), output)


def copy_merge(spark, fmt: str, inputs: list[str], output: str) -> FileFooter:
    """Write ``output`` (which must not exist) from the blocks of ``inputs``, in order.

    The inputs must share one ``copy_key`` (see copy_groups); this is checked first, so nothing
    is written for a mixed list. Any failure, including a partial merge, deletes the output and
    raises CopyMergeError. Returns the output's footer.
    """
    fmt = _check_fmt(fmt)
    if not inputs:
        raise CopyMergeError("copy_merge needs at least one input")
    fs = HadoopFS(spark)
    if fs.exists(output):
        raise CopyMergeError(f"copy_merge output {output} already exists")
    keys = {}
    for p, ft in zip(inputs, read_footers(spark, fmt, inputs)):
        if isinstance(ft, CopyMergeError):
            raise ft
        keys.setdefault(ft.copy_key, []).append(p)
    if len(keys) > 1:
        raise CopyMergeError(f"{fmt} inputs cannot be copy-merged together: they differ in schema, "
                             f"compression, version or metadata: {list(keys.values())}")
    try:
        (_merge_orc if fmt == "orc" else _merge_parquet)(spark, inputs, output)
        return footer_info(spark, fmt, output)
    except Exception as e:
        # Only reached after the existence check above: the file, if any, is ours.
        fs.delete(output)
        if isinstance(e, CopyMergeError):
            raise
        raise CopyMergeError(f"{fmt} copy-merge of {inputs} into {output} failed: "
                             f"{error_text(e)}") from e


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
    """Check, without decoding a row, that ``output`` is exactly the blocks of ``inputs`` in order.

    Footers: rows, per-block rows and bytes, schema and compression (and for ORC the version,
    which mergeFiles carries over). Content: a SHA-256 of every copied byte range, compared in
    order. ORC: each stripe (StripeInformation offset/length). Parquet: each column chunk
    (ColumnChunkMetaData startingPos/totalSize) plus its column path, codec and value count;
    the rewriter copies chunk bytes verbatim, so no statistics fallback is needed.
    Raises CopyMergeError naming the files on the first difference.
    """
    fmt = _check_fmt(fmt)
    got = read_many(spark, fmt, [*inputs, output])
    for r in got:
        if isinstance(r, CopyMergeError):
            raise r
    read, (out, out_units) = got[:-1], got[-1]

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
    *in_digests, out_digests = _digests(spark, [*((p, units) for p, (_, units) in zip(inputs, read)),
                                                 (output, out_units)])
    out_digests = iter(out_digests)
    for p, (_, units), digests in zip(inputs, read, in_digests):
        for i, (want, got) in enumerate(zip(digests, out_digests)):
            if want != got:
                fail(f"bytes of {'stripe' if fmt == 'orc' else 'column chunk'} {i} of {p} "
                     f"{units[i].what} differ in the output")
