"""The YAML configuration: defaults, validation messages naming table and key, lenient loading."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from hive_compaction.airflow import config
from hive_compaction.airflow.config import (
    ConfigError,
    FanOut,
    Settings,
    TablePolicy,
    load,
    load_lenient,
    parse,
)
from hive_compaction.airflow.operator_args import merge_operator_kwargs, task_defaults

MB = 1024**2
GB = 1024**3
SHIPPED = Path(__file__).resolve().parents[1] / "dags" / "hive_compaction.yaml"

GOOD = """
metastore_conn_id: hms
spark_conn_id: spark_yarn
pool: compaction
retries: 5
py_files: hdfs:///libs/hive_compaction.zip
defaults:
  target_file_size: 256MB
  small_file_limit: 200MB
  min_small_files: 3
tables:
  - sales.orders
  - name: Sales.Events
    target_file_size: 1GB
    merge_mode: copy
    commit_mode: location_switch
    partition_filter: "dt >= '2024-01-01'"
    work_dir: hdfs:///tmp/work
  - name: logs.clicks
    small_file_limit: 0
    partition_lag_days: 0
fan_out:
  max_spark_jobs: 3
  max_partitions_per_job: 100
  max_bytes_per_job: 5GB
spark_conf:
  spark.executor.memory: 4g
  spark.executor.instances: 10
"""


def errors_of(raw) -> str:
    with pytest.raises(ConfigError) as e:
        parse(raw, "cfg.yaml")
    return str(e.value)


def table_error(**entry) -> str:
    return errors_of({"tables": [{"name": "db.tbl", **entry}]})


# --- sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, 0),
        (134217728, 134217728),
        ("134217728", 134217728),
        ("128MB", 128 * MB),
        ("128mb", 128 * MB),
        ("128M", 128 * MB),
        ("128 MB", 128 * MB),
        (" 1.5 GB ", int(1.5 * GB)),
        ("1g", GB),
        ("10KB", 10240),
        ("10K", 10240),
        ("2TB", 2 * 1024**4),
        ("7B", 7),
        ("7", 7),
        ("0.5MB", MB // 2),
    ],
)
def test_sizes(value, expected):
    assert (
        parse({"defaults": {"small_file_limit": value, "target_file_size": "4TB"}}).defaults.small_file_limit
        == expected
    )


@pytest.mark.parametrize("value", ["", "MB", "12 XB", "1e6", "-5MB", "ten", "1,5GB", "12 MiB", True, False, [1]])
def test_sizes_rejected(value):
    message = table_error(target_file_size=value)
    assert message.startswith("cfg.yaml: table db.tbl: key 'target_file_size': expected a size like 128MB"), message


def test_a_negative_size_is_rejected():
    assert table_error(target_file_size=-1).endswith("must not be negative, got -1")


# --- good configurations ----------------------------------------------------------------------


def test_empty_config_is_all_defaults():
    for raw in (None, {}):
        s = parse(raw)
        assert s.tables == ()
        assert s.fan_out == FanOut()
        assert (s.metastore_conn_id, s.spark_conn_id, s.pool, s.retries, s.py_files) == (
            None,
            "spark_default",
            "default_pool",
            2,
            None,
        )  # None: metastore_default, else hive_metastore
        assert s.spark_conf == {}


def test_defaults_of_a_table_without_settings():
    s = parse({"tables": ["db.t"]})
    assert s.tables[0].policy == TablePolicy()
    p = TablePolicy()
    assert (p.target_file_size, p.small_file_limit, p.min_small_files, p.partition_lag_days, p.merge_mode) == (
        128 * MB,
        100 * MB,
        2,
        1,
        "auto",
    )
    assert p.partition_filter is None and p.work_dir is None


def test_good_config():
    s = parse(yaml.safe_load(GOOD), "cfg.yaml")
    assert s.source == "cfg.yaml"
    assert (s.metastore_conn_id, s.spark_conn_id, s.pool, s.retries) == ("hms", "spark_yarn", "compaction", 5)
    assert s.py_files == "hdfs:///libs/hive_compaction.zip"
    assert [t.name for t in s.tables] == ["sales.orders", "sales.events", "logs.clicks"]

    orders = s.table("sales.orders").policy
    assert (orders.target_file_size, orders.small_file_limit, orders.min_small_files) == (256 * MB, 200 * MB, 3)
    assert orders.merge_mode == "auto" and orders.partition_lag_days == 1 and orders.commit_mode == "in_place"

    events = s.table("sales.events")
    assert (events.database, events.table) == ("sales", "events")
    assert events.policy.target_file_size == GB
    assert events.policy.small_file_limit == 200 * MB  # inherited from defaults
    assert events.policy.merge_mode == "copy" and events.policy.commit_mode == "location_switch"
    assert events.policy.partition_filter == "dt >= '2024-01-01'"
    assert events.policy.work_dir == "hdfs:///tmp/work"

    clicks = s.table("logs.clicks").policy
    assert clicks.small_file_limit == 0 and clicks.partition_lag_days == 0

    assert s.fan_out == FanOut(max_spark_jobs=3, max_partitions_per_job=100, max_bytes_per_job=5 * GB)
    assert s.spark_conf == {"spark.executor.memory": "4g", "spark.executor.instances": "10"}


def test_table_lookup_of_unknown_table_names_it():
    s = parse({"tables": ["db.t"]}, "cfg.yaml")
    with pytest.raises(ConfigError, match=r"cfg\.yaml: table 'db\.nope' is not configured"):
        s.table("db.nope")


def test_small_file_limit_equal_to_target_is_fine():
    s = parse({"tables": [{"name": "db.t", "target_file_size": "64MB", "small_file_limit": "64MB"}]})
    assert s.tables[0].policy.small_file_limit == 64 * MB


def test_max_bytes_per_job_zero_is_raised_to_one():
    assert parse({"fan_out": {"max_bytes_per_job": 0}}).fan_out.max_bytes_per_job == 1


def test_shipped_config_parses():
    s = load(SHIPPED)
    assert s.source == str(SHIPPED)
    assert [t.name for t in s.tables] == ["demo.events_orc", "demo.events_parquet"]
    assert s.fan_out.max_spark_jobs == 4
    assert s.fan_out.max_bytes_per_job == 20 * GB
    for t in s.tables:
        assert t.policy.target_file_size == 128 * MB
        assert t.policy.small_file_limit == 100 * MB
    assert load_lenient(SHIPPED) == (s, None)


def test_the_dag_reads_the_config_beside_its_file_unless_the_environment_names_one(tmp_path, monkeypatch):
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    dag_file = tmp_path / "dags" / "hive_compaction_dag.py"
    assert config.dag_config_path(dag_file) == tmp_path / "dags" / "hive_compaction.yaml"
    monkeypatch.setenv(config.CONFIG_ENV, "/etc/elsewhere.yaml")
    assert config.dag_config_path(dag_file) == Path("/etc/elsewhere.yaml")


def test_merge_job_defaults_to_the_installed_package_copy():
    import hive_compaction

    job = Path(parse({}).merge_job)
    assert job == Path(hive_compaction.__file__).resolve().parent / "jobs" / "compact_partitions.py"
    assert job.is_file()


@pytest.mark.parametrize(
    "value",
    [
        "/opt/jobs/compact_partitions.py",
        "hdfs://nn:8020/apps/compact_partitions.py",
        "s3a://bucket/jobs/compact_partitions.py",
        "file:///opt/compact_partitions.py",
    ],
)
def test_merge_job_takes_a_path_or_a_url(value):
    assert parse({"merge_job": value}).merge_job == value


@pytest.mark.parametrize(
    "value, why",
    [
        ("", "expected the merge job's path"),
        (3, "expected the merge job's path"),
        ("jobs/compact_partitions.py", "absolute path or a URL"),
        ("/opt/jobs/compact.jar", "a Python file"),
    ],
)
def test_merge_job_errors_name_the_key(value, why):
    with pytest.raises(ConfigError) as e:
        parse({"merge_job": value}, "cfg.yaml")
    assert "cfg.yaml: merge_job:" in str(e.value) and why in str(e.value)


def test_a_missing_default_config_says_how_to_name_one(tmp_path, monkeypatch):
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    monkeypatch.setattr(config, "DEFAULT_CONFIG_PATH", tmp_path / "site-packages" / "dags" / "hive_compaction.yaml")
    with pytest.raises(ConfigError, match="cannot read the config file .*set HIVE_COMPACTION_CONFIG"):
        load()


def test_default_config_path_is_the_shipped_file(monkeypatch):
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    assert config.config_path() == SHIPPED
    monkeypatch.setenv(config.CONFIG_ENV, "/etc/elsewhere.yaml")
    assert config.config_path() == Path("/etc/elsewhere.yaml")


def test_load_reads_the_env_path(tmp_path, monkeypatch):
    p = tmp_path / "c.yaml"
    p.write_text("tables: [a.b]\n")
    monkeypatch.setenv(config.CONFIG_ENV, str(p))
    assert [t.name for t in load().tables] == ["a.b"]


# --- bad values in a table: the message names the table and the key ---------------------------


@pytest.mark.parametrize(
    "entry, key",
    [
        ({"target_size": "1GB"}, "target_size"),  # unknown key
        ({"target_file_size": -1}, "target_file_size"),
        ({"target_file_size": "lots"}, "target_file_size"),
        ({"target_file_size": 0}, "target_file_size"),
        ({"small_file_limit": "-3MB"}, "small_file_limit"),
        ({"small_file_limit": True}, "small_file_limit"),
        ({"small_file_limit": "200MB", "target_file_size": "128MB"}, "small_file_limit"),
        ({"small_file_limit": 128 * MB + 1, "target_file_size": "128MB"}, "small_file_limit"),
        ({"merge_mode": "fast"}, "merge_mode"),
        ({"merge_mode": None}, "merge_mode"),
        ({"commit_mode": "swap"}, "commit_mode"),
        ({"min_small_files": 1}, "min_small_files"),
        ({"min_small_files": "3"}, "min_small_files"),
        ({"min_small_files": True}, "min_small_files"),
        ({"partition_lag_days": -1}, "partition_lag_days"),
        ({"partition_lag_days": 1.5}, "partition_lag_days"),
        ({"lookback_days": -1}, "lookback_days"),
        ({"lookback_days": "7"}, "lookback_days"),
        ({"lookback_days": 367}, "lookback_days"),
        ({"partition_filter": 5}, "partition_filter"),
        ({"work_dir": ["a"]}, "work_dir"),
        ({"work_dir": "/user/etl/hive_compaction"}, "work_dir"),  # no scheme: the driver's local disk
        ({"work_dir": "user/etl"}, "work_dir"),
        # A purge with no retention could reach a run whose merges are still committing (issue 11).
        ({"trash_retention_days": 0}, "trash_retention_days"),
        ({"trash_retention_days": -2}, "trash_retention_days"),
    ],
)
def test_bad_table_value_names_table_and_key(entry, key):
    msg = table_error(**entry)
    assert msg.startswith("cfg.yaml: ")
    assert "table db.tbl" in msg
    assert f"'{key}'" in msg


def test_lookback_days_defaults_to_a_week_and_is_set_per_table():
    s = config.parse(
        {
            "defaults": {"lookback_days": 3, "partition_lag_days": 2},
            "tables": [{"name": "db.a"}, {"name": "db.b", "lookback_days": 0}],
        },
        "cfg.yaml",
    )
    assert [t.policy.lookback_days for t in s.tables] == [3, 0]
    assert config.TablePolicy().lookback_days == 7
    assert s.key_lag_days == 2  # the schedule's run_offset comes from the defaults' lag
    assert (
        table_error(lookback_days=-2) == "cfg.yaml: table db.tbl: key 'lookback_days': expected an integer >= 0, got -2"
    )


def test_small_file_limit_above_target_message_gives_both_values():
    msg = table_error(small_file_limit="200MB", target_file_size="128MB")
    assert str(200 * MB) in msg and str(128 * MB) in msg and "target_file_size" in msg


def test_inherited_default_can_conflict_with_a_table_override():
    # defaults keep small_file_limit at 100MB: a table lowering only its target must say which key
    msg = table_error(target_file_size="64MB")
    assert "table db.tbl" in msg and "'small_file_limit'" in msg


def test_bad_default_value_names_defaults_and_key():
    msg = errors_of({"defaults": {"merge_mode": "yolo"}})
    assert "defaults" in msg and "'merge_mode'" in msg
    msg = errors_of({"defaults": {"bogus": 1}})
    assert "defaults" in msg and "'bogus'" in msg and "known:" in msg


@pytest.mark.parametrize("name", ["nodot", "a.b.c", "db.t-1", "db.", ".t", "db t.x", 42, None, "db.t\n"])
def test_bad_table_name(name):
    msg = errors_of({"tables": [{"name": name}]})
    assert "tables[0]" in msg and "name" in msg and repr(name) in msg


def test_table_entry_without_name():
    msg = errors_of({"tables": ["a.b", {"target_file_size": "1GB"}]})
    assert "tables[1]" in msg and "'name'" in msg


@pytest.mark.parametrize("entry", [42, ["a.b"], None])
def test_table_entry_not_a_mapping(entry):
    msg = errors_of({"tables": [entry]})
    assert "tables[0]" in msg and "mapping" in msg and "'name'" in msg


def test_duplicate_table_names_it():
    msg = errors_of({"tables": ["sales.orders", {"name": "Sales.Orders", "merge_mode": "copy"}]})
    assert "Sales.Orders" in msg and "twice" in msg


@pytest.mark.parametrize("tables", [{"db.t": {"target_file_size": "1GB"}}, "db.t", 5])
def test_tables_must_be_a_list(tables):
    # a mapping of tables would silently drop every table's settings
    msg = errors_of({"tables": tables})
    assert "tables" in msg and "list" in msg


@pytest.mark.parametrize("raw", [[1, 2], "tables: x", 3])
def test_top_level_not_a_mapping(raw):
    assert "top level" in errors_of(raw)


def test_defaults_not_a_mapping():
    msg = errors_of({"defaults": ["target_file_size"]})
    assert "defaults" in msg and "mapping" in msg


def test_unknown_top_level_keys_are_listed():
    msg = errors_of({"table": ["a.b"], "fanout": {}})
    assert "fanout" in msg and "table" in msg


def test_non_string_top_level_key_is_a_config_error():
    msg = errors_of({2024: "x", "tables": []})
    assert "2024" in msg


@pytest.mark.parametrize(
    "fan_out, key",
    [
        ({"max_spark_jobs": 0}, "max_spark_jobs"),
        ({"max_partitions_per_job": "many"}, "max_partitions_per_job"),
        ({"max_bytes_per_job": "-1GB"}, "max_bytes_per_job"),
        ({"jobs": 3}, "jobs"),
    ],
)
def test_bad_fan_out(fan_out, key):
    msg = errors_of({"fan_out": fan_out})
    assert "fan_out" in msg and f"'{key}'" in msg


def test_fan_out_not_a_mapping():
    assert "fan_out" in errors_of({"fan_out": [1]})


def test_spark_conf_not_a_mapping():
    assert "spark_conf" in errors_of({"spark_conf": "spark.x=1"})


@pytest.mark.parametrize("key", ["metastore_conn_id", "spark_conn_id", "pool", "py_files"])
@pytest.mark.parametrize("value", ["", 5, ["x"]])
def test_bad_connection_strings(key, value):
    assert key in errors_of({key: value})


@pytest.mark.parametrize("value", [-1, "2", True, 1.0])
def test_bad_retries(value):
    assert "retries" in errors_of({"retries": value})


def test_retries_zero_is_allowed():
    assert parse({"retries": 0}).retries == 0


# --- load / load_lenient ----------------------------------------------------------------------


def test_load_error_names_the_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("tables:\n  - name: db.t\n    merge_mode: fast\n")
    with pytest.raises(ConfigError) as e:
        load(p)
    assert str(e.value).startswith(str(p)) and "table db.t" in str(e.value) and "'merge_mode'" in str(e.value)


def test_load_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "nope.yaml")


def test_load_invalid_yaml(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("tables: [a.b\n  - : :\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(p)


def test_load_undecodable_file_is_a_config_error(tmp_path):
    p = tmp_path / "binary.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage\x9c")
    with pytest.raises(ConfigError) as e:
        load(p)
    assert str(p) in str(e.value)


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "make_path",
    [
        lambda d: d / "missing.yaml",
        lambda d: d,  # a directory
        lambda d: write(d, "tables: [a.b\n"),  # invalid YAML
        lambda d: write(d, "!!python/object/apply:os.system ['true']\n"),  # unsafe YAML
        lambda d: write(d, "- just\n- a list\n"),
        lambda d: write(d, "tables:\n  - name: a.b\n    target_file_size: -1\n"),
        lambda d: write(d, "tables:\n  - a.b\n  - A.B\n"),
        lambda d: write(d, "fan_out: 3\n"),
        lambda d: write(d, "2024: x\n"),
    ],
)
def test_load_lenient_never_raises(tmp_path, make_path):
    path = make_path(tmp_path)
    settings, error = load_lenient(path)
    assert settings == Settings()
    assert isinstance(error, str) and error
    assert str(path) in error


def test_load_lenient_undecodable_file(tmp_path):
    p = tmp_path / "binary.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage\x9c")
    settings, error = load_lenient(p)
    assert settings == Settings() and error


def test_load_lenient_good_file(tmp_path):
    settings, error = load_lenient(write(tmp_path, GOOD))
    assert error is None
    assert len(settings.tables) == 3


# --- the pool ---------------------------------------------------------------------------------


def test_pool_as_a_name_or_with_slots_and_a_cap_per_run():
    s = parse({"pool": "compaction"})
    assert (s.pool, s.pool_slots, s.max_merges_per_run) == ("compaction", None, None)
    assert "max_active_tis_per_dagrun" not in merge_operator_kwargs(s)
    s = parse({"pool": {"name": "hive_compaction", "slots": 4, "max_merges_per_run": 2}})
    assert (s.pool, s.pool_slots, s.max_merges_per_run) == ("hive_compaction", 4, 2)
    kwargs = merge_operator_kwargs(s)
    assert (kwargs["pool"], kwargs["max_active_tis_per_dagrun"]) == ("hive_compaction", 2)


@pytest.mark.parametrize(
    "pool, message",
    [
        ({"slots": 2}, "cfg.yaml: pool: key 'name': expected a pool name"),
        ({"name": "a pool"}, "cfg.yaml: pool: key 'name': expected a pool name"),
        ({"name": "p", "slots": 0}, "cfg.yaml: pool: key 'slots': expected an integer >= 1, got 0"),
        ({"name": "p", "max_merges_per_run": "2"}, "cfg.yaml: pool: key 'max_merges_per_run': expected an integer"),
        (
            {"name": "p", "slots": 2, "max_merges_per_run": 3},
            "key 'max_merges_per_run' (3) exceeds the pool's slots (2)",
        ),
        ({"name": "p", "size": 3}, "cfg.yaml: pool: unknown key(s) size"),
        (["p"], "cfg.yaml: pool: expected a pool name or a mapping"),
    ],
)
def test_pool_errors_name_the_key(pool, message):
    assert message in errors_of({"pool": pool})


# --- airflow_tasks: where Airflow's executor runs the tasks -------------------------------------


def test_airflow_tasks_unset_passes_nothing():
    from hive_compaction.airflow.config import AirflowTasks

    for raw in ({}, {"airflow_tasks": None}, {"airflow_tasks": {}}, {"airflow_tasks": {"merge_queue": None}}):
        s = parse(raw)
        assert s.airflow_tasks == AirflowTasks()
        assert task_defaults(s) == {}
        assert not {"queue", "priority_weight", "executor_config"} & set(merge_operator_kwargs(s))


def test_airflow_tasks_route_the_merges_and_the_other_tasks():
    executor_config = {"pod_override": {"spec": {"containers": [{"name": "base", "image": "spark:4.2"}]}}}
    s = parse(
        {
            "pool": "compaction",
            "spark_submit": {"queue": "etl"},
            "airflow_tasks": {
                "queue": "default",
                "merge_queue": "spark",
                "merge_priority_weight": 10,
                "merge_executor_config": executor_config,
            },
        }
    )
    assert task_defaults(s) == {"queue": "default"}
    kwargs = merge_operator_kwargs(s)
    # Airflow's queue and Spark's YARN queue stay apart
    assert (kwargs["queue"], kwargs["yarn_queue"], kwargs["pool"]) == ("spark", "etl", "compaction")
    assert kwargs["priority_weight"] == 10 and kwargs["executor_config"] == executor_config
    kwargs["executor_config"]["pod_override"]["spec"] = {}  # a copy: the settings stay as they are
    assert s.airflow_tasks.merge_executor_config == executor_config


def test_merges_without_their_own_queue_go_to_the_tasks_queue():
    s = parse({"airflow_tasks": {"queue": "maintenance"}})
    assert merge_operator_kwargs(s)["queue"] == "maintenance" and task_defaults(s) == {"queue": "maintenance"}
    s = parse({"airflow_tasks": {"merge_queue": "spark"}})
    assert merge_operator_kwargs(s)["queue"] == "spark" and task_defaults(s) == {}


def test_the_shipped_config_routes_nothing():
    assert load(SHIPPED).airflow_tasks == config.AirflowTasks()


@pytest.mark.parametrize(
    "section, message",
    [
        ("spark", "cfg.yaml: airflow_tasks: expected a mapping, got str"),
        (
            {"merge_queue": "spark, gpu"},
            "cfg.yaml: airflow_tasks: key 'merge_queue': expected an Airflow executor queue's name",
        ),
        ({"queue": ""}, "cfg.yaml: airflow_tasks: key 'queue': expected an Airflow executor queue's name"),
        ({"queue": 3}, "cfg.yaml: airflow_tasks: key 'queue': expected an Airflow executor queue's name"),
        (
            {"merge_priority_weight": "high"},
            "cfg.yaml: airflow_tasks: key 'merge_priority_weight': expected an integer",
        ),
        ({"merge_priority_weight": True}, "cfg.yaml: airflow_tasks: key 'merge_priority_weight': expected an integer"),
        ({"merge_priority_weight": 2**31}, "cfg.yaml: airflow_tasks: key 'merge_priority_weight': expected an integer"),
        ({"merge_executor_config": ["x"]}, "cfg.yaml: airflow_tasks: key 'merge_executor_config': expected a mapping"),
        (
            {"merge_timeout_minutes": 0},
            "cfg.yaml: airflow_tasks: key 'merge_timeout_minutes': expected a positive number",
        ),
        ({"merge_timeout_minutes": "1h"}, "cfg.yaml: airflow_tasks: key 'merge_timeout_minutes': expected a positive"),
        ({"merge_timeout_minutes": True}, "cfg.yaml: airflow_tasks: key 'merge_timeout_minutes': expected a positive"),
        ({"pool": "p"}, "cfg.yaml: airflow_tasks: unknown key 'pool': use the top-level key pool"),
        ({"yarn_queue": "etl"}, "unknown key 'yarn_queue': Spark's YARN queue is spark_submit: queue"),
        ({"priority_weight": 3}, "unknown key 'priority_weight': use merge_priority_weight"),
    ],
)
def test_airflow_tasks_errors_name_the_key(section, message):
    assert message in errors_of({"airflow_tasks": section})


def test_an_executor_queue_at_the_top_level_points_to_the_section():
    assert "go in the section airflow_tasks:" in errors_of({"merge_queue": "spark"})


def test_a_bad_airflow_tasks_section_leaves_the_dag_importable(tmp_path):
    """load_lenient (the DAG's import) never raises; load (the plan task) names the key."""
    path = write(tmp_path, "airflow_tasks:\n  merge_queue: [spark]\ntables: [db.t]\n")
    settings, error = load_lenient(path)
    assert settings == Settings() and "airflow_tasks: key 'merge_queue'" in error
    with pytest.raises(ConfigError, match="airflow_tasks: key 'merge_queue'"):
        load(path)


def test_a_work_dir_without_a_scheme_is_refused_saying_why():
    msg = table_error(work_dir="/user/etl/hive_compaction")
    assert "expected a URI on the table's file system, with its scheme" in msg and "'/user/etl/hive_compaction'" in msg


def test_a_merge_timeout_becomes_the_merge_tasks_execution_timeout():
    from datetime import timedelta

    assert merge_operator_kwargs(parse({"airflow_tasks": {"merge_timeout_minutes": 90}}))[
        "execution_timeout"
    ] == timedelta(minutes=90)
    assert merge_operator_kwargs(parse({"airflow_tasks": {"merge_timeout_minutes": 0.5}}))[
        "execution_timeout"
    ] == timedelta(seconds=30)
    assert "execution_timeout" not in merge_operator_kwargs(parse({}))


# --- the JSON Schema: generated from the models, and it agrees with them -----------------------

SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "config.schema.json"
REGENERATE = "PYTHONPATH=plugins python -m hive_compaction.airflow.config_schema > docs/config.schema.json"


def test_the_committed_json_schema_is_the_models():
    from hive_compaction.airflow import config_schema

    assert json.loads(SCHEMA.read_text()) == config_schema.json_schema(), (
        f"docs/config.schema.json is not the models' schema: regenerate it with `{REGENERATE}`"
    )


def test_the_json_schema_takes_the_configs_parse_takes():
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    for raw in (
        yaml.safe_load(SHIPPED.read_text()),
        yaml.safe_load(GOOD),
        {},
        {
            "pool": {"name": "p", "slots": 2},
            "alerts": ["a.B", {"notifier": "a.B", "kwargs": {"x": 1}}],
            "spark_submit": {"jars": ["a.jar"], "env_vars": {"A": 1}, "post_submit_commands": "true"},
            "airflow_tasks": {"merge_timeout_minutes": 0.5},
            "fan_out": None,
        },
    ):
        assert not list(validator.iter_errors(raw)), raw


@pytest.mark.parametrize(
    "raw",
    [
        {"tables": [{"name": "db.t", "target_size": "1GB"}]},
        {"tables": ["nodot"]},
        {"defaults": {"merge_mode": "fast"}},
        {"defaults": {"min_small_files": 1}},
        {"defaults": {"lookback_days": 367}},
        {"defaults": {"target_file_size": "lots"}},
        {"spark_submit": {"driver_memory": "2 GB"}},
        {"spark_submit": {"master": "yarn"}},
        {"pool": {"name": "a pool"}},
        {"airflow_tasks": {"merge_queue": "spark, gpu"}},
        {"retries": True},
        {"merge_queue": "spark"},
    ],
)
def test_the_json_schema_refuses_what_parse_refuses(raw):
    with pytest.raises(ConfigError):
        parse(raw)
    assert list(jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).iter_errors(raw))
