"""The pure logic of merge_speed.py's Lakekeeper contestant (no stack, no Lakekeeper needed):
reading Lakekeeper's compaction report and our launcher's line, the peer ratio and verdict, the
copy's per-file figures, the fixed start of a run Airflow's scheduler drove, and the machine's
CPU a contestant used against the wall time it allows.
The contestant itself runs only with ``--only ... lakekeeper`` and Lakekeeper installed by hand
(not a project dependency), so no test runs it."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import merge_speed  # noqa: E402 - after the sys.path line that finds benchmarks/

# As lakekeeper 0.0.6's core/reporter.py logs it (config.setup_logging's format), then our launcher.
REPORT = """\
2026-11-27 02:40:01 [INFO] lakekeeper.core.reporter - 
============================================================
Compaction Report: merge_speed.c_lakekeeper_orc
============================================================
  Status:          completed
  Duration:        41.7s

  Before:
    Files:         1,200
    Size:          98.2 MB
    Avg file size: 83.8 KB
    Row count:     2,400,000

  After:
    Files:         30
    Size:          95.0 MB
    Avg file size: 3.2 MB

  Partitions compacted: 30
  Partitions skipped:   0

  Gain:
    File reduction:    1,200 -> 30 (-97.5%)

LAKEKEEPER elapsed 44.012 exit 0
"""  # noqa: W291 - the trailing space is the log's own


def test_parse_lakekeeper_report():
    got = merge_speed.parse_lakekeeper("spark noise\n" + REPORT)
    assert got == {
        "status": "completed",
        "duration_seconds": 41.7,
        "files_before": 1200,
        "files_after": 30,
        "partitions_compacted": 30,
        "partitions_skipped": 0,
        "error": None,
        "skipped": None,
        "in_app_seconds": 44.012,
        "exit": 0,
    }


def test_parse_lakekeeper_failure_and_skip():
    failed = (
        REPORT.replace("completed", "failed")
        .replace("  Gain:", "  ERROR: Row count mismatch for x\n\n  Gain:")
        .replace("exit 0", "exit 1")
    )
    got = merge_speed.parse_lakekeeper(failed)
    assert got["status"] == "failed" and got["error"] == "Row count mismatch for x" and got["exit"] == 1
    skipped = merge_speed.parse_lakekeeper(
        "  Skipping merge_speed.t - no compaction needed.\nLAKEKEEPER elapsed 3.000 exit 0\n"
    )
    assert skipped["status"] is None and skipped["skipped"] == "Skipping merge_speed.t - no compaction needed."
    assert merge_speed.parse_lakekeeper("Traceback ...")["exit"] is None


def _rec(wall, files, ok=True, plan=None, in_app=None):
    return {
        "wall_seconds": wall,
        "plan_seconds": plan,
        "in_app_seconds": in_app,
        "files_after": files,
        "ran_ok": ok,
        "checksum_ok": ok,
    }


def test_peer_figures_ratio_and_verdict():
    c = {
        "auto": _rec(19.0, 30, plan=1.0, in_app=10.0),
        "dag": _rec(30.0, 30),
        "lakekeeper": _rec(45.0, 30, in_app=40.0),
    }
    peer = merge_speed.peer_figures(c)
    assert peer["auto"]["wall_seconds"] == 20.0 and peer["auto"]["ratio"] == 2.25 and peer["auto"]["result"] == "HIT"
    assert peer["auto"]["in_app_ratio"] == 4.0
    assert peer["dag"]["ratio"] == 1.5 and peer["dag"]["result"] == "MISS"
    assert "HIT  auto vs Lakekeeper: 2.25x wall (20.00 s vs 45.00 s" in merge_speed.peer_line("auto", peer["auto"])
    assert peer["auto"]["cpu_bound_ratio"] is None and "machine CPU" not in merge_speed.peer_line("auto", peer["auto"])
    # With the machine's CPU measured: 36 CPU-s of ours need 18 s on two cores, against Lakekeeper's 45 s
    c["auto"].update(machine_cpu_seconds=36.0, cpu_bound_wall_seconds=18.0)
    c["lakekeeper"]["machine_cpu_seconds"] = 60.0
    bounded = merge_speed.peer_figures(c)["auto"]
    assert bounded["cpu_bound_ratio"] == 2.5 and bounded["lakekeeper_machine_cpu_seconds"] == 60.0
    assert "; machine CPU 36.0 s vs 60.0 s, so at best 2.5x on these cores" in merge_speed.peer_line("auto", bounded)
    c["auto"]["files_after"] = 31  # fast but more files than Lakekeeper leaves: a miss
    assert merge_speed.peer_figures(c)["auto"]["result"] == "MISS"
    c["lakekeeper"]["ran_ok"] = False  # a failed peer has no ratio
    assert merge_speed.peer_figures(c)["auto"]["result"] == "-"
    assert merge_speed.peer_figures({"auto": _rec(1.0, 1)}) == {}


def test_shape_presets_and_opt_in():
    args = merge_speed.parse_args(["--shape", "20k", "--partitions", "6", "--only", "auto", "lakekeeper"])
    assert (args.files, args.rows, args.partitions) == (40, 60_000, 6)
    assert merge_speed.parse_args(["--shape", "256k", "--rows", "1000"]).rows == 1000  # explicit wins
    assert "lakekeeper" in merge_speed.OPT_IN  # never in a default run: not a project dependency


def test_lakekeeper_missing_says_how_to_install(monkeypatch, tmp_path):
    import pytest

    monkeypatch.setattr(merge_speed, "lakekeeper_version", lambda: None)
    with pytest.raises(RuntimeError, match=r"pip install --no-deps lakekeeper==0\.0\.6"):
        merge_speed.run_lakekeeper(None, tmp_path, "t")  # fails before touching the stack


def test_copy_per_file_average_and_marginal():
    """copy_half (``--only ... copy_half``): a copy job over the first half of the partitions, so
    that what the other half added can be told from the job's warm-up. 1,000 bytes, 200 files;
    the floor 1,000 bytes/s, so the bytes are allowed 4 s at a quarter of its rate."""
    c = {
        "floor": {"in_app_seconds": 1.0},
        "copy": {"in_app_seconds": 10.0},
        "copy_half": {"in_app_seconds": 6.0, "half_files": 100, "half_bytes": 500},
    }
    targets = merge_speed.ratios(c, 1000, 200)["targets"]
    assert targets["copy_ms_per_file"]["value"] == 30.0  # (10 s - 4 s) / 200 files
    assert targets["copy_ms_per_file_marginal"]["value"] == 20.0  # (10 s - 6 s - 2 s) / 100 files
    assert targets["copy_ms_per_file_marginal"]["result"] == "MISS"
    del c["copy_half"]
    assert merge_speed.ratios(c, 1000, 200)["targets"]["copy_ms_per_file_marginal"]["result"] == "-"


def test_the_machine_cpu_bounds_the_dag_against_the_loop(monkeypatch):
    """A contestant's machine CPU over the cores is the least wall time its work needs: a DAG run
    that used 180 CPU-s of a 2-core machine needs 90 s at best, so against a loop of 72 s it
    can reach 0.8x at most, whatever its own wall."""
    monkeypatch.setattr(merge_speed.os, "cpu_count", lambda: 2)
    dag = merge_speed.cpu_figures(1000.0, 1180.0, 100.0)
    assert dag == {"machine_cpu_seconds": 180.0, "cores": 2, "cores_busy": 1.8, "cpu_bound_wall_seconds": 90.0}
    assert merge_speed.cpu_figures(None, 5.0, 1.0) == {}
    c = {"dag": {"wall_seconds": 100.0, **dag}, "loop": {"wall_seconds": 72.0}}
    r = merge_speed.ratios(c, 1000, 200)
    assert r["dag_vs_loop_cpu_bound"] == 0.8 and r["targets"]["dag_vs_loop_wall"]["value"] == 0.72
    now = merge_speed.machine_cpu_seconds()
    assert now is None or now > 0


def test_copy_time_split_into_what_a_file_and_a_partition_add():
    """copy_wide (``--only ... copy_wide``): copy_half's 100 partitions with twice the files (200
    more files, 500 more bytes), and copy's 200 files in half its partitions. The floor 1,000
    bytes/s: 500 bytes are allowed 2 s at a quarter of its rate."""
    c = {
        "floor": {"in_app_seconds": 1.0},
        "copy": {"in_app_seconds": 10.0},
        "copy_half": {"in_app_seconds": 6.0, "half_files": 100, "half_bytes": 500},
        "copy_wide": {"in_app_seconds": 8.5, "partitions": 100, "files_before": 300, "bytes_before": 1000},
    }
    c["copy_half"].update(partitions=100, driver_ms_per_partition_by_step={"prepare": 10.0, "commit": 30.0})
    c["copy_wide"]["driver_ms_per_partition_by_step"] = {"prepare": 16.0, "commit": 31.0, "copy": 5.0}
    r = merge_speed.ratios(c, 1000, 200, partitions=200)
    # the driver's time by step that the 200 files added: (16 - 10) x 100 / 200, (31 - 30) x 100 / 200
    assert r["copy_file_added_driver_ms_by_step"] == {"prepare": 3.0, "commit": 0.5}
    # the files copy_wide adds: 200, their 500 bytes 2 s at a quarter of the floor: (8.5 - 6 - 2) / 200
    assert r["targets"]["copy_ms_per_file_added"]["value"] == 2.5
    assert r["targets"]["copy_ms_per_file_added"]["result"] == "MISS"
    # copy's 100 partitions more than copy_wide, with no more bytes: (10 - 8.5 - 0) / 100
    assert r["copy_ms_per_partition_added"] == 15.0
    c["copy_wide"]["in_app_seconds"] = 8.3  # (8.3 - 6 - 2) / 200
    assert merge_speed.ratios(c, 1000, 200, partitions=200)["targets"]["copy_ms_per_file_added"]["result"] == "HIT"
    del c["copy_half"]
    r = merge_speed.ratios(c, 1000, 200, partitions=200)
    assert r["targets"]["copy_ms_per_file_added"]["result"] == "-" and r["copy_ms_per_partition_added"] == 17.0
    assert merge_speed.ratios(c, 1000, 200)["copy_ms_per_partition_added"] is None  # partitions not given


def test_the_fixed_start_of_a_run_the_scheduler_drove():
    """dag_scheduled: the plan task's start and end from the REST API, the merge task's log as
    Airflow writes it (JSON lines; the merge job's own lines are their events), split as for
    ``airflow dags test``. The job's timestamps are the machine's local time, as it logs them."""

    def local(hms: str) -> str:  # the job's "2026-11-28 17:00:10,500" for a UTC time of day
        t = datetime(2026, 11, 28, *map(int, hms.split(":")), tzinfo=UTC).astimezone()
        return t.strftime("%Y-%m-%d %H:%M:%S,") + "500"

    tis = [
        {
            "task_id": "plan",
            "map_index": -1,
            "start_date": "2026-11-28T17:00:00Z",
            "end_date": "2026-11-28T17:00:01.500000Z",
        },
        {"task_id": "merge", "map_index": 0, "start_date": "2026-11-28T17:00:03.500000Z"},
        {"task_id": "refresh_metastore", "map_index": -1, "start_date": None},
    ]
    records = [
        {"timestamp": "2026-11-28T17:00:04.000000Z", "event": "Spark-Submit cmd: spark-submit ..."},
        {
            "timestamp": "2026-11-28T17:00:09.000000Z",
            "event": f"{local('17:00:08')} INFO hive_compaction: Spark ready 3.9s after the driver's JVM started",
        },
        {
            "timestamp": "2026-11-28T17:00:10.000000Z",
            "event": f"{local('17:00:09')} INFO hive_compaction: prepared 8 partition(s) in 0.4s: ...",
        },
        {
            "timestamp": "2026-11-28T17:00:11.000000Z",
            "event": f"{local('17:00:10')} INFO hive_compaction: Spark SQL session made for the rewrites in 2.0s",
        },
        {
            "timestamp": "2026-11-28T17:00:12.000000Z",
            "event": f"{local('17:00:11')} INFO hive_compaction: the first merge began (rewrite)",
        },
    ]
    got = merge_speed.scheduled_start_phases(tis, records)
    # preparing ended at :09, the session was made at :10, the first rewrite began at :11
    assert got == {
        "start_airflow_seconds": 2.5,
        "start_plan_task_seconds": 1.5,
        "start_spark_seconds": 4.5,
        "start_spark_sql_seconds": 1.0,
        "start_driver_ours_seconds": 2.0,
        "start_prepare_seconds": 1.0,
        "start_scheduling_seconds": 2.0,
        "dag_fixed_start_seconds": 11.5,
        "dag_fixed_start_ours_seconds": 3.5,
    }
    assert merge_speed.scheduled_start_phases(tis, records[:3]) == {}  # no merge byte yet: no figure
    # a first merge that copies: no session to wait for, however late it was made
    copy = records[:3] + [
        {
            "timestamp": "2026-11-28T17:00:10.000000Z",
            "event": f"{local('17:00:09')} INFO hive_compaction: the first merge began (copy)",
        }
    ]
    got = merge_speed.scheduled_start_phases(tis, copy + [records[3]])
    assert got["start_spark_sql_seconds"] == 0.0 and got["dag_fixed_start_ours_seconds"] == 2.5, got
    figures = merge_speed.ratios({"dag_scheduled": got}, 1000, 10)["targets"]
    assert figures["scheduled_fixed_start_seconds"]["result"] == "HIT"  # 9.5 s
    assert figures["scheduled_fixed_start_ours_seconds"]["result"] == "MISS"
