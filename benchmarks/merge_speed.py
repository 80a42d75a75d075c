"""Merge speed: our merge against a plain byte copy and the naive Spark approaches, side by side.

    .venv/bin/python benchmarks/merge_speed.py [--partitions 20] [--files 40] [--rows 550000]
                                               [--formats orc parquet] [--quick] [--json PATH]
                                               [--shape 256k|20k|16m] [--only auto dag lakekeeper ...]

One invocation, one local stack (Hive Metastore on a free loopback port, Airflow home, Spark
local[2]), all state in a temporary folder. For each format a source table of ``--partitions``
partitions of ``--files`` small files (``--rows`` rows per partition) is written once; every
contestant then gets its own table holding a byte-for-byte copy of those files (``CREATE TABLE
LIKE``, data files copied, ``MSCK REPAIR TABLE``, ``ANALYZE ... NOSCAN``), so all start from
identical bytes and statistics. The contestants:

  floor      a plain sequential byte copy (shutil.copyfileobj) of every input file into one
             output file per partition, outside the table: the I/O lower bound, not a valid file;
  dag        our DAG end to end (``airflow dags test``: plan, one spark-submit, Metastore
             refresh), merge_mode auto with the product's default copy floor;
  dag_scheduled  the same DAG run by Airflow's own services (scheduler with the LocalExecutor,
             API server, DAG processor; only with --only, and with a --metastore on PostgreSQL),
             triggered through the REST API as the UI triggers it: each task a process of the
             executor, the fixed start users pay;
  copy       our merge job alone (plan in-process + one spark-submit), merge_mode copy;
  copy_half  the same on the first half of the partitions (only with --only): what the other
             half adds to a job, its start left out;
  copy_wide  the same on a table of copy_half's partitions with twice the files (only with --only):
             against copy_half what a file adds, against copy what a partition adds beyond its files;
  rewrite    our merge job alone, merge_mode rewrite;
  auto       our merge job alone, merge_mode auto with the default copy floor (only with --only:
             ``--only auto copy rewrite`` sets the three modes side by side on the same data);
  loop       ONE Spark application looping over the partitions: read the partition folder,
             coalesce(1), write to a temporary folder, swap the output in for the inputs;
  per-part   the same coalesce(1) rewrite with one spark-submit per partition (what a naive
             Airflow DAG with a task per partition does);
  lakekeeper the closest public peer, Lakekeeper 0.0.6 (PyPI ``lakekeeper``: Hive tables compacted
             with Spark), ``lakekeeper compact --table ...`` in one spark-submit (only with --only;
             not a project dependency: ``pip install --no-deps lakekeeper==0.0.6``, see
             requirements-bench.txt). Lakekeeper compacts EXTERNAL tables only, so in a run with it
             every contestant's copy is an EXTERNAL table (our job treats both kinds alike).

For each: the machine's CPU while it ran (every process's user and system time from
``/proc/stat``: its own, and the Metastore's and PostgreSQL's work for it; so nothing else may
run beside the benchmark) and the wall time that CPU needs at best on this machine's cores;
wall seconds (the whole command), in-application seconds (after the SparkSession is up
and before it stops: for our job the span of ``run_batch`` from its per-partition log lines and
results, for the naive script its own clock), files and bytes after, and whether every row of
every partition is still there (``content``: rows and a digest of every row, equal to the source
table's; for the floor the output sizes equal the summed input sizes). Then the ratios the
product targets, with PASS or MISS. A MISS is reported, not fatal: exit code 1 only when a checksum
differs or a contestant failed to run (its figures would mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "scripts", ROOT / "plugins"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

from harness import Stack, data_files
from hive_compaction.model.batch import batch_tasks, decode_batch

DB = "merge_speed"
GB = 1024**3
ONE_OUTPUT = {"small_file_limit": GB, "target_file_size": GB}  # every partition becomes one file
# The Spark settings of every spark-submit here, ours and the naive ones alike: the DAG passes them
# from its config, the others read them from a spark-defaults.conf (SPARK_CONF_DIR).
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
QUICK = {"partitions": 2, "files": 4, "rows": 200, "formats": ["orc"]}
# Where fixed costs no longer hide the per-partition ones: hundreds of partitions a day. One
# spark-submit per partition is measured on ``sample`` partitions and extrapolated linearly.
SCALE = {"partitions": 200, "files": 10, "rows": 20_000, "formats": ["orc"], "sample": 10}
SCALE_PLANNING_PARTITIONS = 2000  # the planning + listing-only pass of --scale
# The two table shapes against the peer (the demo table's columns, Spark-written ORC, 40
# files a partition: ~13 bytes a row in files of 20,000 rows, more per row in tiny files), and one
# of big files.
SHAPES = {
    "256k": {"files": 40, "rows": 800_000},
    "20k": {"files": 40, "rows": 60_000},
    # Where a copy's bytes outweigh its per-file work: 4 files of ~16 MB (one stripe each) a partition.
    "16m": {"files": 4, "rows": 5_000_000, "partitions": 4},
}
CONTESTANTS = {
    "floor": "floor: byte copy (shutil)",
    "dag": "our DAG end to end (auto)",
    "dag_scheduled": "our DAG run by Airflow's scheduler (auto)",
    "copy": "our merge job, copy mode",
    "copy_half": "our merge job, copy mode, half the partitions",
    "copy_wide": "our merge job, copy mode, half the partitions x twice the files",
    "rewrite": "our merge job, rewrite mode",
    "rewrite_sql": "our merge job, rewrite mode, rewrite_engine spark_sql",
    "auto": "our merge job, auto mode",
    "loop": "naive: 1 app, loop of coalesce(1)",
    "per_partition": "naive: 1 spark-submit/partition",
    "lakekeeper": "peer: Lakekeeper 0.0.6 compact",
}
METASTORES = {
    "derby": "the pyspark wheel's 2.3 on Derby (embedded; the default)",
    "postgres": "the wheel's 2.3 on PostgreSQL",
    "3.1.3": "Hive 3.1.3 on PostgreSQL",
    "4.0.1": "Hive 4.0.1 on PostgreSQL",
}
OPT_IN = {
    "auto",
    "rewrite_sql",
    "lakekeeper",
    "copy_half",
    "copy_wide",
    "dag_scheduled",
}  # run only when --only names them
# The targets of this machine (2 vCPUs: two Spark tasks do ~1.35x the work of one), as ratios of
# one run: name -> (bound, "min" or "max", what it compares). Full verification stays on.
TARGETS = {
    "dag_vs_loop_wall": (1.0, "min", "DAG end-to-end wall vs the unverified one-app coalesce loop's wall (x faster)"),
    "dag_vs_per_partition_submits": (20.0, "min", "DAG end-to-end wall vs one spark-submit per partition (x faster)"),
    "rewrite_verification_share": (
        0.15,
        "max",
        "rewrite: checksum scans after the write / rewrite jobs' time (the "
        "write tasks' own hashing not counted: checksum_cost.py)",
    ),
    "columnar_vs_spark_sql_cpu": (
        0.34,
        "max",
        "rewrite: the columnar engine's tasks' CPU / the Spark SQL rewrite's (rewrite_sql: its write and "
        "verification jobs' tasks), same files",
    ),
    "copy_verification_share": (0.25, "max", "copy: read-back, second read and comparison / copy-merge time"),
    "copy_ms_per_file": (2.0, "max", "copy: in-app ms per input file beyond its bytes at 0.25x the floor's rate"),
    "copy_ms_per_file_marginal": (
        2.0,
        "max",
        "copy: the same, marginal: what the other half of the partitions "
        "added to a job of half of them (its warm-up left out)",
    ),
    "copy_ms_per_file_added": (
        2.0,
        "max",
        "copy: what a file adds to its partition beyond its bytes: copy_wide's "
        "partitions of twice the files against copy_half's (same partitions)",
    ),
    "copy_bytes_vs_floor_throughput": (
        0.25,
        "min",
        "copy: bytes / the copy merges' own time (each on one driver thread) vs the floor's throughput (one process)",
    ),
    "dag_fixed_start_seconds": (10.0, "max", "DAG: the plan task's start to the first merge byte (s)"),
    "dag_fixed_start_ours_seconds": (
        2.0,
        "max",
        "DAG: of that, ours: the plan task's body and the driver's "
        "work after its SparkContext, but the wait for Spark SQL (s)",
    ),
    "scheduled_fixed_start_seconds": (
        10.0,
        "max",
        "DAG run by Airflow's scheduler: the plan task's start to the first merge byte (s)",
    ),
    "scheduled_fixed_start_ours_seconds": (
        2.0,
        "max",
        "DAG run by Airflow's scheduler: of that, ours: the plan "
        "task (its process's own start included) and the driver's "
        "work after its SparkContext, but the wait for Spark SQL (s)",
    ),
}
# Against the peer (issue 30): our default mode at least 2x Lakekeeper's wall on the same table,
# both checksums equal, no more files left than Lakekeeper leaves. Ours: "auto" (the merge job:
# in-process plan + spark-submit) and "dag" (end to end), whichever ran.
PEER_SPEEDUP = 2.0
# "2026-11-21 09:41:34,123 INFO hive_compaction: prepared 20 partition(s) in 1.2s: ..."
PREPARED = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO hive_compaction: prepared \d+ partition")
# "... INFO hive_compaction: the first merge began (rewrite)": the end of a job's fixed start
FIRST_MERGE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO hive_compaction: the first merge began \(")
# "... INFO hive_compaction: Spark SQL session made for the rewrites in 4.3s"
SQL_SESSION = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO hive_compaction: Spark SQL session made ")
REWRITE_VERIFIED = re.compile(
    r"rewrote \d+ group\(s\) \(\d+ files\) in ([0-9.]+)s, "
    r"read back and verified in ([0-9.]+)s"
)
# "... with the columnar engine in 2.1s (its tasks: 2.9s writing, 0.6s reading back)": the tasks' own times
COLUMNAR_VERIFIED = re.compile(
    r"with the columnar engine in [0-9.]+s \(its tasks: ([0-9.]+)s writing, ([0-9.]+)s reading back\)"
)
# "driver memory: JVM peak RSS 612 MB, JVM old generation peak 210 MB of a 1024 MB heap, Python peak RSS 95 MB"
# (each job's last line)
DRIVER_MEMORY = re.compile(
    r"driver memory: (?:JVM peak RSS (\d+) MB, )?JVM old generation peak (\d+) MB of a \d+ MB "
    r"heap, Python peak RSS (\d+) MB"
)
# "driver time by step: prepare 20.1, copy 15.0, lock 8.2 ms per partition (of 200)"
STEP_TIMES = re.compile(r"driver time by step: (.*) ms per partition \(of (\d+)\)")
COPY_VERIFIED = re.compile(
    r"copy-merged \d+ group\(s\) \(\d+ files[^)]*\) in ([0-9.]+)s, of which verifying ([0-9.]+)s"
)
# The DAG's start, from `airflow dags test`'s own lines ("2026-11-27T05:34:31.840697Z [info     ] ...") and
# the merge job's "Spark ready" line.
_AIRFLOW_AT = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z \[info\s*\] "
PLAN_STARTED = re.compile(_AIRFLOW_AT + r"\[DAG TEST\] starting task_id=plan ")
TASK_STARTED = re.compile(_AIRFLOW_AT + r"Task started ")
PLAN_ENDED = re.compile(_AIRFLOW_AT + r"\[DAG TEST\] end task task_id=plan ")
SUBMITTED = re.compile(_AIRFLOW_AT + r"Spark-Submit cmd: ")
SPARK_READY = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO hive_compaction: Spark ready ")

# The naive approach, as a small PySpark script: argv = format, work folder, partition folders.
NAIVE_JOB = textwrap.dedent("""\
    import os, sys, time
    from pyspark.sql import SparkSession

    fmt, work, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
    spark = SparkSession.builder.appName("naive-coalesce").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    started = time.monotonic()
    for part in parts:
        t0 = time.monotonic()
        name = os.path.basename(part.rstrip("/"))
        out = os.path.join(work, "out", name)
        spark.read.format(fmt).load("file://" + part).coalesce(1) \\
            .write.format(fmt).mode("overwrite").save("file://" + out)
        trash = os.path.join(work, "trash", name)
        os.makedirs(trash, exist_ok=True)
        for f in os.listdir(part):  # the inputs (and their .crc files) leave the partition
            os.rename(os.path.join(part, f), os.path.join(trash, f))
        for f in os.listdir(out):  # the one new data file (and its .crc) comes in
            if not f.startswith(("_", ".")):
                os.rename(os.path.join(out, f), os.path.join(part, f))
                if os.path.exists(os.path.join(out, "." + f + ".crc")):
                    os.rename(os.path.join(out, "." + f + ".crc"), os.path.join(part, "." + f + ".crc"))
        print("NAIVE partition %s %.3f" % (name, time.monotonic() - t0), flush=True)
    elapsed = time.monotonic() - started
    spark.stop()
    print("NAIVE elapsed %.3f" % elapsed, flush=True)
""")

# Lakekeeper run in a spark-submit (its README's "Scenario 3"; the wheel ships no run_lakekeeper.py):
# argv = Lakekeeper's own arguments. The session is made first, as Lakekeeper makes it (its
# getOrCreate then returns this one), so the application's own span can be timed like the others'.
LAKEKEEPER_JOB = textwrap.dedent("""\
    import sys, time
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("lakekeeper").enableHiveSupport().getOrCreate()
    spark.sparkContext.setLogLevel("WARN")  # as our job and the naive script run: no INFO log volume
    started = time.monotonic()
    from lakekeeper.cli import main
    code = 0
    try:
        main(args=sys.argv[1:], prog_name="lakekeeper", standalone_mode=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    print("LAKEKEEPER elapsed %.3f exit %d" % (time.monotonic() - started, code), flush=True)
    spark.stop()
    sys.exit(code)
""")
LAKEKEEPER_ARGS = ["--block-size", "128", "--ratio-threshold", "2"]  # as tried by hand on 2026-11-26
LAKEKEEPER_INSTALL = "pip install --no-deps lakekeeper==0.0.6"

# "2026-11-21 09:41:34,123 INFO hive_compaction: [3/20] db.t dt=2026-01-03: merged ..."
PROGRESS = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO hive_compaction: \[\d+/\d+\] (\S+) (\S+): (\w+) ")


def machine_cpu_seconds() -> float | None:
    """The CPU time every process of the machine has used since it started (user, nice, system,
    interrupts, steal: all but idle and I/O wait, from ``/proc/stat``), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def cpu_figures(before: float | None, after: float | None, wall: float | None) -> dict:
    """A contestant's machine CPU while it ran, the cores it kept busy on average, and the least
    wall time that CPU needs on this machine's cores (the work, however well it were scheduled)."""
    if before is None or after is None:
        return {}
    cpu, cores = round(after - before, 1), os.cpu_count() or 1
    return {
        "machine_cpu_seconds": cpu,
        "cores": cores,
        "cores_busy": _div(cpu, wall),
        "cpu_bound_wall_seconds": round(cpu / cores, 1),
    }


def log(msg: str = "") -> None:
    print(msg, flush=True)


def local(uri: str) -> Path:
    return Path(urlsplit(uri).path)


def spark_conf_dir(work: Path) -> str:
    folder = work / "spark-conf"
    if not folder.is_dir():
        folder.mkdir(parents=True)
        (folder / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in SPARK_CONF.items()))
    return str(folder)


# --- tables ------------------------------------------------------------------------------------


def table_dir(stack: Stack, table: str) -> Path:
    from hmsclient import hmsclient

    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        return local(c.get_table(DB, table).sd.location)


def clone_table(stack: Stack, src: str, dst: str, external: bool = False) -> None:
    """``dst``: same DDL as ``src``, the same data files byte for byte, partitions registered.
    ``external``: an EXTERNAL table (``LIKE ... LOCATION``) in the folder a managed one would have."""
    spark = stack.spark
    spark.sql(f"DROP TABLE IF EXISTS {DB}.{dst}")
    if external:
        folder = table_dir(stack, src).parent / dst
        if folder.exists():
            shutil.rmtree(folder)
        spark.sql(f"CREATE TABLE {DB}.{dst} LIKE {DB}.{src} LOCATION 'file://{folder}'")
    else:
        spark.sql(f"CREATE TABLE {DB}.{dst} LIKE {DB}.{src}")
    root = table_dir(stack, dst)
    source = stack.snapshot(DB, src)
    for name in source:
        target = root / name
        target.mkdir(parents=True, exist_ok=True)
        for f in data_files(stack.partition_location(DB, src, name)):
            shutil.copyfile(f, target / f.name)
    spark.sql(f"MSCK REPAIR TABLE {DB}.{dst}")
    spark.sql(f"ANALYZE TABLE {DB}.{dst} PARTITION(dt) COMPUTE STATISTICS NOSCAN")
    if external:
        from hmsclient import hmsclient

        with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
            kind = c.get_table(DB, dst).tableType
        assert kind == "EXTERNAL_TABLE", f"{dst}: {kind}, not an external table"
    copy = stack.snapshot(DB, dst)
    assert {k: v["files"] for k, v in copy.items()} == {k: v["files"] for k, v in source.items()}, (
        f"{dst} is not a byte-for-byte copy of {src}"
    )
    for name, p in copy.items():
        assert p["hms_num_files"] == str(p["num_files"]) and p["hms_total_size"] == str(p["bytes"]), (
            f"{dst}/{name}: statistics {p['hms_num_files']} files / {p['hms_total_size']} bytes not registered"
        )


def content(stack: Stack, table: str) -> dict[str, tuple[int, str]]:
    """Per partition: (rows, an order-independent digest of every row), computed by Spark so it
    scales to the full-size data (``Stack.content`` sorts every row in Python). Each row's
    digest is SHA-256 over its JSON text (all columns), independent of the xxhash64 our own
    verification uses; a lost, changed or duplicated row changes the partition's sums."""
    from pyspark.sql import functions as F

    spark = stack.spark
    spark.sql(f"REFRESH TABLE {DB}.{table}")
    df = spark.table(f"{DB}.{table}")
    digest = F.sha2(F.to_json(F.struct(*[F.col(c) for c in df.columns])), 256)
    part = [F.conv(F.substring(digest, 1 + 15 * i, 15), 16, 10).cast("decimal(38,0)") for i in range(2)]
    key = df.columns[-1]  # the partition column
    rows = df.groupBy(key).agg(F.count(F.lit(1)), *[F.sum(p) for p in part]).collect()
    return {f"{key}={r[0]}": (int(r[1]), f"{r[2]}:{r[3]}") for r in rows}


def after_state(stack: Stack, table: str, expected: dict) -> dict:
    snap = stack.snapshot(DB, table)
    return {
        "files_after": sum(p["num_files"] for p in snap.values()),
        "bytes_after": sum(p["bytes"] for p in snap.values()),
        "files_after_per_partition": {k: p["num_files"] for k, p in sorted(snap.items())},
        "checksum_ok": content(stack, table) == expected,
    }


# --- our job -----------------------------------------------------------------------------------


def job_time(text: str) -> float:
    """Epoch seconds of the merge job's log time ("2026-11-21 09:41:34,123", this machine's local time)."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def job_span(log_text: str, results: list[dict]) -> tuple[float | None, float | None]:
    """(seconds of ``run_batch``, seconds until its first partition was done).

    ``run_batch`` is the merge work without JVM and SparkSession start and stop: from the earliest
    partition start (its progress line's time minus its seconds) to the last progress line. The
    per-partition seconds overlap (all partitions are prepared first, and all rewrite groups share
    one Spark job), so their sum would count the same time several times. The first partition is
    done after every footer was read and, for rewrites, after the one staging job: what follows is
    the commits (and, in copy mode, the other partitions' copies)."""
    seconds = {(r["table"], r["partition"]): r["seconds"] for r in results}
    starts, ends = [], []
    for m in PROGRESS.finditer(log_text):
        at = job_time(m.group(1))
        ends.append(at)
        starts.append(at - seconds.get((m.group(2), m.group(3)), 0.0))
    if not ends or len(ends) != len(results):
        return None, None
    return round(max(ends) - min(starts), 3), round(min(ends) - min(starts), 3)


def phases(log_text: str, started_at: float) -> dict:
    """The job's phase figures from its log: seconds from ``started_at`` (epoch seconds: the
    command's start) to the first merge byte (the job's first copy or rewrite job began), and the seconds
    spent on rewrites and copies and, of those, on verifying them; the drivers' peak memory
    (the largest job's)."""
    merging = [job_time(m.group(1)) for m in FIRST_MERGE.finditer(log_text)]
    rewrite = [
        (float(a), float(b)) for a, b in REWRITE_VERIFIED.findall(log_text) + COLUMNAR_VERIFIED.findall(log_text)
    ]
    copy = [(float(a), float(b)) for a, b in COPY_VERIFIED.findall(log_text)]
    memory = DRIVER_MEMORY.findall(log_text)  # the largest of the run's jobs
    steps: dict[str, float] = {}  # ms per partition, weighted over the run's jobs
    jobs = [
        ({name: float(ms) for name, ms in (part.rsplit(" ", 1) for part in text.split(", "))}, int(n))
        for text, n in STEP_TIMES.findall(log_text)
    ]
    partitions = sum(n for _, n in jobs)
    for times, n in jobs:
        for name, ms in times.items():
            steps[name] = steps.get(name, 0.0) + ms * n / partitions
    return {
        "driver_ms_per_partition_by_step": {k: round(v, 1) for k, v in steps.items()} or None,
        "driver_jvm_peak_rss_mb": max((int(m[0]) for m in memory if m[0]), default=None),
        "driver_old_gen_peak_mb": max((int(m[1]) for m in memory), default=None),
        "driver_python_peak_rss_mb": max((int(m[2]) for m in memory), default=None),
        "fixed_seconds": round(min(merging) - started_at, 3) if merging else None,
        "rewrite_seconds": round(sum(a + b for a, b in rewrite), 3) if rewrite else None,
        "rewrite_verify_seconds": round(sum(b for _, b in rewrite), 3) if rewrite else None,
        "copy_seconds": round(sum(a for a, _ in copy), 3) if copy else None,
        "copy_verify_seconds": round(sum(b for _, b in copy), 3) if copy else None,
    }


def start_phases(log_text: str) -> dict:
    """Where a DAG run's fixed start goes, from the plan task's start to the first merge byte:
    Airflow's (starting the plan task, then the merge task up to its spark-submit), the plan
    task's body, Spark's (spark-submit to the job's SparkContext: launcher, JVMs, Python) and
    the driver's work after it up to its first copy or rewrite job (Kerberos check, work areas,
    listing, footers, the JVM helper; for a rewrite, its files' schema and its job's plan), but
    the time the first rewrite waited for Spark SQL's session beyond preparing (Spark's).
    Ours = the plan task's body + the driver's work. Empty when a line is missing."""

    def first(pattern: re.Pattern, after: float = 0.0) -> float | None:
        for m in pattern.finditer(log_text):
            at = (
                datetime.strptime(m.group(1)[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
                if "T" in m.group(1)
                else job_time(m.group(1))
            )
            if at >= after:
                return at
        return None

    plan = first(PLAN_STARTED)
    body = first(TASK_STARTED, plan or 0.0)
    planned = first(PLAN_ENDED, plan or 0.0)
    submitted = first(SUBMITTED, planned or 0.0)
    session = first(SPARK_READY)
    prepared, merging, sql = first(PREPARED), first(FIRST_MERGE), first(SQL_SESSION)
    if None in (plan, body, planned, submitted, session, prepared, merging):
        return {}
    return start_split(
        plan, (body - plan) + (submitted - planned), planned - body, submitted, session, prepared, merging, sql
    )


def start_split(
    plan: float,
    airflow: float,
    plan_task: float,
    submitted: float,
    ready: float,
    prepared: float,
    merging: float,
    sql_session: float | None,
    **more: float,
) -> dict:
    """The fixed start's parts, from the plan task's start, Airflow's and the plan task's seconds,
    and the times (epoch seconds) of the spark-submit, "Spark ready", the end of preparing, the
    first merge, and Spark SQL's session made (None if it was not); ``more``: other figures in
    seconds. Spark SQL's part is the wait for its session between the end of preparing and the
    first merge (its making overlaps the preparing). Rounded to milliseconds."""
    sql = 0.0 if sql_session is None else max(0.0, min(sql_session, merging) - prepared)
    driver = merging - ready - sql
    out = {
        "start_airflow_seconds": airflow,
        "start_plan_task_seconds": plan_task,
        "start_spark_seconds": ready - submitted,
        "start_spark_sql_seconds": sql,
        "start_driver_ours_seconds": driver,
        "start_prepare_seconds": prepared - ready,
        "dag_fixed_start_seconds": merging - plan,
        "dag_fixed_start_ours_seconds": plan_task + driver,
        **more,
    }
    return {k: round(v, 3) for k, v in out.items()}


def job_problems(log_text: str, results: list[dict]) -> list[str]:
    """Why partitions failed: their reasons, then the job's own FAILED / ERROR lines (not Spark's noise)."""
    out = [f"{r['partition']}: {r['status']} {r['reason']}" for r in results if r["status"] != "merged"]
    out += [
        line.strip()[:500]
        for line in log_text.splitlines()
        if re.search(r"^FAILED |ERROR hive_compaction|Exception: ", line.strip())
    ]
    return out[:12]


def summarise_results(results: list[dict]) -> dict:
    return {
        "statuses": sorted({r["status"] for r in results}),
        "modes": sorted({r["mode"] for r in results if r["mode"]}),
        "partitions_by_mode": {
            m: sum(1 for r in results if r["mode"] == m) for m in sorted({r["mode"] for r in results if r["mode"]})
        },
        "bytes_before": sum(r["bytes_before"] for r in results),
        "sum_partition_seconds": round(sum(r["seconds"] for r in results), 3),
    }


LOGS: Path | None = None  # --logs: where our contestants' job logs are kept (phase lines, profiles)
AUTO_FLOOR: int | None = None  # --auto-floor: the auto contestant's copy_min_block_size


def keep_log(name: str, text: str) -> None:
    if LOGS is not None:
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / f"{name}.log").write_text(text)


def run_dag(stack: Stack, work: Path, table: str) -> dict:
    cfg = stack.write_config(
        work / f"{table}.yaml", [{"name": f"{DB}.{table}", "merge_mode": "auto", **ONE_OUTPUT}], spark_conf=SPARK_CONF
    )
    t0, started_at, cpu_before = time.monotonic(), time.time(), machine_cpu_seconds()
    run = stack.run_dag(cfg, SPARK_CONF_DIR=spark_conf_dir(work))
    wall = time.monotonic() - t0
    cpu = cpu_figures(cpu_before, machine_cpu_seconds(), wall)
    keep_log(table, run.log)
    results = stack.results(cfg, run.run_id) if run.run_id else []
    ok = run.state == "success" and bool(results) and all(r["status"] == "merged" for r in results)
    span, first = job_span(run.log, results)
    return {
        "wall_seconds": round(wall, 3),
        "in_app_seconds": span,
        "first_partition_done_seconds": first,
        "ran_ok": ok,
        **phases(run.log, started_at),
        **start_phases(run.log),
        "error": None
        if ok
        else (
            f"DAG run {run.state}, merge {run.states.get('merge')}: "
            + " | ".join(job_problems(run.log, results) or [run.log[-2000:]])
        ),
        **cpu,
        **summarise_results(results),
    }


def run_dag_scheduled(stack: Stack, work: Path, table: str) -> dict:
    """The DAG as a deployed Airflow runs it: its own api-server, scheduler (LocalExecutor) and
    dag-processor on a database of the stack's PostgreSQL, the run triggered through the REST API
    (no logical date, no form values: every partition of the config's one table, as ``dag``'s).
    Wall: the trigger to the run's end as the scheduler recorded it."""
    from airflow_services import DAG_ID, AirflowServices, service_env
    from local_stack import free_port

    if stack.postgres is None:
        raise RuntimeError("Airflow's services need PostgreSQL: run with --metastore postgres, 3.1.3 or 4.0.1")
    cfg = stack.write_config(
        work / f"{table}.yaml", [{"name": f"{DB}.{table}", "merge_mode": "auto", **ONE_OUTPUT}], spark_conf=SPARK_CONF
    )
    home = work / f"airflow-{table}"
    home.mkdir()
    env = service_env(
        stack.env(cfg, SPARK_CONF_DIR=spark_conf_dir(work)),
        home,
        free_port(),
        **stack.airflow_database(f"bench_{table}"),
    )
    svc = AirflowServices(home, env)
    svc.migrate()
    svc.start()
    try:
        svc.token = svc.wait_ready(DAG_ID)
        svc.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
        # Unpausing starts the latest scheduled run (catchup is off). Its key date is none of the
        # table's, so it merges nothing, but ours would queue behind it (one active run): wait.
        svc.wait_for_runs(lambda r: r["run_type"] == "scheduled", 1, timeout=1800, poll=1)
        started_at, cpu_before = time.time(), machine_cpu_seconds()
        run_id = svc.api("POST", f"/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": {}})["dag_run_id"]
        run = svc.wait_for_runs(lambda r: r["dag_run_id"] == run_id, 1, timeout=1800, poll=1)[0]
        # The machine's CPU from the trigger until the run was seen over (its services' own included)
        cpu = cpu_figures(cpu_before, machine_cpu_seconds(), time.time() - started_at)
        tis = svc.api("GET", f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances")["task_instances"]
    finally:
        svc.stop()
    records = [
        json.loads(line)
        for f in sorted((home / "logs").rglob("*.log"))
        if f"run_id={run_id}" in str(f) and "task_id=merge" in str(f)
        for line in f.read_text(errors="replace").splitlines()
        if line.startswith("{")
    ]
    log_text = "\n".join(str(r.get("event", "")) for r in records)
    keep_log(table, log_text)
    results = stack.results(cfg, run_id)
    ok = run["state"] == "success" and bool(results) and all(r["status"] == "merged" for r in results)
    span, first = job_span(log_text, results)
    return {
        "wall_seconds": round(_epoch(run["end_date"]) - started_at, 3),
        "in_app_seconds": span,
        "first_partition_done_seconds": first,
        "ran_ok": ok,
        **phases(log_text, started_at),
        **scheduled_start_phases(tis, records),
        **cpu,
        "error": None
        if ok
        else (
            f"DAG run {run['state']}, "
            f"tasks {sorted((t['task_id'], t['state']) for t in tis)}: "
            + " | ".join(job_problems(log_text, results) or [log_text[-2000:]])
        ),
        **summarise_results(results),
    }


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def scheduled_start_phases(tis: list[dict], merge_records: list[dict]) -> dict:
    """``start_phases`` for a run the scheduler drove, from its task instances (the REST API's
    start and end dates) and the merge tasks' log records (Airflow's JSON lines, each with its
    ``timestamp``; the merge job's own lines are their ``event``s): Airflow's part is the plan
    task's end to the spark-submit (scheduling the mapped merges, starting a task process, the
    operator); the plan task's part its whole run, its process's own start included. Empty when
    a figure is missing."""
    plan = next((t for t in tis if t["task_id"] == "plan"), None)
    merges = [t for t in tis if t["task_id"] == "merge" and t.get("start_date")]
    submitted = next(
        (
            _epoch(r["timestamp"])
            for r in merge_records
            if str(r.get("event", "")).startswith("Spark-Submit cmd: ") and r.get("timestamp")
        ),
        None,
    )
    text = "\n".join(str(r.get("event", "")) for r in merge_records)
    ready, prepared, merging = SPARK_READY.search(text), PREPARED.search(text), FIRST_MERGE.search(text)
    if not (
        plan
        and plan.get("start_date")
        and plan.get("end_date")
        and merges
        and submitted
        and ready
        and prepared
        and merging
    ):
        return {}
    start, end = _epoch(plan["start_date"]), _epoch(plan["end_date"])
    sql = SQL_SESSION.search(text)
    return start_split(
        start,
        submitted - end,
        end - start,
        submitted,
        job_time(ready.group(1)),
        job_time(prepared.group(1)),
        job_time(merging.group(1)),
        sql and job_time(sql.group(1)),
        start_scheduling_seconds=min(_epoch(t["start_date"]) for t in merges) - end,
    )


def run_job(
    stack: Stack, work: Path, table: str, mode: str, partition_filter: str | None = None, engine: str = "columnar"
) -> dict:
    # auto: the product's default floor unless --auto-floor; the others: none
    floor = (
        ({} if AUTO_FLOOR is None else {"copy_min_block_size": AUTO_FLOOR})
        if mode == "auto"
        else {"copy_min_block_size": 0}
    )
    only = {"partition_filter": partition_filter} if partition_filter else {}
    cfg = stack.write_config(
        work / f"{table}.yaml",
        [{"name": f"{DB}.{table}", "merge_mode": mode, "rewrite_engine": engine, **floor, **only, **ONE_OUTPUT}],
        spark_conf=SPARK_CONF,
    )
    t_plan = time.monotonic()
    planned = stack.plan_batches(cfg, run_id=f"bench-{table}")
    plan_seconds = round(time.monotonic() - t_plan, 3)  # in-process: not in wall (the DAG's plan task is)
    wall, in_app, first, results, errors, logs = 0.0, 0.0, None, [], [], []
    started_at = time.time()
    events = work / f"events-{table}"  # Spark's event log: the tasks' own CPU (tasks_cpu_seconds)
    events.mkdir(exist_ok=True)
    event_conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{events}",
        "spark.eventLog.compress": "false",
    }
    for args in planned["spark_args"]:
        batch = args["application_args"][1]
        payload = decode_batch(batch)
        t0 = time.monotonic()
        p = stack.spark_submit(batch, cfg, conf=event_conf, SPARK_CONF_DIR=spark_conf_dir(work))
        wall += time.monotonic() - t0
        logs.append(p.stdout)
        got = [
            r
            for r in stack.results(cfg, payload["run"])
            if (r["table"], r["partition"]) in {(f"{t.database}.{t.table}", t.partition) for t in batch_tasks(payload)}
        ]
        span, first = job_span(p.stdout, got)
        in_app = None if span is None or in_app is None else in_app + span
        results += got
        if p.returncode != 0 or any(r["status"] != "merged" for r in got):
            errors.append(
                f"spark-submit exit {p.returncode}: "
                + " | ".join(job_problems(p.stdout + p.stderr, got) or [(p.stdout + p.stderr)[-2000:]])
            )
    keep_log(table, "\n".join(logs))
    ok = bool(results) and not errors and all(r["status"] == "merged" for r in results)
    return {
        "wall_seconds": round(wall, 3),
        "in_app_seconds": in_app,
        "first_partition_done_seconds": first,
        "batches": len(planned["spark_args"]),
        "plan_seconds": plan_seconds,
        **phases("\n".join(logs), started_at),
        "tasks_cpu_seconds": tasks_cpu_seconds(events),
        "ran_ok": ok,
        "error": None if ok else ("; ".join(errors) or "no partition was planned"),
        **summarise_results(results),
    }


def tasks_cpu_seconds(events: Path) -> float | None:
    """The CPU time of every Spark task of the jobs whose event logs are in ``events`` (each
    SparkListenerTaskEnd's Executor CPU Time): the merge engines' own work, without the driver's."""
    nanos = 0
    for log_file in (f for f in events.rglob("*") if f.is_file()):  # Spark 4 rolls them into folders
        for line in log_file.read_text(errors="replace").splitlines():
            if '"SparkListenerTaskEnd"' in line:
                nanos += int(json.loads(line).get("Task Metrics", {}).get("Executor CPU Time", 0))
    return round(nanos / 1e9, 2) if nanos else None


# --- the others --------------------------------------------------------------------------------


def run_floor(stack: Stack, work: Path, table: str) -> dict:
    root, out = table_dir(stack, table), work / f"floor-{table}"
    out.mkdir(parents=True)
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    inputs = {p.name: data_files(p) for p in folders}
    t0 = time.monotonic()
    for name, files in inputs.items():
        with open(out / f"{name}.bin", "wb") as dst:
            for f in files:
                with open(f, "rb") as src:
                    shutil.copyfileobj(src, dst)
    wall = time.monotonic() - t0
    sizes = {name: (out / f"{name}.bin").stat().st_size for name in inputs}
    before = {name: sum(f.stat().st_size for f in files) for name, files in inputs.items()}
    return {
        "wall_seconds": round(wall, 6),
        "in_app_seconds": round(wall, 6),
        "ran_ok": True,
        "error": None,
        "bytes_before": sum(before.values()),
        "bytes_after": sum(sizes.values()),
        "files_after": len(sizes),
        "files_after_per_partition": {n: 1 for n in sizes},
        "checksum_ok": sizes == before,
    }


def spark_submit_naive(stack: Stack, script: Path, fmt: str, work: Path, parts: list[Path], conf_dir: str):
    cmd = [
        "spark-submit",
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.driver.host=127.0.0.1",
        str(script),
        fmt,
        str(work),
        *map(str, parts),
    ]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=stack.env(SPARK_CONF_DIR=conf_dir), capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    m = re.search(r"^NAIVE elapsed ([0-9.]+)$", p.stdout, re.M)
    return wall, (float(m.group(1)) if m else None), p


def run_naive(
    stack: Stack, work: Path, table: str, fmt: str, script: Path, per_partition: bool, sample: int | None = None
) -> dict:
    """The naive script: one application over every partition, or one per partition (on the
    first ``sample`` partitions only, its times then extrapolated linearly to all of them)."""
    root = table_dir(stack, table)
    parts = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    scratch = work / f"naive-{table}"
    groups = [[p] for p in parts[: sample or len(parts)]] if per_partition else [parts]
    wall, in_app, errors = 0.0, 0.0, []
    for group in groups:
        w, a, p = spark_submit_naive(stack, script, fmt.lower(), scratch, group, spark_conf_dir(work))
        wall += w
        in_app = None if a is None or in_app is None else in_app + a
        if p.returncode != 0 or a is None:
            lines = [x.strip()[:500] for x in (p.stdout + p.stderr).splitlines() if re.search(r"Error|Exception", x)]
            errors.append(
                f"spark-submit exit {p.returncode}: " + (" | ".join(lines[:12]) or (p.stdout + p.stderr)[-2000:])
            )
    scale = len(parts) / len(groups) if per_partition else 1.0
    out = {
        "wall_seconds": round(wall * scale, 3),
        "in_app_seconds": None if in_app is None else round(in_app * scale, 3),
        "spark_submits": len(groups),
        "ran_ok": not errors,
        "error": "; ".join(errors) or None,
    }
    if scale != 1.0:
        out.update(extrapolated_from=len(groups), measured_wall_seconds=round(wall, 3))
    return out


# --- the peer: Lakekeeper --------------------------------------------------------------------


def lakekeeper_version() -> str | None:
    """The installed Lakekeeper's version (in this interpreter, the one spark-submit runs), or None."""
    from importlib import metadata

    try:
        return metadata.version("lakekeeper")
    except metadata.PackageNotFoundError:
        return None


def parse_lakekeeper(text: str) -> dict:
    """What Lakekeeper's own compaction report (logged, ``core/reporter.py``) and our launcher say:
    status, its compaction's seconds, files before and after, partitions compacted and skipped,
    the error it reported, the table skipped (and why), and the launcher's in-application span."""
    out: dict = {
        "status": None,
        "duration_seconds": None,
        "files_before": None,
        "files_after": None,
        "partitions_compacted": None,
        "partitions_skipped": None,
        "error": None,
        "skipped": None,
        "in_app_seconds": None,
        "exit": None,
    }
    m = re.search(r"Compaction Report: \S+\s*\n=+\n(.*?)(?:\n\n\S|\Z)", text, re.S)
    report = m.group(1) if m else ""
    if m:
        if s := re.search(r"^\s*Status:\s*(\w+)", report, re.M):
            out["status"] = s.group(1)
        if d := re.search(r"^\s*Duration:\s*([0-9.]+)s", report, re.M):
            out["duration_seconds"] = float(d.group(1))
        files = re.findall(r"^\s*Files:\s*([0-9,]+)", report, re.M)
        if len(files) >= 2:
            out["files_before"], out["files_after"] = (int(f.replace(",", "")) for f in files[:2])
        if c := re.search(r"^\s*Partitions compacted:\s*(\d+)", report, re.M):
            out["partitions_compacted"] = int(c.group(1))
        if k := re.search(r"^\s*Partitions skipped:\s*(\d+)", report, re.M):
            out["partitions_skipped"] = int(k.group(1))
        if e := re.search(r"^\s*ERROR:\s*(.+)$", report, re.M):
            out["error"] = e.group(1).strip()
    if k := re.search(r"^\s*(Skipping \S+(?: -|:) .+)$", text, re.M):
        out["skipped"] = k.group(1).strip()
    if a := re.search(r"^LAKEKEEPER elapsed ([0-9.]+) exit (-?\d+)$", text, re.M):
        out["in_app_seconds"], out["exit"] = float(a.group(1)), int(a.group(2))
    return out


def run_lakekeeper(stack: Stack, work: Path, table: str) -> dict:
    """``lakekeeper compact --table`` on the table, in one spark-submit with the same master and
    Spark settings as ours, its session pointed at our Metastore (as its README says a cluster
    does it: the Hive settings of the session). Lakekeeper refreshes no statistics by default
    (``--analyze-stats``: a full-scan ANALYZE); it is run as tried by hand (LAKEKEEPER_ARGS)."""
    version = lakekeeper_version()
    if version is None:
        raise RuntimeError(
            "Lakekeeper is not installed in this interpreter (" + sys.executable + "), and it is "
            "not a project dependency: install it with `" + LAKEKEEPER_INSTALL + "` "
            "(its dependencies, click and PyYAML, are already there; see requirements-bench.txt)"
        )
    script = work / "run_lakekeeper.py"
    script.write_text(LAKEKEEPER_JOB)
    cmd = [
        "spark-submit",
        "--master",
        "local[2]",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        f"spark.hadoop.hive.metastore.uris=thrift://127.0.0.1:{stack.port}",
        "--conf",
        f"spark.sql.warehouse.dir={stack.metastore.warehouse}",
        str(script),
        "compact",
        "--table",
        f"{DB}.{table}",
        *LAKEKEEPER_ARGS,
    ]
    t0 = time.monotonic()
    p = subprocess.run(
        cmd, env=stack.env(SPARK_CONF_DIR=spark_conf_dir(work)), capture_output=True, text=True, timeout=3600
    )
    wall = time.monotonic() - t0
    text = p.stdout + "\n" + p.stderr
    keep_log(table, text)
    got = parse_lakekeeper(text)
    ok = p.returncode == 0 and got["status"] == "completed" and got["exit"] == 0
    error = None
    if not ok:
        why = (
            got["error"]
            or got["skipped"]
            or " | ".join(
                line.strip()[:500]
                for line in text.splitlines()
                if re.search(r"Error|Exception|ERROR", line) and "WARN" not in line[:40]
            )[:2000]
        )
        error = f"lakekeeper {version}: spark-submit exit {p.returncode}, status {got['status']}: " + (
            why or text[-2000:]
        )
    return {
        "wall_seconds": round(wall, 3),
        "in_app_seconds": got["in_app_seconds"],
        "ran_ok": ok,
        "error": error,
        "lakekeeper_version": version,
        "lakekeeper_args": LAKEKEEPER_ARGS,
        "lakekeeper_compaction_seconds": got["duration_seconds"],
        "lakekeeper_reported_files_after": got["files_after"],
        "partitions_compacted": got["partitions_compacted"],
        "partitions_skipped": got["partitions_skipped"],
    }


def peer_figures(c: dict) -> dict:
    """Ours against Lakekeeper on the same table: for "auto" (the merge job; its in-process plan
    added to its spark-submits' wall), "dag" and "dag_scheduled" (end to end), whichever ran: the wall ratio
    (Lakekeeper's / ours), files after, both checksums, and HIT / MISS against PEER_SPEEDUP."""
    lk = c.get("lakekeeper")
    if not lk:
        return {}
    out = {}
    for key in ("auto", "dag", "dag_scheduled"):
        ours = c.get(key)
        if not ours:
            continue
        wall = ours.get("wall_seconds")
        if wall is not None and ours.get("plan_seconds") is not None:
            wall = round(wall + ours["plan_seconds"], 3)
        ratio = _div(lk.get("wall_seconds"), wall) if lk.get("ran_ok") and ours.get("ran_ok") else None
        files_ok = (
            ours.get("files_after") is not None
            and lk.get("files_after") is not None
            and ours["files_after"] <= lk["files_after"]
        )
        checks = bool(ours.get("checksum_ok")) and bool(lk.get("checksum_ok"))
        hit = ratio is not None and ratio >= PEER_SPEEDUP and files_ok and checks
        out[key] = {
            "wall_seconds": wall,
            "lakekeeper_wall_seconds": lk.get("wall_seconds"),
            "ratio": ratio,
            "in_app_ratio": _div(lk.get("in_app_seconds"), ours.get("in_app_seconds")),
            "files_after": ours.get("files_after"),
            "lakekeeper_files_after": lk.get("files_after"),
            "files_ok": files_ok,
            "checksums_equal": checks,
            "target": PEER_SPEEDUP,
            # The best ratio our run's machine CPU allows on these cores, and both runs' CPU.
            "cpu_bound_ratio": _div(lk.get("wall_seconds"), ours.get("cpu_bound_wall_seconds")),
            "machine_cpu_seconds": ours.get("machine_cpu_seconds"),
            "lakekeeper_machine_cpu_seconds": lk.get("machine_cpu_seconds"),
            "result": "-" if ratio is None else "HIT" if hit else "MISS",
        }
    return out


def peer_line(key: str, p: dict) -> str:
    """One line of the peer comparison, e.g. ``auto vs Lakekeeper: 2.41x wall (20.1 s vs 48.4 s),
    ...``."""
    ratio = "-" if p["ratio"] is None else f"{p['ratio']}x"
    return (
        f"{p['result']:>4}  {key} vs Lakekeeper: {ratio} wall ({_num(p['wall_seconds'])} s vs "
        f"{_num(p['lakekeeper_wall_seconds'])} s; in-app {p['in_app_ratio']}x), files after "
        f"{p['files_after']} vs {p['lakekeeper_files_after']} ({'<=' if p['files_ok'] else 'MORE'}), "
        f"checksums {'both equal the source' if p['checksums_equal'] else 'NOT both equal'} "
        f"(target >= {p['target']}x, no more files, checksums equal)"
        + (
            f"; machine CPU {p['machine_cpu_seconds']} s vs {p['lakekeeper_machine_cpu_seconds']} s, so at best "
            f"{p['cpu_bound_ratio']}x on these cores"
            if p.get("cpu_bound_ratio") is not None
            else ""
        )
    )


# --- one format --------------------------------------------------------------------------------


def bench_format(
    stack: Stack,
    work: Path,
    fmt: str,
    partitions: int,
    files: int,
    rows: int,
    script: Path,
    only: list[str] | None = None,
    sample: int | None = None,
) -> dict:
    tag = fmt.lower()
    src = f"src_{tag}"
    dates = [(date(2026, 1, 1) + timedelta(days=i)).isoformat() for i in range(partitions)]
    log(f"\n== {fmt.upper()}: {partitions} partitions x {files} files, {rows} rows per partition")
    t0 = time.monotonic()
    stack.make_table(DB, src, fmt.upper(), dates, files=files, rows=rows)
    source = stack.snapshot(DB, src)
    expected = content(stack, src)
    bytes_before = sum(p["bytes"] for p in source.values())
    files_before = sum(p["num_files"] for p in source.values())
    log(
        f"source {DB}.{src}: {files_before} files, {bytes_before} bytes, "
        f"{sum(n for n, _ in expected.values())} rows (made in {time.monotonic() - t0:.1f}s)"
    )
    uneven = {k: p["num_files"] for k, p in source.items() if p["num_files"] != files}
    if uneven:
        log(f"note: partitions with other than {files} files: {uneven}")

    half_last = dates[len(dates) // 2 - 1]  # copy_half's partitions: the dates up to this one
    half = {k: p for k, p in source.items() if k.split("=", 1)[1] <= half_last}
    # copy_wide's table: copy_half's dates with twice the files of the same size, so that against
    # copy_half only the number of files a partition differs (and against copy, only the partitions)
    sources, expect = {}, {}
    if only and "copy_wide" in only:
        sources["copy_wide"] = wide = f"src_wide_{tag}"
        stack.make_table(DB, wide, fmt.upper(), dates[: len(dates) // 2], files=files * 2, rows=rows * 2)
        expect["copy_wide"] = content(stack, wide)
        wide_snap = stack.snapshot(DB, wide)
        wide_rec = {
            "partitions": len(wide_snap),
            "files_before": sum(p["num_files"] for p in wide_snap.values()),
            "bytes_before": sum(p["bytes"] for p in wide_snap.values()),
        }
        log(f"source {DB}.{wide}: {wide_rec['files_before']} files, {wide_rec['bytes_before']} bytes")
    out = {
        "partitions": partitions,
        "files_before": files_before,
        "bytes_before": bytes_before,
        "rows": sum(n for n, _ in expected.values()),
        "contestants": {},
    }
    external = bool(only) and "lakekeeper" in only  # Lakekeeper compacts EXTERNAL tables only
    out["external_tables"] = external
    for key in [k for k in CONTESTANTS if (k in only if only else k not in OPT_IN)]:
        table = f"c_{key}_{tag}"
        clone_table(stack, sources.get(key, src), table, external=external)
        log(f"-- {CONTESTANTS[key]} ({DB}.{table})")
        cpu_before = machine_cpu_seconds()
        try:
            if key == "floor":
                rec = run_floor(stack, work, table)
            elif key == "dag":
                rec = run_dag(stack, work, table)
            elif key == "dag_scheduled":
                rec = run_dag_scheduled(stack, work, table)
            elif key in ("copy", "rewrite", "auto", "copy_wide"):
                rec = run_job(stack, work, table, key.removesuffix("_wide"))
            elif key == "rewrite_sql":
                rec = run_job(stack, work, table, "rewrite", engine="spark_sql")
            elif key == "copy_half":  # the first half of the dates: the rest stays as it was
                rec = run_job(stack, work, table, "copy", partition_filter=f'dt <= "{half_last}"')
            elif key == "lakekeeper":
                rec = run_lakekeeper(stack, work, table)
            else:
                rec = run_naive(stack, work, table, fmt, script, per_partition=(key == "per_partition"), sample=sample)
        except Exception as e:  # noqa: BLE001 - one broken contestant must not hide the others' figures
            rec = {"wall_seconds": None, "in_app_seconds": None, "ran_ok": False, "error": f"{type(e).__name__}: {e}"}
        if "machine_cpu_seconds" not in rec:  # the DAG contestants measure their run's own span
            rec.update(cpu_figures(cpu_before, machine_cpu_seconds(), rec.get("wall_seconds")))
        if key != "floor":
            try:
                rec.update(after_state(stack, table, expect.get(key, expected)))
            except Exception as e:  # noqa: BLE001 - a read-back failure is this contestant's result
                rec.update(checksum_ok=False, error=(rec.get("error") or "") + f" reading back: {e}")
        rec = {
            "label": CONTESTANTS[key],
            "table": f"{DB}.{table}",
            "files_before": files_before,
            "bytes_before": bytes_before,
            **rec,
        }
        if key == "copy_half":
            rec.update(
                partitions=len(half),
                half_files=sum(p["num_files"] for p in half.values()),
                half_bytes=sum(p["bytes"] for p in half.values()),
            )
        if key == "copy_wide":
            rec.update(wide_rec)
        out["contestants"][key] = rec
        log(
            f"   wall {fmt_s(rec['wall_seconds'])}, in-app {fmt_s(rec['in_app_seconds'])}, "
            f"files after {rec.get('files_after')}, checksum {'ok' if rec.get('checksum_ok') else 'DIFFERS'}"
            + (f", partitions by mode {rec['partitions_by_mode']}" if rec.get("partitions_by_mode") else "")
            + (
                f", first partition done after {fmt_s(rec['first_partition_done_seconds'])} in-app"
                if rec.get("first_partition_done_seconds") is not None
                else ""
            )
            + (
                f", machine CPU {rec['machine_cpu_seconds']} s ({rec['cores_busy']} of {rec['cores']} cores busy)"
                if rec.get("machine_cpu_seconds") is not None
                else ""
            )
            + (f"\n   ERROR {rec['error'][-2000:]}" if rec.get("error") else "")
        )
    out["ratios"] = ratios(out["contestants"], bytes_before, files_before, partitions)
    out["peer"] = peer_figures(out["contestants"])
    out["per_partition_seconds"] = per_partition_seconds(out["contestants"], partitions)
    return out


def per_partition_seconds(c: dict, partitions: int) -> dict:
    """Seconds per partition beyond each contestant's fixed start (ours: to the first merge byte;
    the loop: its JVM start and stop; one submit per partition pays its start every time)."""
    out = {}
    for key, rec in c.items():
        wall, fixed = rec.get("wall_seconds"), rec.get("fixed_seconds")
        if key == "loop" and wall is not None and rec.get("in_app_seconds") is not None:
            fixed = wall - rec["in_app_seconds"]
        if key in ("per_partition", "floor"):
            fixed = 0.0
        out[key] = (
            None if wall is None or fixed is None else round((wall - fixed) / rec.get("partitions", partitions), 4)
        )
    return out


def fmt_s(v) -> str:
    return "-" if v is None else f"{v:.2f}s"


def _div(a, b):
    return float(f"{a / b:.4g}") if a is not None and b else None  # 4 significant digits


def ratios(c: dict, total_bytes: int, total_files: int, partitions: int | None = None) -> dict:
    """The targets' ratios; None where a contestant was left out (--only) or has no figure."""

    def get(key: str, figure: str):
        return c.get(key, {}).get(figure)

    floor_tp = _div(total_bytes, get("floor", "in_app_seconds"))
    copy_tp = _div(total_bytes, get("copy", "in_app_seconds"))
    copy_in_app = get("copy", "in_app_seconds")
    per_file = marginal = None
    if copy_in_app is not None and floor_tp and total_files:
        per_file = round((copy_in_app - total_bytes / (0.25 * floor_tp)) / total_files * 1000, 3)
    half = c.get("copy_half", {})
    if per_file is not None and half.get("in_app_seconds") is not None and total_files > half["half_files"]:
        # What the job of every partition took beyond the job of half of them, for the other half's
        # files and bytes: the cost a file adds once the JVM's code is compiled and the job under way.
        files, size = total_files - half["half_files"], total_bytes - half["half_bytes"]
        marginal = round((copy_in_app - half["in_app_seconds"] - size / (0.25 * floor_tp)) / files * 1000, 3)
    # copy_wide has copy_half's partitions with twice the files, and copy's files in half the
    # partitions: a job's time split into what a file adds and what a partition adds beyond its files
    wide = c.get("copy_wide", {})
    file_added = partition_added = by_step = None
    if (
        floor_tp
        and None not in (wide.get("in_app_seconds"), half.get("in_app_seconds"))
        and wide["files_before"] > half["half_files"]
    ):
        files, size = wide["files_before"] - half["half_files"], wide["bytes_before"] - half["half_bytes"]
        file_added = round(
            (wide["in_app_seconds"] - half["in_app_seconds"] - size / (0.25 * floor_tp)) / files * 1000, 3
        )
        steps = (wide.get("driver_ms_per_partition_by_step") or {}, half.get("driver_ms_per_partition_by_step") or {})
        by_step = {
            k: round((v * wide["partitions"] - steps[1][k] * half["partitions"]) / files, 2)
            for k, v in steps[0].items()
            if k in steps[1]
        }
    if (
        copy_in_app is not None
        and floor_tp
        and wide.get("in_app_seconds") is not None
        and partitions
        and partitions > wide["partitions"]
    ):
        size = total_bytes - wide["bytes_before"]
        partition_added = round(
            (copy_in_app - wide["in_app_seconds"] - size / (0.25 * floor_tp))
            / (partitions - wide["partitions"])
            * 1000,
            2,
        )
    values = {
        "dag_vs_loop_wall": _div(get("loop", "wall_seconds"), get("dag", "wall_seconds")),
        "dag_vs_per_partition_submits": _div(get("per_partition", "wall_seconds"), get("dag", "wall_seconds")),
        # Over the rewrite jobs' own time: jobs of one batch run side by side, so their phases
        # overlap the in-application span (as the copy's share is over the copy merges' time).
        "rewrite_verification_share": _div(get("rewrite", "rewrite_verify_seconds"), get("rewrite", "rewrite_seconds")),
        "columnar_vs_spark_sql_cpu": _div(get("rewrite", "tasks_cpu_seconds"), get("rewrite_sql", "tasks_cpu_seconds")),
        "copy_verification_share": _div(get("copy", "copy_verify_seconds"), get("copy", "copy_seconds")),
        "copy_ms_per_file": per_file,
        "copy_ms_per_file_marginal": marginal,
        "copy_ms_per_file_added": file_added,
        "copy_bytes_vs_floor_throughput": _div(_div(total_bytes, get("copy", "copy_seconds")), floor_tp),
        "dag_fixed_start_seconds": get("dag", "dag_fixed_start_seconds"),
        "dag_fixed_start_ours_seconds": get("dag", "dag_fixed_start_ours_seconds"),
        "scheduled_fixed_start_seconds": get("dag_scheduled", "dag_fixed_start_seconds"),
        "scheduled_fixed_start_ours_seconds": get("dag_scheduled", "dag_fixed_start_ours_seconds"),
    }
    out = {
        "floor_mb_per_s": _div(floor_tp, 1024**2),
        "copy_in_app_mb_per_s": _div(copy_tp, 1024**2),
        # The best DAG-vs-loop ratio each DAG contestant's measured CPU allows on this machine's cores.
        **{
            f"{k}_vs_loop_cpu_bound": _div(get("loop", "wall_seconds"), get(k, "cpu_bound_wall_seconds"))
            for k in ("dag", "dag_scheduled")
        },
        "copy_ms_per_partition_added": partition_added,
        "copy_file_added_driver_ms_by_step": by_step,
        "copy_wall_mb_per_s": _div(_div(total_bytes, get("copy", "wall_seconds")), 1024**2),
        "targets": {},
    }
    for name, (bound, kind, what) in TARGETS.items():
        v = values[name]
        hit = v is not None and (v >= bound if kind == "min" else v <= bound)
        out["targets"][name] = {
            "value": v,
            "target": bound,
            "kind": kind,
            "what": what,
            "result": "-" if v is None else "HIT" if hit else "MISS",
        }
    return out


def report(figures: dict) -> None:
    for fmt, f in figures["formats"].items():
        log(
            f"\n== {fmt.upper()}: {f['partitions']} partitions, {f['files_before']} files, "
            f"{f['bytes_before']} bytes, {f['rows']} rows"
        )
        log(f"{'contestant':<36} {'wall s':>9} {'in-app s':>9} {'files after':>12} {'bytes after':>12}  checksum")
        for _key, c in f["contestants"].items():
            per = set((c.get("files_after_per_partition") or {}).values())
            files = f"{c.get('files_after')}" + (f" ({per.pop()}/part)" if len(per) == 1 else "")
            log(
                f"{c['label']:<36} {_num(c['wall_seconds']):>9} {_num(c['in_app_seconds']):>9} {files:>12} "
                f"{str(c.get('bytes_after')):>12}  {'match' if c.get('checksum_ok') else 'MISMATCH'}"
                + ("" if c.get("ran_ok") else "  (FAILED)")
            )
        r = f["ratios"]
        log(
            f"throughput: floor {r['floor_mb_per_s']} MB/s, copy mode in-app {r['copy_in_app_mb_per_s']} MB/s "
            f"(wall {r['copy_wall_mb_per_s']} MB/s)"
        )
        per = f.get("per_partition_seconds") or {}
        fixed = {k: c.get("fixed_seconds") for k, c in f["contestants"].items() if c.get("fixed_seconds") is not None}
        log(
            "seconds per partition beyond the fixed start: "
            + ", ".join(f"{k} {v}" for k, v in per.items() if v is not None)
            + (
                "; fixed start to the first merge byte: " + ", ".join(f"{k} {v}s" for k, v in fixed.items())
                if fixed
                else ""
            )
        )
        for key in ("dag", "dag_scheduled"):
            dag = f["contestants"].get(key, {})
            if dag.get("dag_fixed_start_seconds") is not None:
                log(
                    f"{key}: the DAG's fixed start, the plan task's start to the first merge byte: "
                    f"{dag['dag_fixed_start_seconds']}s = Airflow {dag['start_airflow_seconds']}s + plan task "
                    f"{dag['start_plan_task_seconds']}s + Spark (spark-submit to the job's SparkContext) "
                    f"{dag['start_spark_seconds']}s + Spark SQL's session (beyond preparing) "
                    f"{dag['start_spark_sql_seconds']}s + the driver's work {dag['start_driver_ours_seconds']}s "
                    f"(of it preparing {dag['start_prepare_seconds']}s)"
                )
            if r.get(f"{key}_vs_loop_cpu_bound") is not None:
                log(
                    f"{key} against loop, the CPU: the DAG's run used {dag['machine_cpu_seconds']} CPU-s of the "
                    f"machine (the loop's {f['contestants']['loop'].get('machine_cpu_seconds')}), at least "
                    f"{dag['cpu_bound_wall_seconds']}s on its {dag['cores']} cores however it were scheduled: at best "
                    f"{r[f'{key}_vs_loop_cpu_bound']}x the loop's wall"
                )
        for key, c in f["contestants"].items():
            if c.get("driver_old_gen_peak_mb") is not None:
                log(
                    f"{key}: the driver's peak memory (its largest job): JVM RSS {c['driver_jvm_peak_rss_mb']} MB, "
                    f"JVM old generation {c['driver_old_gen_peak_mb']} MB, "
                    f"Python RSS {c['driver_python_peak_rss_mb']} MB"
                )
            if c.get("driver_ms_per_partition_by_step"):  # summed over driver threads, so more than wall time
                log(
                    f"{key}: the driver's time by step, ms per partition (summed over its threads): "
                    + ", ".join(f"{k} {v}" for k, v in c["driver_ms_per_partition_by_step"].items())
                )
        pp = f["contestants"].get("per_partition", {})
        if pp.get("extrapolated_from"):
            log(
                f"one spark-submit per partition: measured on {pp['extrapolated_from']} of {f['partitions']} "
                f"partitions ({pp['measured_wall_seconds']}s), extrapolated linearly to {pp['wall_seconds']}s"
            )
        if r.get("copy_ms_per_partition_added") is not None:
            log(
                f"copy: what a partition adds beyond its files and bytes (copy against copy_wide, the same files in "
                f"twice the partitions): {r['copy_ms_per_partition_added']} ms"
            )
        if r.get("copy_file_added_driver_ms_by_step"):
            log(
                "copy: what a file adds, the driver's time by step (summed over its threads): "
                + ", ".join(f"{k} {v}" for k, v in r["copy_file_added_driver_ms_by_step"].items())
                + " ms"
            )
        for _name, t in r["targets"].items():
            log(
                f"{t['result']:>4}  {t['what']}: {t['value']} (target {'>=' if t['kind'] == 'min' else '<='} "
                f"{t['target']})"
            )
        for key, p in (f.get("peer") or {}).items():
            log(peer_line(key, p))


def planning_pass(work: Path, partitions: int) -> dict:
    """The plan task and the merge job's listing over ``partitions`` registered partitions, no
    merge (``planning_scale.py``, its own Metastore: metadata and empty folders only)."""
    out = work / "planning.json"
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "planning_scale.py"),
            "--sizes",
            str(partitions // 2),
            str(partitions),
            "--repeat",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if p.returncode != 0 or not out.exists():
        return {"ran_ok": False, "checksum_ok": True, "error": (p.stdout + p.stderr)[-2000:]}
    r = json.loads(out.read_text())["results"][-1]
    got = {
        "ran_ok": True,
        "checksum_ok": True,
        "partitions": r["partitions"],
        "planning_seconds": r["planning_seconds"],
        "planning_us_per_partition": r["us_per_partition"],
        "listing_seconds": r.get("listing_seconds"),
        "listing_us_per_partition": r.get("listing_us_per_partition"),
    }
    log(
        f"\n== planning + listing only, {got['partitions']} partitions: plan {got['planning_seconds']}s "
        f"({got['planning_us_per_partition']} us per partition), listing {got['listing_seconds']}s "
        f"({got['listing_us_per_partition']} us per partition)"
    )
    return got


def _num(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--files", type=int, default=40, help="small files per partition")
    ap.add_argument(
        "--rows",
        type=int,
        default=550_000,
        help="rows per partition (the default makes about 140 MB of ORC, 250 MB of Parquet, "
        "in 20 x 40 files: the data the targets are set on)",
    )
    ap.add_argument("--formats", nargs="+", type=str.lower, choices=["orc", "parquet"], default=["orc", "parquet"])
    ap.add_argument(
        "--quick", action="store_true", help=f"a tiny smoke configuration: {QUICK} (explicit size arguments still win)"
    )
    ap.add_argument(
        "--scale",
        action="store_true",
        help=f"the scale run: {SCALE}, and a planning + listing-only pass over "
        f"{SCALE_PLANNING_PARTITIONS} partitions (explicit arguments still win)",
    )
    ap.add_argument(
        "--shape",
        choices=list(SHAPES),
        help="the issue's table shapes: files of ~256 KB or ~20 KB (ORC) against the peer, ~16 MB for "
        "a copy's bytes: " + ", ".join(f"{k}: {v}" for k, v in SHAPES.items()) + " (explicit arguments still win)",
    )
    ap.add_argument(
        "--planning-partitions",
        type=int,
        default=SCALE_PLANNING_PARTITIONS,
        help="with --scale: partitions of the planning + listing-only pass (0: none)",
    )
    ap.add_argument(
        "--sample", type=int, help="measure one spark-submit per partition on this many partitions, extrapolate to all"
    )
    ap.add_argument(
        "--only",
        nargs="+",
        choices=list(CONTESTANTS),
        help="run only these contestants (ratios needing a missing one print '-')",
    )
    ap.add_argument(
        "--auto-floor",
        type=int,
        metavar="BYTES",
        help="the auto contestant's copy_min_block_size (default: the product's default)",
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--logs", type=Path, help="keep our contestants' job logs in this folder")
    ap.add_argument(
        "--metastore",
        choices=list(METASTORES),
        default="derby",
        help="the Metastore the tables live in: " + "; ".join(f"{k}: {v}" for k, v in METASTORES.items()),
    )
    args = ap.parse_args(argv)
    given = {a.split("=")[0].lstrip("-") for a in argv if a.startswith("--")}
    for preset, values in ((args.quick, QUICK), (args.scale, SCALE), (args.shape, SHAPES.get(args.shape))):
        for key, value in values.items() if preset else ():
            if key not in given:
                setattr(args, key, value)
    return args


def measure(stack: Stack, work: Path, args: argparse.Namespace) -> dict:
    """Every contestant of every format on ``stack`` (started), then the planning pass of --scale;
    the figures, with their totals and checks."""
    global LOGS, AUTO_FLOOR
    LOGS = args.logs
    AUTO_FLOOR = args.auto_floor
    figures = {
        "config": {
            "partitions": args.partitions,
            "files": args.files,
            "rows": args.rows,
            "formats": args.formats,
            "quick": args.quick,
            "scale": args.scale,
            "sample": args.sample,
            "only": args.only,
            "auto_floor": args.auto_floor,
            "shape": args.shape,
            "master": "local[2]",
            "metastore": args.metastore,
            "spark_conf": SPARK_CONF,
        },
        "formats": {},
    }
    started = time.monotonic()
    script = work / "naive_coalesce.py"
    script.write_text(NAIVE_JOB)
    for fmt in args.formats:
        figures["formats"][fmt] = bench_format(
            stack, work, fmt, args.partitions, args.files, args.rows, script, args.only, args.sample
        )
    if args.scale and args.planning_partitions:
        figures["planning"] = planning_pass(work, args.planning_partitions)
    figures["total_seconds"] = round(time.monotonic() - started, 1)
    every = [c for f in figures["formats"].values() for c in f["contestants"].values()]
    if figures.get("planning"):
        every.append(figures["planning"])
    figures["checksums_ok"] = all(c.get("checksum_ok") for c in every)
    figures["all_ran"] = all(c.get("ran_ok") for c in every)
    figures["ok"] = figures["checksums_ok"] and figures["all_ran"]
    report(figures)
    log(
        f"\ntotal {figures['total_seconds']}s; checksums {'all match' if figures['checksums_ok'] else 'MISMATCH'}; "
        f"contestants {'all ran' if figures['all_ran'] else 'FAILED'}"
    )
    return figures


def make_stack(state: Path, metastore: str) -> Stack:
    """The stack of ``--metastore``: the pyspark wheel's 2.3 on Derby or PostgreSQL, or a Hive
    3.1/4.0 server from Maven Central (``make jars``) on PostgreSQL."""
    if metastore == "derby":
        return Stack(state)
    if metastore == "postgres":
        return Stack(state, use_postgres=True)
    from hive_metastores import NO_TRANSFORMER, HiveMetastoreServer

    return Stack(
        state,
        use_postgres=True,
        metastore=lambda pg: HiveMetastoreServer(metastore, state / "hms", pg, settings=NO_TRANSFORMER),
    )


def main() -> int:
    args = parse_args(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="merge-speed-") as tmp:
        tmp = Path(tmp)
        stack = make_stack(tmp / "stack", args.metastore)
        stack.start()
        try:
            # The in-process session (tables, read-backs) without console progress bars in the output;
            # only that session reads PYSPARK_SUBMIT_ARGS, and only while it starts.
            if "PYSPARK_SUBMIT_ARGS" not in os.environ:
                os.environ["PYSPARK_SUBMIT_ARGS"] = "--conf spark.ui.showConsoleProgress=false pyspark-shell"
                stack.spark  # noqa: B018 - start it now
                del os.environ["PYSPARK_SUBMIT_ARGS"]
            figures = measure(stack, tmp, args)
        finally:
            stack.stop()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
