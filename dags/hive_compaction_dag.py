"""Hive small-file compaction: plan from the Metastore -> mapped Spark merges -> statistics refresh.

The logic lives in ``plugins/hive_compaction``; this file only wires tasks together. The
config (``hive_compaction.yaml`` beside this file) is read leniently here and strictly by the
tasks, so a mistake in it fails a task with a clear message instead of breaking the import.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, AssetAlias, Param, task

from hive_compaction import alerts, config, run_params

_ROOT = Path(__file__).resolve().parents[1]

SETTINGS, CONFIG_ERROR = config.load_lenient()
# Every task's failure is logged with its tables, partitions and reason, and sent to the config's
# notifiers (those usable even if the rest of the config is wrong: a plan failing on it alerts).
ON_FAILURE = alerts.FailureAlert(SETTINGS.alerts if CONFIG_ERROR is None else alerts.lenient_specs())
MERGE_JOB = str(_ROOT / "spark_jobs" / "compact_partitions.py")
# Downstream DAGs can schedule on this alias: one asset event per compacted table,
# with the partitions and dates in its extra.
COMPACTED = AssetAlias("hive_compaction")


def table_asset(name: str) -> Asset:
    return Asset(name=name, uri=f"hive://{name.replace('.', '/')}")


def _mask_batch(context):
    """The encoded batch (up to tens of KB) says nothing to a person: the task's name (its map
    index) names the tables and partitions. Masked, the operator's command line stays readable."""
    from airflow.sdk.log import mask_secret
    args = list(context["task"].application_args or [])
    for flag, value in zip(args, args[1:]):
        if flag == "--batch":
            mask_secret(value)


with DAG(
    dag_id="hive_compaction",
    description="Merge small files of Hive tables and refresh their Metastore statistics",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": SETTINGS.retries, "retry_delay": timedelta(minutes=1),
                  "retry_exponential_backoff": True, "max_retry_delay": timedelta(minutes=30),
                  "on_failure_callback": ON_FAILURE},
    params={name: Param(run_params.PARAM_DEFAULTS[name], **schema)
            for name, schema in run_params.params_schema([t.name for t in SETTINGS.tables]).items()},
    tags=["maintenance", "hive", "spark"],
    doc_md=__doc__,
) as dag:

    @task
    def plan(params=None, run_id=None, dag_run=None, logical_date=None, ti=None):
        """Returns the merge tasks' kwargs; the plan itself goes to XCom key "plan" (Airflow maps
        only over a task's return value, so multiple_outputs cannot carry both)."""
        from airflow.sdk import conf
        from airflow.sdk.exceptions import AirflowFailException
        from hive_compaction import dag_tasks, metastore
        try:  # a wrong config or form value is not worth a retry
            settings = config.load()
            alerts.check(settings)
            selection = run_params.select(settings, dict(params), dag_run.run_type, logical_date)
        except (config.ConfigError, run_params.ParamError) as e:
            raise AirflowFailException(str(e)) from e
        with metastore.from_airflow_connection(settings.metastore_conn_id) as hms:
            planned = dag_tasks.plan(settings, hms, run_id, selection,
                                     max_map_length=conf.getint("core", "max_map_length", fallback=1024))
        ti.xcom_push(key="plan", value=planned["plan"])
        return planned["spark_args"]

    # Runs when every merge succeeded (or none ran). Airflow 3.3 fails (without retry) the second of
    # two runs that emit the first event of one asset through the alias at the same moment
    # (UNIQUE constraint on asset / asset_alias_asset, seen with concurrent backfill runs): one
    # refresh at a time across runs (it takes a second), the configured tables' assets declared
    # as inlets so the DAG processor registers them before any run, and retries (idempotent).
    @task(trigger_rule="none_failed", outlets=[COMPACTED], inlets=[table_asset(t.name) for t in SETTINGS.tables],
          max_active_tis_per_dag=1, retries=max(SETTINGS.retries, 2),
          retry_delay=timedelta(seconds=5), retry_exponential_backoff=False)
    def refresh_metastore(plan: dict, outlet_events=None):
        from hive_compaction import dag_tasks, metastore
        settings = config.load()
        with metastore.from_airflow_connection(settings.metastore_conn_id) as hms:
            report = dag_tasks.refresh(settings, hms, plan)
        for table, extra in dag_tasks.compacted_tables(report).items():
            outlet_events[COMPACTED].add(table_asset(table), extra=extra)
        return report

    planned = plan()
    merges = SparkSubmitOperator.partial(
        task_id="merge",
        application=MERGE_JOB,
        map_index_template="{{ task.name }}",
        on_execute_callback=_mask_batch,
        # conn_id, py_files, conf, pool (and max_active_tis_per_dagrun) and the config's spark_submit: options
        **config.merge_operator_kwargs(SETTINGS),
    ).expand_kwargs(planned)
    merges >> refresh_metastore(planned["plan"])
