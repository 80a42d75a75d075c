"""Operating the DAG as users do: a date from the form, dry runs, the run report."""
from __future__ import annotations

import pytest

from test_end_to_end import files_with_times

pytestmark = pytest.mark.integration

DATES = ["2026-07-01", "2026-07-02", "2026-07-03"]


def state_of(stack, db, table):
    return {name: (files_with_times(stack.partition_location(db, table, name)), snap)
            for name, snap in stack.snapshot(db, table).items()}


def test_dry_run_changes_nothing_then_a_dated_run_compacts_only_that_date(stack, tmp_path):
    db, table = "ops", "events"
    stack.make_table(db, table, "ORC", DATES, files=4, rows=200)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    before = state_of(stack, db, table)
    content = stack.content(db, table)

    dry = stack.run_dag(cfg, conf={"partition_date": "2026-07-02", "dry_run": True})
    assert dry.state == "success", dry.log[-4000:]
    assert state_of(stack, db, table) == before  # not one byte, not one statistic
    report = dry.log[dry.log.index("run report"):]
    assert "dt=2026-07-02  would_merge  4 -> 1" in report
    assert "dt=2026-07-01" not in report and "dt=2026-07-03" not in report

    run = stack.run_dag(cfg, conf={"partition_date": "2026-07-02"})
    assert run.state == "success", run.log[-4000:]
    after = state_of(stack, db, table)
    assert after["dt=2026-07-01"] == before["dt=2026-07-01"]
    assert after["dt=2026-07-03"] == before["dt=2026-07-03"]
    assert after["dt=2026-07-02"][1]["num_files"] == 1
    assert stack.content(db, table) == content


def test_bad_form_input_is_rejected_before_any_spark_job(stack, tmp_path):
    db, table = "ops_bad", "events"
    stack.make_table(db, table, "ORC", DATES[:1], files=3, rows=50)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    before = state_of(stack, db, table)
    run = stack.run_dag(cfg, conf={"partition_date": "2026-07-01", "partition_date_to": "2026-06-01"})
    assert run.state == "failed"
    assert run.states["plan"] == ["failed"] and "merge" not in run.states or \
        set(run.states.get("merge", [])) <= {"upstream_failed"}
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
    report = run.log[run.log.index("run report"):]
    assert any("dt=2026-07-01" in line and "skipped" in line and "within the quiet period of 60 min" in line
               for line in report.splitlines())
    assert state_of(stack, db, table) == before
