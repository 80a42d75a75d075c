"""Merge modes through the real DAG: copy keeps blocks, codec and rows; rewrite keeps the codec,
evolves old files to the table's schema and keeps a declared sort order."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from copy_checks import footer_info
from harness import data_files
from matrix_sampling import variants

pytestmark = pytest.mark.integration


def footers(stack, fmt: str, files: list[Path]):
    return [footer_info(stack.spark, fmt, f"file://{f}") for f in files]


@pytest.mark.parametrize("storage", variants("test_merge_modes: copy, format", ["ORC", "PARQUET"]))
def test_copy_mode_concatenates_blocks_and_keeps_codec_and_every_row(stack, tmp_path, storage):
    db, table, fmt = "modes", f"copy_{storage.lower()}", storage.lower()
    stack.make_table(db, table, storage, ["2026-10-01"], files=5, rows=500)
    folder = stack.partition_location(db, table, "dt=2026-10-01")
    before = footers(stack, fmt, data_files(folder))
    content = stack.content(db, table)

    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "merge_mode": "copy"}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    assert any("dt=2026-10-01" in line and "merged" in line and "  copy  " in line for line in run.log.splitlines())
    # A job that only copies never makes Spark SQL's session (docs/performance.md#the-fixed-start).
    assert "hive_compaction: Spark ready " in run.log and "Spark SQL session made" not in run.log
    assert "(5 files) in" in run.log  # local mode: copied in the driver, no Spark job (its executor is the driver)
    # What an operator sizes --driver-memory by.
    assert re.search(
        r"driver memory: JVM peak RSS \d+ MB, JVM old generation peak \d+ MB of a \d+ MB heap, "
        r"Python peak RSS \d+ MB",
        run.log,
    ), run.log[-3000:]
    outputs = data_files(folder)
    assert len(outputs) == 1 and outputs[0].name.startswith("part-compacted-")
    (after,) = footers(stack, fmt, outputs)
    assert after.compression == before[0].compression
    assert after.rows == sum(f.rows for f in before)
    # every input block is in the output, none decoded into new blocks
    assert Counter(after.block_rows) == Counter(r for f in before for r in f.block_rows)
    assert len(after.block_rows) == sum(len(f.block_rows) for f in before)
    assert stack.content(db, table) == content


def test_rewrite_keeps_the_codec_and_evolves_old_files_to_the_tables_schema(stack, tmp_path):
    db, table = "modes", "evolving"
    spark = stack.spark
    spark.conf.set("spark.sql.orc.compression.codec", "zlib")
    try:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
        spark.sql(f"CREATE TABLE {db}.{table} (id BIGINT, name STRING) PARTITIONED BY (dt STRING) STORED AS ORC")
        spark.range(300).selectExpr("id", "concat('n', id) AS name", "'2026-10-02' AS dt").repartition(
            3
        ).write.insertInto(f"{db}.{table}")
        spark.sql(f"ALTER TABLE {db}.{table} ADD COLUMNS (extra STRING)")
        spark.range(300, 600).selectExpr(
            "id", "concat('n', id) AS name", "concat('x', id) AS extra", "'2026-10-02' AS dt"
        ).repartition(3).write.insertInto(f"{db}.{table}")
    finally:
        spark.conf.unset("spark.sql.orc.compression.codec")
    folder = stack.partition_location(db, table, "dt=2026-10-02")
    schemas = {f.schema for f in footers(stack, "orc", data_files(folder))}
    assert len(schemas) == 2  # old files lack the new column
    rows = stack.rows(db, table)

    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])  # auto: tiny blocks -> rewrite
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    outputs = data_files(folder)
    assert len(outputs) == 1
    (after,) = footers(stack, "orc", outputs)
    assert after.compression == "ZLIB"  # the inputs' codec, not Spark's default
    assert "extra" in after.schema and after.rows == 600
    assert stack.rows(db, table) == rows  # every row, old rows with a null in the new column
    assert "Spark SQL session made for the rewrites" in run.log
    assert "the inputs' checksums taken by the write tasks" in run.log  # not by a second scan


def test_rewrite_keeps_a_declared_sort_order_within_each_output(stack, tmp_path):
    from hmsclient import hmsclient
    from hmsclient.genthrift.hive_metastore.ttypes import Order

    db, table = "modes", "sorted"
    spark = stack.spark
    spark.sql(f"CREATE TABLE {db}.{table} (id BIGINT, k INT) PARTITIONED BY (dt STRING) STORED AS PARQUET")
    spark.range(2000).selectExpr("id", "cast((id * 7919) % 1000 AS INT) AS k", "'2026-10-03' AS dt").repartition(
        4
    ).write.insertInto(f"{db}.{table}")
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        t = c.get_table(db, table)
        t.sd.sortCols = [Order(col="k", order=1)]
        c.alter_table(db, table, t)
    rows = stack.rows(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "copy_min_block_size": 0}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    (output,) = data_files(stack.partition_location(db, table, "dt=2026-10-03"))
    ks = [r["k"] for r in spark.read.parquet(f"file://{output}").collect()]
    assert ks == sorted(ks) and len(ks) == 2000
    assert stack.rows(db, table) == rows
    assert "the inputs' checksums taken by the write tasks" in run.log


def test_a_file_damaged_past_its_footer_fails_only_its_own_partition(stack, tmp_path):
    """Footers read fine, the data does not: the damaged group's columnar merge task fails (also
    where the cluster's defaults ignore corrupt files, which the engine's ORC reader never does),
    and only its partition fails (left byte for byte as it was); the other partition merges."""
    db, table = "modes", "damaged"
    stack.make_table(db, table, "ORC", ["2026-10-05", "2026-10-06"], files=3, rows=20000)
    good, bad = (stack.partition_location(db, table, f"dt=2026-10-0{d}") for d in (5, 6))

    def rows_of(folder: Path) -> list[str]:  # every row, all columns, of one partition folder
        return sorted(repr(tuple(r)) for r in stack.spark.read.orc(f"file://{folder}").collect())

    good_rows = rows_of(good)
    victim = data_files(bad)[0]
    assert victim.stat().st_size > 64 * 1024  # the reader's footer read does not reach offset 100
    raw = bytearray(victim.read_bytes())
    raw[100:108] = bytes(b ^ 0xFF for b in raw[100:108])  # its .crc stays: the read fails loudly
    victim.write_bytes(bytes(raw))
    assert footer_info(stack.spark, "orc", f"file://{victim}").rows > 0
    bad_before = {f.name: f.read_bytes() for f in bad.iterdir()}

    # A cluster whose defaults skip unreadable files: the job turns that off for itself, so the read
    # fails (were the bad file skipped in both passes, the write and the read-back would agree).
    cfg = stack.write_config(
        tmp_path / "c.yaml",
        [{"name": f"{db}.{table}", "merge_mode": "rewrite"}],
        spark_conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.files.ignoreCorruptFiles": "true",
            "spark.sql.files.ignoreMissingFiles": "true",
        },
    )
    run = stack.run_dag(cfg)
    assert run.state == "failed"
    assert "columnar merge failed" in run.log
    assert {f.name: f.read_bytes() for f in bad.iterdir()} == bad_before
    assert len(data_files(good)) == 1 and rows_of(good) == good_rows


def _arrow_content(folder: Path) -> tuple[int, str]:
    """(rows, digest of the sorted rows) of a partition folder's files as pyarrow reads them."""
    import hashlib

    import pyarrow.parquet as pq

    rows = sorted(repr(tuple(r.values())) for f in data_files(folder) for r in pq.read_table(f).to_pylist())
    return len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()


def _physical(schema: str) -> str:
    """A Parquet footer's schema without what a read changes (Spark reads every field as nullable)."""
    return re.sub(r"\brequired\b", "optional", schema)


def test_rewrite_keeps_a_hive_layout_parquet_table_readable_by_every_reader(stack, tmp_path):
    """Parquet written as Hive-centric shops write it (Spark's writeLegacyFormat: decimals as
    FIXED_LEN_BYTE_ARRAY, lists as bag/array, timestamps as INT96), read by Hive's own SerDe: the
    default auto rewrite keeps the inputs' physical types, so Hive's SerDe, pyarrow and Spark read
    the same rows after as before (issue 54)."""
    from demo_tables import create_table, fill

    db, table, day = "modes", "hive_layout", "2026-10-07"
    spark = stack.spark
    spark.conf.set("spark.sql.parquet.writeLegacyFormat", "true")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    try:
        create_table(spark, db, table, "PARQUET")  # decimal(12,2), timestamp, array<bigint>, map
        fill(spark, db, table, [day], 4, 800)
    finally:
        spark.conf.unset("spark.sql.parquet.writeLegacyFormat")
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
    folder = stack.partition_location(db, table, f"dt={day}")
    (before,) = {_physical(f.schema) for f in footers(stack, "parquet", data_files(folder))}
    assert "fixed_len_byte_array(6) amount" in before and "int96 ts" in before and "group bag" in before, before

    def hive_content():  # Hive's ParquetHiveSerDe, not Spark's own reader
        spark.conf.set("spark.sql.hive.convertMetastoreParquet", "false")
        try:
            return stack.content(db, table)
        finally:
            spark.conf.unset("spark.sql.hive.convertMetastoreParquet")

    content, hive, arrow = stack.content(db, table), hive_content(), _arrow_content(folder)
    assert content[f"dt={day}"][0] == hive[f"dt={day}"][0] == arrow[0] == 800

    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])  # auto: tiny blocks -> rewrite
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    assert "with the columnar engine" in run.log  # it was rewritten, by the columnar engine
    outputs = data_files(folder)
    assert len(outputs) == 1 and outputs[0].name.startswith("part-compacted-"), outputs
    assert stack.content(db, table) == content
    assert _arrow_content(folder) == arrow
    assert hive_content() == hive
    (after,) = footers(stack, "parquet", outputs)
    assert _physical(after.schema) == before  # the inputs' physical types and list / map layout


def test_parquet_files_of_two_layouts_are_rewritten_apart_each_keeping_its_own(stack, tmp_path):
    """One partition written by a Hive-layout job (legacy decimals and lists, INT96) and by a job on
    Spark's defaults with TIMESTAMP_MICROS: two outputs, each with its inputs' physical types, and
    the partition's reason says why."""
    from demo_tables import create_table, fill

    db, table, day = "modes", "two_layouts", "2026-10-08"
    spark = stack.spark
    create_table(spark, db, table, "PARQUET")
    for legacy, stamps in (("true", "INT96"), ("false", "TIMESTAMP_MICROS")):
        spark.conf.set("spark.sql.parquet.writeLegacyFormat", legacy)
        spark.conf.set("spark.sql.parquet.outputTimestampType", stamps)
        try:
            fill(spark, db, table, [day], 3, 600)
        finally:
            spark.conf.unset("spark.sql.parquet.writeLegacyFormat")
            spark.conf.unset("spark.sql.parquet.outputTimestampType")
    folder = stack.partition_location(db, table, f"dt={day}")
    before = Counter(_physical(f.schema) for f in footers(stack, "parquet", data_files(folder)))
    assert sorted(before.values()) == [3, 3], before
    content = stack.content(db, table)

    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "merge_mode": "rewrite"}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    assert "small files rewritten apart, their Parquet layouts differ" in run.log
    outputs = data_files(folder)
    assert len(outputs) == 2 and all(f.name.startswith("part-compacted-") for f in outputs), outputs
    assert Counter(_physical(f.schema) for f in footers(stack, "parquet", outputs)) == Counter(set(before))
    assert stack.content(db, table) == content


def test_a_columnar_merge_of_an_orc_table_reads_the_same_through_hives_serde_arrow_and_spark(stack, tmp_path):
    """ORC written by Spark into a Hive table (decimal, timestamp, array, map, nulls), merged by the
    default auto mode's columnar engine: Hive's own ORC SerDe (``convertMetastoreOrc`` off), Arrow's
    ORC reader and Spark's read the same rows after as before."""
    import hashlib

    import pyarrow.orc as po

    from demo_tables import create_table, fill

    db, table, day = "modes", "orc_readers", "2026-10-08"
    spark = stack.spark
    create_table(spark, db, table, "ORC")
    fill(spark, db, table, [day], 5, 900)
    folder = stack.partition_location(db, table, f"dt={day}")

    def arrow() -> tuple[int, str]:
        rows = sorted(
            repr(tuple(r.values())) for f in data_files(folder) for r in po.ORCFile(str(f)).read().to_pylist()
        )
        return len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()

    def hive_content():  # Hive's OrcSerde, not Spark's own ORC reader
        spark.conf.set("spark.sql.hive.convertMetastoreOrc", "false")
        try:
            return stack.content(db, table)
        finally:
            spark.conf.unset("spark.sql.hive.convertMetastoreOrc")

    content, hive, arrow_before = stack.content(db, table), hive_content(), arrow()
    assert content[f"dt={day}"][0] == hive[f"dt={day}"][0] == arrow_before[0] == 900

    run = stack.run_dag(stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}]))
    assert run.state == "success", run.log[-4000:]
    assert "with the columnar engine" in run.log
    assert len(data_files(folder)) == 1
    assert (stack.content(db, table), hive_content(), arrow()) == (content, hive, arrow_before)
