"""The whole DAG on a real HDFS: Hadoop's MiniDFSCluster from Maven Central (scripts/hdfs_stack.py),
a Hive Metastore that knows nothing of it but the tables' hdfs:// locations, tables in both
commit modes, ORC and Parquet, every row checked by content.

As in production, nobody here is the HDFS superuser but the cluster itself: the merge jobs and
the tables' writer run as ``etl``, who owns the table folders; the Metastore runs as ``hive``.
Permissions are checked by the NameNode. Files are looked at over WebHDFS, not through our code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from stack_sampling import require_jars

from harness import ROOT, Stack
from hdfs_stack import Hdfs, HdfsError

pytestmark = pytest.mark.integration

JOB_USER, METASTORE_USER = "etl", "hive"
DB = "on_hdfs"
# The DAG runs on HDFS, one drawn a day (every one in make test-stacks and test-full): this module's
# whole DAG and killed commit, and YARN cluster mode's (test_yarn_cluster, on the same HDFS).
ON_HDFS = "a DAG run on HDFS"
DATES = ["2026-10-01", "2026-10-02"]
TABLES = {
    "orc_in_place": ("ORC", "in_place"),
    "parquet_in_place": ("PARQUET", "in_place"),
    "orc_switch": ("ORC", "location_switch"),
    "parquet_switch": ("PARQUET", "location_switch"),
}


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory):
    require_jars("hdfs")
    cluster = Hdfs(tmp_path_factory.mktemp("hdfs"), groups={JOB_USER: JOB_USER, METASTORE_USER: METASTORE_USER})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def hdfs_stack(hdfs, tmp_path_factory):
    """A Metastore (as ``hive``) and Airflow of this module's own, the database folder made by the
    superuser for ``etl`` (an administrator's one-time set-up), the tables made by ``etl``."""
    stack = Stack(tmp_path_factory.mktemp("stack"), quick_jvm_start=True)
    stack.metastore.env["HADOOP_USER_NAME"] = METASTORE_USER
    try:
        stack.start()
        hdfs.make_folder("/warehouse", METASTORE_USER)
        hdfs.make_folder(f"/warehouse/{DB}.db", JOB_USER)
        spark_tables(
            stack,
            "create",
            DB,
            f"{hdfs.uri}/warehouse/{DB}.db",
            *[f"{t}:{fmt}" for t, (fmt, _) in TABLES.items()],
            "--dates",
            ",".join(DATES),
        )
        yield stack
    finally:
        stack.stop()


def spark_tables(stack, *args) -> dict:
    """scripts/hdfs_tables.py as ``etl``, in a Spark of its own."""
    env = stack.env(HADOOP_USER_NAME=JOB_USER)
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "hdfs_tables.py"), stack.metastore.uri, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    return json.loads(p.stdout.split("RESULT ", 1)[1])


def partitions(stack, hdfs, table: str, db: str = DB) -> dict[str, dict]:
    """Per partition: its location, its data files on HDFS (name -> bytes, owner) and the
    Metastore's statistics."""
    from hmsclient import hmsclient

    out = {}
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        for p in c.get_partitions(db, table, -1):
            entries = hdfs.list(urlsplit(p.sd.location).path)
            files = {
                e["pathSuffix"]: e["length"]
                for e in entries
                if e["type"] == "FILE" and not e["pathSuffix"].startswith(("_", "."))
            }
            out[f"dt={p.values[0]}"] = {
                "location": p.sd.location,
                "files": files,
                "owners": {e["owner"] for e in entries},
                "hms": (p.parameters.get("numFiles"), p.parameters.get("totalSize")),
            }
    return out


def test_the_cluster_checks_permissions_and_the_job_user_is_not_its_superuser(hdfs, hdfs_stack):
    assert hdfs.superuser not in (JOB_USER, METASTORE_USER)
    with pytest.raises(HdfsError, match="403"):
        hdfs.webhdfs("PUT", "/not-for-etl", "MKDIRS", JOB_USER)
    assert hdfs.status("/not-for-etl") is None
    assert hdfs.status(f"/warehouse/{DB}.db")["owner"] == JOB_USER


@pytest.mark.variant(ON_HDFS, "whole DAG")
def test_the_whole_dag_on_hdfs_both_commit_modes_orc_and_parquet(hdfs, hdfs_stack, tmp_path):
    stack = hdfs_stack
    names = [f"{DB}.{t}" for t in TABLES]
    before = spark_tables(stack, "content", *names)
    assert before["file_system"] == "org.apache.hadoop.hdfs.DistributedFileSystem"
    layout = {t: partitions(stack, hdfs, t) for t in TABLES}
    for t, parts in layout.items():
        assert sorted(parts) == [f"dt={d}" for d in DATES], (t, parts)
        for name, p in parts.items():
            assert p["location"] == f"{hdfs.uri}/warehouse/{DB}.db/{t}/{name}"
            assert len(p["files"]) == 4 and p["owners"] == {JOB_USER}, (t, name, p)

    cfg = stack.write_config(
        tmp_path / "c.yaml", [{"name": f"{DB}.{t}", "commit_mode": mode} for t, (_, mode) in TABLES.items()]
    )
    run = stack.run_dag(cfg, HADOOP_USER_NAME=JOB_USER)
    assert run.state == "success", run.log[-8000:]

    after = spark_tables(stack, "content", *names)
    assert after["tables"] == before["tables"]  # every row of every partition, by content
    for t, (_, mode) in TABLES.items():
        for name, p in partitions(stack, hdfs, t).items():
            assert len(p["files"]) == 1, (t, name, p)
            assert p["hms"] == ("1", str(sum(p["files"].values()))), (t, name, p)
            assert p["owners"] == {JOB_USER}, (t, name, p)
            table_folder = f"{hdfs.uri}/warehouse/{DB}.db/{t}"
            if mode == "in_place":
                assert p["location"] == f"{table_folder}/{name}", p
            else:
                assert p["location"].startswith(f"{table_folder}/_compacted/"), p
    # the work area: beside the tables, the job user's alone, the replaced inputs in its trash
    area = hdfs.status(f"/warehouse/{DB}.db/.hive_compaction/orc_in_place")
    assert (area["owner"], area["permission"]) == (JOB_USER, "700")

    # The rollback job, as the job user: the in-place table's files back as they were.
    rollback = stack.rollback_cmd(f"{DB}.orc_in_place", run.run_id, cfg)
    p = subprocess.run(
        rollback, env=stack.env(cfg, HADOOP_USER_NAME=JOB_USER), capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    restored = partitions(stack, hdfs, "orc_in_place")
    assert {n: p["files"] for n, p in restored.items()} == {n: p["files"] for n, p in layout["orc_in_place"].items()}
    assert spark_tables(stack, "content", f"{DB}.orc_in_place")["tables"] == {
        f"{DB}.orc_in_place": before["tables"][f"{DB}.orc_in_place"]
    }


@pytest.mark.stacks_only
def test_a_work_area_the_job_user_cannot_create_fails_saying_why_and_another_file_system_is_skipped(
    hdfs, hdfs_stack, tmp_path
):
    """Production's usual layout: the database folder is the Metastore's, only the table folders
    are the job user's. The default work area (in the database folder) cannot be made: the merge
    fails naming the user, the folder and the fix, nothing changed; with a work_dir the job user
    owns, it merges. A partition whose location names the same NameNode by another authority
    (localhost, not 127.0.0.1) is skipped with the reason, by both runs."""
    stack, db = hdfs_stack, "hive_owned"
    hdfs.make_folder(f"/warehouse/{db}.db", METASTORE_USER)
    hdfs.make_folder(f"/warehouse/{db}.db/events", JOB_USER)
    hdfs.make_folder(f"/warehouse/{db}.db/events/dt=2026-10-09", JOB_USER)
    hdfs.make_folder("/user/etl", JOB_USER)
    spark_tables(stack, "create", db, f"{hdfs.uri}/warehouse/{db}.db", "events:ORC", "--dates", DATES[0])
    elsewhere = f"hdfs://localhost:{hdfs.port}/warehouse/{db}.db/events/dt=2026-10-09"
    spark_tables(
        stack,
        "sql",
        f"ALTER TABLE {db}.events ADD PARTITION (dt='2026-10-09') LOCATION '{elsewhere}'",
        f"INSERT INTO {db}.events PARTITION (dt='2026-10-09') SELECT 1, 'u', 1, 1.5, now(), array(1), map('k','v')",
        f"INSERT INTO {db}.events PARTITION (dt='2026-10-09') SELECT 2, 'u', 1, 1.5, now(), array(1), map('k','v')",
    )
    before = spark_tables(stack, "content", f"{db}.events")["tables"]
    files = {n: p["files"] for n, p in partitions(stack, hdfs, "events", db).items()}
    assert {n: len(f) for n, f in files.items()} == {f"dt={DATES[0]}": 4, "dt=2026-10-09": 2}
    skipped = (
        f"location {elsewhere} is on another file system (hdfs://localhost:{hdfs.port}) than its table "
        f"(hdfs://127.0.0.1:{hdfs.port})"
    )

    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.events"}])
    refused = stack.run_dag(cfg, HADOOP_USER_NAME=JOB_USER)
    assert refused.state == "failed"
    assert (
        f"FAILED {db}.events dt={DATES[0]}: PermissionError: cannot create {hdfs.uri}/warehouse/{db}.db/"
        f'.hive_compaction/events (Permission denied: user=etl, access=WRITE, inode="/warehouse/{db}.db":'
        "hive:hive:drwxr-xr-x): the account that runs the merges needs write access to the folder it goes in, "
        "or a work_dir in the config that it owns"
    ) in refused.log, refused.log[-5000:]
    assert re.search(rf"{db}.events: 1 partition\(s\) to list \(.*\), 1 skipped", refused.log), refused.log[-5000:]
    assert {n: p["files"] for n, p in partitions(stack, hdfs, "events", db).items()} == files

    cfg = stack.write_config(
        tmp_path / "c.yaml", [{"name": f"{db}.events", "work_dir": f"{hdfs.uri}/user/etl/hive_compaction"}]
    )
    run = stack.run_dag(cfg, HADOOP_USER_NAME=JOB_USER)
    assert run.state == "success", run.log[-8000:]
    assert skipped in run.log
    assert spark_tables(stack, "content", f"{db}.events")["tables"] == before
    after = {n: p["files"] for n, p in partitions(stack, hdfs, "events", db).items()}
    assert len(after[f"dt={DATES[0]}"]) == 1 and after["dt=2026-10-09"] == files["dt=2026-10-09"]
    area = hdfs.status(f"/user/etl/hive_compaction/{db}.events")
    assert (area["owner"], area["permission"]) == (JOB_USER, "700")


@pytest.mark.variant(ON_HDFS, "killed commit")
def test_a_commit_killed_midway_on_hdfs_is_finished_by_the_next_run(hdfs, hdfs_stack, tmp_path):
    """The in-place commit killed once the inputs have left for the trash: its journal (published
    by an HDFS rename that never replaces) is on HDFS, the partition empty; the next run replays
    it, taking the journal over, and every row is back, merged."""
    stack, table, date = hdfs_stack, "killed_orc", DATES[0]
    spark_tables(stack, "create", DB, f"{hdfs.uri}/warehouse/{DB}.db", f"{table}:ORC", "--dates", date)
    before = spark_tables(stack, "content", f"{DB}.{table}")["tables"]
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{DB}.{table}"}])
    selected = {"tables": [f"{DB}.{table}"], "partition_date": date}

    killed = stack.run_dag(
        cfg, conf=selected, HADOOP_USER_NAME=JOB_USER, HIVE_COMPACTION_TEST_KILL_AT=f"inputs_moved:dt={date}"
    )
    assert killed.state == "failed"
    journal = f"/warehouse/{DB}.db/.hive_compaction/{table}/journal"
    [entry] = hdfs.list(journal, JOB_USER)
    assert entry["owner"] == JOB_USER and entry["pathSuffix"].startswith(f"dt_{date}.")
    assert partitions(stack, hdfs, table)[f"dt={date}"]["files"] == {}  # the inputs are in the trash

    later = stack.run_dag(cfg, conf=selected, HADOOP_USER_NAME=JOB_USER)
    assert later.state == "success", later.log[-8000:]
    assert f"recovering the interrupted commit of dt={date}" in later.log
    assert spark_tables(stack, "content", f"{DB}.{table}")["tables"] == before
    [after] = partitions(stack, hdfs, table).values()
    assert len(after["files"]) == 1 and after["hms"] == ("1", str(sum(after["files"].values()))), after
    assert hdfs.list(journal, JOB_USER) == []
