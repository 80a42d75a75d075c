"""Tables by pattern on the real stack: one config of patterns compacts the tables of two databases in one
run (every row kept, statistics = the disk), leaves the excluded one alone, and the next run's plan picks
up a table created since."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

DATES = ["2026-05-01", "2026-05-02"]
MATCHED = [("pat_sales", "orders"), ("pat_sales", "refunds"), ("pat_ads", "clicks")]


def test_one_pattern_config_compacts_two_databases_in_one_run_and_the_next_plan_sees_a_new_table(stack, tmp_path):
    for db, table in MATCHED:
        stack.make_table(db, table, "ORC", DATES, files=3, rows=120)
    stack.make_table("pat_sales", "tmp_load", "ORC", DATES[:1], files=3, rows=50)  # excluded
    content = {(db, t): stack.content(db, t) for db, t in MATCHED}
    excluded_before = stack.snapshot("pat_sales", "tmp_load")

    cfg = stack.write_config(tmp_path / "c.yaml", ["pat_sales.*", "re:pat_ads\\.cl.*"], exclude=["pat_sales.tmp_*"])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-5000:]
    assert "tables pat_sales.*: 2 matched (pat_sales.orders, pat_sales.refunds); 1 excluded" in run.log
    assert run.states["merge"] == ["success"] and run.states["compacted.by_pattern"] == ["success"]
    for db, table in MATCHED:
        assert stack.content(db, table) == content[(db, table)], (db, table)  # every row, every column
        for name, p in stack.snapshot(db, table).items():
            assert p["num_files"] == 1, (db, table, name)
            assert (p["hms_num_files"], p["hms_total_size"]) == (str(p["num_files"]), str(p["bytes"])), name
    assert stack.snapshot("pat_sales", "tmp_load") == excluded_before

    # A table created after the run: the next run's plan (the plan only) matches and plans it.
    stack.make_table("pat_ads", "clicks_late", "ORC", DATES[:1], files=3, rows=50)
    from hive_compaction.airflow import config, table_resolution, tasks as dag_tasks
    from hive_compaction.airflow.metastore_hook import Metastore
    from hive_compaction.airflow.run_params import select

    settings = config.load(cfg)
    with Metastore("127.0.0.1", stack.port) as hms:
        resolution = table_resolution.resolve(settings, hms)
        resolved = resolution.settings(settings)
        selection = select(resolved, {"dry_run": True}, "manual", None)
        plan = dag_tasks.plan(resolved, hms, "manual__patterns_next", selection, resolution=resolution)["plan"]
    assert plan["by_pattern"][1] == {
        "entry": "re:pat_ads\\.cl.*",
        "excluded": [],
        "tables": ["pat_ads.clicks", "pat_ads.clicks_late"],
    }
    assert {t for b in plan["batches"] for t, _ in b["partitions"]} == {"pat_ads.clicks_late"}
