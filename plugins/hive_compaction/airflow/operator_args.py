"""The Airflow task arguments the settings give: every task's ``default_args`` and the merge (and rollback)
tasks' SparkSubmitOperator arguments."""

from __future__ import annotations

import copy
from dataclasses import fields
from datetime import timedelta
from typing import Any

from hive_compaction.airflow import config_schema
from hive_compaction.airflow.config import Settings


def task_defaults(settings: Settings) -> dict[str, Any]:
    """``default_args`` of every task: ``airflow_tasks: queue`` if set (the merges' own arguments override it)."""
    return {"queue": settings.airflow_tasks.queue} if settings.airflow_tasks.queue else {}


def merge_operator_kwargs(settings: Settings) -> dict[str, Any]:
    """The SparkSubmitOperator arguments of the merge tasks that come from the config; an unset ``spark_submit``
    option or ``airflow_tasks`` argument is left out, so that the provider's (or Airflow's) default applies.
    Values are copies: the frozen settings must stay as they are."""
    conf = dict(settings.spark_conf)
    routing = settings.airflow_tasks
    minutes = routing.merge_timeout_minutes
    kwargs: dict[str, Any] = {"conn_id": settings.spark_conn_id, "py_files": settings.py_files, "pool": settings.pool}
    optional = {
        "max_active_tis_per_dagrun": settings.max_merges_per_run,
        "queue": routing.merge_queue or routing.queue or None,
        "priority_weight": routing.merge_priority_weight,
        "execution_timeout": None if minutes is None else timedelta(minutes=minutes),
        "executor_config": copy.deepcopy(routing.merge_executor_config),
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    for f in fields(settings.spark_submit):
        value = getattr(settings.spark_submit, f.name)
        if f.name == "use_krb5ccache":  # see SparkSubmitOptions
            conf.update({"spark.kerberos.renewal.credentials": "ccache"} if value else {})
        elif value is not None and f.name in config_schema.SUBMIT_CONF:
            conf[config_schema.SUBMIT_CONF[f.name]] = str(value)
        elif value is not None:  # the operator takes a list; its queue is Airflow's executor queue
            arg = "yarn_queue" if f.name == "queue" else f.name
            kwargs[arg] = list(value) if isinstance(value, tuple) else copy.copy(value)
    if settings.engine_jar:  # the merge engine's jar first, then the config's own jars
        kwargs["jars"] = ",".join([settings.engine_jar, *([kwargs["jars"]] if kwargs.get("jars") else [])])
    kwargs["conf"] = conf
    return kwargs
