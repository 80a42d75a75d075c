"""Spark entry point: roll back the compactions one run committed, for a table (or some partitions).

    spark-submit <site-packages>/hive_compaction/jobs/rollback.py --table db.table --run RUN_ID [--partition dt=...]...
        [--metastore thrift://host:port] [--work-dir <the table's work_dir, if the config sets one>] [--dry-run]
        [--results-table db.table --record-as ROLLBACK_RUN]

Restores each partition's original files (kept in the trash area) and the statistics it had
just before the commit (file count and size: as the folder holds them after the rollback).
RUN_ID is the Airflow run id (or its path form shown in the run report). ``--dry-run`` lists what
would move back and moves nothing. Like the merge job it reads no config file: what it needs
comes from its arguments and Spark's Metastore client. The rollback DAG also passes
``--results-table`` and ``--record-as``: the job records what it did there (``model.rollbacks``)
for the DAG's report, also when it stops on an error. Exit code 3: the driver could not log in
to Kerberos for a SASL Metastore (``storage.kerberos_login``; nothing read or moved, nothing recorded).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time

from pyspark.sql import SparkSession

from hive_compaction.commit.record import CommitRecord
from hive_compaction.commit.rollback import RollbackError, rollback_run, statistics_after
from hive_compaction.commit.work_area import WorkArea
from hive_compaction.merge import results_writer
from hive_compaction.merge.job_spark import runtime
from hive_compaction.model import rollbacks
from hive_compaction.model.results import NUM_FILES, NUM_ROWS, TOTAL_SIZE
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.kerberos_login import logged_in
from hive_compaction.storage.metastore_client import JobMetastore
from hive_compaction.storage.metastore_lock import CommitConflict
from hive_compaction.storage.paths import default_work_dir, run_tag


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--partition", action="append")
    p.add_argument("--metastore", help="the Metastore's address (thrift://host:port, or host:port) when Spark's own "
                                       "configuration (hive-site.xml, spark.hadoop.hive.metastore.uris) names none")
    p.add_argument("--work-dir", help="the table's work_dir, when the DAG's config sets one (default: the folder "
                                      "beside the table, .hive_compaction/<table> in its parent)")
    p.add_argument("--dry-run", action="store_true", help="list what would move back; move nothing")
    p.add_argument("--results-table", help="record what the rollback did in this table (the DAG's results_table)")
    p.add_argument("--record-as", help="the rollback's own run (with --results-table): the record's name")
    args = p.parse_args(argv)
    if bool(args.results_table) != bool(args.record_as):
        p.error("--results-table and --record-as go together")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s hive_compaction: %(message)s")
    db, tbl = args.table.lower().split(".", 1)
    name = f"{db}.{tbl}"
    uris = args.metastore if not args.metastore or "://" in args.metastore else f"thrift://{args.metastore}"
    spark = SparkSession.builder.appName(f"hive-compaction rollback {args.table} {args.run}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    logging.getLogger("hive_compaction").info("Spark ready (%s)", runtime(spark))
    if not logged_in(spark):  # a SASL Metastore's Kerberos login, before anything is read or moved
        spark.stop()
        return 3
    metastore = JobMetastore(spark, uris)
    handled: list[dict] = []  # what the record and the report say, partition by partition
    error = None
    started = time.time()
    try:
        location = metastore.table_location(name)
        if location is None:
            raise RollbackError(f"the Metastore has no table {name}")
        area = WorkArea(default_work_dir(location, db, tbl, args.work_dir))

        def restored(m: CommitRecord) -> None:
            # The statistics the partition had before the commit (a key it did not have is
            # removed again), its file count and size as its folder holds them now.
            stats = statistics_after(fs, m)
            metastore.update_parameters(name, m.partition, stats)
            # an earlier rollback did it: only the statistics again
            already = m.rolled_back_at < started  # type: ignore[operator]  # set before restored() is called
            handled.append(_described(m, "already rolled back" if already else "restored", stats))
            print(f"rolled back {args.table} {m.partition or '(table)'}: "
                  + (f"reads {m.location} again" if m.switched else f"{len(m.inputs)} original file(s) restored")
                  + (" (by an earlier rollback)" if already else "")
                  + f"; statistics { {k: stats.get(k) for k in (NUM_FILES, TOTAL_SIZE, NUM_ROWS)} }", flush=True)

        fs = HadoopFS(spark)
        found = rollback_run(fs, area, run_tag(args.run), location, args.partition, metastore=metastore,
                             restored=restored, dry_run=args.dry_run)
        if args.dry_run:
            handled += _dry_run(fs, name, found)
    except (RollbackError, CommitConflict) as e:
        handled += getattr(e, "described", [])
        error = str(e)
        print(f"error: {e}", file=sys.stderr, flush=True)
    except Exception as e:  # recorded too (the report says what stopped it), then raised as it is
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        try:
            if args.results_table:  # also after an error: the partitions restored before it count
                results_writer.publish(spark, args.results_table, rollbacks.record_run(run_tag(args.record_as)), 0,
                                       rollbacks.encode(run_tag(args.run), name, args.dry_run, handled, error), uris)
        finally:
            metastore.close()
            spark.stop()
    return 1 if error else 0


def _described(m: CommitRecord, state: str, stats: dict | None = None) -> dict:
    """A partition's line in the record: what moves (moved) back and its statistics."""
    inputs = m.inputs
    if stats is None:  # a dry run: what the rollback would write (the disk's counts, as the manifest knows them)
        stats = {**m.stats_before, NUM_FILES: str(len(inputs)),
                 TOTAL_SIZE: str(sum(f.size for f in inputs))}
    return {"partition": m.partition, "location": m.location, "mode": m.mode,
            "state": state, "files_back": len(inputs), "bytes_back": sum(f.size for f in inputs),
            "outputs_out": len(m.outputs), "names_back": sorted(f.name for f in inputs)[:20],
            "statistics": {k: stats.get(k) for k in (NUM_FILES, TOTAL_SIZE, NUM_ROWS)}}


def _dry_run(fs: HadoopFS, name: str, found: list[CommitRecord]) -> list[dict]:
    """What a rollback of ``found`` (manifests) would do, printed and described; RollbackError
    (after listing them all) when the originals of some are gone: the rollback would refuse those."""
    described, refused = [], []
    for m in found:
        gone = [] if m.rolled_back_at or m.switched else _gone(fs, m)
        described.append(_described(m, "already rolled back" if m.rolled_back_at else
                                     f"cannot: {len(gone)} original file(s) gone" if gone else "would restore"))
        _print_would(name, m)
        if gone:
            refused.append(f"{m.partition}: original file(s) {gone[:3]} are no longer in the trash")
    if refused:
        # raised after the listing: the record keeps every partition's line
        raise _Refused(described, f"{name}: {'; '.join(refused)} (purged after the retention?); a rollback of "
                                  "these would change nothing")
    return described


class _Refused(RollbackError):
    """A dry run's refusal, carrying what it listed."""

    def __init__(self, described: list[dict], message: str):
        super().__init__(message)
        self.described = described


def _gone(fs: HadoopFS, m: CommitRecord) -> list[str]:
    """Original files of an in-place commit neither in the trash nor back in the partition."""
    names = [f.name for f in m.inputs]
    found = fs.statuses([f"{m.trash}/{n}" for n in names] + [f"{m.location}/{n}" for n in names])
    return [n for n, t, p in zip(names, found[:len(names)], found[len(names):]) if t is None and p is None]


def _print_would(table: str, m: CommitRecord) -> None:
    label = f"{table} {m.partition or '(table)'}"
    if m.rolled_back_at:
        print(f"dry run: {label} was rolled back already; nothing would move", flush=True)
    elif m.switched:
        print(f"dry run: {label} would read {m.location} again (one Metastore call)", flush=True)
    else:
        print(f"dry run: {label} would get {len(m.inputs)} original file(s) back from {m.trash} and "
              f"{len(m.outputs)} merged file(s) out:", flush=True)
        for f in m.inputs:
            print(f"  back: {m.location}/{f.name} ({f.size} bytes)", flush=True)
        for o in m.outputs:
            print(f"  out:  {m.location}/{o.name}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
