"""Statistics are a hint, not the truth: partitions that writers appended to are compacted.

A first insert creates the partition (Spark registers numFiles=1), later Spark inserts append
to it without updating the statistics, and a file copied in by hand is never counted at all.
Every kind of run that selects the partition lists it and compacts it; afterwards the
Metastore's statistics are the disk's, and the report names the statistics it repaired."""

from __future__ import annotations

import re
import shutil

import pytest

from hive_compaction.airflow import config, tasks as dag_tasks
from hive_compaction.airflow.metastore_hook import Metastore
from hive_compaction.airflow.run_params import select
from matrix_sampling import variants

pytestmark = pytest.mark.integration

APPENDED, COPIED_INTO = "2026-08-01", "2026-08-02"


def make_appended_table(stack, db: str, table: str, storage: str) -> None:
    """dt=APPENDED: one insert, then three appends; dt=COPIED_INTO: one insert, plus a file of
    another partition copied into its folder by hand (its rows become this partition's)."""
    from demo_tables import events

    stack.make_table(db, table, storage, [APPENDED, COPIED_INTO], files=1, rows=100)
    for seed in (7, 8, 9):
        events(stack.spark, APPENDED, 50, seed).coalesce(1).write.insertInto(f"{db}.{table}")
    source = stack.partition_location(db, table, f"dt={APPENDED}")
    target = stack.partition_location(db, table, f"dt={COPIED_INTO}")
    extra = sorted(f for f in source.iterdir() if f.is_file() and not f.name.startswith((".", "_")))[-1]
    shutil.copy(extra, target / f"hand-copied-{extra.name}")
    snap = stack.snapshot(db, table)
    # The premise: the Metastore's statistics are stale.
    assert snap[f"dt={APPENDED}"]["num_files"] == 4 and snap[f"dt={APPENDED}"]["hms_num_files"] == "1"
    assert snap[f"dt={COPIED_INTO}"]["num_files"] == 2 and snap[f"dt={COPIED_INTO}"]["hms_num_files"] == "1"


def assert_compacted_with_true_statistics(stack, db, table, content_before):
    assert stack.content(db, table) == content_before  # every row of every column, by checksum
    snapshot = stack.snapshot(db, table)
    assert sorted(snapshot) == sorted(content_before), (sorted(snapshot), sorted(content_before))
    for name, p in snapshot.items():
        assert p["num_files"] == 1, (name, p)
        assert (p["hms_num_files"], p["hms_total_size"]) == (str(p["num_files"]), str(p["bytes"])), (name, p)
        assert p["hms_num_rows"] == str(content_before[name][0]), (name, p)


@pytest.mark.parametrize("storage", variants("test_stale_statistics: format", ["ORC", "PARQUET"]))
def test_a_form_triggered_run_of_the_date_compacts_appended_partitions(stack, tmp_path, storage):
    db, table = "stale_form", f"events_{storage.lower()}"
    make_appended_table(stack, db, table, storage)
    content_before = stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg, conf={"partition_date": APPENDED, "partition_date_to": COPIED_INTO})
    assert run.state == "success", run.log[-5000:]
    assert_compacted_with_true_statistics(stack, db, table, content_before)
    report = run.log[run.log.index("run report") :]
    lines = {line.split()[1]: line for line in report.splitlines()[2:] if line.startswith(f"{db}.")}
    assert "merged" in lines[f"dt={APPENDED}"] and "4 -> 1" in lines[f"dt={APPENDED}"]
    assert re.search(r"statistics said 1 file\(s\) \(.*\), the disk had 4 \(", lines[f"dt={APPENDED}"])
    assert re.search(r"statistics said 1 file\(s\) \(.*\), the disk had 2 \(", lines[f"dt={COPIED_INTO}"])
    assert "2 with statistics that disagreed with the disk" in report


@pytest.mark.parametrize(
    "run_type, storage", variants("test_stale_statistics: run type", [("scheduled", "ORC"), ("backfill", "PARQUET")])
)
def test_a_scheduled_or_backfill_run_of_the_date_compacts_an_appended_partition(stack, tmp_path, run_type, storage):
    """The run's own selection (its partition key: the partition date, for a scheduled run and a
    backfill alike), through plan, merge job and refresh as the DAG's tasks call them."""
    db, table = f"stale_{run_type}", "events"
    make_appended_table(stack, db, table, storage)
    content_before = stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "partition_lag_days": 1}])
    settings = config.load(cfg)
    selection = select(settings, {}, run_type, None, APPENDED)
    with Metastore("127.0.0.1", stack.port) as hms:
        planned = dag_tasks.plan(settings, hms, f"{run_type}__{APPENDED}", selection)
        assert [p for b in planned["plan"]["batches"] for p in b["partitions"]] == [[f"{db}.{table}", f"dt={APPENDED}"]]
        for args in planned["spark_args"]:
            done = stack.spark_submit(args["application_args"][1], cfg)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        report = dag_tasks.refresh(settings, hms, planned["plan"])
    (result,) = report["partitions"]
    assert (result["status"], result["stats_files"], result["files_before"], result["files_after"]) == (
        "merged",
        1,
        4,
        1,
    )
    assert report["summary"]["stale_statistics"] == 1
    snap = stack.snapshot(db, table)
    assert snap[f"dt={APPENDED}"]["hms_num_files"] == "1" == str(snap[f"dt={APPENDED}"]["num_files"])
    assert stack.content(db, table)[f"dt={APPENDED}"] == content_before[f"dt={APPENDED}"]


def test_an_undated_run_audits_partitions_it_never_listed_then_trusts_them_for_the_audit_period(stack, tmp_path):
    db, table = "stale_audit", "events"
    make_appended_table(stack, db, table, "PARQUET")
    content_before = stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    first = stack.run_dag(cfg)
    assert first.state == "success", first.log[-5000:]
    assert "0 by statistics, 0 selected by date, 2 audited" in first.log
    assert_compacted_with_true_statistics(stack, db, table, content_before)
    # Listed a moment ago and compact: the next undated run has nothing to list.
    again = stack.run_dag(cfg)
    assert again.state == "success", again.log[-5000:]
    assert "0 partition(s) to list" in again.log and set(again.states.get("merge", [])) <= {"skipped"}
