"""Spark entry point: roll back the compactions one run committed, for a table (or some partitions).

    spark-submit <site-packages>/hive_compaction/jobs/rollback.py --table db.table --run RUN_ID [--partition dt=...]...
        [--metastore host:port] [--config path/to/hive_compaction.yaml]

Restores each partition's original files (kept in the trash area) and the statistics it had
just before the commit (file count and size: as the folder holds them after the rollback).
RUN_ID is the Airflow run id (or its path form shown in the run report).
"""
from __future__ import annotations

import argparse
import logging
import sys

from pyspark.sql import SparkSession

from hive_compaction import config
from hive_compaction.work_area import WorkArea
from hive_compaction.hadoop_fs import HadoopFS
from hive_compaction.commit import CommitConflict
from hive_compaction.job_metastore import JobMetastore
from hive_compaction.metastore import NUM_FILES, NUM_ROWS, TOTAL_SIZE, Metastore
from hive_compaction.paths import run_tag
from hive_compaction.planning import table_work_dir
from hive_compaction.rollback import RollbackError, rollback_run, statistics_after


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--partition", action="append")
    p.add_argument("--metastore", default="127.0.0.1:9083", help="host:port of the Metastore's Thrift service")
    p.add_argument("--config", help="the DAG's config file (for a table's work_dir; the hive_compaction.yaml in "
                                    "the dags folder); default: $HIVE_COMPACTION_CONFIG, else this checkout's dags/")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s hive_compaction: %(message)s")
    settings = config.load(args.config)
    db, tbl = args.table.lower().split(".", 1)
    policy = settings.table(f"{db}.{tbl}").policy
    host, _, port = args.metastore.rpartition(":")
    spark = SparkSession.builder.appName(f"hive-compaction rollback {args.table} {args.run}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        with Metastore(host, int(port)) as hms:
            table = hms.table(db, tbl)
            area = WorkArea(table_work_dir(table, policy))

            def restored(m: dict) -> None:
                # The statistics the partition had before the commit (a key it did not have is
                # removed again), its file count and size as its folder holds them now.
                stats = statistics_after(fs, m)
                hms.update_statistics(table, {m["partition"]: stats})
                print(f"rolled back {args.table} {m['partition'] or '(table)'}: "
                      + (f"reads {m['location']} again" if m.get("mode") else f"{len(m['inputs'])} original file(s) restored")
                      + f"; statistics { {k: stats.get(k) for k in (NUM_FILES, TOTAL_SIZE, NUM_ROWS)} }", flush=True)

            fs = HadoopFS(spark)
            rollback_run(fs, area, run_tag(args.run), table.location, args.partition,
                         metastore=JobMetastore(spark, f"thrift://{host}:{port}"), restored=restored)
    except (RollbackError, CommitConflict, config.ConfigError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
