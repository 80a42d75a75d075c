"""The DAGs one config defines: the merge DAG (plan from the Metastore -> mapped Spark merges ->
statistics refresh -> one asset event per compacted table) and its rollback DAG. A DAG file is one
call, ``compaction_dags(<the YAML beside it>)``; a second DAG file with a second config (its own
``dag: dag_id``, schedule, pool, Metastore connection, asset namespace) is a second instance in
the same Airflow.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, AssetAlias, CronPartitionTimetable, Param, TaskGroup, task

from hive_compaction.airflow import alerts, config, operator_args, run_params
from hive_compaction.airflow.assets import alias_name, table_asset
from hive_compaction.airflow.rollback_dag import rollback_dag

DOC = """Hive small-file compaction: plan from the Metastore -> mapped Spark merges -> statistics refresh
-> one asset event per compacted table (one task per table named in the config, one task for all the tables
its patterns match).

The config (the YAML beside the DAG file, or the file ``config.CONFIG_ENV`` names) is read
leniently at parse time and strictly by the tasks, so a mistake in it fails a task with a clear
message instead of breaking the import. The merge job is the config's ``merge_job`` (by default
the copy inside the installed package). The rollback DAG (``<dag_id>_rollback``) rolls back what one
run committed in a table, from a form.

Runs are keyed by the partition date they compact (``CronPartitionTimetable``: the config's ``dag:
schedule``, daily at 00:00 UTC by default, the key ``partition_lag_days`` of the config's defaults
before the run's date); a backfill over a date range makes one run per key.
"""


def compaction_dags(config_path: str | Path) -> tuple[DAG, DAG]:
    """The merge DAG and the rollback DAG of the config at ``config_path`` (the same file at parse
    time and in every task: a task's process parses the DAG file first)."""
    settings, error = config.load_lenient(config_path)
    # Every task's failure is logged with its tables, partitions and reason, and sent to the config's
    # notifiers (those usable even if the rest of the config is wrong: a plan failing on it alerts).
    on_failure = alerts.FailureAlert(
        settings.alerts if error is None else alerts.lenient_specs(config_path), config_path
    )
    merge = _merge_dag(Path(config_path), settings, on_failure)
    return merge, rollback_dag(Path(config_path), settings, on_failure, dag_id=f"{settings.dag.dag_id}_rollback")


def _schedule(settings: config.Settings) -> CronPartitionTimetable | None:
    """The config's cron, keyed by the partition date it compacts: the default lag before it
    (tables with their own lag shift from the key: run_params.table_date). None: triggered only."""
    if settings.dag.schedule is None:
        return None
    return CronPartitionTimetable(
        settings.dag.schedule,
        timezone="UTC",
        run_offset=-settings.key_lag_days or None,
        key_format=run_params.KEY_FORMAT,
    )


def _mask_batch(context):
    """The encoded batch (up to tens of KB) says nothing to a person: the task's name (its map
    index) names the tables and partitions. Masked, the operator's command line stays readable."""
    from airflow.sdk.log import mask_secret

    args = list(context["task"].application_args or [])
    for flag, value in zip(args, args[1:]):
        if flag == "--batch":
            mask_secret(value)


def _merge_dag(config_path: Path, settings: config.Settings, on_failure) -> DAG:
    with DAG(
        dag_id=settings.dag.dag_id,
        description="Merge small files of Hive tables and refresh their Metastore statistics",
        schedule=_schedule(settings),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args={
            "retries": settings.retries,
            "retry_delay": timedelta(seconds=config.MERGE_RETRY_DELAY_SECONDS),
            "retry_exponential_backoff": True,
            "max_retry_delay": timedelta(minutes=30),
            "on_failure_callback": on_failure,
            **operator_args.task_defaults(settings),
        },  # airflow_tasks: queue (the executor's)
        params={
            name: Param(run_params.PARAM_DEFAULTS[name], **schema)
            for name, schema in run_params.params_schema(
                [t.name for t in settings.tables], [p.entry for p in settings.patterns]
            ).items()
        },
        tags=list(settings.dag.tags),
        doc_md=DOC,
    ) as dag:
        planned = _plan(config_path)()
        merges = SparkSubmitOperator.partial(
            task_id="merge",
            application=settings.merge_job,  # config key merge_job (default: the installed package's copy)
            map_index_template="{{ task.name }}",
            on_execute_callback=_mask_batch,
            # conn_id, py_files, conf, pool (and max_active_tis_per_dagrun), the config's airflow_tasks: merge_queue,
            # merge_priority_weight, merge_executor_config and its spark_submit: options
            **operator_args.merge_operator_kwargs(settings),
        ).expand_kwargs(planned)
        report = _refresh(config_path, settings)(planned["plan"])
        merges >> report
        with TaskGroup(alerts.ASSET_EVENT_GROUP, tooltip="one asset event per table with merged partitions"):
            for t in settings.tables:
                _asset_event(t.name, settings.dag.asset_namespace)(report)
            if settings.patterns:
                _pattern_events([p.entry for p in settings.patterns], settings)(report)
    return dag


def _plan(config_path: Path):
    @task
    def plan(params=None, run_id=None, dag_run=None, logical_date=None, partition_key=None, ti=None):
        """Returns the merge tasks' kwargs; the plan itself goes to XCom key "plan" (Airflow maps
        only over a task's return value, so multiple_outputs cannot carry both)."""
        from airflow.sdk import conf
        from airflow.sdk.exceptions import AirflowFailException

        from hive_compaction.airflow import metastore_hook as metastore, table_resolution, tasks as dag_tasks

        def selected(settings):
            try:  # a wrong form value is not worth a retry
                return run_params.select(settings, dict(params), dag_run.run_type, logical_date, partition_key)
            except run_params.ParamError as e:
                raise AirflowFailException(str(e)) from e

        try:  # nor is a wrong config
            settings = config.load(config_path)
            alerts.check(settings)
        except config.ConfigError as e:
            raise AirflowFailException(str(e)) from e
        selection = None if settings.patterns else selected(settings)  # the form checked before the Metastore
        with metastore.from_airflow_connection(settings.metastore_conn_id) as hms:
            resolution = table_resolution.resolve(settings, hms)  # what the patterns match now
            settings = resolution.settings(settings)
            planned = dag_tasks.plan(
                settings,
                hms,
                run_id,
                selection or selected(settings),
                max_map_length=conf.getint("core", "max_map_length", fallback=1024),
                resolution=resolution,
            )
        ti.xcom_push(key="plan", value=planned["plan"])
        return planned["spark_args"]

    return plan


def _refresh(config_path: Path, settings: config.Settings):
    # Runs when every merge succeeded (or none ran); idempotent, so retried.
    @task(
        trigger_rule="none_failed",
        retries=max(settings.retries, 2),
        retry_delay=timedelta(seconds=5),
        retry_exponential_backoff=False,
    )
    def refresh_metastore(plan: dict, dag_run=None):
        from hive_compaction.airflow import metastore_hook as metastore, metrics, tasks as dag_tasks

        current = config.load(config_path)
        with metastore.from_airflow_connection(current.metastore_conn_id) as hms:
            report = dag_tasks.refresh(current, hms, plan)
        metrics.send(dag_run.dag_id, report, plan.get("planned_at"))  # through Airflow's [metrics]
        return report

    return refresh_metastore


def _asset_event(name: str, namespace: str | None):
    """One task per configured table, its asset as the only outlet: it emits the table's event with
    the merged partitions as partition keys, or is skipped when nothing of the table was merged
    (a declared outlet of a task that succeeds always gets an event in Airflow 3.3, keyed by the
    run's key, and an asset alias cannot carry partition keys of its own)."""
    asset = table_asset(name, namespace)

    @task(task_id=name, outlets=[asset], retries=2, retry_delay=timedelta(seconds=5))
    def emit(report: dict, outlet_events=None):
        from airflow.sdk.exceptions import AirflowSkipException

        from hive_compaction.airflow import assets

        event = assets.events(report).get(name)
        if not event:
            raise AirflowSkipException(f"no partition of {name} was merged")
        outlet_events[asset].extra.update(event["extra"])
        if event["partition_keys"]:
            outlet_events[asset].add_partitions(event["partition_keys"])
        return event["partition_keys"]

    return emit


def _pattern_events(entries: list[str], settings: config.Settings):
    """The tables the config's patterns match: one task for all of them (the DAG's shape does not grow
    with their number), an alias per pattern entry, an event per table through it (no partition keys:
    the merged partitions are in its extra)."""
    aliases = {e: AssetAlias(alias_name(e, settings.dag.dag_id)) for e in entries}
    namespace = settings.dag.asset_namespace

    @task(
        task_id=alerts.PATTERN_EVENTS_TASK, outlets=list(aliases.values()), retries=2, retry_delay=timedelta(seconds=5)
    )
    def emit_by_pattern(report: dict, outlet_events=None):
        from airflow.sdk.exceptions import AirflowSkipException

        from hive_compaction.airflow import assets

        added = [e for e in assets.alias_events(report) if e.entry in aliases]
        if not added:
            raise AirflowSkipException("no partition of a table matched by a pattern was merged")
        for e in added:
            outlet_events[aliases[e.entry]].add(table_asset(e.table, namespace), extra=e.extra)
        return {e.table: e.extra["merged_partitions"] for e in added}

    return emit_by_pattern
