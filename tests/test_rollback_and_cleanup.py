"""Rollback restores the exact original files and statistics; cleanup purges expired trash."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from harness import ROOT
from hmsclient import hmsclient

from hive_compaction.results import LISTED_AT, STATISTICS_KEYS

pytestmark = pytest.mark.integration


def statistics_parameters(stack, db: str, table: str) -> dict[str, dict[str, str]]:
    """Per partition: its parameters among the keys a refresh may change."""
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        return {"/".join(f"{k.name}={v}" for k, v in zip(c.get_table(db, table).partitionKeys, p.values)):
                {k: v for k, v in p.parameters.items() if k in STATISTICS_KEYS}
                for p in c.get_partitions(db, table, -1)}


def test_rollback_restores_the_original_files_and_statistics(stack, tmp_path):
    db, table = "rb", "events"
    stack.make_table(db, table, "PARQUET", ["2026-06-01", "2026-06-02"], files=4, rows=300)
    content = stack.content(db, table)
    before = stack.snapshot(db, table)
    params_before = statistics_parameters(stack, db, table)
    assert not any(LISTED_AT in p for p in params_before.values())
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    merged = stack.snapshot(db, table)
    assert all(p["num_files"] == 1 for p in merged.values()) and merged != before
    assert all(LISTED_AT in p for p in statistics_parameters(stack, db, table).values())

    cmd = ["spark-submit", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
           str(ROOT / "spark_jobs" / "rollback.py"), "--table", f"{db}.{table}", "--run", run.run_id,
           "--metastore", f"127.0.0.1:{stack.port}", "--config", str(cfg)]
    p = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert sum(line.startswith("rolled back rb.events dt=") for line in p.stdout.splitlines()) == 2
    after = stack.snapshot(db, table)
    for name in before:  # names and bytes of every file, and the statistics, as before the run
        assert after[name]["files"] == before[name]["files"], name
        for key in ("hms_num_files", "hms_total_size", "hms_num_rows"):
            assert after[name][key] == before[name][key], (name, key)
    # Every key the refresh changed, exactly as before: the refresh's listedAt removed again.
    assert statistics_parameters(stack, db, table) == params_before
    assert stack.content(db, table) == content

    again = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and stack.snapshot(db, table) == after  # idempotent

    bogus = subprocess.run(cmd[:-6] + ["--run", "no-such-run", "--metastore", f"127.0.0.1:{stack.port}",
                                       "--config", str(cfg)], env=stack.env(cfg), capture_output=True, text=True)
    assert bogus.returncode == 1
    assert "run no-such-run has no committed compaction" in bogus.stdout + bogus.stderr, bogus.stdout[-2000:] + bogus.stderr[-2000:]


def test_cleanup_purges_trash_older_than_the_retention_only(stack, tmp_path):
    db, table = "purge", "events"
    stack.make_table(db, table, "ORC", ["2026-06-03"], files=3, rows=100)
    work = Path(str(stack.metastore.state)) / "warehouse" / f"{db}.db" / ".hive_compaction" / table
    keep = stack.write_config(tmp_path / "keep.yaml", [{"name": f"{db}.{table}", "trash_retention_days": 7}])
    first = stack.run_dag(keep)
    assert first.state == "success", first.log[-4000:]
    trash_runs = [d.name for d in (work / "trash").iterdir()]
    assert len(trash_runs) == 1 and any((work / "trash").rglob("*.orc"))

    second = stack.run_dag(keep)  # within the retention: kept
    assert second.state == "success" and [d.name for d in (work / "trash").iterdir()] == trash_runs

    # The merge job that lists a table's partitions purges its work area: a run of the
    # partition's date lists it (the statistics say it is compact) and purges what expired.
    # Two days later (the first run's folders aged by hand), with a retention of one day.
    old = time.time() - 2 * 86400
    for folder in ("trash", "manifests", "staging"):
        for p in [*(work / folder / trash_runs[0]).rglob("*"), work / folder / trash_runs[0]]:
            if p.exists():
                os.utime(p, (old, old))
    purge = stack.write_config(tmp_path / "purge.yaml", [{"name": f"{db}.{table}", "trash_retention_days": 1}])
    third = stack.run_dag(purge, conf={"partition_date": "2026-06-03"})
    assert third.state == "success", third.log[-4000:]
    assert third.states["merge"] == ["success"] and "purged 3 expired folder(s) of 1 run(s)" in third.log
    for folder in ("trash", "manifests", "staging"):
        assert not (work / folder).exists() or trash_runs[0] not in [d.name for d in (work / folder).iterdir()]
    assert not any(work.rglob("*.orc"))
    # the table itself is untouched by the purge
    assert stack.snapshot(db, table)["dt=2026-06-03"]["num_files"] == 1
