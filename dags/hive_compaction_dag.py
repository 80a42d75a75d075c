"""Hive small-file compaction: plan from the Metastore -> mapped Spark merges -> statistics refresh.

The logic lives in ``plugins/hive_compaction``; this file only wires tasks together. The
config (``hive_compaction.yaml`` beside this file) is read leniently here and strictly by the
tasks, so a mistake in it fails a task with a clear message instead of breaking the import.
"""
from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, task

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT / "plugins") not in sys.path:  # Airflow adds plugins/ itself; tests and CLIs may not
    sys.path.insert(0, str(_ROOT / "plugins"))

from hive_compaction import config  # noqa: E402

SETTINGS, _ = config.load_lenient()
MERGE_JOB = str(_ROOT / "spark_jobs" / "compact_partitions.py")

with DAG(
    dag_id="hive_compaction",
    description="Merge small files of Hive tables and refresh their Metastore statistics",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": SETTINGS.retries, "retry_delay": timedelta(minutes=1), "retry_exponential_backoff": True},
    params={
        "tables": Param([], type="array", items={"type": "string"},
                        description="Tables to compact (database.table); empty means all configured tables"),
        "dry_run": Param(False, type="boolean", description="Plan and report; change nothing"),
    },
    tags=["maintenance", "hive", "spark"],
) as dag:

    @task
    def plan(params=None, run_id=None, ti=None):
        """Returns the merge tasks' kwargs; the plan itself goes to XCom key "plan"."""
        from airflow.configuration import conf
        from hive_compaction import dag_tasks
        settings = config.load()
        with dag_tasks.metastore_from_connection(settings.metastore_conn_id) as hms:
            planned = dag_tasks.plan(settings, hms, run_id, tables=params["tables"] or None,
                                     dry_run=params["dry_run"],
                                     max_map_length=conf.getint("core", "max_map_length", fallback=1024),
                                     read_journals=dag_tasks.read_json_files)
        ti.xcom_push(key="plan", value=planned["plan"])
        return planned["spark_args"]

    @task(trigger_rule="none_failed")  # runs when every merge succeeded (or there was none)
    def refresh_metastore(plan: dict):
        from hive_compaction import dag_tasks
        settings = config.load()
        with dag_tasks.metastore_from_connection(settings.metastore_conn_id) as hms:
            return dag_tasks.refresh(settings, hms, plan, dag_tasks.read_text)

    @task
    def purge_expired_trash(params=None):
        """Beside the merges (it only deletes runs older than the retention), never blocking them."""
        from hive_compaction import dag_tasks
        if params["dry_run"]:
            return 0
        settings = config.load()
        with dag_tasks.metastore_from_connection(settings.metastore_conn_id) as hms:
            return len(dag_tasks.purge_expired(settings, hms))

    planned = plan()
    merges = SparkSubmitOperator.partial(
        task_id="merge",
        conn_id=SETTINGS.spark_conn_id,
        application=MERGE_JOB,
        py_files=SETTINGS.py_files,
        conf=SETTINGS.spark_conf,
        pool=SETTINGS.pool,
        map_index_template="{{ task.name }}",
    ).expand_kwargs(planned)
    merges >> refresh_metastore(planned["plan"])
    planned >> purge_expired_trash()
