"""Smoke run of benchmarks/merge_speed.py on a tiny shape: every contestant on identical data, every
row kept, each of our contestants leaves one file per partition, the scale mode's figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "merge_speed.py"
OURS = ("dag", "copy", "rewrite")
CONTESTANTS = {"floor", "dag", "copy", "rewrite", "loop", "per_partition"}


@pytest.mark.integration
def test_merge_speed_scale_mode_smoke(stack, tmp_path, capsys):
    """--scale on a tiny shape, on the session's stack: every contestant on identical data, every
    row kept, each of ours leaves one file per partition; one spark-submit per partition measured
    on one partition and extrapolated, the phase figures read from our jobs' logs. (Its planning
    pass is ``planning_scale.py``, smoked by ``test_benchmark_smoke``.)"""
    sys.path.insert(0, str(SCRIPT.parent))
    import merge_speed

    partitions, files, rows = 3, 3, 100
    args = merge_speed.parse_args(
        [
            "--scale",
            "--partitions",
            str(partitions),
            "--files",
            str(files),
            "--rows",
            str(rows),
            "--sample",
            "1",
            "--planning-partitions",
            "0",
        ]
    )
    figures = merge_speed.measure(stack, tmp_path, args)
    out = capsys.readouterr().out
    assert json.loads(json.dumps(figures)) == figures  # what --json writes
    assert figures["ok"] and figures["checksums_ok"] and figures["all_ran"] and figures["config"]["scale"] is True
    assert set(figures["formats"]) == {"orc"}
    f = figures["formats"]["orc"]
    assert f["rows"] == partitions * rows  # the digests counted every row
    contestants = f["contestants"]
    assert set(contestants) == CONTESTANTS
    for name, c in contestants.items():
        assert c["checksum_ok"] is True and c["ran_ok"] is True, (name, c.get("error"))
        assert c["wall_seconds"] is not None and c["wall_seconds"] > 0, name
        assert c["files_before"] == partitions * files, name
    for name in OURS:
        c = contestants[name]
        assert c["files_after_per_partition"] == {k: 1 for k in c["files_after_per_partition"]}, name
        assert len(c["files_after_per_partition"]) == partitions, name
        assert c["statuses"] == ["merged"], (name, c["statuses"])
        assert c["in_app_seconds"] is not None and 0 < c["in_app_seconds"] <= c["wall_seconds"], name
    assert contestants["copy"]["modes"] == ["copy"] and contestants["rewrite"]["modes"] == ["rewrite"]
    per_partition = f["contestants"]["per_partition"]
    assert per_partition["spark_submits"] == 1 and per_partition["extrapolated_from"] == 1
    assert per_partition["wall_seconds"] == pytest.approx(3 * per_partition["measured_wall_seconds"], rel=1e-3)
    assert "measured on 1 of 3 partitions" in out
    for name in ("dag", "loop"):  # the machine's CPU while each ran, and the wall it allows at best
        c = contestants[name]
        assert 0 < c["cpu_bound_wall_seconds"] <= c["machine_cpu_seconds"], (name, c)
        assert c["cpu_bound_wall_seconds"] == round(c["machine_cpu_seconds"] / c["cores"], 1), (name, c)
        assert 0 < c["cores_busy"] <= c["cores"] + 0.1, (name, c)  # measured over the span its wall is
    assert f["ratios"]["dag_vs_loop_cpu_bound"] > 0
    assert "dag against loop, the CPU: the DAG's run used " in out
    for name in ("dag", "copy", "rewrite"):
        assert 0 < f["contestants"][name]["fixed_seconds"] < f["contestants"][name]["wall_seconds"], name
        assert f["per_partition_seconds"][name] > 0, name
    assert 0 < f["contestants"]["rewrite"]["rewrite_verify_seconds"] < f["contestants"]["rewrite"]["in_app_seconds"]
    dag = contestants["dag"]  # its fixed start, split from its log: each part there, the parts its sum
    parts = [
        dag[k]
        for k in (
            "start_airflow_seconds",
            "start_plan_task_seconds",
            "start_spark_seconds",
            "start_driver_ours_seconds",
        )
    ]
    assert all(p > 0 for p in parts) and dag["start_spark_sql_seconds"] >= 0
    assert sum(parts) + dag["start_spark_sql_seconds"] == pytest.approx(dag["dag_fixed_start_seconds"], abs=0.01)
    assert dag["dag_fixed_start_seconds"] < dag["fixed_seconds"]  # the plan task starts after the command
    assert "the DAG's fixed start, the plan task's start to the first merge byte" in out
    for name in OURS:  # each job's driver memory, from its last line
        c = contestants[name]
        assert 0 < c["driver_old_gen_peak_mb"] < c["driver_jvm_peak_rss_mb"], name
        assert c["driver_python_peak_rss_mb"] > 0, name
    assert "dag: the driver's peak memory (its largest job): JVM RSS " in out
    for name in OURS:  # where each job's driver time went, step by step, from its last lines
        steps = contestants[name]["driver_ms_per_partition_by_step"]
        assert {"prepare", "copy", "lock", "state read", "commit", "listing after", "statistics", "unlock"} <= set(
            steps
        ), (name, steps)
        assert all(ms >= 0 for ms in steps.values()) and steps["prepare"] > 0 and steps["commit"] > 0, (name, steps)
    assert contestants["copy"]["driver_ms_per_partition_by_step"]["copy"] > 0
    assert "copy: the driver's time by step, ms per partition (summed over its threads): prepare " in out
    assert 0 < f["contestants"]["copy"]["copy_verify_seconds"] < f["contestants"]["copy"]["copy_seconds"]
    targets = f["ratios"]["targets"]
    assert targets, f["ratios"]
    # copy_half, copy_wide, dag_scheduled, rewrite_sql run by --only only
    by_opt_in = {
        "columnar_vs_spark_sql_cpu",
        "copy_ms_per_file_marginal",
        "copy_ms_per_file_added",
        "scheduled_fixed_start_seconds",
        "scheduled_fixed_start_ours_seconds",
    }
    assert all(t["result"] in ("HIT", "MISS") for k, t in targets.items() if k not in by_opt_in), targets
    assert all(targets[k]["result"] == "-" for k in by_opt_in), targets
    assert "planning" not in figures


@pytest.mark.integration
def test_merge_speed_dag_run_by_airflows_scheduler_smoke(stack, tmp_path, capsys):
    """``--only dag_scheduled`` on a tiny shape, on the session's stack: Airflow's own services
    (api-server, scheduler, dag-processor) run the DAG triggered through the REST API; every row
    kept, one file a partition, and its fixed start split from the task instances and the merge
    task's log, each part there and the parts its sum."""
    if stack.postgres is None:
        pytest.skip("Airflow's services run on PostgreSQL here, and the stack has none")
    sys.path.insert(0, str(SCRIPT.parent))
    import merge_speed

    args = merge_speed.parse_args(
        ["--partitions", "2", "--files", "3", "--rows", "100", "--formats", "orc", "--only", "dag_scheduled"]
    )
    figures = merge_speed.measure(stack, tmp_path, args)
    out = capsys.readouterr().out
    c = figures["formats"]["orc"]["contestants"]["dag_scheduled"]
    assert figures["ok"] and c["ran_ok"] and c["checksum_ok"], c.get("error")
    assert c["files_after_per_partition"] == {"dt=2026-01-01": 1, "dt=2026-01-02": 1}, c
    assert c["statuses"] == ["merged"] and 0 < c["in_app_seconds"] < c["wall_seconds"], c
    parts = [
        c[k]
        for k in (
            "start_airflow_seconds",
            "start_plan_task_seconds",
            "start_spark_seconds",
            "start_driver_ours_seconds",
        )
    ]
    assert all(p > 0 for p in parts) and c["start_spark_sql_seconds"] >= 0, c
    assert sum(parts) + c["start_spark_sql_seconds"] == pytest.approx(c["dag_fixed_start_seconds"], abs=0.01), c
    # the merge task's start, then its operator
    assert 0 < c["start_scheduling_seconds"] < c["start_airflow_seconds"], c
    assert "dag_scheduled: the DAG's fixed start, the plan task's start to the first merge byte" in out
    # the machine's CPU from the trigger to the run's end, its services' own included
    assert 0 < c["cpu_bound_wall_seconds"] <= c["machine_cpu_seconds"] and 0 < c["cores_busy"] <= c["cores"] + 0.1, c
    targets = figures["formats"]["orc"]["ratios"]["targets"]
    assert targets["scheduled_fixed_start_seconds"]["result"] in ("HIT", "MISS"), targets
    assert targets["scheduled_fixed_start_ours_seconds"]["result"] in ("HIT", "MISS"), targets
