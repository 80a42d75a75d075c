"""The DAG's merge in YARN cluster mode on a real YARN and HDFS (Hadoop's MiniYARNCluster and
MiniDFSCluster from Maven Central: scripts/yarn_stack.py, scripts/hdfs_stack.py).

The merge job's driver runs in a YARN container from the package zip (``make dist``, shipped with
--py-files); the containers' Python is the plain interpreter the venv was made from, with neither
pyspark (Spark ships its pyspark.zip) nor this package. The operator is durable and tracks the
application through the ResourceManager's REST API; the results reach the refresh through the
results table. As in test_hdfs, the job user owns the table folders and is not HDFS's superuser.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from stack_sampling import require_jars
from test_hdfs import JOB_USER, METASTORE_USER, ON_HDFS, partitions, spark_tables

from harness import QUICK_JVM_START, ROOT, Stack
from hdfs_stack import Hdfs
from yarn_stack import Yarn

pytestmark = pytest.mark.integration

DB = "on_yarn"
# The containers' Python: the interpreter the venv was made from (checked below to hold neither
# pyspark nor this package).
PLAIN_PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_jars("hdfs")
    require_jars("yarn")
    state = tmp_path_factory.mktemp("yarn_cluster")
    hdfs = Hdfs(state / "hdfs", groups={JOB_USER: JOB_USER, METASTORE_USER: METASTORE_USER})
    yarn = Yarn(state / "yarn", default_fs="")
    stack = Stack(state / "stack", quick_jvm_start=True)
    stack.metastore.env["HADOOP_USER_NAME"] = METASTORE_USER
    try:
        hdfs.start()
        yarn.default_fs = hdfs.uri
        yarn.start()
        stack.start()
        hdfs.make_folder("/warehouse", METASTORE_USER)
        hdfs.make_folder(f"/warehouse/{DB}.db", JOB_USER)
        hdfs.make_folder("/user", hdfs.superuser)
        hdfs.make_folder(f"/user/{JOB_USER}", JOB_USER)  # spark-submit's staging folder
        yield hdfs, yarn, stack
    finally:
        stack.stop()
        yarn.stop()
        hdfs.stop()


def yarn_config(stack, tmp_path, tables: list[dict], **top) -> Path:
    """A config for YARN cluster mode: the package as a zip (``make dist``'s), the containers on
    the plain Python, small containers."""
    zip_path = tmp_path / "hive_compaction.zip"
    p = subprocess.run(
        [sys.executable, str(ROOT / "plugins" / "hive_compaction" / "package.py"), str(zip_path)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    # Spark's jars as a cluster with Spark installed on every node gives them (``local:``): without
    # it each application zips the ~400 MB of jars, uploads them to HDFS and unpacks them in its
    # containers (~20 s a run here), which is Spark's distribution, not this package's.
    containers = {
        "spark.yarn.appMasterEnv.PYSPARK_PYTHON": PLAIN_PYTHON,
        "spark.executorEnv.PYSPARK_PYTHON": PLAIN_PYTHON,
        "spark.yarn.am.memory": "512m",
        "spark.yarn.jars": f"local:{spark_home()}/jars/*",
        # the containers' JVMs start as the tests' local jobs do (scripts/harness.py)
        "spark.driver.extraJavaOptions": QUICK_JVM_START,
        "spark.executor.extraJavaOptions": QUICK_JVM_START,
        # and bind to loopback, as everything the tests start does
        "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": "127.0.0.1",
        "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
    }
    return stack.write_config(
        tmp_path / "c.yaml",
        tables,
        py_files=str(zip_path),
        spark_submit={
            "deploy_mode": "cluster",
            "durable": True,
            "yarn_track_via_rm_api": True,
            "driver_memory": "512m",
            "executor_memory": "512m",
            "num_executors": 1,
        },
        spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **containers},
        **top,
    )


def run_on_yarn(stack, yarn, cfg: Path):
    connection = {
        "conn_type": "spark",
        "host": "yarn",
        "extra": {"deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": yarn.webapp},
    }
    return stack.run_dag(
        cfg,
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps(connection),
        HADOOP_CONF_DIR=str(yarn.conf_dir),
        YARN_CONF_DIR=str(yarn.conf_dir),
        HADOOP_USER_NAME=JOB_USER,
        SPARK_HOME=spark_home(),
    )


def application(yarn, log: str, final: tuple[str, ...] = ("FINISHED", "FAILED", "KILLED")) -> dict:
    """The ResourceManager's report of the one application the run's log names, once it ended."""
    [app] = set(re.findall(r"Identified spark application id: (application_\d+_\d+)", log))
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(f"{yarn.webapp}/ws/v1/cluster/apps/{app}", timeout=30) as r:
            report = json.load(r)["app"]
        if report["state"] in final or time.monotonic() > deadline:
            return report
        time.sleep(1)


def spark_home() -> str:
    """The venv's Spark (spark-submit finds it alone unless a PYSPARK_PYTHON without pyspark is set)."""
    import pyspark

    return str(Path(pyspark.__file__).parent)


def test_the_containers_python_holds_neither_pyspark_nor_the_package():
    for module in ("pyspark", "hive_compaction"):
        p = subprocess.run([PLAIN_PYTHON, "-c", f"import {module}"], capture_output=True, text=True)
        assert p.returncode != 0 and "ModuleNotFoundError" in p.stderr, (module, p.stderr)


@pytest.mark.variant(ON_HDFS, "YARN cluster mode")
def test_the_dag_merges_in_yarn_cluster_mode_from_the_zip(cluster, tmp_path):
    hdfs, yarn, stack = cluster
    table = f"{DB}.events"
    spark_tables(stack, "create", DB, f"{hdfs.uri}/warehouse/{DB}.db", "events:ORC", "--dates", "2026-10-01")
    before = spark_tables(stack, "content", table)["tables"]
    cfg = yarn_config(stack, tmp_path, [{"name": table}])
    run = run_on_yarn(stack, yarn, cfg)
    assert run.state == "success", run.log[-8000:]

    report = application(yarn, run.log)
    assert (report["state"], report["finalStatus"], report["user"]) == ("FINISHED", "SUCCEEDED", JOB_USER), report
    assert report["applicationType"] == "SPARK"
    assert spark_tables(stack, "content", table)["tables"] == before
    [after] = partitions(stack, hdfs, "events", DB).values()
    # one file, and the statistics the refresh wrote from what the job recorded in the results table
    assert len(after["files"]) == 1 and after["hms"] == ("1", str(sum(after["files"].values()))), after
    assert "1 of 1 partitions merged" in run.log
    # The driver ran in the ApplicationMaster's container (its log is the container's stdout): its
    # groups were merged in the executors' tasks by the engine's jar, which --jars shipped to YARN.
    driver = [
        c.read_text(errors="replace") for c in yarn.state.glob(f"target/**/{report['id']}/container_*_000001/stdout")
    ]
    assert any("with the columnar engine" in text for text in driver), driver


@pytest.mark.stacks_only
def test_a_merge_that_times_out_kills_its_yarn_application(cluster, tmp_path):
    """A Hive writer holds the partition's Metastore lock, so the merge job waits at its commit
    (lock_wait_seconds: 10 minutes) with its application running; the task's timeout
    (merge_timeout_minutes: 1) stops it, and the provider kills the application through the
    ResourceManager. The partition is as it was."""
    from hmsclient import hmsclient
    from hmsclient.genthrift.hive_metastore import ttypes

    hdfs, yarn, stack = cluster
    date = "2026-10-02"
    spark_tables(stack, "create", DB, f"{hdfs.uri}/warehouse/{DB}.db", "held:PARQUET", "--dates", date)
    before = spark_tables(stack, "content", f"{DB}.held")["tables"]
    files = partitions(stack, hdfs, "held", DB)
    cfg = yarn_config(
        stack, tmp_path, [{"name": f"{DB}.held", "lock_wait_seconds": 600}], airflow_tasks={"merge_timeout_minutes": 1}
    )
    writer = ttypes.LockComponent(
        type=ttypes.LockType.EXCLUSIVE,
        level=ttypes.LockLevel.PARTITION,
        dbname=DB,
        tablename="held",
        partitionname=f"dt={date}",
        operationType=ttypes.DataOperationType.NO_TXN,
        isAcid=False,
    )
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        held = c.lock(ttypes.LockRequest(component=[writer], user="hive-writer", hostname="localhost"))
        assert held.state == ttypes.LockState.ACQUIRED
        done = threading.Event()

        def heartbeat():  # a live writer's: the Metastore would drop a silent lock
            with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as beat:
                while not done.wait(2):
                    beat.heartbeat(ttypes.HeartbeatRequest(lockid=held.lockid, txnid=0))

        threading.Thread(target=heartbeat, daemon=True).start()
        try:
            run = run_on_yarn(stack, yarn, cfg)
        finally:
            done.set()
            c.unlock(ttypes.UnlockRequest(lockid=held.lockid))
    assert run.state == "failed", run.log[-8000:]
    assert "AirflowTaskTimeout" in run.log or "Timeout" in run.log, run.log[-5000:]
    report = application(yarn, run.log)
    assert (report["state"], report["finalStatus"]) == ("KILLED", "KILLED"), report
    assert spark_tables(stack, "content", f"{DB}.held")["tables"] == before
    assert partitions(stack, hdfs, "held", DB) == files
