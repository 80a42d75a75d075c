"""Tables at hdfs:// (or s3a://) locations, made and read by a Spark of their own (a process apart from the
tests', so that its Hadoop user is the one named and no other stack's Spark session is reused).

    python scripts/hdfs_tables.py METASTORE_URI create DB LOCATION TABLE:FORMAT... --dates D1,D2
    python scripts/hdfs_tables.py METASTORE_URI content DB.TABLE...
    python scripts/hdfs_tables.py METASTORE_URI sql STATEMENT...

``create`` makes the database at LOCATION and each table in LOCATION/TABLE, four small files per
date (demo_tables.fill). ``content`` prints, as JSON, per table and partition: the rows and a
digest of every row (all columns) sorted, as harness.Stack.content computes it; and the class of
the file system the tables are on. ``sql`` runs each statement. The user is the caller's HADOOP_USER_NAME.
``--conf KEY=VALUE`` (repeated): more Spark settings (the S3A connector's jars and settings);
``create --content``: print the new tables' content as ``content`` does (one Spark start less).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from demo_tables import fill, spark_session


def create(spark, db: str, location: str, tables: list[str], dates: list[str]) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db} LOCATION '{location}'")
    for spec in tables:
        table, storage = spec.split(":")
        spark.sql(f"""CREATE TABLE {db}.{table} (
            event_id BIGINT, user_id STRING, kind INT, amount DECIMAL(12,2), ts TIMESTAMP,
            tags ARRAY<BIGINT>, attrs MAP<STRING,STRING>)
            PARTITIONED BY (dt STRING) STORED AS {storage} LOCATION '{location}/{table}'""")
        fill(spark, db, table, dates, 4, 300)


def content(spark, name: str) -> dict:
    spark.sql(f"REFRESH TABLE {name}")
    rows: dict[str, list[str]] = {}
    for r in spark.table(name).collect():
        rows.setdefault(f"dt={r['dt']}", []).append(repr(tuple(r)))
    return {k: [len(v), hashlib.sha256("\n".join(sorted(v)).encode()).hexdigest()] for k, v in rows.items()}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("metastore")
    p.add_argument("action", choices=["create", "content", "sql"])
    p.add_argument("names", nargs="+")
    p.add_argument("--dates", default="")
    p.add_argument("--conf", action="append", default=[])
    p.add_argument("--content", action="store_true", help="create: print the new tables' content too")
    args = p.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = spark_session(
        args.metastore,
        "file:///nonexistent-warehouse",
        app="hdfs-tables",
        conf=dict(c.split("=", 1) for c in args.conf),
    )
    spark.sparkContext.setLogLevel("ERROR")
    names, out = args.names, {}
    if args.action == "create":
        db, location, *tables = args.names
        create(spark, db, location, tables, args.dates.split(","))
        names = [f"{db}.{spec.split(':')[0]}" for spec in tables] if args.content else []
    elif args.action == "sql":
        for statement in args.names:
            spark.sql(statement)
        names = []
    if names:
        out = {"tables": {n: content(spark, n) for n in names}}
        location = spark.sql(f"DESCRIBE FORMATTED {names[0]}").where("col_name = 'Location'").first()[1]
        jpath = spark._jvm.org.apache.hadoop.fs.Path(location)
        out["file_system"] = jpath.getFileSystem(spark._jsc.hadoopConfiguration()).getClass().getName()
    spark.stop()
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
