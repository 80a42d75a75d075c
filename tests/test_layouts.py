"""Partition layouts on the real stack: big and small files mixed, multi-level partitions,
partition values with awkward characters, non-partitioned tables."""

from __future__ import annotations

import pytest

from test_end_to_end import assert_statistics_match_disk, files_with_times

pytestmark = pytest.mark.integration


def data_file_times(folder):
    return {n: v for n, v in files_with_times(folder).items() if not n.startswith((".", "_"))}


def test_big_files_stay_and_small_files_are_packed_near_the_target(stack, tmp_path):
    db, table = "layouts", "mixed"
    stack.make_table(db, table, "PARQUET", ["2026-08-01"], files=2, rows=20000)  # two big files
    from demo_tables import events

    small = events(stack.spark, "2026-08-01", 6000, seed=7)
    small.repartition(8).write.insertInto(f"{db}.{table}")  # eight small ones
    folder = stack.partition_location(db, table, "dt=2026-08-01")
    files = data_file_times(folder)
    sizes = sorted(size for size, _ in files.values())
    limit = sizes[-3] + 1  # every file but the two big ones is small
    target = 3 * sizes[-3] + 1  # room for about three small files per output
    big = {n: v for n, v in files.items() if v[0] >= limit}
    assert len(big) == 2 and len(files) == 10
    content = stack.content(db, table)

    cfg = stack.write_config(
        tmp_path / "c.yaml", [{"name": f"{db}.{table}", "small_file_limit": limit, "target_file_size": target}]
    )
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    after = data_file_times(folder)
    assert {n: after[n] for n in big} == big  # big files: same names, same bytes, untouched
    outputs = {n: v[0] for n, v in after.items() if n not in big}
    assert all(n.startswith("part-compacted-") for n in outputs)
    assert len(outputs) == 3  # 8 small files, at most 3 per output
    assert all(size <= target for size in outputs.values())
    assert stack.content(db, table) == content
    assert_statistics_match_disk(stack, db, table, content)


def test_multi_level_partitions_with_awkward_values(stack, tmp_path):
    db, table = "layouts", "awkward"
    stack.spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
    stack.spark.sql(f"""CREATE TABLE {db}.{table} (id BIGINT, payload STRING)
                        PARTITIONED BY (year INT, day DATE, label STRING) STORED AS ORC""")
    labels = ["a b", "x/y", "k=v", "50%", "日本語", "plain"]
    from pyspark.sql import functions as F

    df = (
        stack.spark.range(1200)
        .withColumn("payload", F.concat(F.lit("p"), F.col("id").cast("string")))
        .withColumn("year", F.lit(2026))
        .withColumn("day", F.to_date(F.lit("2026-08-02")))
        .withColumn(
            "label", F.element_at(F.array(*[F.lit(v) for v in labels]), (F.col("id") % len(labels) + 1).cast("int"))
        )
    )
    df.repartition(4).write.insertInto(f"{db}.{table}")
    stack.spark.sql(f"REFRESH TABLE {db}.{table}")

    def rows():
        stack.spark.sql(f"REFRESH TABLE {db}.{table}")
        return sorted(map(repr, stack.spark.table(f"{db}.{table}").collect()))

    before_rows = rows()
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    assert rows() == before_rows
    from hmsclient import hmsclient

    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        parts = c.get_partitions(db, table, -1)
        assert sorted(p.values[2] for p in parts) == sorted(labels)
        for p in parts:
            assert p.parameters["numFiles"] == "1", p.values
            assert p.parameters["numRows"] == "200", p.values


def test_a_non_partitioned_table_is_one_unit_of_work(stack, tmp_path):
    db, table = "layouts", "flat"
    stack.spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")  # the module's other tests may not have run
    stack.spark.sql(f"CREATE TABLE {db}.{table} (id BIGINT, name STRING) STORED AS PARQUET")
    stack.spark.range(900).selectExpr("id", "concat('n', id) AS name").repartition(5).write.insertInto(f"{db}.{table}")
    before = sorted(map(repr, stack.spark.table(f"{db}.{table}").collect()))
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    stack.spark.sql(f"REFRESH TABLE {db}.{table}")
    assert sorted(map(repr, stack.spark.table(f"{db}.{table}").collect())) == before
    from hmsclient import hmsclient

    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        t = c.get_table(db, table)
    assert t.parameters["numFiles"] == "1" and t.parameters["numRows"] == "900"
