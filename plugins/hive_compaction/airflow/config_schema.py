"""The config file's declared shape: its sections and the per-table policy as typed records, each key's check
with its message, and the file's JSON Schema (``python -m hive_compaction.airflow.config_schema`` prints
docs/config.schema.json). pydantic checks a file against ``ConfigFile``; ``problem`` words its first error for
config.parse. The records stay plain frozen dataclasses: checked when read from a file, not when built in code."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    WrapValidator,
    model_validator,
)

from hive_compaction.airflow import table_patterns

MAX_LOOKBACK_DAYS = 366
URI = r"^[A-Za-z][A-Za-z0-9+.-]*://"
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?B?)\s*")
_SIZE_UNITS = {unit + b: 1024**i for i, unit in enumerate(("", "K", "M", "G", "T")) for b in ("", "B")}
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def size(value: Any) -> int:
    """``134217728``, ``"128MB"``, ``"1.5 GB"`` -> bytes (ValueError saying what is expected)."""
    m = None if isinstance(value, (bool, int)) else _SIZE.fullmatch(str(value).upper())
    if isinstance(value, bool) or not (isinstance(value, int) or m):
        raise ValueError(f"expected a size like 128MB, got {value!r}")
    n = int(float(m.group(1)) * _SIZE_UNITS[m.group(2)]) if m else value
    if n < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return n


# --- each key's check: pydantic's own (they make the JSON Schema), saying the message given -----

def _says(message: str) -> WrapValidator:
    """Whatever check it wraps fails with ``message`` and the value given."""
    def check(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(f"{message}, got {value!r}") from None
    return WrapValidator(check)


def _int_from(low: int) -> Any:
    return Annotated[int, Field(strict=True, ge=low), _says(f"expected an integer >= {low}")]


def _one_of(*allowed: str, wanted: str = "") -> Any:
    return Annotated[Literal[allowed], _says(f"expected {wanted or 'one of ' + ', '.join(allowed)}")]


def _shaped(kind: type, message: str) -> BeforeValidator:
    """Before a section's keys are checked: it is a ``kind``, else ``message``."""
    def check(value: Any) -> Any:
        if not isinstance(value, kind):
            raise ValueError(message.format(got=type(value).__name__))
        return value
    return BeforeValidator(check)


def _within_a_year(days: int) -> int:
    if days > MAX_LOOKBACK_DAYS:
        raise ValueError(f"at most {MAX_LOOKBACK_DAYS} days (a scheduled run lists what is pending in that "
                         f"many days), got {days!r}")
    return days


def _env_vars(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of variable names to values")
    for name, v in value.items():
        if not isinstance(name, str) or not re.fullmatch(_ENV_NAME, name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if v is None or isinstance(v, (bool, dict, list)):  # yes/true: quote it to mean the word
            raise ValueError(f"{name}: expected a string or number, got {v!r}")
    return {name: str(v) for name, v in value.items()}


def _job_file(kind: str, job: str) -> PlainValidator:
    """A Spark job's file (``kind``: merge or rollback, ``job`` its name): an absolute path or a URL."""
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected the {kind} job's path or URL (a .py file), got {value!r}")
        value = value.strip()
        if not value.endswith(".py"):
            raise ValueError(f"expected a Python file ({job} of this package's version), got {value!r}")
        if not (re.match(URI, value) or value.startswith("/")):
            raise ValueError(f"expected an absolute path or a URL like hdfs://nn/jobs/{job} (a relative path "
                             f"depends on the worker's working folder), got {value!r}")
        return value
    return PlainValidator(check, json_schema_input_type=Annotated[str, Field(pattern=r"\.py\s*$")])


_NonEmpty = Annotated[str, Field(strict=True, pattern=r"\S")]
_Listed = _NonEmpty | Annotated[list[_NonEmpty], Field(strict=True, min_length=1)]
_EntryName = Annotated[str, Field(pattern=table_patterns.ENTRY_PATTERN)]  # a table's name, a glob or re:...
_MAPPING = _shaped(dict, "expected a mapping, got {got}")
Size = Annotated[int, PlainValidator(size, json_schema_input_type=Annotated[int, Field(ge=0)] | Annotated[
    str, Field(pattern=r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGTkmgt][Bb]?|[Bb])?\s*$")])]
Whole = _int_from(0)
Count = _int_from(1)
Flag = Annotated[bool, Field(strict=True), _says("expected true or false")]
String = Annotated[str, Field(strict=True), _says("expected a string")]
Text = Annotated[_NonEmpty, _says("expected a non-empty string")]
Memory = Annotated[str, Field(strict=True, pattern=r"^\s*[1-9][0-9]*([kKmMgGtTpP][bB]?|[bB])?\s*$"),
                   _says("expected a Spark memory size like 512m or 4g"), AfterValidator(str.strip)]
CommaList = Annotated[_Listed, _says("expected a comma-separated string or a list of strings"),
                      AfterValidator(lambda v: ",".join(s.strip() for s in ([v] if isinstance(v, str) else v)))]
Commands = Annotated[_Listed, _says("expected a list of shell commands"),
                     AfterValidator(lambda v: (v,) if isinstance(v, str) else tuple(v))]
EnvVars = Annotated[dict[str, str], PlainValidator(_env_vars, json_schema_input_type=dict[
    Annotated[str, Field(pattern=_ENV_NAME)], str | int | float])]
SparkConf = Annotated[dict[Any, Any], _MAPPING, AfterValidator(lambda conf: {str(k): str(v) for k, v in conf.items()})]
# Celery takes a worker's queues as a comma-separated list (``-q spark,default``): no comma, no white space.
Queue = Annotated[str, Field(strict=True, pattern=r"^[^\s,]+$"),
                  _says("expected an Airflow executor queue's name (no spaces or commas)")]
# Airflow stores a priority weight in a 32-bit integer column.
Priority = Annotated[int, Field(strict=True, ge=-2**31, le=2**31 - 1),
                     _says("expected an integer (Airflow's priority_weight)")]
Minutes = Annotated[float, Field(strict=True, gt=0), _says("expected a positive number of minutes")]
# Airflow's pool names: what `airflow pools set` and the UI accept without quoting trouble.
PoolName = Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9_.-]+$"),
                     _says("expected a pool name (letters, digits, _ . -)")]
TableName = Annotated[str, Field(strict=True, pattern=table_patterns.EXACT.pattern),
                      _says("expected 'database.table'"), AfterValidator(str.lower)]
# Airflow's dag_id (KEY_REGEX), short enough for the rollback DAG's id after it.
DagId = Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9_.-]+$", max_length=200),
                  _says("expected an Airflow dag_id (letters, digits, _ . -; at most 200)")]
# OpenLineage's namespace of a Hive dataset: the Metastore's Thrift service, hive://<host>:<port>.
AssetNamespace = Annotated[str, Field(strict=True, pattern=r"^hive://[A-Za-z0-9.-]+:[0-9]{1,5}$"),
                           _says("expected hive://<metastore host>:<port>, as OpenLineage names Hive datasets")]


# --- the sections ------------------------------------------------------------------------------

@dataclass(frozen=True)
class TablePolicy:
    """How a table is compacted: the ``defaults:`` section, and a table's own keys over it."""
    target_file_size: Size = 128 * 1024**2
    small_file_limit: Size = 100 * 1024**2
    min_small_files: _int_from(2) = 2
    partition_lag_days: Whole = 1
    partition_filter: String | None = None
    merge_mode: _one_of("auto", "copy", "rewrite") = "auto"
    rewrite_engine: _one_of("columnar", "spark_sql") = "columnar"  # spark_sql: never the engine's jar (merge.columnar)
    # A bare path is the Spark driver's local disk (paths.split_uri): renames to the table's file system would fail.
    work_dir: Annotated[str, Field(strict=True, pattern=URI), _says(
        "expected a URI on the table's file system, with its scheme (hdfs://nameservice/user/etl/hive_compaction, "
        "hdfs:///..., file:///...)")] | None = None
    quiet_period_minutes: Whole = 10  # a partition written to more recently than this is left for later
    # Replaced inputs are kept this long for rollback; at least a day: no purge may reach a run still committing.
    trash_retention_days: Count = 7
    # auto copies a partition only where its stripes / row groups average this (docs/performance.md, "The copy floor")
    copy_min_block_size: Size = 192 * 1024
    date_column: String = "dt"  # the partition column that holds the partition's date
    date_format: String = "%Y-%m-%d"  # how dates are written in it (strftime)
    audit_days: Whole = 7  # undated runs also list partitions not listed this long (stale statistics); 0: off
    # Scheduled runs also look back this many days before their own date for partitions that
    # still hold small files (deferred, skipped, failed, late data); 0: their own date only.
    lookback_days: Annotated[Whole, AfterValidator(_within_a_year),
                             Field(json_schema_extra={"maximum": MAX_LOOKBACK_DAYS})] = 7
    # How a merge is committed: "in_place" renames files inside the partition's folder;
    # "location_switch" builds the partition anew in a fresh folder and switches the Metastore's
    # location to it (for tables whose writers all go through the Metastore; see commit_switch).
    commit_mode: _one_of("in_place", "location_switch") = "in_place"
    lock_wait_seconds: Whole = 60  # a commit waits this long for a Hive writer's lock, then leaves the partition
    # Commits hold the Metastore's lock on the partition; false only for a Metastore that serves
    # no locks (no transaction tables): its commits then run unlocked, and every report says so.
    require_locks: Flag = True


def sizes_agree(policy: TablePolicy) -> TablePolicy:
    if policy.target_file_size <= 0:
        raise ValueError("key 'target_file_size' must be positive")
    if policy.small_file_limit > policy.target_file_size:
        raise ValueError(f"key 'small_file_limit' ({policy.small_file_limit}) must not exceed "
                         f"'target_file_size' ({policy.target_file_size})")
    return policy


_Policy = Annotated[TablePolicy, _MAPPING, AfterValidator(sizes_agree)]


@dataclass(frozen=True, kw_only=True)
class TableEntry(TablePolicy):
    """One entry of ``tables:``: ``database.table`` (or a glob, or ``re:<regular expression>``: see table_patterns),
    or a mapping with its ``name`` and the policy keys it sets (the others: its database's, then ``defaults:``)."""
    name: _EntryName

    def policy(self) -> TablePolicy:
        return TablePolicy(**{f.name: getattr(self, f.name) for f in fields(TablePolicy)})


def _table_entry(value: Any) -> Any:
    value = {"name": value} if isinstance(value, str) else value
    if not isinstance(value, dict) or "name" not in value:
        raise ValueError("expected a mapping with a 'name' key")
    table_patterns.parse(value["name"])  # ValueError saying what is expected
    return value


def _name_pattern(value: Any) -> str:
    table_patterns.parse(value)
    return value.lower() if table_patterns.GLOB.fullmatch(value) else value


@dataclass(frozen=True)
class FanOut:
    """How a run's merges are spread over Spark jobs."""
    max_spark_jobs: Count = 8
    max_partitions_per_job: Count = 500
    max_bytes_per_job: Annotated[Size, AfterValidator(lambda n: max(1, n))] = 20 * 1024**3


@dataclass(frozen=True)
class SparkSubmitOptions:
    """The ``spark_submit:`` section: SparkSubmitOperator arguments of the merge tasks. None means "not set": not
    passed, so the provider's default (or the Spark connection's extra: deploy mode, queue, principal, keytab)
    applies; the master always comes from the connection. Names are the provider's, except ``queue`` (the
    operator's ``yarn_queue``: its ``queue`` is Airflow's executor queue) and ``cores_max`` / ``driver_cores``,
    which have no operator argument and become ``spark.cores.max`` / ``spark.driver.cores`` in ``conf``."""
    # overrides the connection's deploy-mode
    deploy_mode: _one_of("client", "cluster", wanted="client or cluster") | None = None
    # Provider default under Airflow 3.3: durable. YARN cluster mode then needs yarn_track_via_rm_api (the operator
    # raises otherwise); the master is only known from the connection, so the operator checks that, not here.
    durable: Flag | None = None
    yarn_track_via_rm_api: Flag | None = None  # needs yarn_resourcemanager_webapp_address in the connection
    track_driver_via_k8s_api: Flag | None = None  # Kubernetes cluster mode; needs a namespace
    status_poll_interval: Count | None = None
    driver_memory: Memory | None = None
    driver_cores: Count | None = None
    executor_memory: Memory | None = None
    executor_cores: Count | None = None
    num_executors: Count | None = None
    total_executor_cores: Count | None = None
    cores_max: Count | None = None
    queue: Text | None = None
    principal: Text | None = None
    keytab: Text | None = None  # a path on the worker (the connection's extra takes base64 instead)
    proxy_user: Text | None = None
    # The ticket cache (KRB5CCNAME) instead of a keytab: becomes spark.kerberos.renewal.credentials=ccache
    # in ``conf``, not the operator's argument, which adds a --principal that Spark 3+ refuses
    # without a keytab ("Both principal and keytab must be defined, or neither").
    use_krb5ccache: Flag | None = None
    archives: CommaList | None = None  # comma-separated (a YAML list is joined)
    jars: CommaList | None = None
    files: CommaList | None = None
    packages: CommaList | None = None
    exclude_packages: CommaList | None = None
    repositories: CommaList | None = None
    driver_class_path: Text | None = None
    properties_file: Text | None = None
    env_vars: EnvVars | None = None
    verbose: Flag | None = None
    # The provider accepts only these from a connection's extra (it runs the binary): same here.
    spark_binary: _one_of("spark-submit", "spark2-submit", "spark3-submit") | None = None
    post_submit_commands: Commands | None = None


# The keys that become Spark properties in ``conf`` rather than operator arguments.
SUBMIT_CONF = {"driver_cores": "spark.driver.cores", "cores_max": "spark.cores.max"}


def _refuse_combinations(opts: SparkSubmitOptions, spark_conf: dict[str, str]) -> None:
    """Combinations the provider (or Spark) would refuse at run time, whatever the connection says."""
    if opts.cores_max is not None and opts.total_executor_cores is not None:
        raise ValueError("spark_submit: keys 'cores_max' and 'total_executor_cores' set the same "
                         "Spark property (spark.cores.max): set one")
    for key, prop in SUBMIT_CONF.items():
        if getattr(opts, key) is not None and prop in spark_conf:
            raise ValueError(f"spark_submit: key {key!r} sets {prop}, which spark_conf sets too: set one")
    if opts.use_krb5ccache and (opts.principal or opts.keytab):
        raise ValueError("spark_submit: key 'use_krb5ccache' logs the job in from the ticket cache (KRB5CCNAME): "
                         "set principal and keytab for a keytab login, or use_krb5ccache alone")
    if opts.track_driver_via_k8s_api and opts.deploy_mode == "client":
        raise ValueError("spark_submit: key 'track_driver_via_k8s_api' needs deploy_mode cluster")
    # With RM / Kubernetes API tracking spark-submit must return as soon as the job is submitted.
    for key, prop, refused in (
            ("yarn_track_via_rm_api", "spark.yarn.submit.waitAppCompletion", lambda v: v != "false"),
            ("track_driver_via_k8s_api", "spark.kubernetes.submission.waitAppCompletion", lambda v: v == "true")):
        if getattr(opts, key) and prop in spark_conf and refused(spark_conf[prop].strip().lower()):
            raise ValueError(f"spark_submit: key {key!r} cannot work with spark_conf {prop}={spark_conf[prop]}")


@dataclass(frozen=True)
class AirflowTasks:
    """The ``airflow_tasks:`` section: where Airflow's executor runs the DAG's tasks (Airflow's own task arguments,
    not Spark's). ``merge_queue``: the executor queue (a Celery worker's ``-q``) of the merge tasks, so that only
    workers with Java and spark-submit take them; Spark's YARN queue is ``spark_submit: queue``, the merges' pool
    the top-level ``pool``. None means "not set": not passed, Airflow's default applies (``[operators]
    default_queue``, weight 1, ...)."""
    queue: Queue | None = None  # plan, refresh_metastore, the asset events (and merges without merge_queue)
    merge_queue: Queue | None = None
    merge_priority_weight: Priority | None = None
    merge_executor_config: Annotated[dict[str, Any], Field(strict=True), _says(
        "expected a mapping (passed to the operators' executor_config as it is)")] | None = None
    # The merge tasks' execution_timeout: past it Airflow stops the task, and the Spark provider
    # kills the job (on YARN with yarn_track_via_rm_api, through the ResourceManager's REST API).
    merge_timeout_minutes: Minutes | None = None


@dataclass(frozen=True)
class AlertSpec:
    """One entry of ``alerts:``: a notifier class (import path) and its keyword arguments."""
    notifier: str
    kwargs: Annotated[dict[str, Any], Field(strict=True), _says(
        "expected a mapping of argument names to values")] = field(default_factory=dict)


def _alert_entry(value: Any) -> Any:
    value = {"notifier": value} if isinstance(value, str) else value
    if not isinstance(value, dict) or not isinstance(value.get("notifier"), str):
        raise ValueError("expected a mapping with a 'notifier' key (a class's import path)")
    return {k: v for k, v in value.items() if v is not None}


@dataclass(frozen=True)
class PoolSpec:
    """``pool:``: the merge tasks' Airflow pool, by its name or with its slots and a cap per run."""
    name: PoolName
    slots: Count | None = None  # the slots the pool should have (documentation and airflow-init)
    max_merges_per_run: Count | None = None  # merge tasks of one run at once (max_active_tis_per_dagrun)


def _pool(value: Any) -> Any:
    value = {"name": value} if isinstance(value, str) else value
    if not isinstance(value, dict):
        raise ValueError("expected a pool name or a mapping with name, slots, max_merges_per_run")
    return {"name": None, **value}  # no name: the name's own check says what it expects


def _fits_the_pool(pool: PoolSpec) -> PoolSpec:
    if pool.slots and (pool.max_merges_per_run or 0) > pool.slots:
        raise ValueError(f"key 'max_merges_per_run' ({pool.max_merges_per_run}) exceeds "
                         f"the pool's slots ({pool.slots})")
    return pool


def _cron(value: Any) -> str | None:
    """A cron expression or preset (``@daily``) as croniter (Airflow's) reads it; "none": no schedule."""
    from croniter import croniter
    if not isinstance(value, str) or not (value.strip().lower() == "none" or croniter.is_valid(value)):
        raise ValueError(f"expected a cron expression like '0 0 * * *', a preset like '@daily', or 'none', "
                         f"got {value!r}")
    return None if value.strip().lower() == "none" else value.strip()


@dataclass(frozen=True)
class DagSpec:
    """The ``dag:`` section: what makes one instance of the DAGs apart from another in one Airflow (a
    second config beside a second DAG file: another team, another Metastore)."""
    dag_id: DagId = "hive_compaction"  # the merge DAG's; the rollback DAG's is <dag_id>_rollback
    # When the merge DAG runs: a cron expression or preset, in UTC; 'none': only when triggered.
    schedule: Annotated[str | None, PlainValidator(_cron, json_schema_input_type=str)] = "0 0 * * *"
    tags: Annotated[tuple[Text, ...], _shaped(list, "expected a list of tags, got {got}")] = (
        "maintenance", "hive", "spark")
    # The tables' assets are hive://<host>:<port>/<db>.<table> with it (OpenLineage's naming of a
    # Hive table, so lineage tools join them with other jobs' datasets); without it hive://<db>/<table>.
    asset_namespace: AssetNamespace | None = None


# --- the file -----------------------------------------------------------------------------------

class ConfigFile(BaseModel):
    """hive_compaction.yaml: the tables to maintain and their policy, and how their merges run.
    A key written but empty is not set."""
    # extra="forbid" holds for the sections' records too: pydantic gives a plain dataclass its model's config.
    model_config = ConfigDict(extra="forbid", title="hive_compaction.yaml")

    defaults: _Policy = Field(default_factory=TablePolicy)
    tables: Annotated[list[Annotated[TableEntry, BeforeValidator(
        _table_entry, json_schema_input_type=_EntryName | TableEntry), AfterValidator(sizes_agree)]],
        _shaped(list, "expected a list of tables, got {got}")] = []
    # Per database: the policy keys its tables get over ``defaults:`` (a table's own keys win).
    databases: Annotated[dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_]+$")], _Policy], _MAPPING] = {}
    # Names, globs or re: expressions: tables a pattern of ``tables:`` matches that are left out.
    exclude: Annotated[list[Annotated[str, PlainValidator(_name_pattern, json_schema_input_type=_EntryName)]],
                       _shaped(list, "expected a list of table names or patterns, got {got}")] = []
    metastore_conn_id: Text | None = None  # None: as Settings says
    spark_conn_id: Text | None = None  # spark_default
    pool: Annotated[PoolSpec, BeforeValidator(_pool, json_schema_input_type=PoolName | PoolSpec),
                    AfterValidator(_fits_the_pool)] | None = None
    retries: Whole | None = None  # each task's (2)
    fan_out: Annotated[FanOut, _MAPPING] = Field(default_factory=FanOut)
    spark_conf: SparkConf = {}
    spark_submit: Annotated[SparkSubmitOptions, _MAPPING] = Field(default_factory=SparkSubmitOptions)
    py_files: Text | None = None
    merge_job: Annotated[str, _job_file("merge", "compact_partitions.py")] | None = None
    rollback_job: Annotated[str, _job_file("rollback", "rollback.py")] | None = None
    airflow_tasks: Annotated[AirflowTasks, _MAPPING] = Field(default_factory=AirflowTasks)
    results_table: TableName | None = None  # default.hive_compaction_results
    alerts: Annotated[list[Annotated[AlertSpec, BeforeValidator(_alert_entry, json_schema_input_type=str | AlertSpec)]],
                      _shaped(list, "expected a list of {{notifier: <import path>, kwargs: {{...}}}}")] = []
    dag: Annotated[DagSpec, _MAPPING] = Field(default_factory=DagSpec)

    @model_validator(mode="before")
    @classmethod
    def _given(cls, raw: Any) -> Any:
        """The keys set; a table's own keys over the defaults' (merged here: a table's limits are
        checked as the table gets them)."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise ValueError("expected a mapping at the top level")
        raw = {k: v for k, v in raw.items() if v is not None or k not in cls.model_fields}
        defaults, tables, databases = raw.get("defaults"), raw.get("tables"), raw.get("databases")
        if isinstance(databases, dict):
            base = defaults if isinstance(defaults, dict) else {}
            databases = raw["databases"] = {db.lower() if isinstance(db, str) else db: {**base, **(keys or {})}
                                            if isinstance(keys, dict) or keys is None else keys
                                            for db, keys in databases.items()}
        if isinstance(tables, list) and (isinstance(defaults, dict) or isinstance(databases, dict)):
            defaults = defaults if isinstance(defaults, dict) else {}
            databases = databases if isinstance(databases, dict) else {}
            raw["tables"] = [{**defaults, **(databases.get(getattr(_name_of(t), "database", None)) or {}),
                              **({"name": t} if isinstance(t, str) else t)}
                             if isinstance(t, (str, dict)) else t for t in tables]
        return raw

    @model_validator(mode="after")
    def _consistent(self) -> ConfigFile:
        names = [t.name.lower() for t in self.tables]
        for i, t in enumerate(self.tables):
            if names[i] in names[:i]:
                raise ValueError(f"table {t.name} is listed twice")
        excluded = [table_patterns.parse(x) for x in self.exclude]
        for t in (t for t in self.tables if table_patterns.parse(t.name).is_exact):
            refused = next((x.text for x in excluded if x.matches(t.name)), None)
            if refused:
                raise ValueError(f"table {t.name} is listed and excluded (by {refused!r}): remove one")
        _refuse_combinations(self.spark_submit, self.spark_conf)
        return self


def _name_of(entry: Any) -> table_patterns.NamePattern | None:
    """A ``tables:`` entry's name (the entry, or its mapping's ``name``) as table_patterns reads it; None: not a
    name (the file's, not checked yet). Its ``database``: the one it names literally, whose section applies."""
    try:
        return table_patterns.parse(entry.get("name") if isinstance(entry, dict) else entry)
    except ValueError:
        return None


# Per section, its keys (an unknown one is refused naming them), and what a misplaced key says besides "unknown".
_KNOWN = {"defaults": TablePolicy, "tables": TablePolicy, "databases": TablePolicy, "fan_out": FanOut,
          "spark_submit": SparkSubmitOptions, "airflow_tasks": AirflowTasks, "pool": PoolSpec, "alerts": AlertSpec,
          "dag": DagSpec}
_ELSEWHERE = {
    "spark_submit": {
        "py_files": "use the top-level key py_files", "conf": "use the top-level mapping spark_conf",
        "spark_conf": "use the top-level mapping spark_conf", "conn_id": "use the top-level key spark_conn_id",
        "pool": "use the top-level key pool", "master": "the master comes from the Spark connection (spark_conn_id)",
        "yarn_queue": "use queue", "name": "each merge task names its own application",
        "application_args": "each merge task gets its own from the plan",
    },
    "airflow_tasks": {
        "pool": "use the top-level key pool", "yarn_queue": "Spark's YARN queue is spark_submit: queue",
        "executor_config": "use merge_executor_config (the merge tasks')",
        "priority_weight": "use merge_priority_weight (the merge tasks')",
    },
}
# Airflow task arguments written at the top level.
_TASK_KEYS = {"executor_config", "priority_weight", *(f.name for f in fields(AirflowTasks))}
_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument", "invalid_key")


def _where(loc: tuple, raw: Any, source: str) -> str:
    """"<file>: <section, table or entry>: key 'k'": where the value at ``loc`` of the file ``raw`` is."""
    if not loc:
        return source
    section, *keys = loc
    if section == "databases" and keys:
        section, *keys = f"databases: {keys[0]}", *keys[1:]
    if keys and isinstance(keys[0], int):
        index, *keys = keys
        entry = raw[section][index] if section == "tables" else None
        name = entry.get("name") if isinstance(entry, dict) else entry
        section = f"table {name}" if _name_of(entry) else f"{section}[{index}]"
    return ": ".join([source, str(section), *(f"key {k!r}" for k in keys)])


def problem(error: ValidationError, raw: Any, source: str) -> str:
    """The first of ``error``'s problems (unknown keys first: the top level's, the mapping's), naming the file
    ``source``, the section or table, and the key."""
    errors = error.errors()
    unknown = [e for e in errors if e["type"] in _UNKNOWN]
    first = next((e for e in unknown if len(e["loc"]) == 1), None) or next(
        (e for e in unknown if e["loc"][:-1] == errors[0]["loc"][:-1]), errors[0])
    if first["type"] not in _UNKNOWN:
        text = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
        return f"{_where(first['loc'], raw, source)}: {text}"
    owner, key = first["loc"][:-1], first["loc"][-1]
    where = _where(owner, raw, source)
    names = sorted(str(e["loc"][-1]) for e in unknown if e["loc"][:-1] == owner)
    if not owner:
        return f"{where}: unknown key(s) {', '.join(names)}" + (
            " (Airflow's executor queue, priority and executor_config go in the section airflow_tasks:)"
            if _TASK_KEYS & set(names) else "")
    known = ", ".join(sorted(f.name for f in fields(_KNOWN[owner[0]])))  # type: ignore[index]  # a section's name
    if owner[0] in ("pool", "alerts"):  # entries name all their unknown keys at once
        return f"{where}: unknown key(s) {', '.join(names)} (known: {known})"
    hint = _ELSEWHERE.get(owner[0], {}).get(key)  # type: ignore[arg-type]  # a section's name
    return f"{where}: unknown key {key!r}{f': {hint}' if hint else ''} (known: {known})"


def json_schema() -> dict[str, Any]:
    """The file's JSON Schema (docs/config.schema.json), for editors and CI."""
    schema = ConfigFile.model_json_schema()
    for key, value in schema["properties"].items():  # empty: not set (ConfigFile._given)
        if {"type": "null"} not in value.get("anyOf", []):
            schema["properties"][key] = {"anyOf": [value, {"type": "null"}]}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))
