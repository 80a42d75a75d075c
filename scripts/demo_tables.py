"""Demo tables: partitioned ORC and Parquet tables full of small files, through Spark and the Metastore.

    python scripts/demo_tables.py [--metastore thrift://127.0.0.1:9083] [--warehouse file:///...]

Each table gets several dates; most partitions are written the way a dynamic-partition insert
with many tasks writes them (one file per task per partition), one date is written by a single
task and so already holds a single file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from build_engine import JAR as ENGINE_JAR

ROOT = Path(__file__).resolve().parents[1]

DEMO_DB = "demo"
DEMO_TABLES = {"events_orc": "ORC", "events_parquet": "PARQUET"}
DEMO_DATES = ["2026-11-17", "2026-11-18", "2026-11-19", "2026-11-20", "2026-11-21"]
SINGLE_FILE_DATE = "2026-11-17"
# Written as an hourly job does: one insert creates it, later inserts append (Spark leaves its
# statistics at numFiles=1: only a listing sees the small files).
APPENDED_DATE = "2026-11-21"


def spark_session(
    metastore_uri: str, warehouse: str, app: str = "hive-compaction-demo", conf: dict[str, str] | None = None
):
    """``conf``: more Spark settings (e.g. a connector's jars and its ``spark.hadoop.*`` settings)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    conf = dict(conf or {})
    if ENGINE_JAR.exists():  # the merge engine's jar, as the merge tasks' spark-submit passes it
        conf["spark.jars"] = ",".join(j for j in (str(ENGINE_JAR), conf.get("spark.jars")) if j)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return (
        builder.master("local[2]")
        .appName(app)
        .config("spark.hadoop.hive.metastore.uris", metastore_uri)
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("hive.exec.dynamic.partition.mode", "nonstrict")
        .enableHiveSupport()
        .getOrCreate()
    )


def events(spark, date: str, rows: int, seed: int):
    """Rows with a mix of types (strings, decimals, timestamps, nulls, arrays, maps)."""
    from pyspark.sql import functions as F

    return spark.range(rows).select(
        (F.col("id") + seed * 1_000_000).alias("event_id"),
        F.concat(F.lit("user-"), (F.col("id") * 7919 % 997).cast("string")).alias("user_id"),
        F.when(F.col("id") % 11 == 0, F.lit(None)).otherwise(F.col("id") % 5).cast("int").alias("kind"),
        (F.col("id") * 1.25).cast("decimal(12,2)").alias("amount"),
        F.expr(f"timestamp_seconds(unix_timestamp(to_date('{date}')) + id % 86400)").alias("ts"),
        F.array(F.col("id") % 3, F.col("id") % 7).alias("tags"),
        F.create_map(F.lit("k"), (F.col("id") % 13).cast("string")).alias("attrs"),
        F.lit(date).alias("dt"),
    )


def create_table(spark, db: str, table: str, storage: str) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
    spark.sql(f"DROP TABLE IF EXISTS {db}.{table}")
    spark.sql(f"""CREATE TABLE {db}.{table} (
        event_id BIGINT, user_id STRING, kind INT, amount DECIMAL(12,2), ts TIMESTAMP,
        tags ARRAY<BIGINT>, attrs MAP<STRING,STRING>)
        PARTITIONED BY (dt STRING) STORED AS {storage}""")


FILL_DATES_PER_INSERT = 100


def fill(
    spark,
    db: str,
    table: str,
    dates: list[str],
    files_per_partition: int,
    rows_per_partition: int,
    single_file_dates: tuple[str, ...] = (),
) -> None:
    """Insert like a many-task dynamic-partition job: ``files_per_partition`` files in each date.
    At most ``FILL_DATES_PER_INSERT`` dates an insert: Spark's analyzer takes minutes over a union
    of thousands of frames."""
    from functools import reduce

    frames = [events(spark, d, rows_per_partition, seed=i) for i, d in enumerate(dates) if d not in single_file_dates]
    for k in range(0, len(frames), FILL_DATES_PER_INSERT):
        df = reduce(lambda a, b: a.unionByName(b), frames[k : k + FILL_DATES_PER_INSERT])
        df.repartition(files_per_partition).write.insertInto(f"{db}.{table}")
    for d in single_file_dates:
        events(spark, d, rows_per_partition, seed=dates.index(d)).coalesce(1).write.insertInto(f"{db}.{table}")


def create_demo_tables(spark, files_per_partition: int = 12, rows_per_partition: int = 3000) -> list[str]:
    names = []
    for table, storage in DEMO_TABLES.items():
        create_table(spark, DEMO_DB, table, storage)
        fill(spark, DEMO_DB, table, DEMO_DATES[:-1], files_per_partition, rows_per_partition, (SINGLE_FILE_DATE,))
        for hour in range(6):
            events(spark, APPENDED_DATE, rows_per_partition // 6, seed=100 + hour).coalesce(1).write.insertInto(
                f"{DEMO_DB}.{table}"
            )
        names.append(f"{DEMO_DB}.{table}")
    return names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    state = Path(os.environ.get("HIVE_COMPACTION_STATE", ROOT / ".state")).resolve()
    p.add_argument("--metastore", default=f"thrift://127.0.0.1:{os.environ.get('HIVE_METASTORE_PORT', '9083')}")
    p.add_argument("--warehouse", default=f"file://{state}/warehouse")
    p.add_argument("--files", type=int, default=12, help="files per partition")
    p.add_argument("--rows", type=int, default=3000, help="rows per partition")
    args = p.parse_args()
    spark = spark_session(args.metastore, args.warehouse)
    spark.sparkContext.setLogLevel("WARN")
    for name in create_demo_tables(spark, args.files, args.rows):
        print(f"created {name}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
