"""Smoke runs of benchmarks/planning_scale.py (the session's Metastore, two small tables, the plan task),
benchmarks/table_patterns_scale.py (the session's Metastore, a few tables by name and by pattern),
benchmarks/scan_cost.py (on the session's stack), benchmarks/checksum_cost.py (Spark only), benchmarks/lock_cost.py
and benchmarks/thread_cpu.py (a process of its own)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "planning_scale.py"


@pytest.mark.integration
def test_planning_scale_quick(stack, tmp_path):
    """On the session stack's Metastore (``--metastore-port``), not one of its own: a Metastore start less."""
    out = tmp_path / "figures.json"
    batch_size = 100  # several get_partitions_by_names calls per table even at the quick sizes
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--batch-size",
            str(batch_size),
            "--repeat",
            "1",
            "--metastore-port",
            str(stack.port),
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    figures = json.loads(out.read_text())

    assert figures["ok"] is True
    assert figures["checks"] and all(c["ok"] for c in figures["checks"]), figures["checks"]
    results = figures["results"]
    assert [r["partitions"] for r in results] == [300, 600]
    assert [r["partitions"] for r in figures["registration"]] == [300, 600]
    for r in results:
        assert 1 <= r["batches"] <= figures["max_spark_jobs"]
        # get_table + get_partition_names + one get_partitions_by_names per batch of names, and
        # the results table's upkeep (get_tables, get_partition_names of old records)
        assert r["calls"] == 4 + math.ceil(r["partitions"] / batch_size)
        # the merge job lists every planned partition with one JVM call each
        assert r["listed"] == r["planned"] and r["listing_calls_per_partition"] == 1.0
        # every registered partition has numFiles >= 2: all are candidates, all fit in this run
        assert r["planned"] == r["partitions"] and r["deferred"] == 0 and r["skipped"] == 0
        assert sum(r["partitions_per_batch"]) == r["partitions"]
        assert r["planning_seconds"] > 0
    small, large = results
    assert large["calls"] > small["calls"]
    assert figures["ratios"]["calls"] == pytest.approx(large["calls"] / small["calls"], rel=1e-3)


@pytest.mark.integration
def test_table_patterns_scale_quick(stack, tmp_path):
    """A few tables over two databases of the session stack's Metastore, planned by name and by one
    pattern: the benchmark's own checks (same partitions, the calls the listing adds, the DAG's task
    counts) hold, and its figures say what it measured."""
    out = tmp_path / "figures.json"
    script = ROOT / "benchmarks" / "table_patterns_scale.py"
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            "--tables",
            "6",
            "--partitions",
            "3",
            "--databases",
            "2",
            "--threads",
            "2",
            "--metastore-port",
            str(stack.port),
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    figures = json.loads(out.read_text())
    assert figures["ok"] is True and len(figures["checks"]) == 4, figures["checks"]
    named, pattern = figures["by_name"], figures["by_pattern"]
    assert named["tables"] == pattern["tables"] == 6 and named["planned"] == pattern["planned"] > 0
    assert (named["dag_tasks"], pattern["dag_tasks"]) == (3 + 6, 3 + 1)
    assert named["calls"] > 0 and pattern["seconds"] > 0


@pytest.mark.integration
def test_scan_cost_smoke(stack, tmp_path):
    """benchmarks/scan_cost.py on the session's stack, tiny: both merges of each partition keep
    every row in one file, the block sizes follow the file counts, both scans are timed."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import scan_cost

    rows = scan_cost.bench(stack, tmp_path, "orc", [6, 2], 3000, repeat=1)
    assert [r["files"] for r in rows] == [6, 2]
    assert rows[0]["block_bytes"] < rows[1]["block_bytes"]
    for r in rows:
        assert r["copy_scan_seconds"] > 0 and r["rewrite_scan_seconds"] > 0
        assert r["ratio"] > 0
    assert scan_cost.threshold([{**rows[0], "ratio": 3.0}, {**rows[1], "ratio": 1.1}], 1.25) == rows[1]["block_bytes"]
    assert scan_cost.threshold([{**rows[0], "ratio": 1.0}, {**rows[1], "ratio": 2.0}], 1.25) is None
    # one setting for both formats: the larger of their thresholds
    parquet = [{"format": "parquet", "block_bytes": 10, "ratio": 1.0}]
    assert (
        scan_cost.threshold([{**rows[0], "ratio": 3.0}, {**rows[1], "ratio": 1.1}] + parquet, 1.25)
        == rows[1]["block_bytes"]
    )


@pytest.mark.integration
def test_checksum_cost_quick(tmp_path):
    """benchmarks/checksum_cost.py on three small groups: the inputs', outputs', observed, cached
    and write tasks' checksums agree, and the figures it prints are there."""
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "checksum_cost.py"),
            "--groups",
            "3",
            "--files",
            "2",
            "--rows",
            "500",
            "--rounds",
            "1",
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    (r,) = json.loads(out.read_text())["rounds"]
    assert r["groups_mismatched"] == 0 and r["rows"] == 3 * 500
    assert all(
        r[k] > 0
        for k in (
            "plain_write_s",
            "inputs_scan_s",
            "outputs_scan_s",
            "observed_write_s",
            "cached_write_s",
            "cache_sums_s",
            "writer_write_s",
            "writer_outputs_scan_s",
        )
    )
    # On groups this small a design's share can come out below zero (its write beat the plain one).
    assert 0 < r["scan_share"] < 1 and "cached_share" in r and "writer_share" in r
    assert "Verification share: scan" in proc.stdout


@pytest.mark.integration
def test_lock_cost_smoke(stack, tmp_path):
    """benchmarks/lock_cost.py against the session's Metastore, four partitions: every lock is
    granted and released, and the three ways are timed."""
    from hmsclient import hmsclient
    from hmsclient.genthrift.hive_metastore import ttypes

    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "lock_cost.py"),
            "--uris",
            stack.metastore.uri,
            "--partitions",
            "4",
            "--rounds",
            "1",
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    figures = json.loads(out.read_text())
    assert figures["partitions"] == 4
    assert all(figures[f"{k}_ms_per_partition"] > 0 for k in ("per_partition", "two_threads", "one_request"))
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        locks = c.show_locks(ttypes.ShowLocksRequest(dbname="lock_cost")).locks or []
    assert [lock for lock in locks if lock.tablename == "events"] == []


def test_thread_cpu_sample_and_report(tmp_path):
    """benchmarks/thread_cpu.py samples a process by its command line and splits its CPU between its
    log's lines: a process that spins for a second between two lines shows about a second there, and
    next to nothing between the lines around its sleeps."""
    marker = f"thread-cpu-smoke-{tmp_path.name}"
    log = tmp_path / "job.log"
    job = (
        "import logging, sys, time\n"
        f"logging.basicConfig(filename={str(log)!r}, level=logging.INFO,"
        " format='%(asctime)s %(levelname)s hive_compaction: %(message)s')\n"
        "time.sleep(1.0); logging.info('Spark ready 1.0s after the driver JVM started')\n"
        "end = time.process_time() + 1.0\n"
        "while time.process_time() < end: pass\n"
        "logging.info('prepared 2 partition(s) in 1.0s')\n"
        "time.sleep(0.6); logging.info('the first merge began (copy)')\n"
        "time.sleep(0.4)\n"
    )
    samples = tmp_path / "samples.jsonl"
    sampler = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "thread_cpu.py"),
            "sample",
            str(samples),
            "--match",
            marker,
            "--seconds",
            "30",
            "--until-gone",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    subprocess.run([sys.executable, "-c", job, marker], check=True, timeout=60)
    assert sampler.wait(timeout=30) == 0, "no process was sampled"
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "thread_cpu.py"),
            "report",
            str(samples),
            str(log),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(out.read_text())
    spin, idle = figures["intervals"]
    assert spin["to"].startswith("prepared") and idle["to"].startswith("the first merge began")
    assert 0.7 <= spin["by_kind"]["the Python driver"] <= 1.3, spin
    assert idle["cpu"] < 0.3, idle
    (life,) = figures["processes"].values()
    assert 0.7 <= life["the Python driver"] <= 2.0, life  # the spin, its interpreter's start and stop
    assert "the Python driver" in proc.stdout and f"the whole of {marker}" in proc.stdout


def test_thread_cpu_kinds():
    from importlib import util

    spec = util.spec_from_file_location("thread_cpu", ROOT / "benchmarks" / "thread_cpu.py")
    thread_cpu = util.module_from_spec(spec)
    spec.loader.exec_module(thread_cpu)
    kinds = {
        name: thread_cpu.kind_of("java", name)
        for name in (
            "C2 CompilerThre",
            "C1 CompilerThre",
            "G1 Conc#0",
            "VM Thread",
            "Executor task l",
            "Thread-7",
            "java",
        )
    }
    assert kinds == {
        "C2 CompilerThre": "JIT compilers",
        "C1 CompilerThre": "JIT compilers",
        "G1 Conc#0": "GC and VM",
        "VM Thread": "GC and VM",
        "Executor task l": "executor tasks",
        "Thread-7": "JVM threads of our py4j calls",
        "java": "other JVM threads",
    }
    assert thread_cpu.kind_of("python", "python3") == "the Python driver"
