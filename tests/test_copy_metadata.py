"""Copy merges keep and check footer metadata, on real files: ORC written by the ORC Java writer
with the proleptic calendar (dates before 1582), Parquet with user key-value metadata and with
Spark's LEGACY rebase metadata. Inputs that disagree on metadata that changes how values read are
never copied together."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from copy_checks import copy_groups, footer_info, read_one, verify_copy
from hive_compaction.merge.checksum import content as observed_content, content_metrics
from hive_compaction.merge.copy import CopyMergeError, copy_merge, read_footers
from hive_compaction.merge.grouping import copy_notes
from hive_compaction.model.batch import PartitionTask
from hive_compaction.storage.listing import DataFile

pytestmark = pytest.mark.integration

EPOCH = dt.datetime(1970, 1, 1)


def orc_rows(start: int, n: int = 40) -> list[tuple]:
    """Dates and timestamps before, around and after the 1582 calendar switch, with nulls."""
    out = []
    for i in range(start, start + n):
        day = dt.date(1000 + (i * 37) % 1100, 1 + i % 12, 1 + i % 28)
        ts = dt.datetime(1200 + (i * 53) % 900, 1 + i % 12, 1 + i % 27, i % 24, i % 60, i % 60, (i % 1000) * 1000)
        out.append((i, None if i % 7 == 0 else day, None if i % 11 == 0 else ts, f"n{i}"))
    return out


def write_orc(spark, path: Path, rows: list[tuple], proleptic: bool, metadata: dict[str, bytes] = None) -> str:
    """One ORC file written by the ORC Java writer (as Hive 3.1.3+ / 4 write with
    orc.proleptic.gregorian=true), in one stripe; the vectors hold proleptic day / millisecond
    counts, converted by the writer when the file is hybrid."""
    from py4j.java_gateway import get_field, set_field

    jvm = spark._jvm
    orc = jvm.org.apache.orc
    schema = orc.TypeDescription.fromString("struct<id:bigint,d:date,ts:timestamp,name:string>")
    opts = (
        orc.OrcFile.writerOptions(spark._jsc.hadoopConfiguration())
        .setSchema(schema)
        .setProlepticGregorian(proleptic)
        .compress(orc.CompressionKind.ZLIB)
    )
    writer = orc.OrcFile.createWriter(jvm.org.apache.hadoop.fs.Path(path.as_uri()), opts)
    batch = schema.createRowBatch(len(rows))
    ids, days, stamps, names = get_field(batch, "cols")
    names.initBuffer()
    days.changeCalendar(True, False)  # the values below are proleptic counts
    stamps.changeCalendar(True, False)
    iv, dv, tv, nv = (
        get_field(ids, "vector"),
        get_field(days, "vector"),
        get_field(stamps, "time"),
        get_field(stamps, "nanos"),
    )
    d_null, t_null = get_field(days, "isNull"), get_field(stamps, "isNull")
    set_field(days, "noNulls", False)
    set_field(stamps, "noNulls", False)
    for i, (id_, day, ts, name) in enumerate(rows):
        iv[i] = id_
        if day is None:
            d_null[i] = True
        else:
            dv[i] = (day - EPOCH.date()).days
        if ts is None:
            t_null[i] = True
        else:
            micros = (ts - EPOCH) // dt.timedelta(microseconds=1)
            tv[i] = micros // 1000
            nv[i] = (micros % 1_000_000) * 1000
        names.setVal(i, bytearray(name.encode()))
    set_field(batch, "size", len(rows))
    writer.addRowBatch(batch)
    for k, v in (metadata or {}).items():
        writer.addUserMetadata(k, jvm.java.nio.ByteBuffer.wrap(bytearray(v)))
    writer.close()
    return path.as_uri()


def read_rows(spark, fmt: str, paths) -> list[tuple]:
    return sorted((tuple(r) for r in spark.read.format(fmt).load(paths).collect()), key=lambda r: r[0])


def content(spark, fmt: str, paths) -> tuple[int, int, int]:
    """Rows and the merge job's own content checksums (row_hash)."""
    df = spark.read.format(fmt).load(paths)
    return observed_content(df.agg(*content_metrics(df.schema)).first())


def extra(spark, fmt: str, path: str) -> dict[str, str]:
    return dict(footer_info(spark, fmt, path).extra)


@pytest.fixture(scope="module")
def orc_files(spark, tmp_path_factory):
    """Three proleptic and two hybrid ORC files holding the same kind of rows and metadata."""
    root = tmp_path_factory.mktemp("orc_calendars")
    meta = {"origin": b"ingest-7", "binary": bytes(range(256))}
    prol = [write_orc(spark, root / f"prol-{i}.orc", orc_rows(i * 100), True, meta) for i in range(3)]
    hyb = [write_orc(spark, root / f"hyb-{i}.orc", orc_rows(1000 + i * 100), False, meta) for i in range(2)]
    return {"proleptic": prol, "hybrid": hyb}


def test_orc_proleptic_dates_before_1582_read_back_equal_after_a_copy(spark, orc_files, tmp_path):
    files = orc_files["proleptic"]
    expected = sorted((r for i in range(3) for r in orc_rows(i * 100)), key=lambda r: r[0])
    assert read_rows(spark, "orc", files) == expected  # the writer got them right
    before = content(spark, "orc", files)
    out = (tmp_path / "merged.orc").as_uri()

    footer, _ = copy_merge(spark, "orc", files, out)

    ins = [footer_info(spark, "orc", f) for f in files]
    assert dict(footer.extra)["calendar"] == "proleptic" == dict(ins[0].extra)["calendar"]
    assert footer.extra == ins[0].extra  # calendar, row index stride, user metadata (binary too)
    assert dict(footer.extra)["meta:binary"] == bytes(range(256)).decode("latin-1")
    assert footer.version == ins[0].version and footer.block_rows == (40, 40, 40)
    assert read_rows(spark, "orc", out) == expected  # 1000-01-01 is still 1000-01-01
    assert content(spark, "orc", out) == before
    verify_copy(spark, "orc", files, out)

    # Statistics: each stripe's are the inputs' (verify_copy), the file's are their merge.
    jvm = spark._jvm
    opts = jvm.org.apache.orc.OrcFile.readerOptions(spark._jsc.hadoopConfiguration()).convertToProlepticGregorian(True)
    reader = jvm.org.apache.orc.OrcFile.createReader(jvm.org.apache.hadoop.fs.Path(out), opts)
    stats = reader.getStatistics()
    days = [r[1] for r in expected if r[1] is not None]
    assert stats[2].getNumberOfValues() == len(days)
    assert str(stats[2].getMinimumLocalDate()) == str(min(days))
    assert str(stats[2].getMaximumLocalDate()) == str(max(days))
    assert stats[1].getNumberOfValues() == 120 and (stats[1].getMinimum(), stats[1].getMaximum()) == (0, 239)
    assert read_one(spark, "orc", out, statistics=True).file_stats == ""
    reader.close()


def test_orcs_own_merge_drops_the_calendar_and_the_check_catches_it(spark, orc_files, tmp_path):
    """OrcFile.mergeFiles (what Hive's CONCATENATE does for ORC) writes its footer in the
    writer's default calendar: the proleptic stripes read shifted by days. The copy's check
    refuses such an output."""
    files = orc_files["proleptic"]
    jvm = spark._jvm
    out = tmp_path / "orc-merge.orc"
    paths = jvm.java.util.ArrayList()
    for f in files:
        paths.add(jvm.org.apache.hadoop.fs.Path(f))
    opts = jvm.org.apache.orc.OrcFile.writerOptions(spark._jsc.hadoopConfiguration())
    assert len(jvm.org.apache.orc.OrcFile.mergeFiles(jvm.org.apache.hadoop.fs.Path(out.as_uri()), opts, paths)) == 3
    assert dict(footer_info(spark, "orc", out.as_uri()).extra)["calendar"] == "hybrid"
    assert read_rows(spark, "orc", out.as_uri())[1][1] != read_rows(spark, "orc", files)[1][1]  # shifted
    with pytest.raises(CopyMergeError, match=r"calendar \(proleptic in the input, hybrid in the output\)"):
        verify_copy(spark, "orc", files, out.as_uri())


def test_the_check_compares_each_stripes_statistics(spark, orc_files, tmp_path):
    """A stripe copied with another stripe's statistics (the bytes all right, the footer not)
    fails the check: readers skip stripes by those statistics."""
    jvm = spark._jvm
    orc = jvm.org.apache.orc
    conf = spark._jsc.hadoopConfiguration()
    files = orc_files["hybrid"]
    readers = [
        orc.OrcFile.createReader(jvm.org.apache.hadoop.fs.Path(f), orc.OrcFile.readerOptions(conf)) for f in files
    ]
    first = readers[0]
    out = (tmp_path / "swapped.orc").as_uri()
    opts = (
        orc.OrcFile.writerOptions(conf)
        .setSchema(first.getSchema())
        .compress(first.getCompressionKind())
        .version(first.getFileVersion())
        .bufferSize(first.getCompressionSize())
        .enforceBufferSize()
        .setProlepticGregorian(False)
    )
    writer = orc.OrcFile.createWriter(jvm.org.apache.hadoop.fs.Path(out), opts)
    for i, r in enumerate(readers):
        stripe = r.getStripes()[0]
        raw = Path(files[i][len("file://") :]).read_bytes()[
            stripe.getOffset() : stripe.getOffset() + stripe.getLength()
        ]
        wrong = readers[1 - i].getOrcProtoStripeStatistics()[0]  # the other file's
        writer.appendStripe(bytearray(raw), 0, len(raw), stripe, wrong)
    for k, v in (("origin", b"ingest-7"), ("binary", bytes(range(256)))):
        writer.addUserMetadata(k, jvm.java.nio.ByteBuffer.wrap(bytearray(v)))
    writer.close()
    for r in readers:
        r.close()
    assert read_rows(spark, "orc", out) == read_rows(spark, "orc", files)  # the rows are right
    with pytest.raises(CopyMergeError, match="statistics of stripe 0 of .*hyb-0.orc"):
        verify_copy(spark, "orc", files, out)


def test_orc_inputs_with_different_calendars_are_not_copied_together(spark, orc_files, tmp_path):
    prol, hyb = orc_files["proleptic"], orc_files["hybrid"]
    mixed = [prol[0], hyb[0], prol[1], hyb[1], prol[2]]
    assert copy_groups(spark, "orc", mixed) == ([prol, hyb], [])
    out = tmp_path / "mixed.orc"
    with pytest.raises(CopyMergeError, match=r"refused: .*calendar \(proleptic vs hybrid\)"):
        copy_merge(spark, "orc", [prol[0], hyb[0]], out.as_uri())
    assert not out.exists()
    # Each calendar's group copies on its own and keeps it.
    for name, group in (("p", prol), ("h", hyb)):
        target = (tmp_path / f"{name}.orc").as_uri()
        footer, _ = copy_merge(spark, "orc", group, target)
        assert dict(footer.extra)["calendar"] == dict(footer_info(spark, "orc", group[0]).extra)["calendar"]
        assert read_rows(spark, "orc", target) == read_rows(spark, "orc", group)


def test_a_partition_with_both_calendars_is_copied_in_separate_groups_with_the_reason(
    stack, spark, orc_files, tmp_path
):
    """The merge job on a real partition folder, merge_mode copy: two copy groups, one per calendar,
    the reason in the partition's result; every row (dates before 1582 included) reads back the
    same. (auto rewrites such a partition into one file: copying would leave two.)"""
    from hive_compaction.merge.job_spark import JobSpark
    from hive_compaction.merge.runner import BatchRunner

    folder = tmp_path / "t" / "dt=1"
    folder.mkdir(parents=True)
    for f in orc_files["proleptic"] + orc_files["hybrid"]:
        shutil.copyfile(Path(f[len("file://") :]), folder / Path(f).name)
    uri = f"file://{folder}"  # as_uri() would quote the '='
    rows, checksum = read_rows(spark, "orc", uri), content(spark, "orc", uri)
    task = PartitionTask(
        "db",
        "t",
        "dt=1",
        ("1",),
        uri,
        f"file://{tmp_path}/t",
        "orc",
        f"file://{tmp_path}/.hc",
        target_file_size=1 << 30,
        small_file_limit=1 << 20,
        min_small_files=2,
        merge_mode="copy",
    )

    # ``stack``: the session's Spark knows the real Metastore, whose lock the commit takes.
    (result,) = BatchRunner(JobSpark(spark.sparkContext), "run1", "b0").run_batch([task])

    assert result.status == "merged", result.reason
    assert result.mode == "copy" and result.groups == 2 and result.files_merged == 5
    assert "calendar (hybrid: 2, proleptic: 3; changes how values read" in result.reason
    outputs = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    assert len(outputs) == 2
    assert sorted(dict(footer_info(spark, "orc", f"file://{p}").extra)["calendar"] for p in outputs) == [
        "hybrid",
        "proleptic",
    ]
    assert read_rows(spark, "orc", uri) == rows
    assert content(spark, "orc", uri) == checksum


def test_auto_merges_a_partition_across_the_copy_floor_with_one_engine_into_one_file(stack, spark, tmp_path):
    """Files with stripes on both sides of copy_min_block_size: auto used to copy those above and
    rewrite those below (two outputs). Now one engine and one file per partition: copy where the
    partition's stripes average at least the floor, rewrite where they do not."""
    from hive_compaction.merge.job_spark import JobSpark
    from hive_compaction.merge.runner import BatchRunner

    tasks, rows, sizes = [], {}, []
    for part in ("1", "2"):
        folder = tmp_path / "t" / f"dt={part}"
        folder.mkdir(parents=True)
        written = tmp_path / f"w{part}"  # as_uri() would quote a '=' in the path
        written.mkdir()
        for i, n in enumerate((20, 30, 200, 300)):  # two small stripes, two bigger ones
            shutil.copyfile(
                Path(write_orc(spark, written / f"f{i}.orc", orc_rows(1000 * i, n), proleptic=True)[7:]),
                folder / f"f{i}.orc",
            )
        uri = f"file://{folder}"
        rows[part] = read_rows(spark, "orc", uri)
        blocks = [
            b for f in sorted(folder.glob("f*.orc")) for b in footer_info(spark, "orc", f"file://{f}").block_bytes
        ]
        sizes = sorted(blocks)
        average = sum(blocks) / len(blocks)
        assert sizes[1] < average < sizes[2]  # the per-file floor in between would have split them
        floor = int(average) if part == "1" else int(average) + 1  # dt=1: copied, dt=2: rewritten
        tasks.append(
            PartitionTask(
                "db",
                "t",
                f"dt={part}",
                (part,),
                uri,
                f"file://{tmp_path}/t",
                "orc",
                f"file://{tmp_path}/.hc",
                target_file_size=1 << 30,
                small_file_limit=1 << 20,
                min_small_files=2,
                merge_mode="auto",
                copy_min_block_size=floor,
            )
        )
    copied, rewritten = BatchRunner(JobSpark(spark.sparkContext), "run1", "b0").run_batch(tasks)
    assert (copied.status, copied.mode, copied.groups, copied.files_merged, copied.files_after) == (
        "merged",
        "copy",
        1,
        4,
        1,
    ), copied.reason
    assert copied.reason == ""
    assert (rewritten.status, rewritten.mode, rewritten.groups, rewritten.files_merged, rewritten.files_after) == (
        "merged",
        "rewrite",
        1,
        4,
        1,
    ), rewritten.reason
    assert rewritten.reason.startswith("auto rewrote the partition: copying would keep stripes / row groups averaging")
    for part, r in (("1", copied), ("2", rewritten)):
        assert read_rows(spark, "orc", r.location) == rows[part]


# --- Parquet ----------------------------------------------------------------------------------


def write_parquet_with_metadata(spark, path: Path, start: int, metadata: dict[str, str]) -> str:
    """A Parquet file written by parquet-mr's example writer with user key-value metadata."""
    jvm = spark._jvm
    schema = jvm.org.apache.parquet.schema.MessageTypeParser.parseMessageType(
        "message m { required int32 id; optional binary name (STRING); optional int32 day (DATE); }"
    )
    extra_meta = jvm.java.util.HashMap()
    for k, v in metadata.items():
        extra_meta.put(k, v)
    builder = jvm.org.apache.parquet.hadoop.example.ExampleParquetWriter.builder(
        jvm.org.apache.parquet.hadoop.util.HadoopOutputFile.fromPath(
            jvm.org.apache.hadoop.fs.Path(path.as_uri()), spark._jsc.hadoopConfiguration()
        )
    )
    writer = (
        builder.withType(schema)
        .withExtraMetaData(extra_meta)
        .withCompressionCodec(jvm.org.apache.parquet.hadoop.metadata.CompressionCodecName.SNAPPY)
        .build()
    )
    factory = jvm.org.apache.parquet.example.data.simple.SimpleGroupFactory(schema)
    for i in range(start, start + 50):
        g = factory.newGroup().append("id", i)
        if i % 6:
            g = g.append("name", f"name-{i}")
        writer.write(g.append("day", -150000 + i * 997))
    writer.close()
    return path.as_uri()


def test_parquet_user_key_value_metadata_is_kept(spark, tmp_path):
    meta = {"owner": "team-a", "schema.fingerprint": "f00d", "note": "x" * 300}
    files = [write_parquet_with_metadata(spark, tmp_path / f"in-{i}.parquet", i * 50, meta) for i in range(3)]
    ins = [footer_info(spark, "parquet", f) for f in files]
    assert dict(ins[0].extra) == {**meta, "writer.model.name": "example"}
    before = content(spark, "parquet", files)
    out = (tmp_path / "merged.parquet").as_uri()

    footer, _ = copy_merge(spark, "parquet", files, out)

    assert footer.extra == ins[0].extra  # every key, writer.model.name too
    verify_copy(spark, "parquet", files, out)  # chunk statistics included
    assert content(spark, "parquet", out) == before
    assert read_rows(spark, "parquet", out) == read_rows(spark, "parquet", files)
    # created_by cannot be kept: the output names this parquet-mr, the inputs' under original.created.by.
    jvm = spark._jvm
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
        jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
            jvm.org.apache.hadoop.fs.Path(out), spark._jsc.hadoopConfiguration()
        )
    )
    kv = dict(reader.getFooter().getFileMetaData().getKeyValueMetaData())
    assert kv["original.created.by"] == ins[0].version
    # Column statistics came with the row groups: min / max of each chunk as in its input.
    chunk_stats = [str(c.getStatistics()) for b in reader.getFooter().getBlocks() for c in b.getColumns()]
    reader.close()
    want = []
    for f in files:
        r = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
            jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
                jvm.org.apache.hadoop.fs.Path(f), spark._jsc.hadoopConfiguration()
            )
        )
        want += [str(c.getStatistics()) for b in r.getFooter().getBlocks() for c in b.getColumns()]
        r.close()
    assert chunk_stats == want and any("min: " in s for s in want)


def spark_parquet(spark, folder: Path, start: int, legacy: bool, parts: int = 2) -> list[str]:
    """Spark-written Parquet with dates and INT96 timestamps before 1582, with LEGACY (hybrid
    calendar) or CORRECTED rebase: the LEGACY files carry org.apache.spark.legacyDateTime /
    legacyINT96 in their footers."""
    mode = "LEGACY" if legacy else "CORRECTED"
    confs = {
        "spark.sql.parquet.datetimeRebaseModeInWrite": mode,
        "spark.sql.parquet.int96RebaseModeInWrite": mode,
        "spark.sql.parquet.outputTimestampType": "INT96",
    }
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        df = spark.range(start, start + 60 * parts, numPartitions=1).selectExpr(
            "id",
            "date_add(DATE'1000-01-01', cast(id * 3 AS INT)) AS d",
            "timestamp_seconds(-30000000000 + id * 86461) AS ts",
            "concat('n', id) AS name",
        )
        df.write.option("maxRecordsPerFile", 60).parquet(str(folder))
    finally:
        for k in confs:
            spark.conf.unset(k)
    return sorted(p.as_uri() for p in folder.glob("part-*"))


def test_parquet_legacy_and_corrected_rebase_inputs_are_not_copied_together(spark, tmp_path):
    legacy = spark_parquet(spark, tmp_path / "legacy", 0, True)
    corrected = spark_parquet(spark, tmp_path / "corrected", 1000, False)
    assert "org.apache.spark.legacyDateTime" in extra(spark, "parquet", legacy[0])
    assert "org.apache.spark.legacyINT96" in extra(spark, "parquet", legacy[0])
    assert "org.apache.spark.legacyDateTime" not in extra(spark, "parquet", corrected[0])
    mixed = [legacy[0], corrected[0], legacy[1], corrected[1]]
    rows, checksum = read_rows(spark, "parquet", mixed), content(spark, "parquet", mixed)
    assert rows[0][1] == dt.date(1000, 1, 1)

    assert copy_groups(spark, "parquet", mixed) == ([legacy, corrected], [])
    out = tmp_path / "mixed.parquet"
    with pytest.raises(CopyMergeError, match=r'refused: .*org\.apache\.spark\.legacyDateTime \(absent vs ""\)'):
        copy_merge(spark, "parquet", [corrected[0], legacy[0]], out.as_uri())
    assert not out.exists()

    # The reason the merge job records for such a partition.
    files = [DataFile(p, 1, 0) for p in mixed]
    task = PartitionTask(
        "db",
        "t",
        "dt=1",
        ("1",),
        "x",
        "x",
        "parquet",
        "x",
        target_file_size=1 << 30,
        small_file_limit=1 << 30,
        min_small_files=2,
        merge_mode="auto",
    )
    footers = dict(zip(mixed, read_footers(spark, "parquet", mixed)))
    note = copy_notes(task, files, footers)
    assert 'org.apache.spark.legacyDateTime ("": 2, absent: 2; changes how values read' in note
    assert "org.apache.spark.legacyINT96" in note

    # Each group copies on its own: the old dates and timestamps read back the same.
    outs = []
    for name, group in (("l", legacy), ("c", corrected)):
        target = (tmp_path / f"{name}.parquet").as_uri()
        footer, _ = copy_merge(spark, "parquet", group, target)
        assert footer.extra == footer_info(spark, "parquet", group[0]).extra
        verify_copy(spark, "parquet", group, target)
        outs.append(target)
    assert read_rows(spark, "parquet", outs) == rows
    assert content(spark, "parquet", outs) == checksum


def test_parquets_rewriter_on_mixed_rebase_inputs_shifts_dates_and_the_check_catches_it(spark, tmp_path):
    """ParquetRewriter alone takes every input's key-value metadata into one footer: the
    CORRECTED file's rows are then read as LEGACY (shifted). The copy's check refuses it."""
    legacy = spark_parquet(spark, tmp_path / "legacy", 0, True, parts=1)
    corrected = spark_parquet(spark, tmp_path / "corrected", 1000, False, parts=1)
    jvm = spark._jvm
    paths = jvm.java.util.ArrayList()
    for f in (legacy[0], corrected[0]):
        paths.add(jvm.org.apache.hadoop.fs.Path(f))
    out = (tmp_path / "rewriter.parquet").as_uri()
    opts = getattr(jvm.org.apache.parquet.hadoop.rewrite, "RewriteOptions$Builder")(
        spark._jsc.hadoopConfiguration(), paths, jvm.org.apache.hadoop.fs.Path(out)
    ).build()
    rewriter = jvm.org.apache.parquet.hadoop.rewrite.ParquetRewriter(opts)
    rewriter.processBlocks()
    rewriter.close()
    assert read_rows(spark, "parquet", out) != read_rows(spark, "parquet", [legacy[0], corrected[0]])
    with pytest.raises(CopyMergeError, match=r"footer metadata differs from .*org\.apache\.spark\.legacyDateTime"):
        verify_copy(spark, "parquet", [legacy[0], corrected[0]], out)


def test_spark_parquet_metadata_is_kept(spark, tmp_path):
    files = spark_parquet(spark, tmp_path / "in", 0, False, parts=3)
    ins = footer_info(spark, "parquet", files[0])
    assert {"org.apache.spark.version", "org.apache.spark.sql.parquet.row.metadata"} <= set(dict(ins.extra))
    out = (tmp_path / "merged.parquet").as_uri()
    footer, _ = copy_merge(spark, "parquet", files, out)
    assert footer.extra == ins.extra
    assert spark.read.parquet(out).schema == spark.read.parquet(*files).schema
    assert content(spark, "parquet", out) == content(spark, "parquet", files)
