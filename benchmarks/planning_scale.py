"""Planning at scale: how the plan task's time and Metastore calls grow with the partition count.

    .venv/bin/python benchmarks/planning_scale.py [--sizes 10000 20000] [--batch-size 500]
                                                  [--quick] [--metastore-port PORT] [--json PATH]

Starts its own Hive Metastore (embedded Derby, temporary state folder, free loopback port) unless
``--metastore-port`` names one already running, registers one partitioned ORC table per size
through the raw Thrift API (metadata only: no Spark, no data files), then runs the DAG's
``dag_tasks.plan`` against each table and prints, per size, the planning time, the time per
partition, the Metastore calls and the Spark applications (batches) produced, and the ratios
between the sizes (a per-partition time ratio near 1.0 means planning grows linearly).

Checks (exit code 1 when one fails): every table became at most ``max_spark_jobs`` Spark
applications; the Metastore calls stay within ``4 + ceil(n / batch_size)`` plus a small constant;
listing the planned partitions (as the merge job does, through a local Spark's Hadoop FileSystem)
costs at most one round trip per partition (where the tables' folders are on this machine);
every registered partition was either planned or deferred (none lost). The figures are written as
JSON to ``--json PATH`` or, without it, as the last line of stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "scripts", ROOT / "plugins"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes

from hive_compaction.airflow import config as config_mod, tasks as dag_tasks
from hive_compaction.airflow.metastore_hook import Metastore as HMS
from hive_compaction.airflow.run_params import select
from hive_compaction.model.batch import batch_tasks, decode_batch
from local_stack import Metastore as LocalMetastore, free_port

DATABASE = "planning_bench"
ORC_INPUT = "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat"
ORC_OUTPUT = "org.apache.hadoop.hive.ql.io.orc.OrcOutputFormat"
ORC_SERDE = "org.apache.hadoop.hive.ql.io.orc.OrcSerde"
MAX_SPARK_JOBS = 8
MAX_PARTITIONS_PER_JOB = 2000
CALLS_SLACK = 2  # constant allowance on top of the expected calls
# get_table + get_partition_names + ceil(n / batch_size), and the results table's upkeep once the
# plan has batches (get_tables; get_partition_names to drop old records, none here: no job runs)
FIXED_CALLS = 4
QUICK_SIZES = [300, 600]


def log(msg: str = "") -> None:
    print(msg, flush=True)


# --- registration ------------------------------------------------------------------------------


def storage(location: str | None, cols) -> ttypes.StorageDescriptor:
    return ttypes.StorageDescriptor(
        cols=cols,
        location=location,
        inputFormat=ORC_INPUT,
        outputFormat=ORC_OUTPUT,
        compressed=False,
        numBuckets=-1,
        serdeInfo=ttypes.SerDeInfo(serializationLib=ORC_SERDE, parameters={"serialization.format": "1"}),
        bucketCols=[],
        sortCols=[],
        parameters={},
    )


COLUMNS = [ttypes.FieldSchema("id", "bigint", None), ttypes.FieldSchema("payload", "string", None)]
PARTITION_KEYS = [ttypes.FieldSchema("dt", "string", None), ttypes.FieldSchema("hr", "int", None)]


def partition_values(i: int) -> list[str]:
    return [(date(2020, 1, 1) + timedelta(days=i // 24)).isoformat(), str(i % 24)]


def ensure_database(client, warehouse: str | None) -> None:
    try:
        client.get_database(DATABASE)
    except ttypes.NoSuchObjectException:
        client.create_database(
            ttypes.Database(
                name=DATABASE,
                description="planning_scale benchmark",
                locationUri=f"{warehouse}/{DATABASE}.db" if warehouse else None,
                parameters={},
            )
        )


def local_folder(location: str) -> Path | None:
    """The table folder when it is on this machine's file system (the Metastore is on 127.0.0.1)."""
    parts = urlsplit(location)
    return Path(parts.path) if parts.scheme in ("", "file") and parts.netloc in ("", "localhost") else None


def precreate(folder: Path) -> None:
    """Make the (empty) partition folder ourselves. The Metastore creates a missing one itself, and
    Hive 2.3 then copies the parent's permissions onto it by forking ``ls``/``chmod`` processes
    (hive.warehouse.subdir.inherit.perms), about 20 ms per partition: 10 minutes for 30,000."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # not ours to write: the Metastore makes it, only slower


def register_table(client, table: str, n: int, chunk: int, rng: random.Random) -> tuple[float, bool]:
    """Create ``table`` with ``n`` partitions; (seconds, reused). An existing table with exactly
    ``n`` partitions (from an earlier run on a running Metastore) is reused as it is."""
    try:
        existing = client.get_table(DATABASE, table)
    except ttypes.NoSuchObjectException:
        existing = None
    if existing is not None:
        if len(client.get_partition_names(DATABASE, table, -1)) == n:
            return 0.0, True
        client.drop_table(DATABASE, table, True)
    started = time.perf_counter()
    client.create_table(
        ttypes.Table(
            tableName=table,
            dbName=DATABASE,
            owner="benchmark",
            createTime=int(time.time()),
            sd=storage(None, COLUMNS),
            partitionKeys=PARTITION_KEYS,
            tableType="EXTERNAL_TABLE",
            parameters={"EXTERNAL": "TRUE"},
        )
    )
    location = client.get_table(DATABASE, table).sd.location.rstrip("/")
    local_root = local_folder(location)
    for start in range(0, n, chunk):
        parts = []
        for i in range(start, min(n, start + chunk)):
            values = partition_values(i)
            if local_root is not None:
                precreate(local_root / f"dt={values[0]}" / f"hr={values[1]}")
            num_files = rng.randint(2, 50)
            total_size = sum(rng.randint(256 * 1024, 8 * 1024**2) for _ in range(num_files))
            parts.append(
                ttypes.Partition(
                    values=values,
                    dbName=DATABASE,
                    tableName=table,
                    createTime=int(time.time()),
                    sd=storage(f"{location}/dt={values[0]}/hr={values[1]}", COLUMNS),
                    parameters={"numFiles": str(num_files), "totalSize": str(total_size)},
                )
            )
        client.add_partitions(parts)
    return time.perf_counter() - started, False


# --- planning ----------------------------------------------------------------------------------


def plan_once(port: int, table: str, batch_size: int) -> tuple[float, int, dict]:
    settings = config_mod.parse(
        {
            "tables": [{"name": f"{DATABASE}.{table}"}],
            "fan_out": {"max_spark_jobs": MAX_SPARK_JOBS, "max_partitions_per_job": MAX_PARTITIONS_PER_JOB},
            # Its own results table: on a Metastore already running (--metastore-port), the plan task's
            # upkeep of the default one would read other runs' records and change the call counts.
            "results_table": f"{DATABASE}.hive_compaction_results",
        },
        "<planning_scale>",
    )
    with HMS("127.0.0.1", port, batch_size=batch_size) as hms:
        started = time.perf_counter()
        out = dag_tasks.plan(settings, hms, f"bench__{table}", select(settings, {}, "manual", None))
        seconds = time.perf_counter() - started
        return seconds, hms.calls, out


def read_once(port: int, table: str, batch_size: int) -> float:
    """Only the Metastore part of planning: the table and all its partitions, as plan reads them."""
    with HMS("127.0.0.1", port, batch_size=batch_size) as hms:
        started = time.perf_counter()
        info = hms.table(DATABASE, table)
        for _ in hms.partitions(info):
            pass
        return time.perf_counter() - started


def measure(port: int, table: str, n: int, batch_size: int, repeat: int) -> dict:
    times, reads, calls, out = [], [], None, None
    for _ in range(repeat):
        seconds, c, out = plan_once(port, table, batch_size)
        times.append(seconds)
        calls = c if calls is None else max(calls, c)
        reads.append(read_once(port, table, batch_size))
    plan = out["plan"]
    per_batch = [len(b["partitions"]) for b in plan["batches"]]
    best = min(times)
    expected_calls = FIXED_CALLS + math.ceil(n / batch_size)
    return {
        "table": f"{DATABASE}.{table}",
        "partitions": n,
        "planning_seconds": round(best, 4),
        "planning_seconds_all": [round(t, 4) for t in times],
        "us_per_partition": round(best / n * 1e6, 2),
        "metastore_read_seconds": round(min(reads), 4),
        "metastore_read_us_per_partition": round(min(reads) / n * 1e6, 2),
        "calls": calls,
        "expected_calls": expected_calls,
        "max_allowed_calls": expected_calls + CALLS_SLACK,
        "batches": len(out["spark_args"]),
        "partitions_per_batch": per_batch,
        "planned": sum(per_batch),
        "deferred": len(plan["deferred"]),
        "skipped": len(plan["skipped"]),
        "max_encoded_batch_chars": max((len(a["application_args"][1]) for a in out["spark_args"]), default=0),
    }


# --- listing (the merge job's part) -----------------------------------------------------------


def listing_pass(spark, out: dict) -> dict:
    """List every planned partition's folder as the merge job does (``HadoopFS.list``, one JVM
    helper call each), counting the helper calls. The folders are the registered, empty ones."""
    from hive_compaction.storage import jvm_helper
    from hive_compaction.storage.hadoop_fs import HadoopFS

    locations = [t.location for a in out["spark_args"] for t in batch_tasks(decode_batch(a["application_args"][1]))]
    fs, calls = HadoopFS(spark), [0]
    real = jvm_helper.call

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    fs.list(locations[0])  # compiles the helper: not timed
    jvm_helper.call = counted
    try:
        started = time.perf_counter()
        for loc in locations:
            fs.list(loc)
        seconds = time.perf_counter() - started
    finally:
        jvm_helper.call = real
    return {
        "listed": len(locations),
        "listing_seconds": round(seconds, 4),
        "listing_us_per_partition": round(seconds / max(1, len(locations)) * 1e6, 1),
        "listing_calls_per_partition": round(calls[0] / max(1, len(locations)), 3),
    }


def local_spark():
    import os

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("planning-scale-listing")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --- main --------------------------------------------------------------------------------------


def run(args, port: int, warehouse: str | None) -> dict:
    sizes = sorted(args.sizes)
    rng = random.Random(args.seed)
    figures: dict = {
        "sizes": sizes,
        "batch_size": args.batch_size,
        "register_chunk": args.register_chunk,
        "max_spark_jobs": MAX_SPARK_JOBS,
        "max_partitions_per_job": MAX_PARTITIONS_PER_JOB,
        "repeat": args.repeat,
        "metastore_port": port,
    }
    registration = []
    with hmsclient.HMSClient(host="127.0.0.1", port=port) as client:
        ensure_database(client, warehouse)
        for n in sizes:
            table = f"parts_{n}"
            seconds, reused = register_table(client, table, n, args.register_chunk, rng)
            registration.append(
                {"table": f"{DATABASE}.{table}", "partitions": n, "seconds": round(seconds, 2), "reused": reused}
            )
            if reused:
                log(f"reused {DATABASE}.{table}: {n} partitions already registered")
            else:
                log(
                    f"registered {DATABASE}.{table}: {n} partitions in {seconds:.1f} s "
                    f"({seconds / n * 1e3:.2f} ms per partition, add_partitions x{args.register_chunk})"
                )
        # The listing pass lists the folders from this machine: only where every table's is here.
        local = all(local_folder(client.get_table(DATABASE, f"parts_{n}").sd.location) for n in sizes)
    total_reg = sum(r["seconds"] for r in registration)
    total_parts = sum(r["partitions"] for r in registration)
    log(f"registration total: {total_parts} partitions in {total_reg:.1f} s")
    figures["registration"] = registration
    figures["registration_seconds"] = round(total_reg, 2)
    figures["registered_partitions"] = total_parts

    # One untimed warm-up plan so the Metastore's JIT and caches do not penalise the first size.
    plan_once(port, f"parts_{sizes[0]}", args.batch_size)
    results = []
    log("")
    log(
        f"planning (dag_tasks.plan, best of {args.repeat}; fan_out max_spark_jobs={MAX_SPARK_JOBS}, "
        f"max_partitions_per_job={MAX_PARTITIONS_PER_JOB}; Metastore batch_size={args.batch_size})"
    )
    log(
        f"{'partitions':>10} {'plan s':>9} {'us/part':>9} {'read s':>8} {'read us/part':>12} {'calls':>6} "
        f"{'expect':>6} {'batches':>8} {'planned':>8} {'deferred':>8}"
    )
    spark = local_spark() if local else None
    for n in sizes:
        r = measure(port, f"parts_{n}", n, args.batch_size, args.repeat)
        if spark is not None:
            r.update(listing_pass(spark, plan_once(port, f"parts_{n}", args.batch_size)[2]))
            log(
                f"{'':>10} listing {r['listed']} planned partition folders: {r['listing_seconds']:.2f} s, "
                f"{r['listing_us_per_partition']:.0f} us and {r['listing_calls_per_partition']} JVM call(s) "
                "per partition"
            )
        results.append(r)
        log(
            f"{r['partitions']:>10} {r['planning_seconds']:>9.3f} {r['us_per_partition']:>9.1f} "
            f"{r['metastore_read_seconds']:>8.3f} {r['metastore_read_us_per_partition']:>12.1f} {r['calls']:>6} "
            f"{r['expected_calls']:>6} {r['batches']:>8} {r['planned']:>8} {r['deferred']:>8}"
        )
        log(
            f"{'':>10} runs {r['planning_seconds_all']} s; partitions per Spark application "
            f"{r['partitions_per_batch']}; largest --batch argument {r['max_encoded_batch_chars']} chars"
        )
    if spark is not None:
        spark.stop()
    figures["results"] = results

    small, large = results[0], results[-1]
    ratios = {
        "partitions": round(large["partitions"] / small["partitions"], 4),
        "us_per_partition": round(large["us_per_partition"] / small["us_per_partition"], 4),
        "metastore_read_us_per_partition": round(
            large["metastore_read_us_per_partition"] / small["metastore_read_us_per_partition"], 4
        ),
        "planning_seconds": round(large["planning_seconds"] / small["planning_seconds"], 4),
        "calls": round(large["calls"] / small["calls"], 4),
        "expected_calls": round(large["expected_calls"] / small["expected_calls"], 4),
    }
    figures["ratios"] = ratios
    log("")
    log(f"ratios {large['partitions']} vs {small['partitions']} partitions (x{ratios['partitions']}):")
    log(
        f"  time per partition: {large['us_per_partition']:.1f} / {small['us_per_partition']:.1f} us = "
        f"{ratios['us_per_partition']:.3f}  (1.0 = linear growth; total time x{ratios['planning_seconds']:.3f})"
    )
    log(
        f"  Metastore read per partition (part of the above): {large['metastore_read_us_per_partition']:.1f} / "
        f"{small['metastore_read_us_per_partition']:.1f} us = {ratios['metastore_read_us_per_partition']:.3f}"
    )
    if large["deferred"]:
        log(
            f"  note: {large['deferred']} of the {large['partitions']} partitions were deferred (capacity "
            f"{MAX_SPARK_JOBS} x {MAX_PARTITIONS_PER_JOB}), so they were read but not encoded into a batch"
        )
    log(
        f"  Metastore calls:    {large['calls']} / {small['calls']} = {ratios['calls']:.3f}  "
        f"(expected {large['expected_calls']} / {small['expected_calls']} = {ratios['expected_calls']:.3f})"
    )

    checks = []
    for r in results:
        checks.append(
            {
                "name": f"{r['partitions']} partitions -> at most {MAX_SPARK_JOBS} Spark applications",
                "ok": 1 <= r["batches"] <= MAX_SPARK_JOBS,
                "value": r["batches"],
            }
        )
        checks.append(
            {
                "name": f"{r['partitions']} partitions -> calls <= {FIXED_CALLS} + ceil(n/{args.batch_size}) "
                f"+ {CALLS_SLACK} = {r['max_allowed_calls']}",
                "ok": r["calls"] <= r["max_allowed_calls"],
                "value": r["calls"],
            }
        )
        checks.append(
            {
                "name": f"{r['partitions']} partitions -> each planned or deferred (none skipped or lost)",
                "ok": r["planned"] + r["deferred"] == r["partitions"] and r["skipped"] == 0,
                "value": {"planned": r["planned"], "deferred": r["deferred"], "skipped": r["skipped"]},
            }
        )
        if "listed" in r:
            checks.append(
                {
                    "name": f"{r['partitions']} partitions -> listing costs at most one round trip per partition",
                    "ok": r["listed"] == r["planned"] and r["listing_calls_per_partition"] <= 1.0,
                    "value": r["listing_calls_per_partition"],
                }
            )
    figures["checks"] = checks
    figures["ok"] = all(c["ok"] for c in checks)
    log("")
    for c in checks:
        log(f"  [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['value']}")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[10000, 20000],
        help="partition counts, one table each (default: 10000 20000)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=500,
        help="partitions per get_partitions_by_names call (the Metastore client's batch_size)",
    )
    p.add_argument("--register-chunk", type=int, default=1000, help="partitions per add_partitions call")
    p.add_argument("--repeat", type=int, default=3, help="timed plan runs per size; the best is reported")
    p.add_argument("--quick", action="store_true", help=f"smoke run: sizes {QUICK_SIZES[0]} and {QUICK_SIZES[1]}")
    p.add_argument("--metastore-port", type=int, help="use a Hive Metastore already running on 127.0.0.1:PORT")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", metavar="PATH", help="write the figures here instead of stdout's last line")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = list(QUICK_SIZES)
    if len(args.sizes) < 2 or len(set(args.sizes)) != len(args.sizes) or min(args.sizes) < 1:
        p.error("--sizes needs at least two different positive partition counts")
    if args.batch_size < 1 or args.register_chunk < 1 or args.repeat < 1:
        p.error("--batch-size, --register-chunk and --repeat must be positive")

    wall = time.perf_counter()
    local = None
    tmp = None
    try:
        if args.metastore_port:
            port, warehouse = args.metastore_port, None
            log(f"using the Hive Metastore at thrift://127.0.0.1:{port}")
        else:
            tmp = tempfile.TemporaryDirectory(prefix="planning_scale-")
            local = LocalMetastore(Path(tmp.name), free_port())
            started = time.perf_counter()
            local.start()
            port, warehouse = local.port, local.warehouse
            log(f"Metastore started in {time.perf_counter() - started:.1f} s (state {tmp.name})")
        figures = run(args, port, warehouse)
    finally:
        if local is not None:
            with contextlib.redirect_stdout(sys.stderr):  # keep the JSON the last line of stdout
                local.stop()
        if tmp is not None:
            tmp.cleanup()
    figures["wall_seconds"] = round(time.perf_counter() - wall, 1)
    log(f"\n{'all checks passed' if figures['ok'] else 'CHECKS FAILED'} (wall time {figures['wall_seconds']:.0f} s)")
    text = json.dumps(figures, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n")
        log(f"figures written to {args.json}")
    else:
        print(text, flush=True)
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
