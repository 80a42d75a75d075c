"""The full DAG on a real multi-JVM Spark cluster: a standalone Master and two 1-core Workers
started from the pyspark wheel (scripts/spark_cluster.py), executors in JVMs of their own.

The merge jobs run in client mode (the driver is the spark-submit process here); each
application is capped at one core (``spark.cores.max``) so two merges share the two workers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from test_end_to_end import assert_statistics_match_disk

pytestmark = pytest.mark.integration

DATES = ["2026-05-01", "2026-05-02"]
# table -> (storage, merge mode): every format with every mode
TABLES = {
    "orc_copy": ("ORC", "copy"),
    "orc_rewrite": ("ORC", "rewrite"),
    "parquet_copy": ("PARQUET", "copy"),
    "parquet_rewrite": ("PARQUET", "rewrite"),
}
ON_CLUSTER = "standalone"
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.cores.max": "1",
    "spark.executor.memory": "512m",
    "spark.driver.host": "127.0.0.1",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Its own component: the only tests whose executors run in JVMs of their own."""
    import shutil

    from spark_cluster import ClusterError, StandaloneCluster, spark_home

    if shutil.which("java") is None:
        pytest.skip("no java on PATH: a Spark standalone cluster cannot start")
    if not (spark_home() / "jars").is_dir():
        pytest.skip(f"the pyspark package at {spark_home()} has no jars/ folder to start a cluster from")
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        c.start()
    except ClusterError as e:
        pytest.skip(f"the Spark standalone cluster (spark-class Master + 2 Workers) did not start: {e}")
    yield c
    c.stop()


def cluster_conn(cluster) -> str:
    return json.dumps({"conn_type": "spark", "host": cluster.master_url})


def write_config(stack, path: Path, db: str) -> Path:
    """Two Spark jobs for the run: half the partitions each."""
    return stack.write_config(
        path,
        [{"name": f"{db}.{t}", "merge_mode": mode} for t, (_, mode) in TABLES.items()],
        spark_conf=SPARK_CONF,
        fan_out={"max_spark_jobs": 2, "max_partitions_per_job": len(TABLES) * len(DATES) // 2},
    )


def make_tables(stack, db: str, files: int, rows: int) -> dict[str, dict]:
    for t, (storage, _) in TABLES.items():
        stack.make_table(db, t, storage, DATES, files=files, rows=rows)
    return {t: stack.content(db, t) for t in TABLES}


def assert_compacted(stack, db: str, content_before: dict, run) -> None:
    assert run.state == "success", run.log[-5000:]
    assert run.states["merge"] == ["success", "success"], run.states
    assert run.states["refresh_metastore"] == ["success"]
    for t in TABLES:
        assert stack.content(db, t) == content_before[t], t  # every row, every column
        after = stack.snapshot(db, t)
        assert sorted(after) == [f"dt={d}" for d in DATES]
        assert {n: p["num_files"] for n, p in after.items()} == {n: 1 for n in after}, t
        assert_statistics_match_disk(stack, db, t, content_before[t])


def results_by_batch(stack, cfg: Path, run_id: str) -> dict[int, list]:
    """What each merge job (batch) of the run recorded in the results table."""
    from hive_compaction.airflow import config, results_reader
    from hive_compaction.airflow.metastore_hook import Metastore
    from hive_compaction.model.results import decode_results
    from hive_compaction.storage.paths import run_tag

    settings = config.load(cfg)
    with Metastore("127.0.0.1", stack.port) as hms:
        recorded = results_reader.read_run(hms, settings.results_table, run_tag(run_id))
    return {b: decode_results(params) for b, params in recorded.items()}


def finished_apps(cluster) -> dict[str, dict]:
    return {a["id"]: a for a in cluster.status()["completedapps"]}


def executor_logs(cluster, app_id: str) -> list[Path]:
    return sorted(p for w in cluster.worker_dirs() for p in (w / app_id).glob("*/stderr"))


@pytest.fixture(scope="module")
def data_sets(stack):
    """The tables, fresh: {database: {table: content}}."""
    made = {ON_CLUSTER: make_tables(stack, ON_CLUSTER, files=4, rows=300)}
    for t in TABLES:
        assert {n: p["num_files"] for n, p in stack.snapshot(ON_CLUSTER, t).items()} == {f"dt={d}": 4 for d in DATES}, t
    return made


@pytest.fixture(scope="module")
def cluster_run(stack, cluster, data_sets, tmp_path_factory):
    """The DAG run on the standalone cluster: (config, run, apps finished before)."""
    cfg = write_config(stack, tmp_path_factory.mktemp("standalone") / "c.yaml", ON_CLUSTER)
    apps_before = finished_apps(cluster)
    run = stack.run_dag(cfg, AIRFLOW_CONN_SPARK_DEFAULT=cluster_conn(cluster))
    return cfg, run, apps_before


def test_dag_on_a_standalone_cluster_keeps_every_row(stack, cluster, data_sets, cluster_run):
    db, content_before = ON_CLUSTER, data_sets[ON_CLUSTER]
    cfg, run, apps_before = cluster_run
    assert_compacted(stack, db, content_before, run)
    assert cluster.master_url in run.log  # spark-submit --master spark://127.0.0.1:<port>
    assert "with the columnar engine" in run.log  # the engine's jar ran in the cluster's executors
    assert "files, in executor tasks) in" in run.log  # and the copies too, on a cluster

    by_batch = results_by_batch(stack, cfg, run.run_id)
    results = [r for rs in by_batch.values() for r in rs]
    assert sorted((r.table, r.partition) for r in results) == sorted(
        (f"{db}.{t}", f"dt={d}") for t in TABLES for d in DATES
    )
    for r in results:
        assert r.status.value == "merged", r
        assert r.mode == TABLES[r.table.split(".")[1]][1], r

    # The run's two merge applications ran on the cluster, one core each ...
    apps = {i: a for i, a in finished_apps(cluster).items() if i not in apps_before}
    assert len(apps) == 2, apps
    assert all(a["name"].startswith("hive-compaction ") and a["cores"] == 1 for a in apps.values()), apps
    # ... with executors in JVMs of their own, launched by the workers (their own stderr, pid).
    workers = [cluster.worker_status(i) for i in range(cluster.workers)]
    launched = {e["appid"] for w in workers for e in w["finishedexecutors"] + w["executors"]}
    assert set(apps) <= launched, (apps, launched)
    # Each application is named by the operator after the tables it holds (the merge tasks' label).
    assert sorted(by_batch) == [0, 1], sorted(by_batch)
    named = {i: [t for t in TABLES if f".{t}:" in a["name"]] for i, a in apps.items()}
    assert all(named.values()), apps
    rewrite_apps = [i for i, ts in named.items() if any(TABLES[t][1] == "rewrite" for t in ts)]
    assert rewrite_apps, (apps, by_batch)
    for app_id in apps:
        logs = executor_logs(cluster, app_id)
        assert logs, f"no executor stderr under the workers' work dirs for {app_id}"
        text = "\n".join(p.read_text(errors="replace") for p in logs)
        # A copy-only application needs no executor: it may end before its executor's JVM is up
        # (seen on a loaded machine), so only the rewrite's must have started and run tasks.
        if app_id in rewrite_apps:  # the rewrite's Spark tasks ran on the executor, not the driver
            assert re.search(r"Started daemon with process name: \d+@", text), text[-3000:]
            assert re.search(r"Executor: Running task \d+\.\d+ in stage", text), text[-3000:]
            assert re.search(r"Executor: Finished task \d+\.\d+ in stage", text), text[-3000:]
            # the merge tasks' classes came to the executor's JVM in the engine's jar (spark-submit --jars)
            assert re.search(r"Fetching spark://\S+/hive-compaction-engine\.jar", text), text[-3000:]
    for app_id, a in sorted(apps.items()):
        logs = executor_logs(cluster, app_id)
        tasks = sum(len(re.findall(r"Executor: Running task", p.read_text(errors="replace"))) for p in logs)
        print(
            f"{app_id} {a['name']!r}: {a['cores']} core, {a['duration'] / 1000:.1f}s, {tasks} task(s) on "
            f"executor(s) {[str(p.parent.relative_to(cluster.state)) for p in logs]}"
        )
    first, second = sorted(apps.values(), key=lambda a: a["starttime"])
    overlap = first["starttime"] + first["duration"] > second["starttime"]
    print(
        "the two applications ran "
        + ("at the same time" if overlap else "one after the other (airflow dags test runs mapped tasks one at a time)")
    )
