"""Several instances from one installed package: two DAG files in one dags folder, each naming its
own YAML, make four DAGs whose ids, schedules, tags, pools, connections, assets and aliases come
from their own config and do not collide; a second instance whose config is wrong keeps its ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness import two_instance_dags
from hive_compaction.airflow import config


def instance_config(path: Path, **top) -> Path:
    raw = {"spark_conf": {"spark.ui.enabled": "false"}, "retries": 0, **top}
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def two_instances(tmp_path, monkeypatch):
    """A dags folder holding the shipped DAG file with its YAML, and a second DAG file with its own."""
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    dags = two_instance_dags(tmp_path / "dags")
    instance_config(
        dags / "hive_compaction.yaml",
        metastore_conn_id="metastore_a",
        pool="compaction_a",
        tables=["sales.orders", "sales.*"],
        dag={"asset_namespace": "hive://hms-a.example.com:9083"},
    )
    return dags


def dag_bag(folder: Path):
    from airflow.models import DagBag

    bag = DagBag(dag_folder=str(folder))
    assert bag.import_errors == {}, bag.import_errors
    return bag


def test_two_configs_make_two_instances_that_share_nothing(two_instances):
    instance_config(
        two_instances / "team_b.yaml",
        metastore_conn_id="metastore_b",
        pool="compaction_b",
        spark_conn_id="spark_b",
        results_table="ops.compaction_results",
        tables=["sales.orders", "sales.*"],
        dag={
            "dag_id": "team_b_compaction",
            "schedule": "30 2 * * 1-5",
            "tags": ["team-b"],
            "asset_namespace": "hive://hms-b.example.com:9083",
        },
    )
    bag = dag_bag(two_instances)
    assert sorted(bag.dag_ids) == [
        "hive_compaction",
        "hive_compaction_rollback",
        "team_b_compaction",
        "team_b_compaction_rollback",
    ]
    a, b = bag.dags["hive_compaction"], bag.dags["team_b_compaction"]
    assert (a.timetable.expression, b.timetable.expression) == ("0 0 * * *", "30 2 * * 1-5")
    assert sorted(a.tags) == ["hive", "maintenance", "spark"] and sorted(b.tags) == ["team-b"]
    assert a.get_task("merge").pool == "compaction_a" and b.get_task("merge").pool == "compaction_b"
    assert b.get_task("merge").partial_kwargs["conn_id"] == "spark_b"
    assert bag.dags["team_b_compaction_rollback"].get_task("rollback").pool == "compaction_b"
    # The same table name on two Metastores: two assets, named the way OpenLineage names a Hive table.
    (asset_a,), (asset_b,) = (d.get_task("compacted.sales.orders").outlets for d in (a, b))
    assert asset_a.uri == "hive://hms-a.example.com:9083/sales.orders"
    assert asset_b.uri == "hive://hms-b.example.com:9083/sales.orders" and asset_a.name != asset_b.name
    aliases = [{o.name for o in d.get_task("compacted.by_pattern").outlets} for d in (a, b)]
    assert aliases == [{"hive_compaction:sales.*"}, {"team_b_compaction:sales.*"}]
    # As the scheduler stores them, and the tasks read their own file.
    from airflow.serialization.serialized_objects import DagSerialization

    for d in (a, b):
        stored = DagSerialization.from_dict(DagSerialization.to_dict(d))
        assert stored.dag_id == d.dag_id and stored.get_task("merge").pool == d.get_task("merge").pool
    assert config.load(two_instances / "team_b.yaml").results_table == "ops.compaction_results"


def test_a_triggered_only_instance_has_no_schedule(two_instances):
    instance_config(
        two_instances / "team_b.yaml", tables=["sales.orders"], dag={"dag_id": "team_b", "schedule": "none"}
    )
    bag = dag_bag(two_instances)
    assert type(bag.dags["team_b"].timetable).__name__ == "NullTimetable"
    assert bag.dags["hive_compaction"].timetable.expression == "0 0 * * *"


def test_a_wrong_second_config_keeps_the_instances_apart(two_instances):
    """A mistake elsewhere in the file: its DAGs still import, under its own ids (the defaults' would
    collide with the first instance), and its plan fails naming the file and the key."""
    instance_config(
        two_instances / "team_b.yaml", tables=["sales.orders"], fan_out={"max_spark_jobs": 0}, dag={"dag_id": "team_b"}
    )
    bag = dag_bag(two_instances)
    assert {"hive_compaction", "team_b", "team_b_rollback"} <= set(bag.dag_ids)
    with pytest.raises(config.ConfigError, match=r"team_b\.yaml: fan_out: key 'max_spark_jobs'"):
        config.load(two_instances / "team_b.yaml")


@pytest.mark.parametrize(
    "dag_section, why",
    [
        ({"schedule": "every day"}, "key 'schedule': expected a cron expression"),
        ({"dag_id": "team b"}, "key 'dag_id': expected an Airflow dag_id"),
        ({"asset_namespace": "thrift://hms:9083"}, "key 'asset_namespace': expected hive://<metastore host>:<port>"),
        ({"tags": "team-b"}, "key 'tags': expected a list of tags"),
        ({"owner": "me"}, "unknown key 'owner'"),
    ],
)
def test_the_dag_section_errors_name_the_key(dag_section, why):
    with pytest.raises(config.ConfigError) as e:
        config.parse({"dag": dag_section}, "team_b.yaml")
    assert str(e.value).startswith("team_b.yaml: dag: ") and why in str(e.value), str(e.value)
