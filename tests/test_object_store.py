"""Tables on storage without an atomic rename or an exclusive create are refused, for real.

The storage is ``tests/jvm/S3LikeFileSystem.java`` (scheme s3like: a rename copies then deletes, a
create checks then writes), mounted as a user would have an object store behind a cluster's view:
``viewfs://hcstack/objects`` -> ``s3like:///objects``, in the Metastore's core-site.xml and in the
merge jobs' Spark settings. The plan sees only the Metastore's viewfs location and lets it through;
each merge job must resolve the mount and refuse before it stages, journals or moves anything.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.integration

DB = "object_store"
DATES = ["2026-09-01", "2026-09-02"]
FILES_PER_PARTITION = 4
ROWS_PER_PARTITION = 200
# table -> (storage format, commit_mode)
TABLES = {
    "events_orc": ("ORC", "in_place"),
    "events_parquet": ("PARQUET", "in_place"),
    "events_orc_switch": ("ORC", "location_switch"),
}
REFUSAL = "storage scheme 's3like' is not known to rename atomically or to create a file exclusively"


def require_object_store(stack) -> None:
    if stack.s3like_jar is None:
        pytest.fail(stack.object_store_error)


def make_object_store_table(stack, tmp_path: Path, table: str, storage: str) -> None:
    """A partitioned table at viewfs://hcstack/objects/<db>/<table>, several small files in each
    partition. Spark writes the files to a local folder; they are then put into the s3like root
    (as an upload would), and the table and its partitions registered through the Metastore,
    which reaches the storage through the mount (its statistics are computed by listing it)."""
    from functools import reduce

    from demo_tables import events

    written = tmp_path / "written" / table
    frames = [events(stack.spark, d, ROWS_PER_PARTITION, seed=i) for i, d in enumerate(DATES)]
    reduce(lambda a, b: a.unionByName(b), frames).repartition(FILES_PER_PARTITION).write.partitionBy("dt").format(
        storage.lower()
    ).save(f"file://{written}")
    folder = stack.s3like_root / "objects" / DB / table
    for d in DATES:
        shutil.copytree(
            written / f"dt={d}", folder / f"dt={d}", ignore=shutil.ignore_patterns(".*.crc")
        )  # an object store has no checksum files
    stack.spark.sql(f"CREATE DATABASE IF NOT EXISTS {DB}")
    stack.spark.sql(f"""CREATE TABLE {DB}.{table} (
        event_id BIGINT, user_id STRING, kind INT, amount DECIMAL(12,2), ts TIMESTAMP,
        tags ARRAY<BIGINT>, attrs MAP<STRING,STRING>)
        PARTITIONED BY (dt STRING) STORED AS {storage} LOCATION '{stack.object_store_root}/{DB}/{table}'""")
    for d in DATES:
        stack.spark.sql(f"ALTER TABLE {DB}.{table} ADD PARTITION (dt='{d}')")


def tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` (relative name -> size, SHA-256 of its bytes), folders as (-1, '')."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        if p.is_file()
        else (-1, "")
        for p in sorted(root.rglob("*"))
    }


def row_content(stack, storage: str, folder: Path) -> dict[str, tuple[int, str]]:
    """Per partition: (rows, digest of the sorted rows), as ``Stack.content`` computes it; read from
    the s3like root's local folder (the test's own Spark session has no s3like class)."""
    rows: dict[str, list[str]] = {}
    for r in stack.spark.read.format(storage.lower()).load(f"file://{folder}").collect():
        rows.setdefault(f"dt={r['dt']}", []).append(repr(tuple(r)))
    return {k: (len(v), hashlib.sha256("\n".join(sorted(v)).encode()).hexdigest()) for k, v in rows.items()}


def partition_parameters(stack, table: str) -> dict[str, dict[str, str]]:
    from hmsclient import hmsclient

    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        return {p.values[0]: dict(p.parameters) for p in c.get_partitions(DB, table, -1)}


def merge_job_cmd(stack, batch_arg: str) -> list[str]:
    cmd = stack.spark_submit_cmd(batch_arg)
    conf = [a for k, v in stack.object_store_spark_conf.items() for a in ("--conf", f"{k}={v}")]
    return cmd[:1] + conf + cmd[1:]


def test_two_concurrent_merge_jobs_refuse_an_object_store_and_change_nothing(stack, tmp_path):
    require_object_store(stack)
    for table, (storage, _) in TABLES.items():
        make_object_store_table(stack, tmp_path, table, storage)
    root = stack.s3like_root
    tables_root = root / "objects" / DB
    files_before = tree(root)
    assert (
        sum(1 for name in files_before if name.endswith((".orc", ".parquet")))
        == len(TABLES) * len(DATES) * FILES_PER_PARTITION
    )
    rows_before = {t: row_content(stack, storage, tables_root / t) for t, (storage, _) in TABLES.items()}
    assert {t: {k: v[0] for k, v in rows.items()} for t, rows in rows_before.items()} == {
        t: {f"dt={d}": ROWS_PER_PARTITION for d in DATES} for t in TABLES
    }
    statistics_before = {t: partition_parameters(stack, t) for t in TABLES}
    # The Metastore listed the partitions through the mount: its statistics are the files on the storage.
    assert {t: {d: p.get("numFiles") for d, p in s.items()} for t, s in statistics_before.items()} == {
        t: {d: str(FILES_PER_PARTITION) for d in DATES} for t in TABLES
    }, statistics_before

    cfg = stack.write_config(
        tmp_path / "c.yaml",
        [{"name": f"{DB}.{t}", "commit_mode": mode} for t, (_, mode) in TABLES.items()],
        spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **stack.object_store_spark_conf},
    )
    # The plan sees only viewfs:// locations: it passes every partition to the merge jobs. run-b is
    # a dry run: the refusal comes before any footer is read, so a dry run reports it too.
    runs = {
        run: [
            b["application_args"][1] for b in stack.plan_batches(cfg, run_id=run, dry_run=run == "run-b")["spark_args"]
        ]
        for run in ("run-a", "run-b")
    }
    assert all(runs.values()), runs  # each run has merge jobs to start
    jobs = {
        run: [
            subprocess.Popen(
                merge_job_cmd(stack, batch),
                env=stack.env(cfg),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for batch in batches
        ]
        for run, batches in runs.items()
    }
    logs = {run: [p.communicate(timeout=600)[0] for p in procs] for run, procs in jobs.items()}
    for run, procs in jobs.items():
        for p, log in zip(procs, logs[run]):
            assert p.returncode == 0, log[-4000:]  # a refusal is a skip with a reason, not a failure

    expected = {(f"{DB}.{t}", f"dt={d}") for t in TABLES for d in DATES}
    for run in runs:
        results = stack.results(cfg, run)
        assert {(r["table"], r["partition"]) for r in results} == expected, results
        for r in results:
            assert r["status"] == "skipped" and REFUSAL in r["reason"], r
            assert r["files_after"] == r["files_before"] == FILES_PER_PARTITION
        log = "\n".join(logs[run])
        for table, partition in expected:  # the job's log line names the table, partition and reason
            assert any(
                table in line and partition in line and "skipped" in line and REFUSAL in line
                for line in log.splitlines()
            ), (run, table, partition)

    # Nothing written to the storage: no staging, journal or work area, every file byte for byte.
    assert tree(root) == files_before
    assert not list(root.rglob(".hive_compaction"))
    assert {t: row_content(stack, storage, tables_root / t) for t, (storage, _) in TABLES.items()} == rows_before
    assert {t: partition_parameters(stack, t) for t in TABLES} == statistics_before


@pytest.fixture(scope="module")
def object_store_jvm(stack):
    """A JVM on the wheel's jars and the s3like jar, and a Hadoop configuration that reaches the
    storage (the session's Spark JVM cannot load a class added after it started): a py4j gateway."""
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    import s3like

    require_object_store(stack)
    jars = s3like.spark_jars()
    port = launch_gateway(
        jarpath=str(next(jars.glob("py4j-*.jar"))),
        classpath=f"{jars}/*:{stack.s3like_jar}",
        die_on_exit=True,
        javaopts=["-Xmx256m"],
    )
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
    conf = gateway.jvm.org.apache.hadoop.conf.Configuration()
    for k, v in stack.object_store_spark_conf.items():
        if k.startswith("spark.hadoop."):
            conf.set(k[len("spark.hadoop.") :], v)
    try:
        yield gateway.jvm, conf
    finally:
        gateway.shutdown()


def test_the_s3like_file_system_has_an_object_stores_semantics(stack, object_store_jvm):
    """What makes it unsafe, seen: two create(overwrite=false) of one name both succeed (the last
    to close wins), and a rename is a copy (new files, the source deleted)."""
    import os

    jvm, conf = object_store_jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{stack.object_store_root}/semantics/journal.json")
    fs = path.getFileSystem(conf)
    assert str(fs.resolvePath(jvm.org.apache.hadoop.fs.Path(stack.object_store_root)).toUri().getScheme()) == "s3like"
    first, second = fs.create(path, False), fs.create(path, False)  # both checked: nothing there yet
    first.write(bytearray(b"first"))
    second.write(bytearray(b"second"))
    first.close()
    second.close()
    local = stack.s3like_root / "objects" / "semantics"
    assert (local / "journal.json").read_bytes() == b"second"
    inode = (local / "journal.json").stat().st_ino
    assert fs.rename(path.getParent(), jvm.org.apache.hadoop.fs.Path(f"{stack.object_store_root}/renamed"))
    moved = stack.s3like_root / "objects" / "renamed" / "journal.json"
    assert moved.read_bytes() == b"second" and moved.stat().st_ino != inode and not local.exists()
    assert not [f for f in os.listdir(moved.parent) if f.endswith(".crc")]


def test_exclusive_publish_and_atomic_replace_refuse_the_storage_and_create_nothing(stack, object_store_jvm):
    """``HadoopFS.create_exclusive`` (how a journal is published) and ``write_text_atomic`` (how a
    replay rewrites one) on the real s3like file system, directly and through the viewfs mount:
    OSError naming the scheme, and not even their folder is created. HadoopFS needs only a JVM and
    a Hadoop configuration (``object_store_jvm``)."""
    from hive_compaction.storage.hadoop_fs import HadoopFS

    jvm, conf = object_store_jvm
    fs = HadoopFS(SimpleNamespace(_jvm=jvm, _jsc=SimpleNamespace(hadoopConfiguration=lambda: conf)))
    before = tree(stack.s3like_root)
    for base in ("s3like:///objects/unit", f"{stack.object_store_root}/unit"):
        for publish in (fs.create_exclusive, fs.write_text_atomic):
            with pytest.raises(OSError, match=REFUSAL):
                publish(f"{base}/journal/dt_2026-09-01.json", '{"run": "unit"}')
        assert tree(stack.s3like_root) == before, base
    assert fs.resolved_scheme(stack.object_store_root) == "s3like"
