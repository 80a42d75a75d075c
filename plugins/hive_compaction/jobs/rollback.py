"""Spark entry point: roll back the compactions one run committed, for a table (or some partitions).

    spark-submit <site-packages>/hive_compaction/jobs/rollback.py --table db.table --run RUN_ID [--partition dt=...]...
        [--metastore thrift://host:port] [--work-dir <the table's work_dir, if the config sets one>]

Restores each partition's original files (kept in the trash area) and the statistics it had
just before the commit (file count and size: as the folder holds them after the rollback).
RUN_ID is the Airflow run id (or its path form shown in the run report). Like the merge job it
reads no config file: what it needs comes from its arguments and Spark's Metastore client.
"""
from __future__ import annotations

import argparse
import logging
import sys

from pyspark.sql import SparkSession

from hive_compaction.commit.rollback import RollbackError, rollback_run, statistics_after
from hive_compaction.commit.work_area import WorkArea
from hive_compaction.model.results import NUM_FILES, NUM_ROWS, TOTAL_SIZE
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.metastore_client import CommitConflict, JobMetastore
from hive_compaction.storage.paths import default_work_dir, run_tag


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--partition", action="append")
    p.add_argument("--metastore", help="the Metastore's address (thrift://host:port, or host:port) when Spark's own "
                                       "configuration (hive-site.xml, spark.hadoop.hive.metastore.uris) names none")
    p.add_argument("--work-dir", help="the table's work_dir, when the DAG's config sets one (default: the folder "
                                      "beside the table, .hive_compaction/<table> in its parent)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s hive_compaction: %(message)s")
    db, tbl = args.table.lower().split(".", 1)
    name = f"{db}.{tbl}"
    uris = args.metastore if not args.metastore or "://" in args.metastore else f"thrift://{args.metastore}"
    spark = SparkSession.builder.appName(f"hive-compaction rollback {args.table} {args.run}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    metastore = JobMetastore(spark, uris)
    try:
        location = metastore.table_location(name)
        if location is None:
            raise RollbackError(f"the Metastore has no table {name}")
        area = WorkArea(default_work_dir(location, db, tbl, args.work_dir))

        def restored(m: dict) -> None:
            # The statistics the partition had before the commit (a key it did not have is
            # removed again), its file count and size as its folder holds them now.
            stats = statistics_after(fs, m)
            metastore.update_parameters(name, m["partition"], stats)
            print(f"rolled back {args.table} {m['partition'] or '(table)'}: "
                  + (f"reads {m['location']} again" if m.get("mode") else f"{len(m['inputs'])} original file(s) restored")
                  + f"; statistics { {k: stats.get(k) for k in (NUM_FILES, TOTAL_SIZE, NUM_ROWS)} }", flush=True)

        fs = HadoopFS(spark)
        rollback_run(fs, area, run_tag(args.run), location, args.partition, metastore=metastore, restored=restored)
    except (RollbackError, CommitConflict) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        metastore.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
