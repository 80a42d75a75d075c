"""Operating the DAG as users do: a date from the form, dry runs, the run report."""

from __future__ import annotations

import re

import pytest

from test_end_to_end import files_with_times

pytestmark = pytest.mark.integration

DATES = ["2026-07-01", "2026-07-02", "2026-07-03"]


def state_of(stack, db, table):
    return {
        name: (files_with_times(stack.partition_location(db, table, name)), snap)
        for name, snap in stack.snapshot(db, table).items()
    }


def test_dry_run_changes_nothing_then_a_dated_run_compacts_only_that_date(stack, tmp_path):
    db, table = "ops", "events"
    stack.make_table(db, table, "ORC", DATES, files=4, rows=200)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    before = state_of(stack, db, table)
    content = stack.content(db, table)

    dry = stack.run_dag(cfg, conf={"partition_date": "2026-07-02", "dry_run": True})
    assert dry.state == "success", dry.log[-4000:]
    assert state_of(stack, db, table) == before  # not one byte, not one statistic
    report = dry.log[dry.log.index("run report") :]
    assert "dt=2026-07-02  would_merge  4 -> 1" in report
    assert "dt=2026-07-01" not in report and "dt=2026-07-03" not in report
    assert f"{db}.{table}: 1 partition(s) listed, files 4 -> 1" in report  # the per-table size section
    assert "run note: dry run, would merge 1 of 1 partition(s) in 1 table(s): 4 -> 1 files" in report

    run = stack.run_dag(cfg, conf={"partition_date": "2026-07-02"})
    assert run.state == "success", run.log[-4000:]
    after = state_of(stack, db, table)
    assert after["dt=2026-07-01"] == before["dt=2026-07-01"]
    assert after["dt=2026-07-03"] == before["dt=2026-07-03"]
    assert after["dt=2026-07-02"][1]["num_files"] == 1
    assert stack.content(db, table) == content
    # The size section from what the job listed: four tiny files before, one (still tiny: all
    # the partition holds) after, and why it is left.
    sizes = run.log[run.log.index("file sizes per table") :]
    assert re.search(r"^\s+< \S+ \S+\s+4\s+1$", sizes, flags=re.M), sizes[:1500]
    assert "left: dt=2026-07-02: 1 small file(s): too little small data left" in sizes, sizes[:1500]


def test_bad_form_input_is_rejected_before_any_spark_job(stack, tmp_path):
    db, table = "ops_bad", "events"
    stack.make_table(db, table, "ORC", DATES[:1], files=3, rows=50)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    before = state_of(stack, db, table)
    run = stack.run_dag(cfg, conf={"partition_date": "2026-07-01", "partition_date_to": "2026-06-01"})
    assert run.state == "failed"
    assert run.states["plan"] == ["failed"], run.states
    assert set(run.states.get("merge", [])) <= {"upstream_failed"}, run.states  # no merge task ran
    assert "partition_date_to: 2026-06-01 is before partition_date 2026-07-01" in run.log
    assert "Spark-Submit cmd" not in run.log
    assert state_of(stack, db, table) == before


def test_a_partition_still_being_written_is_left_for_a_later_run(stack, tmp_path):
    db, table = "ops_quiet", "events"
    stack.make_table(db, table, "PARQUET", DATES[:1], files=3, rows=90)
    before = state_of(stack, db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "quiet_period_minutes": 60}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    report = run.log[run.log.index("run report") :]
    assert any(
        "dt=2026-07-01" in line and "skipped" in line and "within the quiet period of 60 min" in line
        for line in report.splitlines()
    )
    assert state_of(stack, db, table) == before


def test_a_failed_merge_alerts_the_configured_notifier_with_its_tables_partitions_and_reason(stack, tmp_path):
    import json
    import os
    from pathlib import Path

    db, table = "ops_alert", "events"
    stack.make_table(db, table, "ORC", DATES[:2], files=3, rows=60)
    out = tmp_path / "alerts.jsonl"
    cfg = stack.write_config(
        tmp_path / "c.yaml",
        [{"name": f"{db}.{table}"}],
        fan_out={"max_spark_jobs": 8, "max_partitions_per_job": 1},
        alerts=[
            {
                "notifier": "alert_recorder.RecordingNotifier",
                "kwargs": {"path": str(out), "message": "ALERT {{ failure.message }}"},
            }
        ],
    )
    tests, scripts = Path(__file__).parent, Path(__file__).parents[1] / "scripts"
    run = stack.run_dag(
        cfg,
        HIVE_COMPACTION_TEST_KILL_AT="journaled:dt=2026-07-02",
        PYTHONPATH=os.pathsep.join(map(str, (tests, scripts))),
    )
    assert run.state == "failed", run.log[-4000:]
    assert sorted(run.states["merge"]) == ["failed", "success"]
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(g["task_id"], g["failure"]["partitions"]) for g in got] == [("merge", [f"{db}.{table}/dt=2026-07-02"])], (
        got
    )  # only the failed task, only its partition
    failure = got[0]["failure"]
    assert failure["tables"] == [f"{db}.{table}"]
    assert "Error code is: -9" in failure["reason"] or "spark-submit" in failure["reason"], failure["reason"]
    assert got[0]["message"] == "ALERT " + failure["message"]
    assert failure["message"] in run.log  # logged as well
