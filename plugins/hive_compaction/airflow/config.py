"""The tables to maintain and their policy, read from the YAML file users edit.

Everything is validated when a task runs (never at DAG import): an error names the file,
the table and the key. ``load_lenient`` exists for DAG parsing only: it never raises and
falls back to defaults, so a bad file can never break the scheduler.
"""
from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

# The file's name in the dags folder: the DAG passes the one beside itself (``dag_config_path``).
CONFIG_NAME = "hive_compaction.yaml"
# Where a config is looked for when no one says where (scripts run from a checkout).
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[3] / "dags" / CONFIG_NAME
CONFIG_ENV = "HIVE_COMPACTION_CONFIG"
MERGE_MODES = ("auto", "copy", "rewrite")
COMMIT_MODES = ("in_place", "location_switch")
_SIZE_UNITS = {"": 1, "B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def default_merge_job() -> str:
    """The merge job inside the installed package (the wheel's copy, or the checkout's)."""
    from hive_compaction.jobs import MERGE_JOB
    return str(MERGE_JOB)


MAX_LOOKBACK_DAYS = 366


class ConfigError(ValueError):
    """A configuration value is missing or wrong; the message names where."""


# The first retry of a task waits this long, then each one twice as long (Airflow's exponential
# backoff, which adds up to as much again): how long a partition whose merge job died mid-commit
# waits for the retry that finishes its commit (report.reader_gap_note).
MERGE_RETRY_DELAY_SECONDS = 60

@dataclass(frozen=True)
class TablePolicy:
    target_file_size: int = 128 * 1024**2
    small_file_limit: int = 100 * 1024**2
    min_small_files: int = 2
    partition_lag_days: int = 1
    partition_filter: str | None = None
    merge_mode: str = "auto"
    work_dir: str | None = None
    quiet_period_minutes: int = 10  # a partition written to more recently than this is left for later
    trash_retention_days: int = 7  # replaced inputs are kept this long for rollback
    copy_min_block_size: int = 192 * 1024  # auto copies a partition only where its stripes / row groups average this (docs/performance.md, "The copy floor")
    date_column: str = "dt"  # the partition column that holds the partition's date
    date_format: str = "%Y-%m-%d"  # how dates are written in it (strftime)
    # Undated runs also list partitions not listed for this many days (statistics go stale);
    # 0 turns the audit off.
    audit_days: int = 7
    # Scheduled runs also look back this many days before their own date for partitions that
    # still hold small files (deferred, skipped, failed, late data); 0: their own date only.
    lookback_days: int = 7
    # How a merge is committed: "in_place" renames files inside the partition's folder;
    # "location_switch" builds the partition anew in a fresh folder and switches the Metastore's
    # location to it (for tables whose writers all go through the Metastore; see commit_switch).
    commit_mode: str = "in_place"
    # A commit waits this long for another holder of the Metastore's lock on the partition
    # (a Hive writer), then leaves the partition for the next run.
    lock_wait_seconds: int = 60
    # Commits hold the Metastore's lock on the partition; false only for a Metastore that serves
    # no locks (no transaction tables): its commits then run unlocked, and every report says so.
    require_locks: bool = True


@dataclass(frozen=True)
class TableConfig:
    database: str
    table: str
    policy: TablePolicy

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class FanOut:
    max_spark_jobs: int = 8
    max_partitions_per_job: int = 500
    max_bytes_per_job: int = 20 * 1024**3


def _submit_key(check: str = "text", *, operator_arg: str | None = None, spark_property: str | None = None):
    """A ``spark_submit`` key, unset by default: how its value is checked (a key of
    ``_SUBMIT_CHECKS``), and what it becomes: the operator's argument of the same name, another
    argument (``operator_arg``), or a Spark property in ``conf`` (``spark_property``)."""
    return field(default=None, metadata={"check": check, "operator_arg": operator_arg,
                                         "spark_property": spark_property})


@dataclass(frozen=True)
class SparkSubmitOptions:
    """The ``spark_submit:`` section: SparkSubmitOperator arguments of the merge tasks.

    None means "not set": the argument is not passed, so the provider's default (or the Spark
    connection's extra, for deploy mode, queue, principal, keytab) applies. The master always
    comes from the connection. Names are the provider's, except ``queue`` (the operator's
    ``yarn_queue``: its ``queue`` is Airflow's executor queue) and ``cores_max`` /
    ``driver_cores``, which have no operator argument and become ``spark.cores.max`` /
    ``spark.driver.cores`` in ``conf``.
    """
    deploy_mode: str | None = _submit_key("deploy_mode")  # overrides the connection's deploy-mode
    # Provider default under Airflow 3.3: durable. YARN cluster mode then needs
    # yarn_track_via_rm_api (the operator raises otherwise); the master is only known from
    # the connection, so that is checked by the operator, not here.
    durable: bool | None = _submit_key("bool")
    yarn_track_via_rm_api: bool | None = _submit_key("bool")  # needs yarn_resourcemanager_webapp_address in the connection
    track_driver_via_k8s_api: bool | None = _submit_key("bool")  # Kubernetes cluster mode; needs a namespace
    status_poll_interval: int | None = _submit_key("count")
    driver_memory: str | None = _submit_key("memory")
    driver_cores: int | None = _submit_key("count", spark_property="spark.driver.cores")
    executor_memory: str | None = _submit_key("memory")
    executor_cores: int | None = _submit_key("count")
    num_executors: int | None = _submit_key("count")
    total_executor_cores: int | None = _submit_key("count")
    cores_max: int | None = _submit_key("count", spark_property="spark.cores.max")
    queue: str | None = _submit_key(operator_arg="yarn_queue")
    principal: str | None = _submit_key()
    keytab: str | None = _submit_key()  # a path on the worker (the connection's extra takes base64 instead)
    proxy_user: str | None = _submit_key()
    # The ticket cache (KRB5CCNAME) instead of a keytab: becomes spark.kerberos.renewal.credentials=ccache
    # in ``conf``, not the operator's argument, which adds a --principal that Spark 3+ refuses
    # without a keytab ("Both principal and keytab must be defined, or neither").
    use_krb5ccache: bool | None = _submit_key("bool")
    archives: str | None = _submit_key("list")  # comma-separated (a YAML list is joined)
    jars: str | None = _submit_key("list")
    files: str | None = _submit_key("list")
    packages: str | None = _submit_key("list")
    exclude_packages: str | None = _submit_key("list")
    repositories: str | None = _submit_key("list")
    driver_class_path: str | None = _submit_key()
    properties_file: str | None = _submit_key()
    env_vars: dict[str, str] | None = _submit_key("env_vars")
    verbose: bool | None = _submit_key("bool")
    spark_binary: str | None = _submit_key("spark_binary")
    post_submit_commands: tuple[str, ...] | None = _submit_key("commands")


# The keys that become Spark properties in ``conf`` rather than operator arguments.
_SUBMIT_CONF = {f.name: f.metadata["spark_property"] for f in fields(SparkSubmitOptions)
                if f.metadata["spark_property"]}
# What a misplaced key should say instead of just "unknown".
_SUBMIT_ELSEWHERE = {
    "py_files": "use the top-level key py_files",
    "conf": "use the top-level mapping spark_conf",
    "spark_conf": "use the top-level mapping spark_conf",
    "conn_id": "use the top-level key spark_conn_id",
    "pool": "use the top-level key pool",
    "master": "the master comes from the Spark connection (spark_conn_id)",
    "yarn_queue": "use queue",
    "name": "each merge task names its own application",
    "application_args": "each merge task gets its own from the plan",
}
# The provider accepts only these from a connection's extra (it runs the binary): same here.
_SPARK_BINARIES = ("spark-submit", "spark2-submit", "spark3-submit")
# Spark's size strings: 512m, 4g, 1024 (MiB), 2gb, ...
_SPARK_MEMORY = re.compile(r"^[1-9][0-9]*([kmgtp]b?|b)?$", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class AirflowTasks:
    """The ``airflow_tasks:`` section: where Airflow's executor runs the DAG's tasks.

    Airflow's own task arguments, not Spark's: ``merge_queue`` is the executor queue (a Celery
    worker's ``-q``) the merge tasks are sent to, so that only workers with Java and spark-submit
    take them; Spark's YARN queue is ``spark_submit: queue``. None means "not set": the argument
    is not passed and Airflow's default applies (``[operators] default_queue``, weight 1, ...).
    The merge tasks' pool is the top-level ``pool``.
    """
    queue: str | None = None  # plan, refresh_metastore, the asset events (and merges without merge_queue)
    merge_queue: str | None = None
    merge_priority_weight: int | None = None
    merge_executor_config: dict[str, Any] | None = None
    # The merge tasks' execution_timeout: past it Airflow stops the task, and the Spark provider
    # kills the job (on YARN with yarn_track_via_rm_api, through the ResourceManager's REST API).
    merge_timeout_minutes: float | None = None


# Celery takes a worker's queues as a comma-separated list (``-q spark,default``): a queue's
# name has no comma and no white space.
_QUEUE_NAME = re.compile(r"^[^\s,]+$")
# Airflow stores a priority weight in a 32-bit integer column.
_PRIORITY_RANGE = (-2**31, 2**31 - 1)
# What a misplaced key should say instead of just "unknown".
_TASKS_ELSEWHERE = {
    "pool": "use the top-level key pool",
    "yarn_queue": "Spark's YARN queue is spark_submit: queue",
    "executor_config": "use merge_executor_config (the merge tasks')",
    "priority_weight": "use merge_priority_weight (the merge tasks')",
}


@dataclass(frozen=True)
class AlertSpec:
    """One entry of ``alerts:``: a notifier class (import path) and its keyword arguments."""
    notifier: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    tables: tuple[TableConfig, ...] = ()
    # None (not named): metastore_default (the Hive provider's id) when that connection exists, else
    # hive_metastore (this package's former default; metastore_hook.Metastore)
    metastore_conn_id: str | None = None
    spark_conn_id: str = "spark_default"
    pool: str = "default_pool"
    pool_slots: int | None = None  # the slots the pool should have (documentation and airflow-init)
    max_merges_per_run: int | None = None  # merge tasks of one run at once (max_active_tis_per_dagrun)
    retries: int = 2  # each task's, the merges' with MERGE_RETRY_DELAY_SECONDS, doubling
    alerts: tuple[AlertSpec, ...] = ()
    fan_out: FanOut = field(default_factory=FanOut)
    spark_conf: dict[str, str] = field(default_factory=dict)
    py_files: str | None = None
    # The merge job's file as spark-submit is given it: a local path on the workers that run the
    # merge tasks, or a URL the cluster reads (hdfs://, s3a://, ...).
    merge_job: str = field(default_factory=default_merge_job)
    # The rollback job's, likewise; None: rollback.py beside the merge job (``rollback_job_file``).
    rollback_job: str | None = None
    spark_submit: SparkSubmitOptions = field(default_factory=SparkSubmitOptions)
    airflow_tasks: AirflowTasks = field(default_factory=AirflowTasks)
    # Where merge jobs record their results for the refresh task (see results.py).
    results_table: str = "default.hive_compaction_results"
    # The ``defaults:`` policy: its partition_lag_days is the DAG's, which the runs' partition
    # keys are counted in (run_params.table_date).
    defaults: TablePolicy = field(default_factory=TablePolicy)
    source: str = "<defaults>"

    @property
    def rollback_job_file(self) -> str:
        """The rollback job as spark-submit gets it: ``rollback_job``, else ``rollback.py`` beside
        ``merge_job`` (both ship in the package's ``jobs/`` folder: copy them together)."""
        return self.rollback_job or f"{self.merge_job.rsplit('/', 1)[0]}/rollback.py"

    @property
    def key_lag_days(self) -> int:
        """Days between a scheduled run's cron date and its partition key (the schedule's
        run_offset, negated): the default ``partition_lag_days``."""
        return self.defaults.partition_lag_days

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise ConfigError(f"{self.source}: table {name!r} is not configured")


def parse_size(value: Any, where: str) -> int:
    """``134217728``, ``"128MB"``, ``"1.5 GB"`` -> bytes."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a size like 128MB, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?B?)\s*", str(value).upper())
        if not m:
            raise ConfigError(f"{where}: expected a size like 128MB, got {value!r}")
        unit = m.group(2) if m.group(2) in _SIZE_UNITS else m.group(2) + "B"
        n = int(float(m.group(1)) * _SIZE_UNITS[unit])
    if n < 0:
        raise ConfigError(f"{where}: must not be negative, got {value!r}")
    return n


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _policy(raw: dict, base: TablePolicy, where: str) -> TablePolicy:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    known = {f.name for f in fields(TablePolicy)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        at = f"{where}: key {key!r}"
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        if key in ("target_file_size", "small_file_limit", "copy_min_block_size"):
            values[key] = parse_size(value, at)
        elif key == "min_small_files":
            values[key] = _int(value, at, 2)
        elif key in ("partition_lag_days", "quiet_period_minutes", "audit_days", "lock_wait_seconds"):
            values[key] = _int(value, at, 0)
        elif key == "lookback_days":
            values[key] = _int(value, at, 0)
            if values[key] > MAX_LOOKBACK_DAYS:
                raise ConfigError(f"{at}: at most {MAX_LOOKBACK_DAYS} days (a scheduled run lists what is pending in "
                                  f"that many days), got {value!r}")
        elif key == "trash_retention_days":
            # At least a day: a purge must never reach a run whose merges may still be committing.
            values[key] = _int(value, at, 1)
        elif key == "require_locks":
            if not isinstance(value, bool):
                raise ConfigError(f"{at}: expected true or false, got {value!r}")
            values[key] = value
        elif key == "commit_mode":
            if value not in COMMIT_MODES:
                raise ConfigError(f"{at}: expected one of {', '.join(COMMIT_MODES)}, got {value!r}")
            values[key] = value
        elif key == "merge_mode":
            if value not in MERGE_MODES:
                raise ConfigError(f"{at}: expected one of {', '.join(MERGE_MODES)}, got {value!r}")
            values[key] = value
        elif key == "work_dir" and value is not None:
            # A bare path would be taken for the Spark driver's local disk (paths.split_uri):
            # the commit's renames between it and the table's file system would all fail.
            if not isinstance(value, str) or not _URI.match(value):
                raise ConfigError(f"{at}: expected a URI on the table's file system, with its scheme (hdfs://"
                                  f"nameservice/user/etl/hive_compaction, hdfs:///..., file:///...), got {value!r}")
            values[key] = value
        elif value is not None and not isinstance(value, str):
            raise ConfigError(f"{at}: expected a string, got {value!r}")
        else:
            values[key] = value
    policy = replace(base, **values)
    if policy.target_file_size <= 0:
        raise ConfigError(f"{where}: key 'target_file_size' must be positive")
    if policy.small_file_limit > policy.target_file_size:
        raise ConfigError(
            f"{where}: key 'small_file_limit' ({policy.small_file_limit}) must not exceed "
            f"'target_file_size' ({policy.target_file_size})"
        )
    return policy


def _set_keys(raw: Any, where: str, options: type, elsewhere: dict[str, str]):
    """(key, value, "<where>: key 'k'") of a mapping section's keys that are set; an unknown key
    is refused naming the known ones (and where it belongs, when ``elsewhere`` knows)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    known = {f.name for f in fields(options)}
    for key, value in raw.items():
        if key not in known:
            hint = f": {elsewhere[key]}" if key in elsewhere else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint} (known: {', '.join(sorted(known))})")
        if value is not None:  # written but empty: not set
            yield key, value, f"{where}: key {key!r}"


def _check_bool(value: Any, at: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{at}: expected true or false, got {value!r}")
    return value


def _check_memory(value: Any, at: str) -> str:
    if not isinstance(value, str) or not _SPARK_MEMORY.fullmatch(value.strip()):
        raise ConfigError(f"{at}: expected a Spark memory size like 512m or 4g, got {value!r}")
    return value.strip()


def _check_list(value: Any, at: str) -> str:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str) and v.strip() for v in items):
        raise ConfigError(f"{at}: expected a comma-separated string or a list of strings, got {value!r}")
    return ",".join(v.strip() for v in items)


def _check_one_of(*allowed: str):
    wanted = " or ".join(allowed) if len(allowed) == 2 else "one of " + ", ".join(allowed)

    def check(value: Any, at: str) -> str:
        if value not in allowed:
            raise ConfigError(f"{at}: expected {wanted}, got {value!r}")
        return value
    return check


def _check_env_vars(value: Any, at: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(f"{at}: expected a mapping of variable names to values")
    for name, v in value.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"{at}: {name!r} is not an environment variable name")
        if v is None or isinstance(v, (bool, dict, list)):  # yes/true: quote it to mean the word
            raise ConfigError(f"{at}: {name}: expected a string or number, got {v!r}")
    return {name: str(v) for name, v in value.items()}


def _check_commands(value: Any, at: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str) and v.strip() for v in items):
        raise ConfigError(f"{at}: expected a list of shell commands, got {value!r}")
    return tuple(items)


def _check_text(value: Any, at: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{at}: expected a non-empty string, got {value!r}")
    return value


# How a spark_submit key's value is checked (and normalized), by the kind its field declares.
_SUBMIT_CHECKS = {
    "bool": _check_bool,
    "count": lambda value, at: _int(value, at, 1),
    "memory": _check_memory,
    "list": _check_list,
    "deploy_mode": _check_one_of("client", "cluster"),
    "spark_binary": _check_one_of(*_SPARK_BINARIES),
    "env_vars": _check_env_vars,
    "commands": _check_commands,
    "text": _check_text,
}


def _spark_submit(raw: Any, spark_conf: dict[str, str], where: str) -> SparkSubmitOptions:
    """The ``spark_submit:`` mapping; ``where`` is "<file>: spark_submit"."""
    checks = {f.name: _SUBMIT_CHECKS[f.metadata["check"]] for f in fields(SparkSubmitOptions)}
    values = {key: checks[key](value, at)
              for key, value, at in _set_keys(raw, where, SparkSubmitOptions, _SUBMIT_ELSEWHERE)}
    opts = SparkSubmitOptions(**values)
    _refuse_combinations(opts, spark_conf, where)
    return opts


def _refuse_combinations(opts: SparkSubmitOptions, spark_conf: dict[str, str], where: str) -> None:
    """Combinations the provider (or Spark) would refuse at run time, whatever the connection says."""
    if opts.cores_max is not None and opts.total_executor_cores is not None:
        raise ConfigError(f"{where}: keys 'cores_max' and 'total_executor_cores' set the same "
                          "Spark property (spark.cores.max): set one")
    for key, prop in _SUBMIT_CONF.items():
        if getattr(opts, key) is not None and prop in spark_conf:
            raise ConfigError(f"{where}: key {key!r} sets {prop}, which spark_conf sets too: set one")
    if opts.use_krb5ccache and (opts.principal or opts.keytab):
        raise ConfigError(f"{where}: key 'use_krb5ccache' logs the job in from the ticket cache (KRB5CCNAME): "
                          "set principal and keytab for a keytab login, or use_krb5ccache alone")
    if opts.track_driver_via_k8s_api and opts.deploy_mode == "client":
        raise ConfigError(f"{where}: key 'track_driver_via_k8s_api' needs deploy_mode cluster")
    # With RM / Kubernetes API tracking spark-submit must return as soon as the job is submitted.
    for key, prop, refused in (
            ("yarn_track_via_rm_api", "spark.yarn.submit.waitAppCompletion", lambda v: v != "false"),
            ("track_driver_via_k8s_api", "spark.kubernetes.submission.waitAppCompletion", lambda v: v == "true")):
        if getattr(opts, key) and prop in spark_conf and refused(spark_conf[prop].strip().lower()):
            raise ConfigError(f"{where}: key {key!r} cannot work with spark_conf {prop}={spark_conf[prop]}")


def _airflow_tasks(raw: Any, where: str) -> AirflowTasks:
    """The ``airflow_tasks:`` mapping; ``where`` is "<file>: airflow_tasks"."""
    values: dict[str, Any] = {}
    for key, value, at in _set_keys(raw, where, AirflowTasks, _TASKS_ELSEWHERE):
        if key in ("queue", "merge_queue"):
            if not isinstance(value, str) or not _QUEUE_NAME.fullmatch(value):
                raise ConfigError(f"{at}: expected an Airflow executor queue's name (no spaces or commas), "
                                  f"got {value!r}")
        elif key == "merge_priority_weight":
            if isinstance(value, bool) or not isinstance(value, int) or not \
                    _PRIORITY_RANGE[0] <= value <= _PRIORITY_RANGE[1]:
                raise ConfigError(f"{at}: expected an integer (Airflow's priority_weight), got {value!r}")
        elif key == "merge_timeout_minutes":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{at}: expected a positive number of minutes, got {value!r}")
        elif key == "merge_executor_config":
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ConfigError(f"{at}: expected a mapping (passed to the operators' executor_config as it "
                                  f"is), got {value!r}")
        values[key] = value
    return AirflowTasks(**values)


def task_defaults(settings: Settings) -> dict[str, Any]:
    """``default_args`` of every task of the DAG from the config: ``queue`` when
    ``airflow_tasks: queue`` is set (the merge tasks' own arguments override it)."""
    return {"queue": settings.airflow_tasks.queue} if settings.airflow_tasks.queue else {}


def merge_operator_kwargs(settings: Settings) -> dict[str, Any]:
    """The SparkSubmitOperator arguments of the merge tasks that come from the config.

    ``conn_id``, ``py_files``, ``conf``, ``pool`` (and ``max_active_tis_per_dagrun`` when
    ``pool: max_merges_per_run`` is set), the ``airflow_tasks`` arguments of the merges that were
    set (``queue`` from ``merge_queue``, ``priority_weight``, ``executor_config``,
    ``execution_timeout`` from ``merge_timeout_minutes``), plus every
    ``spark_submit`` option that was set (unset ones are left out so that the provider's defaults
    apply).
    """
    conf = dict(settings.spark_conf)
    kwargs: dict[str, Any] = {"conn_id": settings.spark_conn_id, "py_files": settings.py_files,
                              "pool": settings.pool}
    if settings.max_merges_per_run is not None:
        kwargs["max_active_tis_per_dagrun"] = settings.max_merges_per_run
    routing = settings.airflow_tasks
    if routing.merge_queue or routing.queue:
        kwargs["queue"] = routing.merge_queue or routing.queue
    if routing.merge_priority_weight is not None:
        kwargs["priority_weight"] = routing.merge_priority_weight
    if routing.merge_timeout_minutes is not None:
        from datetime import timedelta
        kwargs["execution_timeout"] = timedelta(minutes=routing.merge_timeout_minutes)
    if routing.merge_executor_config is not None:
        import copy  # a copy: the frozen settings must stay as they are
        kwargs["executor_config"] = copy.deepcopy(routing.merge_executor_config)
    opts = settings.spark_submit
    for f in fields(opts):
        value = getattr(opts, f.name)
        if value is None:
            continue
        if f.name in _SUBMIT_CONF:
            conf[_SUBMIT_CONF[f.name]] = str(value)
            continue
        if f.name == "use_krb5ccache":  # see SparkSubmitOptions
            if value:
                conf["spark.kerberos.renewal.credentials"] = "ccache"
            continue
        if isinstance(value, tuple):  # the operator takes a list
            value = list(value)
        elif isinstance(value, dict):  # a copy: the frozen settings must stay as they are
            value = dict(value)
        kwargs[f.metadata["operator_arg"] or f.name] = value
    kwargs["conf"] = conf
    return kwargs


def _pool(raw: Any, where: str) -> dict[str, Any]:
    """``pool: NAME`` or ``pool: {name: NAME, slots: N, max_merges_per_run: M}``."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a pool name or a mapping with name, slots, max_merges_per_run")
    unknown = set(raw) - {"name", "slots", "max_merges_per_run"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
                          "(known: max_merges_per_run, name, slots)")
    name = raw.get("name")
    # Airflow's pool names: what `airflow pools set` and the UI accept without quoting trouble.
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"{where}: key 'name': expected a pool name (letters, digits, _ . -), got {name!r}")
    out: dict[str, Any] = {"pool": name}
    for key, attr in (("slots", "pool_slots"), ("max_merges_per_run", "max_merges_per_run")):
        if raw.get(key) is not None:
            out[attr] = _int(raw[key], f"{where}: key {key!r}", 1)
    if out.get("pool_slots") and out.get("max_merges_per_run", 0) > out["pool_slots"]:
        raise ConfigError(f"{where}: key 'max_merges_per_run' ({out['max_merges_per_run']}) exceeds "
                          f"the pool's slots ({out['pool_slots']})")
    return out


def import_notifier(path: str, where: str) -> type:
    """The notifier class at ``path`` ("package.module.Class"); ConfigError naming ``where`` if not."""
    module, _, name = path.rpartition(".")
    if not module or not name:
        raise ConfigError(f"{where}: expected a class's import path like "
                          f"airflow.providers.smtp.notifications.smtp.SmtpNotifier, got {path!r}")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception as e:  # noqa: BLE001 - a missing provider, a typo, an import error in it
        raise ConfigError(f"{where}: cannot import notifier {path!r}: {type(e).__name__}: {e}") from e
    if not isinstance(cls, type) or not callable(getattr(cls, "notify", None)):
        raise ConfigError(f"{where}: {path!r} is not a notifier class (a subclass of airflow.sdk.BaseNotifier)")
    return cls


def _alerts(raw: Any, where: str) -> tuple[AlertSpec, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of {{notifier: <import path>, kwargs: {{...}}}}")
    specs = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if isinstance(entry, str):
            entry = {"notifier": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("notifier"), str):
            raise ConfigError(f"{at}: expected a mapping with a 'notifier' key (a class's import path)")
        unknown = set(entry) - {"notifier", "kwargs"}
        if unknown:
            raise ConfigError(f"{at}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (known: kwargs, notifier)")
        kwargs = entry.get("kwargs") or {}
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise ConfigError(f"{at}: key 'kwargs': expected a mapping of argument names to values")
        import_notifier(entry["notifier"], f"{at}: key 'notifier'")
        specs.append(AlertSpec(entry["notifier"], dict(kwargs)))
    return tuple(specs)


_TOP_LEVEL = {"tables", "defaults", "metastore_conn_id", "spark_conn_id", "pool", "fan_out", "spark_conf",
              "spark_submit", "py_files", "merge_job", "rollback_job", "retries", "results_table", "alerts",
              "airflow_tasks"}
_TASK_KEYS = {"queue", "merge_queue", "executor_config", "priority_weight", "merge_priority_weight",
              "merge_executor_config", "merge_timeout_minutes"}


def parse(raw: Any, source: str = "<config>") -> Settings:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    unknown = set(raw) - _TOP_LEVEL
    if unknown:
        hint = (" (Airflow's executor queue, priority and executor_config go in the section airflow_tasks:)"
                if unknown & _TASK_KEYS else "")
        raise ConfigError(f"{source}: unknown key(s) {', '.join(sorted(map(str, unknown)))}{hint}")
    defaults = _policy(raw.get("defaults") or {}, TablePolicy(), f"{source}: defaults")
    tables = _tables(raw.get("tables"), defaults, source)
    fan = _fan_out(raw.get("fan_out") or {}, f"{source}: fan_out")
    spark_conf = raw.get("spark_conf") or {}
    if not isinstance(spark_conf, dict):
        raise ConfigError(f"{source}: spark_conf: expected a mapping")
    spark_conf = {str(k): str(v) for k, v in spark_conf.items()}
    spark_submit = _spark_submit(raw.get("spark_submit") or {}, spark_conf, f"{source}: spark_submit")
    out = Settings(tables=tuple(tables), fan_out=fan, source=source, defaults=defaults,
                   spark_conf=spark_conf, spark_submit=spark_submit)
    if raw.get("retries") is not None:
        out = replace(out, retries=_int(raw["retries"], f"{source}: retries", 0))
    if raw.get("results_table") is not None:
        if not isinstance(raw["results_table"], str) or not _TABLE_NAME.fullmatch(raw["results_table"]):
            raise ConfigError(f"{source}: results_table: expected 'database.table', got {raw['results_table']!r}")
        out = replace(out, results_table=raw["results_table"].lower())
    if raw.get("pool") is not None:
        out = replace(out, **_pool(raw["pool"], f"{source}: pool"))
    if raw.get("airflow_tasks") is not None:
        out = replace(out, airflow_tasks=_airflow_tasks(raw["airflow_tasks"], f"{source}: airflow_tasks"))
    if raw.get("alerts") is not None:
        out = replace(out, alerts=_alerts(raw["alerts"], f"{source}: alerts"))
    if raw.get("merge_job") is not None:
        out = replace(out, merge_job=_merge_job(raw["merge_job"], f"{source}: merge_job"))
    if raw.get("rollback_job") is not None:
        out = replace(out, rollback_job=_merge_job(raw["rollback_job"], f"{source}: rollback_job", "rollback"))
    for key in ("metastore_conn_id", "spark_conn_id", "py_files"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(f"{source}: {key}: expected a non-empty string")
            out = replace(out, **{key: raw[key]})
    return out


def _tables(raw: Any, defaults: TablePolicy, source: str) -> list[TableConfig]:
    """The ``tables:`` list: names ``database.table`` (or mappings with ``name`` and policy keys)."""
    if not isinstance(raw or [], list):
        raise ConfigError(f"{source}: tables: expected a list of tables, got {type(raw).__name__}")
    tables, seen = [], set()
    for i, entry in enumerate(raw or []):
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfigError(f"{source}: tables[{i}]: expected a mapping with a 'name' key")
        name = entry["name"]
        if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
            raise ConfigError(f"{source}: tables[{i}]: name must be 'database.table', got {name!r}")
        if name.lower() in seen:
            raise ConfigError(f"{source}: table {name} is listed twice")
        seen.add(name.lower())
        policy = _policy({k: v for k, v in entry.items() if k != "name"}, defaults, f"{source}: table {name}")
        db, tbl = name.lower().split(".")
        tables.append(TableConfig(db, tbl, policy))
    return tables


def _fan_out(raw: Any, where: str) -> FanOut:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    fan = FanOut()
    for key, value in raw.items():
        at = f"{where}: key {key!r}"
        if key == "max_bytes_per_job":
            fan = replace(fan, max_bytes_per_job=max(1, parse_size(value, at)))
        elif key in ("max_spark_jobs", "max_partitions_per_job"):
            fan = replace(fan, **{key: _int(value, at, 1)})
        else:
            raise ConfigError(f"{where}: unknown key {key!r}")
    return fan


def _merge_job(value: Any, where: str, kind: str = "merge") -> str:
    """A Spark job's file (``kind``: merge or rollback): an absolute path or a URL, of a .py file."""
    job = {"merge": "compact_partitions.py", "rollback": "rollback.py"}[kind]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: expected the {kind} job's path or URL (a .py file), got {value!r}")
    value = value.strip()
    if not value.endswith(".py"):
        raise ConfigError(f"{where}: expected a Python file ({job} of this package's "
                          f"version), got {value!r}")
    if not (_URL.match(value) or value.startswith("/")):
        raise ConfigError(f"{where}: expected an absolute path or a URL like hdfs://nn/jobs/{job} "
                          f"(a relative path depends on the worker's working folder), got {value!r}")
    return value


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def dag_config_path(dag_file: str | os.PathLike) -> Path:
    """The config a DAG file reads: ``$HIVE_COMPACTION_CONFIG`` when set, else the
    ``hive_compaction.yaml`` beside the DAG file (wherever the dags folder is; the package may be
    installed anywhere)."""
    return Path(os.environ.get(CONFIG_ENV) or Path(dag_file).resolve().parent / CONFIG_NAME)


def load(path: str | os.PathLike | None = None) -> Settings:
    """Strict: raises ConfigError naming the file, table and key."""
    p = Path(path) if path else config_path()
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        hint = ""
        if not path and p == DEFAULT_CONFIG_PATH:  # an installed package has no dags/ beside it
            hint = f"; name the config file (the DAG's {CONFIG_NAME}) or set {CONFIG_ENV}"
        raise ConfigError(f"{p}: cannot read the config file ({getattr(e, 'strerror', None) or e}){hint}") from e
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    return parse(raw, str(p))


def load_lenient(path: str | os.PathLike | None = None) -> tuple[Settings, str | None]:
    """For DAG parsing: (settings or defaults, the error if there was one). Never raises."""
    try:
        return load(path), None
    except Exception as e:  # noqa: BLE001 - a bad config must not break the DAG import
        return Settings(), str(e)
