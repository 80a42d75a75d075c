"""End to end on the real stack: Metastore plan -> mapped spark-submits -> Metastore refresh."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from matrix_sampling import variants

pytestmark = pytest.mark.integration

DATES = ["2026-03-01", "2026-03-02", "2026-03-03"]
SINGLE = "2026-03-01"


def files_with_times(folder: Path) -> dict[str, tuple[int, int]]:
    return {f.name: (f.stat().st_size, f.stat().st_mtime_ns) for f in folder.iterdir() if f.is_file()}


def assert_statistics_match_disk(stack, db, table, expected_rows):
    snapshot = stack.snapshot(db, table)
    assert snapshot and sorted(snapshot) == sorted(expected_rows), (sorted(snapshot), sorted(expected_rows))
    for name, p in snapshot.items():
        assert p["hms_num_files"] == str(p["num_files"]), name
        assert p["hms_total_size"] == str(p["bytes"]), name
        if p["hms_num_rows"] is not None:
            assert p["hms_num_rows"] == str(expected_rows[name][0]), name


@pytest.mark.parametrize("storage", variants("test_end_to_end: format", ["ORC", "PARQUET"]))
def test_dag_compacts_keeps_every_row_and_refreshes_statistics(stack, tmp_path, storage):
    db, table = "e2e", f"events_{storage.lower()}"
    stack.make_table(db, table, storage, DATES, files=5, rows=400, single_file_dates=(SINGLE,))
    content_before = stack.content(db, table)
    before = stack.snapshot(db, table)
    single_dir = stack.partition_location(db, table, f"dt={SINGLE}")
    single_before = files_with_times(single_dir)
    assert {k: v["num_files"] for k, v in before.items()} == {
        "dt=2026-03-01": 1,
        "dt=2026-03-02": 5,
        "dt=2026-03-03": 5,
    }

    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-5000:]
    assert run.states["merge"] == ["success"] and run.states["refresh_metastore"] == ["success"]
    # each in-place commit says how long a reader listing the partition could have missed rows
    windows = re.findall(r"\] \S+ (dt=2026-03-0[23]): merged .*reader window (\d+) ms", run.log)
    assert sorted(p for p, _ in windows) == ["dt=2026-03-02", "dt=2026-03-03"], windows

    after = stack.snapshot(db, table)
    for name in ("dt=2026-03-02", "dt=2026-03-03"):
        assert after[name]["num_files"] < before[name]["num_files"]
        assert after[name]["num_files"] == 1
        # nothing of ours is left in the partition folder (no staging, journal or hidden leftovers)
        leftovers = [
            f.name
            for f in stack.partition_location(db, table, name).iterdir()
            if not f.name.startswith(".part-") or not f.name.endswith(".crc")
        ]
        assert sorted(leftovers) == sorted(after[name]["files"]), leftovers
    assert stack.content(db, table) == content_before  # every row, every column, dt included
    assert_statistics_match_disk(stack, db, table, content_before)
    assert after["dt=2026-03-02"]["hms_num_rows"] == "400"
    assert files_with_times(single_dir) == single_before  # single-file partition untouched
    # Listed although its statistics said one file (the audit: it was never listed before), so
    # its statistics are now the disk's, rows included (Spark had written none).
    assert before[f"dt={SINGLE}"]["hms_num_rows"] is None
    assert after[f"dt={SINGLE}"]["hms_num_rows"] == str(content_before[f"dt={SINGLE}"][0])

    # The replaced inputs are kept in the trash area, outside the table, byte for byte.
    trash = stack.work_area(db, table) / "trash"
    kept = {f.name: f.stat().st_size for f in trash.rglob("*") if f.is_file() and not f.name.startswith(".")}
    originals = {n: s for p in ("dt=2026-03-02", "dt=2026-03-03") for n, s in before[p]["files"].items()}
    assert kept == originals

    # Running again on the compacted table plans nothing and changes nothing.
    dirs = {name: stack.partition_location(db, table, name) for name in after}
    state_before_rerun = {name: files_with_times(d) for name, d in dirs.items()}
    rerun = stack.run_dag(cfg)
    assert rerun.state == "success", rerun.log[-5000:]
    assert "merge" not in rerun.states or set(rerun.states["merge"]) <= {"skipped"}
    assert {name: files_with_times(d) for name, d in dirs.items()} == state_before_rerun
    assert stack.snapshot(db, table) == after


def test_failed_merge_blocks_refresh_and_loses_nothing(stack, tmp_path):
    db, table = "e2e_fail", "events"
    stack.make_table(db, table, "ORC", DATES, files=4, rows=300)
    content_before = stack.content(db, table)
    before = stack.snapshot(db, table)
    bad_dir = stack.partition_location(db, table, "dt=2026-03-02")
    bad_before = files_with_times(bad_dir)

    # One partition per Spark job, so the healthy partitions merge in jobs of their own; the job
    # of dt=2026-03-02 dies (SIGKILL) once its commit is journaled, before any file moved.
    cfg = stack.write_config(
        tmp_path / "c.yaml", [{"name": f"{db}.{table}"}], fan_out={"max_spark_jobs": 8, "max_partitions_per_job": 1}
    )
    run = stack.run_dag(cfg, HIVE_COMPACTION_TEST_KILL_AT="journaled:dt=2026-03-02")
    assert run.state == "failed"
    assert sorted(run.states["merge"]) == ["failed", "success", "success"]
    assert run.states["refresh_metastore"] == ["upstream_failed"]
    assert "test kill point journaled reached for e2e_fail.events/dt=2026-03-02" in run.log

    after = stack.snapshot(db, table)
    assert files_with_times(bad_dir) == bad_before  # the failing partition: not one file changed
    for name in ("dt=2026-03-01", "dt=2026-03-03"):
        assert after[name]["num_files"] == 1
        # The refresh did not run; the merge jobs wrote their partitions' statistics with the commit.
        assert after[name]["hms_num_files"] == "1" != before[name]["hms_num_files"]
    assert stack.content(db, table) == content_before  # no row lost or duplicated anywhere

    # The next run finishes the interrupted commit and repairs the statistics.
    rerun = stack.run_dag(cfg)
    assert rerun.state == "success", rerun.log[-5000:]
    assert stack.content(db, table) == content_before
    assert all(p["num_files"] == 1 for p in stack.snapshot(db, table).values())
    assert_statistics_match_disk(stack, db, table, content_before)


def test_dag_imports_cleanly_even_with_a_broken_config(stack, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("tables:\n  - name: e2e.events\n    target_file_size: lots\n")
    check = (
        "from airflow.dag_processing.dagbag import DagBag; b = DagBag(); "
        "print(repr(b.import_errors)); print(sorted(b.dags))"
    )
    for config in (None, broken, tmp_path / "missing.yaml"):
        p = subprocess.run([sys.executable, "-c", check], env=stack.env(config), capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[-2:] == [
            "{}",
            "['hive_compaction', 'hive_compaction_downstream_example', 'hive_compaction_rollback']",
        ], p.stdout

    run = stack.run_dag(broken)
    assert run.state == "failed"
    assert run.states["plan"] == ["failed"]
    assert "table e2e.events: key 'target_file_size'" in run.log


def test_unreachable_metastore_fails_planning_with_a_clear_message(stack, tmp_path):
    from local_stack import free_port

    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": "e2e.nothing"}])
    closed = f'{{"conn_type":"generic","host":"127.0.0.1","port":{free_port()}}}'
    run = stack.run_dag(cfg, AIRFLOW_CONN_HIVE_METASTORE=closed)
    assert run.state == "failed" and run.states["plan"] == ["failed"]
    assert "cannot reach the Hive Metastore at thrift://127.0.0.1:" in run.log
