"""The whole DAG on S3 through Hadoop's real S3A connector: hadoop-aws 3.5.0 from Maven Central
against moto's S3 server on 127.0.0.1 (scripts/s3a_stack.py), a Hive Metastore that reaches the
bucket through the same connector, tables at s3a:// locations.

On an object store a rename is a copy then a delete and a folder has no time of its own, so:
``location_switch`` tables are merged (the journal published by a conditional PUT, the new folder
built beside the old one, one Metastore call as the commit point, under the Metastore's lock);
``in_place`` tables are refused with the reason, before anything is written; an old folder is
retired once its run's commit records (not the objects' times) are older than the retention.
Every row is checked by content; the bucket is looked at over plain HTTP, not through our code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from stack_sampling import missing, require_jars

from harness import ROOT, Stack
from s3a_stack import SERVER, S3Error, S3Server, connector_jars

pytestmark = pytest.mark.integration

BUCKET, DB = "lake", "on_s3"
DATES = ["2026-10-01", "2026-10-02"]
TABLES = {
    "orc_switch": ("ORC", "location_switch"),
    "parquet_switch": ("PARQUET", "location_switch"),
    "orc_in_place": ("ORC", "in_place"),
}
SWITCHED = [t for t, (_, mode) in TABLES.items() if mode == "location_switch"]
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
MERGED: dict = {}  # the DAG run of the first test, for the later ones (stacks_only)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    require_jars("s3a")
    if not (SERVER / ".installed").exists():
        missing(f"the S3 server is not installed in {SERVER} (make jars; is PyPI reachable?)")
    server = S3Server(tmp_path_factory.mktemp("s3"))
    try:
        server.start()
        server.make_bucket(BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_stack(s3, tmp_path_factory):
    """A Metastore with the S3A connector and the endpoint's settings (it lists and creates the
    tables' folders), the tables written through S3A by a Spark of their own."""
    stack = Stack(tmp_path_factory.mktemp("stack"), quick_jvm_start=True)
    stack.metastore.extra_classpath += connector_jars()
    stack.metastore.hadoop_conf.update(s3.hadoop_conf)
    try:
        stack.start()
        stack.created = spark_tables(
            stack,
            s3,
            "create",
            DB,
            f"s3a://{BUCKET}/warehouse/{DB}.db",
            *[f"{t}:{fmt}" for t, (fmt, _) in TABLES.items()],
            "--dates",
            ",".join(DATES),
            "--content",
        )
        yield stack
    finally:
        stack.stop()


def spark_tables(stack, s3, *args) -> dict:
    """scripts/hdfs_tables.py in a Spark of its own, with the S3A connector."""
    conf = [a for k, v in s3.spark_conf.items() for a in ("--conf", f"{k}={v}")]
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "hdfs_tables.py"), stack.metastore.uri, *args, *conf],
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    return json.loads(p.stdout.split("RESULT ", 1)[1])


def key_of(uri: str) -> str:
    """``s3a://lake/a/b`` -> ``a/b/`` (the prefix of the folder's objects)."""
    parts = urlsplit(uri)
    assert (parts.scheme, parts.netloc) == ("s3a", BUCKET), uri
    return parts.path.strip("/") + "/"


def partitions(stack, s3, table: str) -> dict[str, dict]:
    """Per partition: its location, the data objects directly in its folder (name -> size, etag)
    and the Metastore's parameters."""
    from hmsclient import hmsclient

    out = {}
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        for p in c.get_partitions(DB, table, -1):
            out[f"dt={p.values[0]}"] = {
                "location": p.sd.location.rstrip("/"),
                "files": files_at(s3, p.sd.location),
                "parameters": dict(p.parameters),
            }
    return out


def files_at(s3, location: str) -> dict[str, tuple[int, str]]:
    """The data objects directly in a folder: name -> (size, etag). Not its marker (the key of the
    folder itself, which S3A's mkdirs writes), nor hidden names or deeper keys."""
    prefix = key_of(location)
    return {
        k[len(prefix) :]: (o["size"], o["etag"])
        for k, o in s3.list(BUCKET, prefix).items()
        if k != prefix and "/" not in k[len(prefix) :] and not k[len(prefix) :].startswith(("_", "."))
    }


def area(table: str) -> str:
    return f"warehouse/{DB}.db/.hive_compaction/{table}/"


def test_the_whole_dag_on_s3a_switches_locations_and_refuses_in_place(s3, s3_stack, tmp_path):
    stack = s3_stack
    names = [f"{DB}.{t}" for t in TABLES]
    before = stack.created  # read back through S3A by the Spark that wrote them
    assert before["file_system"] == S3A_CLASS  # the real connector, to the real endpoint
    layout = {t: partitions(stack, s3, t) for t in TABLES}
    for t, parts in layout.items():
        assert sorted(parts) == [f"dt={d}" for d in DATES], (t, parts)
        for name, p in parts.items():
            assert p["location"] == f"s3a://{BUCKET}/warehouse/{DB}.db/{t}/{name}"
            assert len(p["files"]) == 4, (t, name, p)
    # The endpoint honours S3's conditional write, which the journals are published with.
    s3.put(BUCKET, "probe/exists", b"1")
    with pytest.raises(S3Error, match=" 412 "):
        s3.put(BUCKET, "probe/exists", b"2", {"If-None-Match": "*"})
    assert s3.get(BUCKET, "probe/exists") == b"1"

    cfg = stack.write_config(
        tmp_path / "c.yaml",
        [{"name": f"{DB}.{t}", "commit_mode": mode} for t, (_, mode) in TABLES.items()],
        spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **s3.spark_conf},
    )
    run = stack.run_dag(cfg)
    (tmp_path / "dag.log").write_text(run.log)
    assert run.state == "success", run.log[-8000:]
    # journals by conditional PUT (no fallback to the lock alone), every commit under the Metastore's lock
    assert "journals there are published under the partition's Metastore lock only" not in run.log
    assert "'unlocked': 0" in run.log, run.log[-5000:]

    after = spark_tables(stack, s3, "content", *names)
    assert after["tables"] == before["tables"]  # every row of every partition, by content
    for t in SWITCHED:
        for name, p in partitions(stack, s3, t).items():
            old = layout[t][name]
            assert p["location"].startswith(f"s3a://{BUCKET}/warehouse/{DB}.db/{t}/_compacted/{name}/"), p
            assert len(p["files"]) == 1, (t, name, p)
            assert (p["parameters"]["numFiles"], p["parameters"]["totalSize"]) == (
                "1",
                str(sum(size for size, _ in p["files"].values())),
            ), (t, name, p)
            # The old folder's files left for the run's trash (a partition written again there must not read them).
            assert files_at(s3, old["location"]) == {}, (t, name)
            pid = name.replace("=", "_") + "."  # the partition's id in the work area: <k>_<v>.<hash>
            trashed = {
                k.rsplit("/", 1)[1]: o["size"]
                for k, o in s3.list(BUCKET, area(t) + "trash/").items()
                if f"/{pid}" in k and k.rsplit("/", 1)[1] in old["files"]
            }
            assert trashed == {n: size for n, (size, _) in old["files"].items()}, (t, name)
        objects = s3.list(BUCKET, area(t))
        assert not [k for k in objects if "/journal/" in k and k.endswith(".json")], objects  # every commit finished
        assert len([k for k in objects if "/manifests/" in k and k.endswith(".json")]) == len(DATES), objects
    # in_place on an object store: refused with the reason, nothing written (not even a work area)
    assert {n: p["files"] for n, p in partitions(stack, s3, "orc_in_place").items()} == {
        n: p["files"] for n, p in layout["orc_in_place"].items()
    }
    assert s3.list(BUCKET, area("orc_in_place")) == {}
    for d in DATES:
        assert any(
            f"{DB}.orc_in_place" in line and f"dt={d}" in line and "storage scheme 's3a' is an object store" in line
            for line in run.log.splitlines()
        ), run.log[-5000:]
    MERGED.update(cfg=cfg, run=run, before=before, layout=layout)


@pytest.mark.stacks_only
def test_rollback_and_an_old_folder_retired_by_the_age_of_its_commit_records(s3, s3_stack, tmp_path):
    """After the first test's DAG run: the rollback job puts a switched table's partitions back
    at their old folders. Then retirement: S3A reports a folder's time as the time of the call, and
    rewriting an object gives it a new one, so only the commit records say how old a switch is.
    The other table's manifests are made three days old (rewritten now: every object time is of
    the last minute); its next merge job retires the old folders (retention 1 day), the
    partitions read their new folders. Every row as before, by content."""
    if not MERGED:
        pytest.skip("needs the DAG run of test_the_whole_dag_on_s3a_switches_locations_and_refuses_in_place")
    stack, run, before, layout = s3_stack, MERGED["run"], MERGED["before"], MERGED["layout"]
    rollback = stack.rollback_cmd(f"{DB}.parquet_switch", run.run_id, MERGED["cfg"], conf=s3.spark_conf)
    p = subprocess.run(rollback, env=stack.env(MERGED["cfg"]), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    rolled = partitions(stack, s3, "parquet_switch")
    assert {n: (p["location"], p["files"]) for n, p in rolled.items()} == {
        n: (p["location"], p["files"]) for n, p in layout["parquet_switch"].items()
    }
    for name, p in rolled.items():  # the statistics as they were before the merge
        assert (p["parameters"]["numFiles"], p["parameters"]["totalSize"]) == (
            layout["parquet_switch"][name]["parameters"]["numFiles"],
            layout["parquet_switch"][name]["parameters"]["totalSize"],
        ), name

    table = "orc_switch"
    manifests = [k for k in s3.list(BUCKET, area(table)) if "/manifests/" in k and k.endswith(".json")]
    assert len(manifests) == len(DATES)
    for key in manifests:
        record = json.loads(s3.get(BUCKET, key))
        record["committed_at"] -= 3 * 86400
        s3.put(BUCKET, key, json.dumps(record).encode())
    switched = partitions(stack, s3, table)
    cfg = stack.write_config(
        tmp_path / "retire.yaml",
        [{"name": f"{DB}.{table}", "commit_mode": "location_switch", "trash_retention_days": 1}],
        spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **s3.spark_conf},
    )
    later = stack.run_dag(cfg, conf={"tables": [f"{DB}.{table}"], "partition_date": DATES[0]})
    (tmp_path / "dag.log").write_text(later.log)
    assert later.state == "success", later.log[-8000:]
    for name, p in switched.items():
        old = layout[table][name]["location"]
        assert s3.list(BUCKET, key_of(old)) == {}, name  # retired: its files, then the folder
        now = partitions(stack, s3, table)[name]
        assert (now["location"], now["files"]) == (p["location"], p["files"]), name
    assert not [k for k in s3.list(BUCKET, area(table)) if "/manifests/" in k and not k.endswith("/")]  # (markers)
    assert spark_tables(stack, s3, "content", *[f"{DB}.{t}" for t in SWITCHED])["tables"] == {
        f"{DB}.{t}": before["tables"][f"{DB}.{t}"] for t in SWITCHED
    }


@pytest.mark.stacks_only
def test_without_conditional_writes_the_metastore_lock_is_the_lease(s3, s3_stack, tmp_path):
    """hadoop-aws told not to send conditional writes (``fs.s3a.create.conditional.enabled:
    false``, as with an older hadoop-aws or an endpoint that ignores If-None-Match): the journal is
    published under the partition's Metastore lock alone, which every other publisher of it takes
    first. The merge commits under it, every row as before, and the job says how it published."""
    stack, table = s3_stack, "no_conditional"
    created = spark_tables(
        stack, s3, "create", DB, f"s3a://{BUCKET}/warehouse/{DB}.db", f"{table}:ORC", "--dates", DATES[0], "--content"
    )
    cfg = stack.write_config(
        tmp_path / "c.yaml",
        [{"name": f"{DB}.{table}", "commit_mode": "location_switch"}],
        spark_conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            **s3.spark_conf,
            "spark.hadoop.fs.s3a.create.conditional.enabled": "false",
        },
    )
    run = stack.run_dag(cfg, conf={"tables": [f"{DB}.{table}"]})
    (tmp_path / "dag.log").write_text(run.log)
    assert run.state == "success", run.log[-8000:]
    assert "the S3A connector does not offer conditional writes on s3a://lake" in run.log, run.log[-5000:]
    assert "journals there are published under the partition's Metastore lock only" in run.log
    assert "'unlocked': 0" in run.log, run.log[-5000:]  # every commit under the lock
    [p] = partitions(stack, s3, table).values()
    assert p["location"].startswith(f"s3a://{BUCKET}/warehouse/{DB}.db/{table}/_compacted/") and len(p["files"]) == 1
    assert not [k for k in s3.list(BUCKET, area(table)) if "/journal/" in k and k.endswith(".json")]
    assert spark_tables(stack, s3, "content", f"{DB}.{table}")["tables"] == created["tables"]
