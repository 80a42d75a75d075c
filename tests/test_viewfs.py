"""Tables and work areas on a file system Airflow does not know: Hadoop viewfs://.

Airflow's ObjectStoragePath has no viewfs (nor hdfs) scheme; the DAG must not need one. The
mount (viewfs://hcstack/data over a local folder) is in the Metastore's core-site.xml and in
Spark's settings, as it would be on a cluster. Plan, merges, refresh, purge, rollback and an
interrupted commit finished by a later run all pass, every row checked."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.integration


def local(stack, uri: str) -> Path:
    """Where a viewfs path lives on this machine's disk (the mount's target)."""
    assert uri.startswith(f"{stack.metastore.viewfs_root}/"), uri  # every location is on viewfs
    rest = urlsplit(uri).path[len("/data") :]
    return Path(str(stack.metastore.state)) / "viewfs-data" / rest.lstrip("/")


def make_viewfs_table(stack, db: str, table: str, storage: str, dates: list[str]) -> str:
    from demo_tables import fill

    location = f"{stack.metastore.viewfs_root}/{db}/{table}"
    stack.spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
    stack.spark.sql(f"""CREATE TABLE {db}.{table} (
        event_id BIGINT, user_id STRING, kind INT, amount DECIMAL(12,2), ts TIMESTAMP,
        tags ARRAY<BIGINT>, attrs MAP<STRING,STRING>)
        PARTITIONED BY (dt STRING) STORED AS {storage} LOCATION '{location}'""")
    fill(stack.spark, db, table, dates, 4, 200)
    return location


def viewfs_config(stack, tmp_path, tables, **policy):
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **stack.metastore.viewfs_conf}
    return stack.write_config(tmp_path / "c.yaml", [{"name": t, **policy} for t in tables], spark_conf=conf)


def test_the_whole_dag_on_viewfs(stack, tmp_path):
    db = "on_viewfs"
    dates = ["2026-10-01", "2026-10-02"]
    for table, storage in (("events_orc", "ORC"), ("events_parquet", "PARQUET")):
        make_viewfs_table(stack, db, table, storage, dates)
    tables = [f"{db}.events_orc", f"{db}.events_parquet"]
    content = {t: stack.content(*t.split(".")) for t in tables}
    before = {t: viewfs_snapshot(stack, *t.split(".")) for t in tables}
    assert {t: {n: p["num_files"] for n, p in snap.items()} for t, snap in before.items()} == {
        t: {f"dt={d}": 4 for d in dates} for t in tables
    }, before
    cfg = viewfs_config(stack, tmp_path, tables, merge_mode="auto")

    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-5000:]
    assert "viewfs://hcstack/data/on_viewfs/events_orc/dt=2026-10-01" in run.log
    for t in tables:
        db_, tbl = t.split(".")
        assert stack.content(db_, tbl) == content[t]
        after = viewfs_snapshot(stack, db_, tbl)
        assert sorted(after) == [f"dt={d}" for d in dates], (t, after)
        for name, p in after.items():
            assert p["num_files"] == 1, (t, name)
            assert (p["hms_num_files"], p["hms_total_size"]) == (str(p["num_files"]), str(p["bytes"]))
    # the work area is beside the table, on viewfs too
    work = local(stack, f"{stack.metastore.viewfs_root}/{db}/.hive_compaction/events_orc")
    assert any((work / "trash").rglob("*.orc"))

    # Rollback through the Spark job, on viewfs.
    rollback = stack.rollback_cmd(f"{db}.events_orc", run.run_id, cfg, stack.metastore.viewfs_conf)
    p = subprocess.run(rollback, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    restored = viewfs_snapshot(stack, db, "events_orc")
    assert {k: v["files"] for k, v in restored.items()} == {
        k: v["files"] for k, v in before[f"{db}.events_orc"].items()
    }
    assert stack.content(db, "events_orc") == content[f"{db}.events_orc"]

    # A kill in the middle of a commit, finished by a later run (the journal aged past any
    # commit's life), then the purge of expired runs: all on viewfs.
    killed = stack.run_dag(
        cfg,
        conf={"tables": [f"{db}.events_orc"], "partition_date": "2026-10-01"},
        HIVE_COMPACTION_TEST_KILL_AT="inputs_moved:dt=2026-10-01",
    )
    assert killed.state == "failed"
    journals = list((work / "journal").glob("dt_2026-10-01.*.json"))
    assert len(journals) == 1
    old = time.time() - 3 * 86400
    os.utime(journals[0], (old, old))
    for folder in ("trash", "manifests", "staging"):
        for f in [*(work / folder).rglob("*")]:
            os.utime(f, (old, old))
    purge_cfg = viewfs_config(stack, tmp_path, tables, merge_mode="auto", trash_retention_days=1)
    later = stack.run_dag(purge_cfg, conf={"tables": [f"{db}.events_orc"], "partition_date": "2026-10-02"})
    assert later.state == "success", later.log[-5000:]
    assert "finished the commit run" in later.log and "expired folder(s)" in later.log
    assert not journals[0].exists()
    assert stack.content(db, "events_orc") == content[f"{db}.events_orc"]


def viewfs_snapshot(stack, db: str, table: str) -> dict[str, dict]:
    """Per partition: data files on the mount's disk and the Metastore's statistics."""
    from demo import partition_snapshot

    return partition_snapshot(stack.port, db, table, local_path=lambda location: local(stack, location))
