"""Spark entry point: compact one batch of Hive partitions planned by the Airflow DAG.

    spark-submit <site-packages>/hive_compaction/jobs/compact_partitions.py --batch <encoded batch> [--dry-run]

Lists every partition of the batch, merges its small files, and records what it found and did
in the Metastore's results table for the DAG's refresh task. Exit code 0 when every partition
was merged, skipped with a reason or had nothing to do; 1 when any partition failed (the others
are still done, and every failure left its partition's files as they were); 2 when the batch was
planned by another version of this package (refused before anything is touched); 3 when the
driver could not log in to Kerberos for a SASL Metastore (``storage.kerberos_login``; nothing
touched either).

The driver needs the ``hive_compaction`` package (standard library and pyspark only): installed
where the driver runs, or shipped with ``--py-files dist/hive_compaction.zip`` (``make dist``).
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import time
from pathlib import Path

from pyspark import SparkContext

from hive_compaction.merge import results_writer
from hive_compaction.merge.job_spark import JobSpark, runtime
from hive_compaction.merge.runner import BatchRunner
from hive_compaction.model.batch import VersionMismatch, batch_tasks, check_version, decode_batch
from hive_compaction.model.results import Status, encode_results
from hive_compaction.storage.kerberos_login import logged_in

log = logging.getLogger("hive_compaction")


def driver_age(spark) -> float:
    """Seconds since the driver's JVM started (spark-submit's, in client mode): Spark's share of
    a job's start, before any of ours."""
    started_ms = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getStartTime()
    return time.time() - started_ms / 1000


def driver_memory(spark) -> str:
    """The driver's peak memory so far, for sizing ``--driver-memory``: its JVM's resident set
    (the kernel's high-water mark, where /proc shows it), the peak of the heap's old generation
    (what outlives collections) against the heap's limit, and the Python process's resident set.
    Not the heap pools' peaks added up: each peaks at its own time, and their sum overstated the
    heap (1,469 MB "of" a 1,024 MB heap in a 2,000-partition run)."""
    jvm = spark._jvm
    pools = [
        p
        for p in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
        if str(p.getType()) == "Heap memory"
    ]
    # "G1 Old Gen", "PS Old Gen", "Tenured Gen", "ZGC Old Generation"; a one-pool heap is its own.
    old = [p for p in pools if "Old Gen" in p.getName() or "Tenured" in p.getName()] or pools
    peak = sum(p.getPeakUsage().getUsed() for p in old)
    heap = jvm.java.lang.Runtime.getRuntime().maxMemory()
    parts = [
        f"JVM old generation peak {peak / 2**20:.0f} MB of a {heap / 2**20:.0f} MB heap",
        f"Python peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB",
    ]
    try:  # the JVM's own process (the Python driver's parent, on its host); /proc is Linux's
        status = Path(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/status").read_text()
        rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        parts.insert(0, f"JVM peak RSS {rss / 1024:.0f} MB")
    except (OSError, StopIteration, ValueError):
        pass
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", required=True, help="the encoded batch the planning task made")
    parser.add_argument("--dry-run", action="store_true", help="list and group, change nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s hive_compaction: %(message)s"
    )
    # py4j logs every driver thread's connection closing at INFO: noise between our progress lines.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    payload = decode_batch(args.batch)
    try:  # before any Spark, file or Metastore call
        check_version(payload)
    except VersionMismatch as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    tasks = batch_tasks(payload)
    # The application keeps the name spark-submit gave it (the operator names the tables it holds).
    spark = JobSpark(SparkContext.getOrCreate())  # Spark SQL's session only if the job rewrites
    spark.sparkContext.setLogLevel("WARN")  # our own progress lines stay readable in the task log
    log.info("Spark ready %.1fs after the driver's JVM started (%s)", driver_age(spark), runtime(spark))
    runner = None
    try:
        if not logged_in(spark):
            return 3
        runner = BatchRunner(
            spark,
            payload["run"],
            str(payload["batch"]),
            dry_run=args.dry_run or payload.get("dry_run", False),
            metastore_uris=payload.get("metastore_uris"),
        )
        results = runner.maintain(payload.get("maintain", []), tasks) + runner.run_batch(tasks)
        results_writer.publish(
            spark,
            payload["results_table"],
            payload["run"],
            payload["batch"],
            encode_results(results),
            payload.get("metastore_uris"),
        )
        log.info("driver memory: %s", driver_memory(spark))
    finally:
        if runner is not None:
            runner.metastore.close()
        spark.stop()
    failed = [r for r in results if r.status is Status.FAILED]
    for r in failed:
        print(f"FAILED {r.table} {r.partition}: {r.reason}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
