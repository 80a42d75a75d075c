"""The backlog on the real stack: a partition deferred by the fan-out caps or skipped for its quiet
period is planned again by the next scheduled run (its lookback), a partition the last listing left
compact is not, and the report says beforehand which run that will be. Plan, merge jobs and refresh
run as the DAG's tasks call them."""

from __future__ import annotations

import pytest

from hive_compaction.airflow import config, tasks as dag_tasks
from hive_compaction.airflow.metastore_hook import Metastore
from hive_compaction.airflow.run_params import select

pytestmark = pytest.mark.integration

DB = "backlog"
OLD, DAY1, DAY2 = "2026-07-07", "2026-07-09", "2026-07-10"


def scheduled_run(stack, cfg, key: str) -> tuple[dict, dict]:
    """The scheduled run keyed ``key``: (its plan, its report)."""
    settings = config.load(cfg)
    with Metastore("127.0.0.1", stack.port) as hms:
        planned = dag_tasks.plan(settings, hms, f"scheduled__{key}", select(settings, {}, "scheduled", None, key))
        for args in planned["spark_args"]:
            done = stack.spark_submit(args["application_args"][1], cfg)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return planned["plan"], dag_tasks.refresh(settings, hms, planned["plan"])


def planned_partitions(plan: dict) -> set[tuple[str, str]]:
    return {tuple(p) for b in plan["batches"] for p in b["partitions"]}


def test_deferred_and_quiet_partitions_come_back_in_the_next_scheduled_run(stack, tmp_path):
    stack.make_table(DB, "events", "ORC", [OLD, DAY1, DAY2], files=4, rows=120)
    stack.make_table(DB, "busy", "PARQUET", [DAY1], files=3, rows=60)
    content = {t: stack.content(DB, t) for t in ("events", "busy")}
    cfg = stack.write_config(
        tmp_path / "c.yaml",
        [{"name": f"{DB}.events"}, {"name": f"{DB}.busy", "quiet_period_minutes": 600}],
        fan_out={"max_spark_jobs": 1, "max_partitions_per_job": 2},
    )
    events, busy = f"{DB}.events", f"{DB}.busy"

    # Keyed DAY1: its own partitions first (both tables), so the backlog's OLD waits.
    plan, report = scheduled_run(stack, cfg, DAY1)
    assert planned_partitions(plan) == {(events, f"dt={DAY1}"), (busy, f"dt={DAY1}")}
    assert plan["deferred"] == [
        {
            "table": events,
            "partition": f"dt={OLD}",
            "again": f"again in the scheduled run of {DAY2} (within lookback_days: 7)",
        }
    ]
    by_partition = {(r["table"], r["partition"]): r for r in report["partitions"]}
    assert by_partition[(events, f"dt={DAY1}")]["status"] == "merged"
    quiet = by_partition[(busy, f"dt={DAY1}")]
    assert quiet["status"] == "skipped" and "quiet period" in quiet["reason"], quiet
    assert quiet["again"] == f"again in the scheduled run of {DAY2} (within lookback_days: 7)"
    snap = stack.snapshot(DB, "busy")[f"dt={DAY1}"]
    assert snap["num_files"] == 3  # untouched, and the Metastore remembers its small files

    # Keyed DAY2: its own date, then the backlog oldest first: the deferred OLD and the quiet
    # partition; DAY1 of events, merged and listed since, is not planned again.
    plan, report = scheduled_run(stack, cfg, DAY2)
    assert planned_partitions(plan) == {(events, f"dt={DAY2}"), (events, f"dt={OLD}")}
    assert plan["deferred"] == [
        {
            "table": busy,
            "partition": f"dt={DAY1}",
            "again": "again in the scheduled run of 2026-07-11 (within lookback_days: 7)",
        }
    ]
    assert {(r["partition"], r["status"]) for r in report["partitions"]} == {
        (f"dt={DAY2}", "merged"),
        (f"dt={OLD}", "merged"),
    }
    snaps = stack.snapshot(DB, "events")
    assert sorted(snaps) == [f"dt={d}" for d in (OLD, DAY1, DAY2)], snaps
    for name, snap in snaps.items():
        assert snap["num_files"] == 1, (name, snap)
    assert stack.snapshot(DB, "busy")[f"dt={DAY1}"]["num_files"] == 3
    assert {t: stack.content(DB, t) for t in ("events", "busy")} == content  # every row, by checksum
