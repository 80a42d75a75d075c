"""The ``spark_submit:`` section: parsing, and the merge operator it builds on YARN, Kubernetes
and a standalone cluster (the DAG imported with a DagBag; the provider's own command line and
run-time checks exercised without running spark-submit)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import yaml

from hive_compaction.airflow import config
from hive_compaction.airflow.config import ConfigError, SparkSubmitOptions, parse
from hive_compaction.airflow.operator_args import merge_operator_kwargs
from hive_compaction.jobs import ENGINE_JAR_NAME, MERGE_JOB

# The merge engine's jar beside the default merge job (make engine built it): the merge tasks' --jars.
ENGINE_JAR = str(MERGE_JOB.parent / ENGINE_JAR_NAME)
ROOT = Path(__file__).resolve().parents[1]


def errors_of(spark_submit, **top) -> str:
    with pytest.raises(ConfigError) as e:
        parse({"spark_submit": spark_submit, **top}, "cfg.yaml")
    return str(e.value)


# --- parsing ----------------------------------------------------------------------------------


def test_unset_section_keeps_todays_operator_arguments():
    for raw in ({}, {"spark_submit": None}, {"spark_submit": {}}):
        s = parse(
            {
                "spark_conn_id": "spark_yarn",
                "pool": "compaction",
                "py_files": "hdfs:///lib.zip",
                "spark_conf": {"spark.ui.enabled": False},
                **raw,
            }
        )
        assert s.spark_submit == SparkSubmitOptions()
        assert merge_operator_kwargs(s) == {
            "conn_id": "spark_yarn",
            "py_files": "hdfs:///lib.zip",
            "pool": "compaction",
            "jars": ENGINE_JAR,  # the merge engine's jar beside the default merge job
            "conf": {"spark.ui.enabled": "False"},
        }
    assert merge_operator_kwargs(config.Settings()) == {
        "conn_id": "spark_default",
        "py_files": None,
        "pool": "default_pool",
        "jars": ENGINE_JAR,
        "conf": {},
    }


def test_good_values():
    s = parse(
        yaml.safe_load("""
spark_conf: {spark.ui.enabled: "false"}
spark_submit:
  deploy_mode: cluster
  durable: true
  yarn_track_via_rm_api: true
  status_poll_interval: 15
  driver_memory: 2g
  driver_cores: 2
  executor_memory: " 4096M "
  executor_cores: 4
  num_executors: 10
  cores_max: 40
  queue: etl
  principal: compaction@EXAMPLE.COM
  keytab: /etc/security/keytabs/compaction.keytab
  proxy_user: hive
  archives: [hdfs:///envs/py.tar.gz#env, hdfs:///x.zip]
  jars: hdfs:///jars/a.jar,hdfs:///jars/b.jar
  properties_file: /etc/spark/compaction.conf
  env_vars: {PYSPARK_PYTHON: ./env/bin/python, RETRIES: 3}
  verbose: false
  spark_binary: spark3-submit
  post_submit_commands: ["curl -X POST localhost:15020/quitquitquit"]
  driver_class_path: ~        # empty: not set
"""),
        "cfg.yaml",
    )
    o = s.spark_submit
    assert (o.deploy_mode, o.durable, o.yarn_track_via_rm_api) == ("cluster", True, True)
    assert o.track_driver_via_k8s_api is None
    assert (o.driver_memory, o.executor_memory, o.executor_cores, o.num_executors) == ("2g", "4096M", 4, 10)
    assert o.archives == "hdfs:///envs/py.tar.gz#env,hdfs:///x.zip"
    assert o.env_vars == {"PYSPARK_PYTHON": "./env/bin/python", "RETRIES": "3"}
    assert o.post_submit_commands == ("curl -X POST localhost:15020/quitquitquit",)
    assert o.driver_class_path is None

    kwargs = merge_operator_kwargs(s)
    assert kwargs == {
        "conn_id": "spark_default",
        "py_files": None,
        "pool": "default_pool",
        "conf": {"spark.ui.enabled": "false", "spark.cores.max": "40", "spark.driver.cores": "2"},
        "deploy_mode": "cluster",
        "durable": True,
        "yarn_track_via_rm_api": True,
        "status_poll_interval": 15,
        "driver_memory": "2g",
        "executor_memory": "4096M",
        "executor_cores": 4,
        "num_executors": 10,
        "yarn_queue": "etl",  # not "queue": that is Airflow's executor queue
        "principal": "compaction@EXAMPLE.COM",
        "keytab": "/etc/security/keytabs/compaction.keytab",
        "proxy_user": "hive",
        "archives": "hdfs:///envs/py.tar.gz#env,hdfs:///x.zip",
        "jars": f"{ENGINE_JAR},hdfs:///jars/a.jar,hdfs:///jars/b.jar",
        "properties_file": "/etc/spark/compaction.conf",
        "env_vars": {"PYSPARK_PYTHON": "./env/bin/python", "RETRIES": "3"},
        "verbose": False,
        "spark_binary": "spark3-submit",
        "post_submit_commands": ["curl -X POST localhost:15020/quitquitquit"],
    }
    # the settings stay frozen: the operator gets copies it may change
    kwargs["env_vars"]["X"] = "1"
    kwargs["conf"]["spark.x"] = "1"
    assert "X" not in s.spark_submit.env_vars and "spark.x" not in s.spark_conf


def test_every_option_is_an_argument_the_operator_accepts():
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    every = SparkSubmitOptions(
        deploy_mode="client",
        durable=False,
        yarn_track_via_rm_api=False,
        track_driver_via_k8s_api=False,
        status_poll_interval=5,
        driver_memory="1g",
        driver_cores=1,
        executor_memory="1g",
        executor_cores=1,
        num_executors=1,
        total_executor_cores=2,
        cores_max=None,
        queue="q",
        principal="p",
        keytab="/k",
        proxy_user="u",
        use_krb5ccache=False,
        archives="a",
        jars="j",
        files="f",
        packages="g:a:1",
        exclude_packages="g:b",
        repositories="https://repo",
        driver_class_path="/cp",
        properties_file="/p",
        env_vars={"A": "1"},
        verbose=True,
        spark_binary="spark-submit",
        post_submit_commands=("true",),
    )
    assert all(getattr(every, f) is not None or f == "cores_max" for f in every.__dataclass_fields__)
    kwargs = merge_operator_kwargs(config.Settings(spark_submit=every))
    op = SparkSubmitOperator(task_id="x", application="a.py", **kwargs)
    assert op.durable is False and op.pool == "default_pool" and op.queue == "default"  # executor queue untouched


@pytest.mark.parametrize(
    "spark_submit, key, says",
    [
        ({"master": "yarn"}, "master", "connection"),
        ({"py_files": "x.zip"}, "py_files", "top-level"),
        ({"conf": {"a": 1}}, "conf", "spark_conf"),
        ({"yarn_queue": "etl"}, "yarn_queue", "use queue"),
        ({"name": "x"}, "name", "own application"),
        ({"driver_mem": "2g"}, "driver_mem", "known:"),
        ({"deploy_mode": "local"}, "deploy_mode", "client or cluster"),
        ({"deploy_mode": True}, "deploy_mode", "client or cluster"),
        ({"durable": "yes"}, "durable", "true or false"),
        ({"yarn_track_via_rm_api": 1}, "yarn_track_via_rm_api", "true or false"),
        ({"track_driver_via_k8s_api": "true"}, "track_driver_via_k8s_api", "true or false"),
        ({"verbose": 0}, "verbose", "true or false"),
        ({"driver_memory": "2 GB"}, "driver_memory", "memory size"),
        ({"driver_memory": 2048}, "driver_memory", "memory size"),
        ({"executor_memory": "lots"}, "executor_memory", "memory size"),
        ({"executor_memory": "0g"}, "executor_memory", "memory size"),
        ({"executor_cores": 0}, "executor_cores", ">= 1"),
        ({"executor_cores": "4"}, "executor_cores", ">= 1"),
        ({"num_executors": True}, "num_executors", ">= 1"),
        ({"total_executor_cores": 1.5}, "total_executor_cores", ">= 1"),
        ({"cores_max": -2}, "cores_max", ">= 1"),
        ({"driver_cores": 0}, "driver_cores", ">= 1"),
        ({"status_poll_interval": 0}, "status_poll_interval", ">= 1"),
        ({"queue": ""}, "queue", "non-empty string"),
        ({"queue": 5}, "queue", "non-empty string"),
        ({"principal": ["a"]}, "principal", "non-empty string"),
        ({"keytab": {"path": "/k"}}, "keytab", "non-empty string"),
        ({"properties_file": "  "}, "properties_file", "non-empty string"),
        ({"jars": []}, "jars", "comma-separated"),
        ({"archives": ["a.zip", 3]}, "archives", "comma-separated"),
        ({"files": ["a", ""]}, "files", "comma-separated"),
        ({"env_vars": ["A=1"]}, "env_vars", "mapping"),
        ({"env_vars": {"A-B": "1"}}, "env_vars", "'A-B'"),
        ({"env_vars": {"A": None}}, "env_vars", "string or number"),
        ({"env_vars": {"A": True}}, "env_vars", "string or number"),
        ({"spark_binary": "/bin/sh"}, "spark_binary", "spark-submit"),
        ({"post_submit_commands": [""]}, "post_submit_commands", "shell commands"),
    ],
)
def test_bad_value_names_the_file_the_section_and_the_key(spark_submit, key, says):
    msg = errors_of(spark_submit)
    assert msg.startswith("cfg.yaml: spark_submit: ")
    assert f"'{key}'" in msg and says in msg


def test_section_must_be_a_mapping():
    msg = errors_of(["durable"])
    assert msg.startswith("cfg.yaml: spark_submit: ") and "mapping" in msg


@pytest.mark.parametrize(
    "spark_submit, spark_conf, keys",
    [
        ({"cores_max": 4, "total_executor_cores": 4}, {}, ["cores_max", "total_executor_cores"]),
        ({"cores_max": 4}, {"spark.cores.max": 8}, ["cores_max", "spark.cores.max"]),
        ({"driver_cores": 2}, {"spark.driver.cores": 2}, ["driver_cores", "spark.driver.cores"]),
        ({"track_driver_via_k8s_api": True, "deploy_mode": "client"}, {}, ["track_driver_via_k8s_api", "cluster"]),
        (
            {"yarn_track_via_rm_api": True},
            {"spark.yarn.submit.waitAppCompletion": "true"},
            ["yarn_track_via_rm_api", "waitAppCompletion"],
        ),
        (
            {"track_driver_via_k8s_api": True},
            {"spark.kubernetes.submission.waitAppCompletion": True},
            ["track_driver_via_k8s_api", "waitAppCompletion"],
        ),
        ({"use_krb5ccache": True, "principal": "p@R"}, {}, ["use_krb5ccache", "principal and keytab"]),
        ({"use_krb5ccache": True, "keytab": "/k"}, {}, ["use_krb5ccache", "ticket cache"]),
    ],
)
def test_combinations_the_provider_would_refuse(spark_submit, spark_conf, keys):
    msg = errors_of(spark_submit, spark_conf=spark_conf)
    assert msg.startswith("cfg.yaml: spark_submit: ")
    assert all(k in msg for k in keys), msg


def test_the_ticket_cache_is_spark_conf_not_the_operators_argument():
    """use_krb5ccache becomes spark.kerberos.renewal.credentials=ccache: the operator's own adds a
    --principal (Airflow's [kerberos] principal when none is set), which Spark 3+ refuses
    without a keytab."""
    kwargs = merge_operator_kwargs(parse({"spark_submit": {"use_krb5ccache": True}}))
    assert "use_krb5ccache" not in kwargs and "principal" not in kwargs
    assert kwargs["conf"]["spark.kerberos.renewal.credentials"] == "ccache"
    kwargs = merge_operator_kwargs(parse({"spark_submit": {"use_krb5ccache": False}}))
    assert "use_krb5ccache" not in kwargs and "spark.kerberos.renewal.credentials" not in kwargs["conf"]


def test_tracking_with_wait_app_completion_false_is_fine():
    s = parse(
        {"spark_submit": {"yarn_track_via_rm_api": True}, "spark_conf": {"spark.yarn.submit.waitAppCompletion": False}}
    )
    assert s.spark_submit.yarn_track_via_rm_api is True


def test_load_names_the_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("spark_submit:\n  executor_memory: plenty\n")
    with pytest.raises(ConfigError) as e:
        config.load(p)
    assert str(e.value).startswith(f"{p}: spark_submit: key 'executor_memory'")
    assert config.load_lenient(p)[0] == config.Settings()  # the DAG still imports, with defaults


def test_shipped_config_sets_no_spark_submit_option():
    assert config.load(ROOT / "dags" / "hive_compaction.yaml").spark_submit == SparkSubmitOptions()


def test_shipped_examples_parse():
    """The commented spark_submit examples in the shipped YAML are valid once uncommented."""
    lines = (ROOT / "dags" / "hive_compaction.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.rstrip() == "# spark_submit:")
    block = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        block.append(line[2:] if line.startswith("# ") else line[1:])
    s = parse(yaml.safe_load("\n".join(block)), "example")
    assert s.spark_submit != SparkSubmitOptions()


# --- the DAG's merge operator on each kind of cluster -----------------------------------------

YARN_RM = "http://127.0.0.1:8088"
CLUSTERS = {
    # YARN cluster mode: Airflow 3.3's durable default needs RM API tracking, which needs the
    # ResourceManager's web address in the connection.
    "yarn-cluster": (
        {
            "conn_type": "spark",
            "host": "yarn",
            "extra": {"deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": YARN_RM},
        },
        {
            "durable": True,
            "yarn_track_via_rm_api": True,
            "queue": "etl",
            "driver_memory": "2g",
            "executor_memory": "4g",
            "executor_cores": 2,
            "num_executors": 8,
            "principal": "compaction@EXAMPLE.COM",
            "keytab": "/etc/security/keytabs/compaction.keytab",
            "archives": "hdfs:///envs/pyspark.tar.gz#env",
            "env_vars": {"PYSPARK_PYTHON": "./env/bin/python"},
        },
        [
            "--master yarn",
            "--deploy-mode cluster",
            "--queue etl",
            "--driver-memory 2g",
            "--executor-memory 4g",
            "--executor-cores 2",
            "--num-executors 8",
            "--principal compaction@EXAMPLE.COM",
            "--keytab /etc/security/keytabs/compaction.keytab",
            "--archives hdfs:///envs/pyspark.tar.gz#env",
            "--conf spark.yarn.submit.waitAppCompletion=false",
            "--conf spark.yarn.appMasterEnv.PYSPARK_PYTHON=./env/bin/python",
        ],
    ),
    "k8s-cluster": (
        {
            "conn_type": "spark",
            "host": "k8s://https://127.0.0.1:6443",
            "extra": {"deploy-mode": "cluster", "namespace": "compaction"},
        },
        {
            "track_driver_via_k8s_api": True,
            "driver_memory": "1g",
            "driver_cores": 1,
            "executor_memory": "3g",
            "executor_cores": 2,
            "num_executors": 4,
            "env_vars": {"TZ": "UTC"},
        },
        [
            "--master k8s://https://127.0.0.1:6443",
            "--deploy-mode cluster",
            "--conf spark.kubernetes.namespace=compaction",
            "--conf spark.kubernetes.submission.waitAppCompletion=false",
            "--conf spark.kubernetes.driverEnv.TZ=UTC",
            "--conf spark.driver.cores=1",
            "--driver-memory 1g",
            "--executor-memory 3g",
            "--executor-cores 2",
            "--num-executors 4",
        ],
    ),
    "standalone-client": (
        {"conn_type": "spark", "host": "spark://127.0.0.1:7077", "extra": {"deploy-mode": "client"}},
        {
            "durable": True,
            "driver_memory": "1g",
            "executor_memory": "2g",
            "executor_cores": 1,
            "cores_max": 4,
            "jars": ["/opt/jars/a.jar", "/opt/jars/b.jar"],
            "verbose": True,
            "env_vars": {"SPARK_LOCAL_IP": "127.0.0.1"},
        },
        [
            "--master spark://127.0.0.1:7077",
            "--deploy-mode client",
            "--conf spark.cores.max=4",
            "--driver-memory 1g",
            "--executor-memory 2g",
            "--executor-cores 1",
            f"--jars {ENGINE_JAR},/opt/jars/a.jar,/opt/jars/b.jar",
            "--verbose",
        ],
    ),
}


def has_run(cmd: list[str], run: list[str]) -> bool:
    """``run`` appears in ``cmd`` as consecutive items (a flag and its value)."""
    return any(cmd[i : i + len(run)] == run for i in range(len(cmd)))


def write_config(path: Path, **top) -> Path:
    """The shape of scripts/harness.py's write_config."""
    raw = {
        "metastore_conn_id": "hive_metastore",
        "spark_conn_id": "spark_default",
        "retries": 0,
        "spark_conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        "tables": [{"name": "db.events"}],
        "defaults": {"quiet_period_minutes": 0},
        **top,
    }
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def merge_task(tmp_path, monkeypatch):
    """Import the DAG with a config and a Spark connection; return (the mapped merge task, kwargs of
    the config, the serialized-and-back task)."""

    def build(connection: dict, spark_submit: dict):
        cfg = write_config(tmp_path / "c.yaml", spark_submit=spark_submit)
        monkeypatch.setenv(config.CONFIG_ENV, str(cfg))
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
        from airflow.models import DagBag

        bag = DagBag(dag_folder=str(ROOT / "dags"))
        assert bag.import_errors == {}
        dag = bag.dags["hive_compaction"]
        expected = merge_operator_kwargs(config.load(cfg))  # strict: the config is valid
        # What the scheduler stores must carry the same arguments.
        stored = _stored(dag).get_task("merge")
        return dag.get_task("merge"), expected, stored

    return build


def unmapped(task):
    """The operator a worker builds for one mapped merge (kwargs as the plan task returns them)."""
    return task.unmap({"application_args": ["--batch", "e30="], "name": "hive-compaction db.events"})


@pytest.fixture
def fake_kube_client(monkeypatch):
    """The hook refuses a k8s:// master without the cncf-kubernetes provider (not installed here;
    production workers need it). Nothing here talks to Kubernetes."""
    from airflow.providers.apache.spark.hooks import spark_submit as hook_module

    monkeypatch.setattr(hook_module, "kube_client", types.SimpleNamespace(), raising=False)


@pytest.fixture
def fake_requests_kerberos(monkeypatch):
    """RM API tracking with a principal and keytab authenticates with requests-kerberos
    (production workers need it installed); only its presence is checked before polling."""
    monkeypatch.setitem(
        sys.modules, "requests_kerberos", types.SimpleNamespace(HTTPKerberosAuth=lambda: "kerberos-auth")
    )


def run_execute(op, monkeypatch) -> str:
    """op.execute() up to the point where it would start spark-submit: 'submit' (wait for the
    spark-submit process) or 'resumable' (submit, then track the job by its id), after every check
    the provider makes on the way."""
    hook = op._get_hook()
    op._hook = hook
    outcome = []
    monkeypatch.setattr(hook, "submit", lambda application: outcome.append("submit"))
    monkeypatch.setattr(op, "execute_resumable", lambda context: outcome.append("resumable"))
    op.execute({})
    return outcome[0]


@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_dagbag_builds_the_merge_operator(cluster, merge_task, monkeypatch, fake_kube_client, fake_requests_kerberos):
    connection, spark_submit, expected_args = CLUSTERS[cluster]
    task, expected, stored = merge_task(connection, spark_submit)
    for t in (task, stored):  # (serialization leaves out None values)
        assert {k: t.partial_kwargs.get(k) for k in expected if k != "pool"} == {
            k: v for k, v in expected.items() if k != "pool"
        }
        assert t.pool == "default_pool"

    op = unmapped(task)
    # the same arguments passed by hand build the same operator
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    by_hand = SparkSubmitOperator(task_id="x", application="a.py", **expected)
    for o in (op, by_hand):
        cmd = o._get_hook()._build_spark_submit_command(o.application)
        for args in expected_args + ["--conf spark.ui.enabled=false"]:
            assert has_run(cmd, args.split(" ")), (args, cmd)
    cmd = op._get_hook()._build_spark_submit_command(op.application)
    assert cmd[0] == "spark-submit"
    # the config's merge_job, by default the copy inside the installed package
    assert cmd[-3:] == [str(ROOT / "plugins" / "hive_compaction" / "jobs" / "compact_partitions.py"), "--batch", "e30="]
    assert cmd[cmd.index("--name") + 1] == "hive-compaction db.events"

    # what execute() would do, after the provider's own checks of the combination
    outcome = run_execute(op, monkeypatch)
    assert outcome == {"yarn-cluster": "resumable", "k8s-cluster": "resumable", "standalone-client": "submit"}[cluster]


def test_yarn_cluster_durable_without_tracking_is_refused_by_the_provider(merge_task, monkeypatch):
    """Why yarn_track_via_rm_api exists in the config: Airflow 3.3's durable default (or durable:
    true) in YARN cluster mode, which only the connection reveals, fails every merge task."""
    connection = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}
    task, _, _ = merge_task(connection, {})
    op = unmapped(task)
    assert op.durable is True  # the provider's default under Airflow 3.3
    with pytest.raises(ValueError, match="requires yarn_track_via_rm_api=True"):
        run_execute(op, monkeypatch)

    # durable: false is the other way out: spark-submit waits for the application
    task, _, _ = merge_task(connection, {"durable": False})
    assert run_execute(unmapped(task), monkeypatch) == "submit"


def test_yarn_tracking_needs_the_resourcemanager_address_in_the_connection(merge_task, monkeypatch):
    connection = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}
    task, _, _ = merge_task(connection, {"yarn_track_via_rm_api": True})
    with pytest.raises(ValueError, match="yarn_resourcemanager_webapp_address"):
        run_execute(unmapped(task), monkeypatch)


def test_yarn_tracking_with_kerberos_needs_requests_kerberos(merge_task, monkeypatch):
    monkeypatch.setitem(sys.modules, "requests_kerberos", None)  # as on a worker without it
    connection, spark_submit, _ = CLUSTERS["yarn-cluster"]
    task, _, _ = merge_task(connection, spark_submit)
    with pytest.raises(RuntimeError, match="requests-kerberos"):
        run_execute(unmapped(task), monkeypatch)


def test_deploy_mode_in_the_config_overrides_the_connection(merge_task, monkeypatch):
    connection = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client", "queue": "default"}}
    task, _, _ = merge_task(connection, {"deploy_mode": "cluster", "queue": "etl", "durable": False})
    hook = unmapped(task)._get_hook()
    assert hook._is_yarn_cluster_mode and hook._connection["queue"] == "etl"


def test_a_bad_section_leaves_the_dag_importable_with_defaults(merge_task):
    connection = {"conn_type": "spark", "host": "local[2]"}
    with pytest.raises(ConfigError):  # strict load, as the plan task does
        merge_task(connection, {"executor_memory": "plenty"})
    from airflow.models import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    task = bag.dags["hive_compaction"].get_task("merge")
    assert "executor_memory" not in task.partial_kwargs and task.partial_kwargs["conf"] == {}


def test_the_merge_task_submits_the_configured_merge_job(tmp_path, monkeypatch):
    """merge_job: a URL the cluster reads (the job need not be on the Airflow worker)."""
    job = "hdfs://nn/apps/hive_compaction/compact_partitions.py"
    monkeypatch.setenv(config.CONFIG_ENV, str(write_config(tmp_path / "c.yaml", merge_job=job)))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    from airflow.models import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    op = unmapped(bag.dags["hive_compaction"].get_task("merge"))
    assert op._get_hook()._build_spark_submit_command(op.application)[-3:] == [job, "--batch", "e30="]


# --- airflow_tasks: the executor's queue, priority, executor_config and pool on the operators ---------


def _dag_bag_on_yarn(cfg: Path, monkeypatch):
    """The dags folder as a scheduler parses it with this config and a YARN Spark connection."""
    monkeypatch.setenv(config.CONFIG_ENV, str(cfg))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn"}))
    from airflow.models import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag


def _stored(dag):
    """The DAG as the scheduler stores it and a worker reads it back."""
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def test_the_dag_routes_merges_and_the_other_tasks_as_airflow_tasks_says(tmp_path, monkeypatch):
    """The merge operator carries the merge queue, pool, priority and executor_config (as the DAG
    has it, as the scheduler stores it, and as a worker unmaps it); plan, refresh and the asset
    events carry the tasks' queue; Spark's YARN queue stays Spark's."""
    executor_config = {"pod_override": {"metadata": {"labels": {"team": "data-platform"}}}}
    cfg = write_config(
        tmp_path / "c.yaml",
        pool={"name": "hive_compaction", "slots": 2},
        spark_submit={"queue": "etl"},
        airflow_tasks={
            "queue": "default",
            "merge_queue": "spark",
            "merge_priority_weight": 7,
            "merge_executor_config": executor_config,
        },
    )
    bag = _dag_bag_on_yarn(cfg, monkeypatch)
    dag = bag.dags["hive_compaction"]
    stored = _stored(dag)
    for d in (dag, stored):
        merge = d.get_task("merge")
        got = {k: merge.partial_kwargs.get(k) for k in ("queue", "pool", "priority_weight", "executor_config")}
        assert got == {
            "queue": "spark",
            "pool": "hive_compaction",
            "priority_weight": 7,
            "executor_config": executor_config,
        }, got
        others = {t.task_id: t.queue for t in d.tasks if t.task_id != "merge"}
        assert {"plan", "refresh_metastore", "compacted.db.events"} <= set(others), others
        assert set(others.values()) == {"default"}, others
    op = unmapped(dag.get_task("merge"))
    assert (op.queue, op.pool, op.priority_weight, op.executor_config) == (
        "spark",
        "hive_compaction",
        7,
        executor_config,
    )
    assert op._get_hook()._connection["queue"] == "etl"  # spark-submit --queue etl


def test_without_airflow_tasks_the_dag_keeps_airflows_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv(config.CONFIG_ENV, str(write_config(tmp_path / "c.yaml")))
    from airflow.models import DagBag
    from airflow.sdk import conf

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags["hive_compaction"]
    merge = unmapped(dag.get_task("merge"))
    default_queue = conf.get("operators", "default_queue")
    assert (merge.queue, merge.pool, merge.priority_weight, merge.executor_config) == (
        default_queue,
        "default_pool",
        1,
        {},
    )
    assert {t.queue for t in dag.tasks if t.task_id != "merge"} == {default_queue}


# --- the rollback DAG: its job is submitted as the merges are ----------------------------------


def test_the_rollback_task_is_submitted_like_the_merges(tmp_path, monkeypatch):
    """Same Spark connection, executor queue, pool, priority, executor_config, Kerberos principal
    and keytab, py_files and conf as the merge operator (as the DAG has it and as the scheduler
    stores it); its job is rollback.py beside the configured merge_job, or rollback_job."""
    executor_config = {"pod_override": {"metadata": {"labels": {"team": "data-platform"}}}}
    cfg = write_config(
        tmp_path / "c.yaml",
        pool={"name": "hive_compaction", "slots": 2},
        py_files="hdfs://nn/apps/hive_compaction.zip",
        merge_job="hdfs://nn/apps/hive_compaction/compact_partitions.py",
        spark_submit={
            "queue": "etl",
            "principal": "compaction@EXAMPLE.COM",
            "keytab": "/etc/security/keytabs/compaction.keytab",
            "driver_memory": "2g",
        },
        airflow_tasks={
            "queue": "default",
            "merge_queue": "spark",
            "merge_priority_weight": 7,
            "merge_executor_config": executor_config,
        },
    )
    bag = _dag_bag_on_yarn(cfg, monkeypatch)
    expected = merge_operator_kwargs(config.load(cfg))
    assert {
        "queue",
        "pool",
        "priority_weight",
        "executor_config",
        "principal",
        "keytab",
        "py_files",
        "conf",
        "conn_id",
        "yarn_queue",
        "driver_memory",
    } <= set(expected), expected
    dag = bag.dags["hive_compaction_rollback"]
    stored = _stored(dag)
    task = dag.get_task("rollback")
    # the operator keeps its template fields as they are named, the others with a leading _
    got = {k: getattr(task, k if k in task.template_fields or hasattr(task, k) else f"_{k}") for k in expected}
    assert got == expected, got
    # what the scheduler stores (and a worker gets): Airflow's own arguments and the template fields
    kept = {
        k: v
        for k, v in expected.items()
        if k in ("queue", "pool", "priority_weight", "executor_config") or k in task.template_fields
    }
    assert {"queue", "principal", "keytab", "py_files", "conf"} <= set(kept), kept
    assert {k: getattr(stored.get_task("rollback"), k) for k in kept} == kept
    for d in (dag, stored):
        assert {t.task_id: t.queue for t in d.tasks if t.task_id != "rollback"} == {
            "check": "default",
            "report": "default",
        }
    assert task.application == "hdfs://nn/apps/hive_compaction/rollback.py"
    task.application_args = ["--table", "db.events", "--run", "r1"]  # what the check task returns
    cmd = task._get_hook()._build_spark_submit_command(task.application)
    for args in (
        ["--principal", "compaction@EXAMPLE.COM"],
        ["--keytab", "/etc/security/keytabs/compaction.keytab"],
        ["--queue", "etl"],
        ["--py-files", "hdfs://nn/apps/hive_compaction.zip"],
    ):
        assert has_run(cmd, args), (args, cmd)
    assert cmd[-5:] == ["hdfs://nn/apps/hive_compaction/rollback.py", "--table", "db.events", "--run", "r1"], cmd

    bag = _dag_bag_on_yarn(write_config(tmp_path / "c2.yaml", rollback_job="/opt/jobs/rollback.py"), monkeypatch)
    assert bag.dags["hive_compaction_rollback"].get_task("rollback").application == "/opt/jobs/rollback.py"
