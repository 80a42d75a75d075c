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
import urllib.request
from pathlib import Path

import pytest

from harness import ROOT, Stack
from hdfs_stack import Hdfs
from yarn_stack import Yarn
from test_hdfs import JOB_USER, METASTORE_USER, partitions, spark_tables

pytestmark = pytest.mark.integration

DB = "on_yarn"
# The containers' Python: the interpreter the venv was made from (checked below to hold neither
# pyspark nor this package).
PLAIN_PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
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


def spark_home() -> str:
    """The venv's Spark (spark-submit finds it alone unless a PYSPARK_PYTHON without pyspark is set)."""
    import pyspark
    return str(Path(pyspark.__file__).parent)


def test_the_containers_python_holds_neither_pyspark_nor_the_package():
    for module in ("pyspark", "hive_compaction"):
        p = subprocess.run([PLAIN_PYTHON, "-c", f"import {module}"], capture_output=True, text=True)
        assert p.returncode != 0 and "ModuleNotFoundError" in p.stderr, (module, p.stderr)


def test_the_dag_merges_in_yarn_cluster_mode_from_the_zip(cluster, tmp_path):
    hdfs, yarn, stack = cluster
    table = f"{DB}.events"
    spark_tables(stack, "create", DB, f"{hdfs.uri}/warehouse/{DB}.db", "events:ORC", "--dates", "2026-10-01")
    before = spark_tables(stack, "content", table)["tables"]
    zip_path = tmp_path / "hive_compaction.zip"
    p = subprocess.run([sys.executable, str(ROOT / "plugins" / "hive_compaction" / "package.py"), str(zip_path)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    containers = {"spark.yarn.appMasterEnv.PYSPARK_PYTHON": PLAIN_PYTHON, "spark.executorEnv.PYSPARK_PYTHON": PLAIN_PYTHON,
                  "spark.yarn.am.memory": "512m"}
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": table}], py_files=str(zip_path),
                             spark_submit={"deploy_mode": "cluster", "durable": True, "yarn_track_via_rm_api": True,
                                           "driver_memory": "512m", "executor_memory": "512m", "num_executors": 1},
                             spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **containers})
    connection = {"conn_type": "spark", "host": "yarn",
                  "extra": {"deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": yarn.webapp}}
    run = stack.run_dag(cfg, AIRFLOW_CONN_SPARK_DEFAULT=json.dumps(connection), HADOOP_CONF_DIR=str(yarn.conf_dir),
                        YARN_CONF_DIR=str(yarn.conf_dir), HADOOP_USER_NAME=JOB_USER, SPARK_HOME=spark_home())
    assert run.state == "success", run.log[-8000:]

    [app] = set(re.findall(r"Identified spark application id: (application_\d+_\d+)", run.log))
    with urllib.request.urlopen(f"{yarn.webapp}/ws/v1/cluster/apps/{app}", timeout=30) as r:
        report = json.load(r)["app"]
    assert (report["state"], report["finalStatus"], report["user"]) == ("FINISHED", "SUCCEEDED", JOB_USER), report
    assert report["applicationType"] == "SPARK"
    assert spark_tables(stack, "content", table)["tables"] == before
    [after] = partitions(stack, hdfs, "events", DB).values()
    # one file, and the statistics the refresh wrote from what the job recorded in the results table
    assert len(after["files"]) == 1 and after["hms"] == ("1", str(sum(after["files"].values()))), after
    assert "1 of 1 partitions merged" in run.log
