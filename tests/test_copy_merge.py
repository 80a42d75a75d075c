"""Copy-merge (ORC stripe copy, Parquet row-group copy) on real files written by a local Spark."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path

import pytest

from copy_checks import copy_groups, footer_info, read_one, verify_copy
from hive_compaction.merge.copy import CopyMergeError, copy_merge

pytestmark = pytest.mark.integration

OTHER_CODEC = {"orc": ("zlib", "ZLIB"), "parquet": ("gzip", "GZIP")}
DEFAULT_CODEC = {"orc": "ZSTD", "parquet": "SNAPPY"}


def rows(n: int = 600, start: int = 0) -> list[tuple]:
    """Longs, strings, decimals, timestamps, arrays and maps, with nulls in every nullable column."""
    base = dt.datetime(2024, 1, 1, 12, 0, 0)
    return [
        (
            i,
            None if i % 7 == 0 else f"name-{i}",
            None if i % 11 == 0 else Decimal(i * 37 % 100000) / Decimal(1000),
            None if i % 13 == 0 else base + dt.timedelta(seconds=i * 61),
            None if i % 5 == 0 else [f"t{i % 3}", None if i % 2 else "x"],
            None if i % 9 == 0 else {f"k{i % 4}": i, "n": None},
        )
        for i in range(start, start + n)
    ]


def frame(spark, n: int = 600, start: int = 0):
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("name", T.StringType()),
            T.StructField("amount", T.DecimalType(18, 4)),
            T.StructField("ts", T.TimestampType()),
            T.StructField("tags", T.ArrayType(T.StringType())),
            T.StructField("attrs", T.MapType(T.StringType(), T.LongType())),
        ]
    )
    return spark.createDataFrame(rows(n, start), schema)


def write(
    spark, fmt: str, folder: Path, n: int = 600, start: int = 0, parts: int = 6, wide: bool = False, **options
) -> list[str]:
    """``parts`` Spark-written files of frame(n, start) rows, as Hadoop URIs (file:///...); one task
    cut by maxRecordsPerFile, so no shuffle."""
    df = frame(spark, n, start)
    df = df.selectExpr("*", "id * 2 AS extra") if wide else df
    writer = df.coalesce(1).write.option("maxRecordsPerFile", -(-n // parts)).options(**options)
    writer.format(fmt).save(str(folder))
    files = sorted(p.as_uri() for p in folder.glob("part-*"))
    assert len(files) == parts
    return files


def collected(spark, fmt: str, paths) -> list[tuple]:
    """All rows as tuples, sorted by id (in Python: orderBy would add a sampling job)."""
    return sorted((tuple(r) for r in spark.read.format(fmt).load(paths).collect()), key=lambda r: r[0])


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    """Input files per format, written once: 6 default-codec files of 100 rows ("plain"), 2 with
    another codec, 2 with one more column ("wide"), 1 of 6000 rows ("big")."""
    root = tmp_path_factory.mktemp("copy_merge_inputs")
    out = {}
    for fmt in ("orc", "parquet"):
        out[fmt] = {
            "plain": write(spark, fmt, root / fmt / "plain"),
            "codec": write(spark, fmt, root / fmt / "codec", 200, 1000, parts=2, compression=OTHER_CODEC[fmt][0]),
            "wide": write(spark, fmt, root / fmt / "wide", 200, 2000, parts=2, wide=True),
            "big": write(spark, fmt, root / fmt / "big", 6000, 10000, parts=1),
        }
    return out


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_copy_merge_keeps_rows_blocks_and_codec(spark, data, tmp_path, fmt):
    files = data[fmt]["plain"]
    out = (tmp_path / f"merged.{fmt}").as_uri()
    inputs = [footer_info(spark, fmt, f) for f in files]

    footer, size = copy_merge(spark, fmt, files, out)

    assert footer == footer_info(spark, fmt, out)
    assert size == (tmp_path / f"merged.{fmt}").stat().st_size
    assert footer.rows == 600 == sum(ft.rows for ft in inputs)
    assert footer.block_rows == tuple(r for ft in inputs for r in ft.block_rows)
    assert footer.block_bytes == tuple(b for ft in inputs for b in ft.block_bytes)
    assert footer.compression == DEFAULT_CODEC[fmt] == inputs[0].compression
    assert footer.schema == inputs[0].schema
    verify_copy(spark, fmt, files, out)
    assert collected(spark, fmt, out) == rows(600)  # the same rows, nulls, maps and all
    # a merged file is itself a normal member of its group
    assert copy_groups(spark, fmt, files + [out]) == ([files + [out]], [])


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected 0x82F63B78), bit by bit: independent of the JVM's."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_the_digest_of_each_copied_range_is_its_crc32c_then_its_crc32(spark, data, tmp_path, fmt):
    """The copy's verification compares the digests the JVM takes of every copied range, the
    inputs' and the output's read back: each is the range's CRC-32C then its CRC-32 (16 hex
    digits), computed here apart from the JVM, so a range that differs by one byte differs."""
    import zlib
    from urllib.parse import urlsplit

    from hive_compaction.storage import jvm_helper

    files = data[fmt]["plain"][:2]
    out = tmp_path / f"merged.{fmt}"
    got = jvm_helper.call(spark, "copyMerge", fmt, files, out.as_uri())
    assert "error" not in got, got

    def expected(path: str) -> list[str]:
        raw = Path(urlsplit(path).path).read_bytes()
        chunks = [raw[u.offset : u.offset + u.length] for u in read_one(spark, fmt, path)[1]]
        return [f"{_crc32c(c):08x}{zlib.crc32(c):08x}" for c in chunks]

    inputs = [expected(f) for f in files]
    assert [doc["digests"] for doc in got["inputs"]] == inputs
    assert got["output"]["digests"] == expected(out.as_uri()) == [d for digests in inputs for d in digests]


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_groups_split_by_codec_and_schema_and_mixed_merge_fails(spark, data, tmp_path, fmt):
    plain, other, wider = data[fmt]["plain"][:3], data[fmt]["codec"], data[fmt]["wide"]
    assert footer_info(spark, fmt, other[0]).compression == OTHER_CODEC[fmt][1]

    mixed = [plain[0], other[0], plain[1], wider[0], other[1], plain[2], wider[1]]
    groups, rejected = copy_groups(spark, fmt, mixed)
    assert groups == [plain, other, wider] and rejected == []

    for bad in ([*plain, other[0]], [*plain, wider[0]]):
        out = tmp_path / f"mixed.{fmt}"
        with pytest.raises(CopyMergeError, match="cannot be copy-merged together"):
            copy_merge(spark, fmt, bad, out.as_uri())
        assert not out.exists()


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_damaged_input_fails_the_merge_and_leaves_nothing(spark, data, tmp_path, fmt):
    """An input whose footer reads fine but whose block bytes do not (a flipped byte under its
    .crc: Hadoop's local FS refuses the read, as HDFS refuses a bad block) fails the merge after
    the output was created; the output is removed and the inputs are as they were."""
    import shutil
    from urllib.parse import urlsplit

    folder = tmp_path / "inputs"
    folder.mkdir()
    files = []
    for f in data[fmt]["plain"][:3]:
        src = Path(urlsplit(f).path)
        for name in (src.name, f".{src.name}.crc"):
            shutil.copyfile(src.parent / name, folder / name)
        files.append((folder / src.name).as_uri())
    victim = Path(urlsplit(files[1]).path)
    unit = read_one(spark, fmt, files[1])[1][0]
    raw = bytearray(victim.read_bytes())
    raw[unit.offset + unit.length // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    out = tmp_path / f"merged.{fmt}"
    with pytest.raises(CopyMergeError, match="failed: .*Checksum"):
        copy_merge(spark, fmt, files, out.as_uri())
    assert not out.exists()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_existing_output_is_refused_and_kept(spark, data, tmp_path):
    out = tmp_path / "merged.orc"
    out.write_bytes(b"not mine")
    with pytest.raises(CopyMergeError, match="already exists"):
        copy_merge(spark, "orc", data["orc"]["plain"], out.as_uri())
    assert out.read_bytes() == b"not mine"


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_verify_copy_detects_tampering_and_wrong_inputs(spark, data, tmp_path, fmt):
    files = data[fmt]["plain"]
    out = tmp_path / f"merged.{fmt}"
    copy_merge(spark, fmt, files, out.as_uri())
    verify_copy(spark, fmt, files, out.as_uri())

    with pytest.raises(CopyMergeError, match="rows"):
        verify_copy(spark, fmt, files[:-1], out.as_uri())
    with pytest.raises(CopyMergeError):
        verify_copy(spark, fmt, files[::-1], out.as_uri())

    # Flip one byte in the middle of the first stripe / column chunk copied from files[1].
    unit = read_one(spark, fmt, out.as_uri())[1][len(read_one(spark, fmt, files[0])[1])]
    raw = bytearray(out.read_bytes())
    raw[unit.offset + unit.length // 2] ^= 0xFF
    out.write_bytes(bytes(raw))
    # With its .crc beside it, Hadoop's local FS refuses the read; still a failed verification.
    with pytest.raises(CopyMergeError):
        verify_copy(spark, fmt, files, out.as_uri())
    (tmp_path / f".merged.{fmt}.crc").unlink()
    with pytest.raises(CopyMergeError, match="bytes of .*" + re.escape(files[1].split("/")[-1])):
        verify_copy(spark, fmt, files, out.as_uri())


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_tiny_blocks_are_rejected(spark, data, fmt):
    small, big = data[fmt]["plain"], data[fmt]["big"]

    def avg_block_bytes(f):
        ft = footer_info(spark, fmt, f)
        return sum(ft.block_bytes) / len(ft.block_bytes)

    small_avg = max(avg_block_bytes(f) for f in small)
    assert avg_block_bytes(big[0]) > small_avg + 1

    assert copy_groups(spark, fmt, small + big, min_avg_block_bytes=int(small_avg) + 1) == ([big], small)
    assert copy_groups(spark, fmt, small + big, min_block_rows=101) == ([big], small)
    assert copy_groups(spark, fmt, small + big, min_block_rows=100) == ([small + big], [])
