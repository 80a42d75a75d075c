"""The tables to maintain and their policy, read from the YAML file users edit.

Everything is validated when a task runs (never at DAG import): an error names the file,
the table and the key. ``load_lenient`` exists for DAG parsing only: it never raises and
falls back to defaults, so a bad file can never break the scheduler.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[2] / "dags" / "hive_compaction.yaml"
CONFIG_ENV = "HIVE_COMPACTION_CONFIG"
MERGE_MODES = ("auto", "copy", "rewrite")
_SIZE_UNITS = {"": 1, "B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")


class ConfigError(ValueError):
    """A configuration value is missing or wrong; the message names where."""


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
    copy_min_block_size: int = 1024**2  # auto mode copies only stripes / row groups this big on average
    date_column: str = "dt"  # the partition column that holds the partition's date
    date_format: str = "%Y-%m-%d"  # how dates are written in it (strftime)


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


@dataclass(frozen=True)
class Settings:
    tables: tuple[TableConfig, ...] = ()
    metastore_conn_id: str = "hive_metastore"
    spark_conn_id: str = "spark_default"
    pool: str = "default_pool"
    retries: int = 2
    fan_out: FanOut = field(default_factory=FanOut)
    spark_conf: dict[str, str] = field(default_factory=dict)
    py_files: str | None = None
    source: str = "<defaults>"

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
        elif key in ("partition_lag_days", "quiet_period_minutes", "trash_retention_days"):
            values[key] = _int(value, at, 0)
        elif key == "merge_mode":
            if value not in MERGE_MODES:
                raise ConfigError(f"{at}: expected one of {', '.join(MERGE_MODES)}, got {value!r}")
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


def parse(raw: Any, source: str = "<config>") -> Settings:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    known = {"tables", "defaults", "metastore_conn_id", "spark_conn_id", "pool", "fan_out",
             "spark_conf", "py_files", "retries"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    defaults = _policy(raw.get("defaults") or {}, TablePolicy(), f"{source}: defaults")

    tables = []
    seen = set()
    if not isinstance(raw.get("tables") or [], list):
        raise ConfigError(f"{source}: tables: expected a list of tables, got {type(raw['tables']).__name__}")
    for i, entry in enumerate(raw.get("tables") or []):
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
        policy = _policy({k: v for k, v in entry.items() if k != "name"}, defaults,
                         f"{source}: table {name}")
        db, tbl = name.lower().split(".")
        tables.append(TableConfig(db, tbl, policy))

    fan_raw = raw.get("fan_out") or {}
    if not isinstance(fan_raw, dict):
        raise ConfigError(f"{source}: fan_out: expected a mapping")
    fan = FanOut()
    for key, value in fan_raw.items():
        at = f"{source}: fan_out: key {key!r}"
        if key == "max_bytes_per_job":
            fan = replace(fan, max_bytes_per_job=max(1, parse_size(value, at)))
        elif key in ("max_spark_jobs", "max_partitions_per_job"):
            fan = replace(fan, **{key: _int(value, at, 1)})
        else:
            raise ConfigError(f"{source}: fan_out: unknown key {key!r}")

    spark_conf = raw.get("spark_conf") or {}
    if not isinstance(spark_conf, dict):
        raise ConfigError(f"{source}: spark_conf: expected a mapping")
    out = Settings(tables=tuple(tables), fan_out=fan, source=source,
                   spark_conf={str(k): str(v) for k, v in spark_conf.items()})
    if raw.get("retries") is not None:
        out = replace(out, retries=_int(raw["retries"], f"{source}: retries", 0))
    for key in ("metastore_conn_id", "spark_conn_id", "pool", "py_files"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(f"{source}: {key}: expected a non-empty string")
            out = replace(out, **{key: raw[key]})
    return out


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def load(path: str | os.PathLike | None = None) -> Settings:
    """Strict: raises ConfigError naming the file, table and key."""
    p = Path(path) if path else config_path()
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the config file ({getattr(e, 'strerror', None) or e})") from e
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
