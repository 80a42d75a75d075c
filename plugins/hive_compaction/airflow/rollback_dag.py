"""The rollback DAG, built here and defined by the same DAG file as the merge DAG (users copy only
that file and its YAML into their dags folder): check the form -> the rollback Spark job ->
its report.

The job is submitted like the merges (``operator_args.merge_operator_kwargs``: the Spark connection,
queue, pool, executor_config, Kerberos principal and keytab, py_files, conf), so it runs where
and as they run.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, task

from hive_compaction.airflow import config, operator_args, rollback

DAG_ID = "hive_compaction_rollback"

DOC = """Roll back what a `hive_compaction` run committed in one table: the merged files leave the
partitions, the original files (kept in the trash area for `trash_retention_days`) come back, and
each partition's statistics are those it had before the merge (file count and size as the disk
holds them). Trigger it with the form: the table, the run (its run id), optionally some of its
partitions, and a dry run that lists what would move back. The `check` task refuses a table,
run or partition that has nothing committed to roll back, listing what has; the `report` task
logs what moved (also its XCom). From a shell: `spark-submit .../hive_compaction/jobs/rollback.py`
(docs/operations.md)."""


def rollback_dag(config_path: Path, settings: config.Settings, on_failure, dag_id: str = DAG_ID) -> DAG:
    """``settings``: the config as read at parse time (leniently: defaults when it is wrong); the
    tasks read it again strictly. ``on_failure``: the merge DAG's failure alert."""
    with DAG(
        dag_id=dag_id,
        description="Roll back a hive_compaction run's merges in one table (originals and statistics back)",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # two rollbacks of one partition would wait on each other's lock
        default_args={
            "retries": settings.retries,
            "retry_delay": timedelta(minutes=1),
            "on_failure_callback": on_failure,
            **operator_args.task_defaults(settings),
        },
        params=_form(settings),
        tags=["maintenance", "hive", "spark"],
        doc_md=DOC,
    ) as dag:

        @task(multiple_outputs=True)  # retried when the Metastore is unreachable, never for a wrong value
        def check(params=None, run_id=None):
            return _check(config_path, dict(params), run_id)

        # Ran after the job, also when it failed: what it restored before stopping is reported.
        @task(trigger_rule="all_done_min_one_success", retries=2, retry_delay=timedelta(seconds=5))
        def report(request: dict, run_id=None):
            return _report(config_path, request, run_id)

        checked = check()
        job = SparkSubmitOperator(
            task_id="rollback",
            application=settings.rollback_job_file,  # config key rollback_job (default: beside merge_job)
            application_args=checked["application_args"],  # type: ignore[index]  # multiple_outputs: by key
            name="hive-compaction rollback {{ params.table }}",
            **operator_args.merge_operator_kwargs(settings),
        )
        job >> report(checked["request"])  # type: ignore[index]  # multiple_outputs: by key
    return dag


def _check(config_path: Path, params: dict, run_id: str) -> dict:
    """The check task: the form's request, checked against the config and the Metastore, and the job's arguments."""
    from airflow.sdk.exceptions import AirflowFailException

    from hive_compaction.airflow.metastore_hook import Metastore
    from hive_compaction.airflow.run_params import ParamError

    try:
        current = config.load(config_path)
        with Metastore(metastore_conn_id=current.metastore_conn_id) as hms:
            request = rollback.check(current, hms, params)
            uris = hms.uris
    except (config.ConfigError, ParamError) as e:
        raise AirflowFailException(str(e)) from e
    return {"request": request.to_dict(), "application_args": rollback.job_arguments(current, request, uris, run_id)}


def _report(config_path: Path, request: dict, run_id: str) -> dict:
    """The report task: what the rollback job recorded; fails the run when it restored not all it was asked to."""
    from airflow.sdk.exceptions import AirflowFailException

    from hive_compaction.airflow.metastore_hook import Metastore

    current = config.load(config_path)
    with Metastore(metastore_conn_id=current.metastore_conn_id) as hms:
        record = rollback.read_record(hms, current.results_table, run_id)
    if record is None:
        raise AirflowFailException(
            f"the rollback job recorded nothing in {current.results_table} for "
            f"{request['table']} run {request['run']}: see the rollback task's log"
        )
    rep = rollback.report(record)
    rollback.log.info("rollback report\n%s", rollback.render(rep))
    if rep["error"] or not record["complete"]:
        raise AirflowFailException(
            f"{request['table']} run {request['run']}: {rep['error'] or 'the record is incomplete'}; {rep['note']}"
        )
    return rep


def _form(settings: config.Settings) -> dict[str, Param]:
    """The trigger form: the table (the configured ones offered), the run, some partitions, a dry run."""
    schemas = rollback.params_schema([t.name for t in settings.tables])
    return {
        name: Param(rollback.PARAM_DEFAULTS[name], **schema) if name in rollback.PARAM_DEFAULTS else Param(**schema)
        for name, schema in schemas.items()
    }
