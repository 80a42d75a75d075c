"""Merge small ORC / Parquet files by copying their encoded blocks, never decoding a row.

ORC stripes and Parquet row groups are self-contained: a merged file can take them byte for byte
from its inputs and only needs a new footer. That is far cheaper than a Spark rewrite (no decode,
no encode, no shuffle) but only valid when every input agrees on what the footer describes
(schema, compression, format/writer version, ...), and it keeps the inputs' block sizes, so files
made of tiny blocks gain little and should be rewritten instead.

Everything runs in the driver's JVM through py4j, with the classes shipped in the pyspark wheel:
``org.apache.orc.OrcFile.mergeFiles`` and parquet-hadoop's ``ParquetRewriter``. All file I/O goes
through the Hadoop FileSystem API, so paths are Hadoop URIs (``hdfs://``, ``s3a://``, ``file:``)
and no byte of data passes through Python.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from py4j.java_gateway import JavaClass

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


def _why(e: Exception) -> str:
    """The Java exception's own message for py4j errors (their str() is a long stack trace)."""
    java = getattr(e, "java_exception", None)
    return str(java.toString()) if java is not None else str(e).splitlines()[0]


def _check_fmt(fmt: str) -> str:
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise ValueError(f"copy-merge supports {FORMATS}, not {fmt!r}")
    return fmt


def _cls(spark, name: str):
    """A JVM class by full name. Built locally: ``spark._jvm.a.b.C`` costs a py4j round trip per dot."""
    return JavaClass(name, spark._jvm._gateway_client)


def _items(jlist) -> list:
    """A java.util.List's items, by index: py4j's iterator protocol ends on a Java exception that
    pyspark's error converter inspects with a dozen more round trips."""
    return [jlist.get(i) for i in range(jlist.size())]


def _path(spark, uri: str):
    return _cls(spark, "org.apache.hadoop.fs.Path")(uri)


def _java_list(spark, items):
    out = _cls(spark, "java.util.ArrayList")()
    for item in items:
        out.add(item)
    return out


def _orc_footer(spark, uri: str) -> tuple[FileFooter, list[_Unit]]:
    conf = spark._jsc.hadoopConfiguration()
    orc = _cls(spark, "org.apache.orc.OrcFile")
    p = _path(spark, uri)
    reader = orc.createReader(p, orc.readerOptions(conf).filesystem(p.getFileSystem(conf)))
    try:
        stripes = [(int(s.getNumberOfRows()), int(s.getOffset()), int(s.getLength()))
                   for s in _items(reader.getStripes())]
        latin1 = _cls(spark, "java.nio.charset.StandardCharsets").ISO_8859_1  # lossless bytes -> str
        meta = sorted((f"meta:{k}", latin1.decode(reader.getMetadataValue(k).duplicate()).toString())
                      for k in _items(reader.getMetadataKeys()))
        footer = FileFooter(
            rows=int(reader.getNumberOfRows()),
            block_rows=tuple(rows for rows, _, _ in stripes),
            schema=reader.getSchema().toString(),
            compression=reader.getCompressionKind().name(),
            version=f"{reader.getFileVersion().getName()} {reader.getWriterVersion().name()}",
            block_bytes=tuple(length for _, _, length in stripes),
            extra=(("row_index_stride", str(reader.getRowIndexStride())), *meta),
        )
        return footer, [_Unit(("stripe", rows), offset, length) for rows, offset, length in stripes]
    finally:
        reader.close()


def _parquet_footer(spark, uri: str) -> tuple[FileFooter, list[_Unit]]:
    conf = spark._jsc.hadoopConfiguration()
    hadoop = "org.apache.parquet.hadoop."
    input_file = _cls(spark, hadoop + "util.HadoopInputFile").fromPath(_path(spark, uri), conf)
    reader = _cls(spark, hadoop + "ParquetFileReader").open(input_file)
    try:
        meta = reader.getFooter()
        schema = meta.getFileMetaData().getSchema().toString()
        # One call for the whole footer (parquet-cli's "meta" uses the same), rather than a few
        # py4j round trips per column chunk.
        doc = json.loads(_cls(spark, hadoop + "metadata.ParquetMetadata").toJSON(meta))
    finally:
        reader.close()
    blocks, fmd = doc["blocks"], doc["fileMetaData"]
    chunks = [c for b in blocks for c in b["columns"]]
    units = [_Unit((".".join(c["path"]), c["codec"], int(c["valueCount"])), int(c["startingPos"]),
                   int(c["totalSize"])) for c in chunks]
    # ParquetRewriter records its inputs' writers under this key: it must not split groups.
    kv = sorted((k, v) for k, v in (fmd.get("keyValueMetaData") or {}).items()
                if k != "original.created.by")
    footer = FileFooter(
        rows=sum(int(b["rowCount"]) for b in blocks),
        block_rows=tuple(int(b["rowCount"]) for b in blocks),
        schema=schema,
        compression="+".join(sorted({c["codec"] for c in chunks})),
        version=str(fmd.get("createdBy")),
        block_bytes=tuple(int(b["compressedSize"]) for b in blocks),
        extra=tuple(kv),
    )
    return footer, units


def _read(spark, fmt: str, path: str) -> tuple[FileFooter, list[_Unit]]:
    fmt = _check_fmt(fmt)
    try:
        return (_orc_footer if fmt == "orc" else _parquet_footer)(spark, path)
    except Exception as e:
        raise CopyMergeError(f"cannot read the {fmt} footer of {path}: {_why(e)}") from e


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
    for f in files:
        ft = footer_info(spark, fmt, f)
        if tiny_blocks(ft, min_avg_block_bytes, min_block_rows):
            rejected.append(f)
        else:
            groups.setdefault(ft.copy_key, []).append(f)
    return list(groups.values()), rejected


def _merge_orc(spark, inputs: list[str], output: str) -> None:
    """OrcFile.mergeFiles copies stripes; it silently skips inputs that differ from the first one
    (schema, compression, file/writer version, row index stride, user metadata), so any skipped
    input is a failure here."""
    conf = spark._jsc.hadoopConfiguration()
    orc = _cls(spark, "org.apache.orc.OrcFile")
    out = _path(spark, output)
    first = orc.createReader(_path(spark, inputs[0]), orc.readerOptions(conf))
    try:
        # mergeFiles overrides these from the first input itself; set them to say what we expect.
        opts = (orc.writerOptions(conf).fileSystem(out.getFileSystem(conf)).overwrite(False)
                .setSchema(first.getSchema()).compress(first.getCompressionKind())
                .version(first.getFileVersion()))
    finally:
        first.close()
    merged = orc.mergeFiles(out, opts, _java_list(spark, [_path(spark, p) for p in inputs]))
    merged = [str(p.toString()) for p in _items(merged)]
    expected = [str(_path(spark, p).toString()) for p in inputs]
    if merged != expected:
        skipped = [p for p in expected if p not in merged]
        raise CopyMergeError(f"ORC merge into {output} refused {skipped} "
                             f"(incompatible with {expected[0]})")


def _merge_parquet(spark, inputs: list[str], output: str) -> None:
    """ParquetRewriter without prune/mask/encrypt/codec options streams each column chunk's bytes
    as they are (ParquetFileWriter.appendColumnChunk), keeping column/offset indexes and bloom
    filters; no page is decoded. It opens every input up front (and refuses differing schemas).
    The output is stamped with this parquet-mr's created_by (the inputs' go to
    "original.created.by"), one reason why inputs must share one created_by."""
    conf = spark._jsc.hadoopConfiguration()
    rewrite = "org.apache.parquet.hadoop.rewrite."
    paths = _java_list(spark, [_path(spark, p) for p in inputs])
    opts = _cls(spark, rewrite + "RewriteOptions$Builder")(conf, paths, _path(spark, output)).build()
    rewriter = _cls(spark, rewrite + "ParquetRewriter")(opts)  # creates the output
    try:
        rewriter.processBlocks()
    except Exception:
        try:
            rewriter.close()  # releases the output stream; copy_merge then deletes the file
        except Exception:
            pass
        raise
    rewriter.close()  # writes the footer


def copy_merge(spark, fmt: str, inputs: list[str], output: str) -> FileFooter:
    """Write ``output`` (which must not exist) from the blocks of ``inputs``, in order.

    The inputs must share one ``copy_key`` (see copy_groups); this is checked first, so nothing
    is written for a mixed list. Any failure, including a partial merge, deletes the output and
    raises CopyMergeError. Returns the output's footer.
    """
    fmt = _check_fmt(fmt)
    if not inputs:
        raise CopyMergeError("copy_merge needs at least one input")
    conf = spark._jsc.hadoopConfiguration()
    out = _path(spark, output)
    fs = out.getFileSystem(conf)
    if fs.exists(out):
        raise CopyMergeError(f"copy_merge output {output} already exists")
    keys = {}
    for p in inputs:
        keys.setdefault(footer_info(spark, fmt, p).copy_key, []).append(p)
    if len(keys) > 1:
        raise CopyMergeError(f"{fmt} inputs cannot be copy-merged together: they differ in schema, "
                             f"compression, version or metadata: {list(keys.values())}")
    try:
        (_merge_orc if fmt == "orc" else _merge_parquet)(spark, inputs, output)
        return footer_info(spark, fmt, output)
    except Exception as e:
        # Only reached after the existence check above: the file, if any, is ours.
        if fs.exists(out):
            fs.delete(out, False)
        if isinstance(e, CopyMergeError):
            raise
        raise CopyMergeError(f"{fmt} copy-merge of {inputs} into {output} failed: "
                             f"{_why(e)}") from e


def _digests(spark, path: str, units: list[_Unit]) -> list[bytes]:
    """SHA-256 of each unit's bytes, read through the Hadoop FS.

    The loop runs in the JVM (commons-io IOUtils.copyLarge into a DigestOutputStream, an 8 KiB
    buffer): py4j passes byte[] arguments by copy, so a Python loop over a JVM buffer would
    hash nothing, and no data bytes should cross into Python anyway. Only digests come back.
    """
    conf = spark._jsc.hadoopConfiguration()
    p = _path(spark, path)
    md = _cls(spark, "java.security.MessageDigest").getInstance("SHA-256")  # digest() resets it
    sink = _cls(spark, "java.security.DigestOutputStream")(
        _cls(spark, "java.io.OutputStream").nullOutputStream(), md)
    copy_large = _cls(spark, "org.apache.commons.io.IOUtils").copyLarge
    out = []
    try:
        stream = p.getFileSystem(conf).open(p)
        try:
            for u in units:
                stream.seek(u.offset)
                # copyLarge(in, out, skip, length); Hadoop's copyBytes has an int/long overload pair
                # that py4j cannot tell apart.
                if copy_large(stream, sink, 0, u.length) != u.length:
                    raise CopyMergeError(f"{path} ends inside the block at offset {u.offset}")
                out.append(bytes(md.digest()))
        finally:
            stream.close()
    except CopyMergeError:
        raise
    except Exception as e:  # e.g. a ChecksumException: the file is unreadable, so not a good copy
        raise CopyMergeError(f"cannot read the blocks of {path}: {_why(e)}") from e
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
    read = [_read(spark, fmt, p) for p in inputs]
    out, out_units = _read(spark, fmt, output)

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
    out_digests = iter(_digests(spark, output, out_units))
    for p, (_, units) in zip(inputs, read):
        for i, (want, got) in enumerate(zip(_digests(spark, p, units), out_digests)):
            if want != got:
                fail(f"bytes of {'stripe' if fmt == 'orc' else 'column chunk'} {i} of {p} "
                     f"{units[i].what} differ in the output")
