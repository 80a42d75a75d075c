"""The tables to maintain and their policy, read from the YAML file users edit (its shape, records and each
key's check: config_schema). Everything is validated when a task runs (never at DAG import): an error names the
file, the table and the key. ``load_lenient`` is for DAG parsing only: it never raises and falls back to
defaults, so a bad file can never break the scheduler."""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hive_compaction.airflow import config_schema, table_patterns
from hive_compaction.airflow.config_schema import AirflowTasks, AlertSpec, FanOut, SparkSubmitOptions, TablePolicy
from hive_compaction.jobs import ENGINE_JAR_NAME, MERGE_JOB

# The file's name in the dags folder: the DAG passes the one beside itself (``dag_config_path``).
CONFIG_NAME = "hive_compaction.yaml"
# Where a config is looked for when no one says where (scripts run from a checkout).
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[3] / "dags" / CONFIG_NAME
CONFIG_ENV = "HIVE_COMPACTION_CONFIG"


class ConfigError(ValueError):
    """A configuration value is missing or wrong; the message names where."""


# The first retry of a task waits this long, then each one twice as long (Airflow's exponential
# backoff, which adds up to as much again): how long a partition whose merge job died mid-commit
# waits for the retry that finishes its commit (report.reader_gap_note).
MERGE_RETRY_DELAY_SECONDS = 60


@dataclass(frozen=True)
class TableConfig:
    database: str
    table: str
    policy: TablePolicy

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class TablePattern:
    """An entry of ``tables:`` that names tables by a pattern (``sales.*``, a glob, ``re:...``), resolved from the
    Metastore's names when a run plans (table_resolution). ``own``: its own policy keys, over its database's."""
    entry: str
    own: tuple[tuple[str, Any], ...] = ()

    @property
    def pattern(self) -> table_patterns.NamePattern:
        return table_patterns.parse(self.entry)

    def policy(self, database_policy: TablePolicy) -> TablePolicy:
        return replace(database_policy, **dict(self.own))


@dataclass(frozen=True)
class Settings:
    tables: tuple[TableConfig, ...] = ()  # the exact names (a run's plan adds what patterns match: table_resolution)
    patterns: tuple[TablePattern, ...] = ()  # the entries of ``tables:`` that are patterns, in the file's order
    exclude: tuple[str, ...] = ()  # names or patterns left out of what ``patterns`` match
    databases: dict[str, TablePolicy] = field(default_factory=dict)  # per database, over ``defaults:``
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
    # merge tasks, or a URL the cluster reads (hdfs://, s3a://, ...); by default the installed package's.
    merge_job: str = str(MERGE_JOB)
    rollback_job: str | None = None  # likewise; None: rollback.py beside the merge job (``rollback_job_file``)
    spark_submit: SparkSubmitOptions = field(default_factory=SparkSubmitOptions)
    airflow_tasks: AirflowTasks = field(default_factory=AirflowTasks)
    results_table: str = "default.hive_compaction_results"  # merge jobs' results, for the refresh task (results.py)
    # The ``defaults:`` policy: its partition_lag_days is the DAG's, which the runs' partition
    # keys are counted in (run_params.table_date).
    defaults: TablePolicy = field(default_factory=TablePolicy)
    dag: config_schema.DagSpec = field(default_factory=config_schema.DagSpec)  # dag_id, schedule, tags, asset_namespace
    source: str = "<defaults>"

    @property
    def rollback_job_file(self) -> str:
        """The rollback job spark-submit gets: ``rollback_job``, else ``rollback.py`` beside ``merge_job`` (both
        ship in the package's ``jobs/`` folder: copy them together)."""
        return self.rollback_job or f"{self.merge_job.rsplit('/', 1)[0]}/rollback.py"

    @property
    def engine_jar(self) -> str | None:
        """The merge engine's jar beside ``merge_job`` (copy them together); None for a local path without it."""
        jar = f"{self.merge_job.rsplit('/', 1)[0]}/{ENGINE_JAR_NAME}"
        return None if jar.startswith("/") and not os.path.exists(jar) else jar

    @property
    def key_lag_days(self) -> int:
        """Days between a scheduled run's cron date and its partition key (the schedule's run_offset, negated)."""
        return self.defaults.partition_lag_days

    def policy_of(self, database: str) -> TablePolicy:
        """The policy of a table of ``database`` that sets no key of its own."""
        return self.databases.get(database.lower(), self.defaults)

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise ConfigError(f"{self.source}: table {name!r} is not configured")


def parse(raw: Any, source: str = "<config>") -> Settings:
    """The settings of a config file's YAML (``raw``); ConfigError naming the file ``source``. A pattern's own
    keys are checked against every policy its tables may get (a database's of ``databases:``, the defaults)."""
    try:
        given = config_schema.ConfigFile.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(config_schema.problem(e, raw, source)) from None
    for i, alert in enumerate(given.alerts):
        import_notifier(alert.notifier, f"{source}: alerts[{i}]: key 'notifier'")
    exact, patterns = [], []
    for t, raw_t in zip(given.tables, (raw or {}).get("tables") or []):
        if table_patterns.parse(t.name).is_exact:
            database, table = t.name.lower().split(".")
            exact.append(TableConfig(database, table, t.policy()))
            continue
        keys = [k for k in (raw_t if isinstance(raw_t, dict) else {}) if k != "name"]
        patterns.append(found := TablePattern(t.name, tuple((k, getattr(t, k)) for k in keys)))
        for db, policy in [*given.databases.items(), (None, given.defaults)]:
            try:
                if db is None or found.pattern.may_hold(db):
                    config_schema.sizes_agree(found.policy(policy))
            except ValueError as e:
                where = f"with databases: {db}" if db else "with defaults"
                raise ConfigError(f"{source}: table {t.name} ({where}): {e}") from None
    pool = {"pool": given.pool.name, "pool_slots": given.pool.slots,
            "max_merges_per_run": given.pool.max_merges_per_run} if given.pool else {}
    return Settings(**{k: v for k, v in given if v is not None and k not in ("pool", "tables", "alerts", "exclude")},
                    **pool, tables=tuple(exact), patterns=tuple(patterns), exclude=tuple(given.exclude),  # type: ignore[arg-type]  # the checked file's keys
                    alerts=tuple(given.alerts), source=source)


def import_notifier(path: str, where: str) -> type:
    """The notifier class at ``path`` ("package.module.Class"); ConfigError naming ``where`` if not."""
    module, _, name = path.rpartition(".")
    if not module or not name:
        raise ConfigError(f"{where}: expected a class's import path like "
                          f"airflow.providers.smtp.notifications.smtp.SmtpNotifier, got {path!r}")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception as e:
        raise ConfigError(f"{where}: cannot import notifier {path!r}: {type(e).__name__}: {e}") from e
    if not isinstance(cls, type) or not callable(getattr(cls, "notify", None)):
        raise ConfigError(f"{where}: {path!r} is not a notifier class (a subclass of airflow.sdk.BaseNotifier)")
    return cls


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def dag_config_path(dag_file: str | os.PathLike, name: str = CONFIG_NAME) -> Path:
    """The config a DAG file reads: the file ``name`` beside it (wherever the dags folder is: the package may be
    installed anywhere), or for the default name ``$HIVE_COMPACTION_CONFIG`` if set (another instance names its own)."""
    if name == CONFIG_NAME and os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    return Path(dag_file).resolve().parent / name


def load(path: str | os.PathLike | None = None) -> Settings:
    """Strict: raises ConfigError naming the file, table and key."""
    p = Path(path) if path else config_path()
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        by_default = not path and p == DEFAULT_CONFIG_PATH  # an installed package has no dags/ beside it
        hint = f"; name the config file (the DAG's {CONFIG_NAME}) or set {CONFIG_ENV}" if by_default else ""
        raise ConfigError(f"{p}: cannot read the config file ({getattr(e, 'strerror', None) or e}){hint}") from e
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    return parse(raw, str(p))


def load_lenient(path: str | os.PathLike | None = None) -> tuple[Settings, str | None]:
    """For DAG parsing: (settings or defaults, the error if there was one). Never raises. A file wrong elsewhere
    keeps its ``dag:`` section if that is right itself: a second instance's DAGs keep their ids (with the
    defaults' they would collide with the first's)."""
    try:
        return load(path), None
    except Exception as e:  # noqa: BLE001 - a bad config must not break the DAG import
        try:
            raw = yaml.safe_load((Path(path) if path else config_path()).read_text())
            given = raw.get("dag") if isinstance(raw, dict) else None
            return Settings(dag=config_schema.ConfigFile.model_validate({"dag": given or {}}).dag), str(e)
        except Exception:  # noqa: BLE001 - wrong too: the defaults'
            return Settings(), str(e)
