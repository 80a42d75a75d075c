"""What one DAG run compacts: the trigger form's values, validated, and the partition dates.

Scheduled and backfill runs carry a partition key (the DAG's ``CronPartitionTimetable``): the
partition date the run compacts, for tables with the DAG's lag (``defaults:
partition_lag_days``, the schedule's ``run_offset``); a table with a lag of its own compacts the
date its lag names, shifted from the key by the difference. A backfill of a date range makes one
run per key, so a backfill run and a scheduled run of one key mean the same dates. Scheduled runs
also look back ``lookback_days`` before their own date (``backlog``). Manual runs compact the
form's date or date range, else the key they were triggered with, else every partition. Runs
without a key (made before the schedule carried keys) keep the older rule: scheduled, the run's
date minus each table's lag; backfill, the run's date. Every value is checked here before
anything reaches the Metastore or a path; errors name the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from hive_compaction.airflow import table_patterns
from hive_compaction.airflow.backlog import next_scheduled_key
from hive_compaction.airflow.config import ConfigError, Settings, TableConfig, TablePolicy

MAX_SIZE_MB = 16 * 1024
MAX_RANGE_DAYS = 366
# The schedule's partition keys: the partition date, as the form writes dates.
KEY_FORMAT = "%Y-%m-%d"


class ParamError(ValueError):
    """A trigger-form value is wrong; the message names the field."""


def params_schema(table_names: list[str], patterns: Sequence[str] = ()) -> dict[str, dict]:
    """JSON schema of each form field (the Airflow UI renders these as a form). ``patterns``: the config's
    pattern entries: the field then takes names or patterns (of the tables they match), and its pick list
    shows the exact names and the patterns, not every table they match."""
    table_items: dict[str, Any] = {"type": "string", "pattern": r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$"}
    tables: dict[str, Any] = {
        # null: the UI's pick list sends null when nothing is picked (= every table)
        "type": ["null", "array"],
        "items": table_items,
        "uniqueItems": True,
        "title": "Tables",
        "description": "Configured tables to compact; empty means all of them",
    }
    if patterns:
        table_items["pattern"] = table_patterns.ENTRY_PATTERN
        tables["description"] = (
            "Configured tables to compact, by name, glob (sales.*) or re:<regular expression>; empty means all of them"
        )
        tables["examples"] = sorted(table_names) + list(patterns)
    elif table_names:
        table_items["enum"] = sorted(table_names)
        tables["examples"] = sorted(table_names)  # the UI shows a pick list for an array with examples
    return {
        "tables": tables,
        "partition_date": {
            "type": ["null", "string"],
            "format": "date",
            "title": "Partition date",
            "description": "Only partitions of this date (YYYY-MM-DD); empty: every partition",
        },
        "partition_date_to": {
            "type": ["null", "string"],
            "format": "date",
            "title": "Up to partition date",
            "description": "With a partition date: compact the range up to this date too",
        },
        "dry_run": {"type": "boolean", "title": "Dry run", "description": "Plan and report; change nothing"},
        "target_file_size_mb": {
            "type": ["null", "integer"],
            "minimum": 1,
            "maximum": MAX_SIZE_MB,
            "title": "Target file size (MB)",
            "description": "Override the configured target",
        },
        "small_file_limit_mb": {
            "type": ["null", "integer"],
            "minimum": 0,
            "maximum": MAX_SIZE_MB,
            "title": "Small-file limit (MB)",
            "description": "Override; 0 merges nothing",
        },
    }


PARAM_DEFAULTS: dict[str, Any] = {
    "tables": [],
    "partition_date": None,
    "partition_date_to": None,
    "dry_run": False,
    "target_file_size_mb": None,
    "small_file_limit_mb": None,
}


@dataclass(frozen=True)
class RunSelection:
    tables: tuple[TableConfig, ...]
    dates: dict[str, tuple[date, date] | None]  # per table: inclusive partition-date range, None = all
    dry_run: bool
    # Scheduled runs, per table: the lookback window before its own date (inclusive), else absent.
    lookback: dict[str, tuple[date, date]] = field(default_factory=dict)
    # When partitions left alone are looked at again: the next scheduled run's key, and the lag
    # the keys are counted in (config.Settings.key_lag_days).
    next_key: date | None = None
    key_lag_days: int = 0


def _date(value: Any, field: str) -> date | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ParamError(f"{field}: expected a date YYYY-MM-DD, got {value!r}")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ParamError(f"{field}: expected a date YYYY-MM-DD, got {value!r}") from None


def _size_mb(value: Any, field: str, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_SIZE_MB:
        raise ParamError(f"{field}: expected a whole number of MB from {minimum} to {MAX_SIZE_MB}, got {value!r}")
    return value


def key_date(partition_key: str) -> date:
    """The partition date a run's key names (``KEY_FORMAT``)."""
    try:
        return datetime.strptime(partition_key, KEY_FORMAT).date()
    except (TypeError, ValueError):
        raise ParamError(
            f"partition_key: expected a date YYYY-MM-DD (the schedule's key_format), got {partition_key!r}"
        ) from None


def table_date(key: date, policy: TablePolicy, key_lag_days: int) -> date:
    """The partition date a run keyed ``key`` compacts in a table: the key itself for a table with
    the DAG's lag, earlier (later) by as many days as the table's lag is longer (shorter)."""
    return key - timedelta(days=policy.partition_lag_days - key_lag_days)


def select(
    settings: Settings,
    params: dict,
    run_type,
    logical_date: datetime | date | None,
    partition_key: str | None = None,
    now: datetime | None = None,
) -> RunSelection:
    """``run_type`` is Airflow's DagRunType (an enum in the task SDK, whose str() is not its
    value) or its value: "scheduled", "backfill", "manual", ...; ``partition_key`` the run's key
    (None for runs without one); ``now`` the clock "today" is read from (default: the current
    time, in UTC)."""
    run_type = str(getattr(run_type, "value", run_type))
    key = key_date(partition_key) if partition_key else None
    unknown = set(params) - set(PARAM_DEFAULTS)
    if unknown:
        raise ParamError(f"unknown field(s): {', '.join(sorted(unknown))}")
    p = {**PARAM_DEFAULTS, **params}
    names = p["tables"] or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ParamError(f"tables: expected a list of table names, got {names!r}")
    tables = _picked(settings, names) if names else list(settings.tables)
    if not tables:
        raise ParamError(f"tables: no table is configured in {settings.source}")
    if not isinstance(p["dry_run"], bool):
        raise ParamError(f"dry_run: expected true or false, got {p['dry_run']!r}")

    overridden = _with_sizes(tables, p)
    start, end = _date_range(p)
    key_lag = settings.key_lag_days
    if key is None and run_type == "scheduled" and logical_date is not None:  # a run from before the keys
        key = _as_date(logical_date) - timedelta(days=key_lag)
    dates: dict[str, tuple[date, date] | None] = {}
    lookback: dict[str, tuple[date, date]] = {}
    for t in overridden:
        if start:
            dates[t.name] = (start, end or start)
        elif key is not None:
            d = table_date(key, t.policy, key_lag)
            dates[t.name] = (d, d)
            # Only scheduled runs look back: backfill runs run side by side, each on its own date.
            if run_type == "scheduled" and t.policy.lookback_days:
                lookback[t.name] = (d - timedelta(days=t.policy.lookback_days), d - timedelta(days=1))
        elif run_type == "backfill" and logical_date is not None:
            d = _as_date(logical_date)
            dates[t.name] = (d, d)
        else:
            dates[t.name] = None
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    next_key = next_scheduled_key(run_type, key if not start else None, key_lag, today)
    return RunSelection(tuple(overridden), dates, p["dry_run"], lookback, next_key, key_lag)


def _picked(settings: Settings, names: list[str]) -> list[TableConfig]:
    """The configured tables the form names, by name or pattern (each once, in the form's order)."""
    picked: dict[str, TableConfig] = {}
    for n in names:
        try:
            pattern = table_patterns.parse(n)
        except ValueError as e:
            raise ParamError(f"tables: {e}") from None
        if pattern.is_exact:
            try:
                picked.setdefault(pattern.text, settings.table(pattern.text))
            except ConfigError as e:
                raise ParamError(f"tables: {e}") from None
            continue
        matches = [t for t in settings.tables if pattern.matches(t.name)]
        if not matches:
            raise ParamError(f"tables: {n!r} matches no configured table (of {len(settings.tables)})")
        for t in matches:
            picked.setdefault(t.name, t)
    return list(picked.values())


def _with_sizes(tables: list[TableConfig], p: dict) -> list[TableConfig]:
    """The tables with the form's file sizes (when given) in their policies."""
    target = _size_mb(p["target_file_size_mb"], "target_file_size_mb", 1)
    limit = _size_mb(p["small_file_limit_mb"], "small_file_limit_mb", 0)
    overridden = []
    for t in tables:
        policy = t.policy
        if target is not None:
            policy = replace(policy, target_file_size=target * 1024**2)
        if limit is not None:
            policy = replace(policy, small_file_limit=limit * 1024**2)
        if policy.small_file_limit > policy.target_file_size:
            raise ParamError(
                f"small_file_limit_mb: {policy.small_file_limit // 1024**2} MB exceeds the target file "
                f"size of {t.name} ({policy.target_file_size // 1024**2} MB)"
            )
        overridden.append(replace(t, policy=policy))
    return overridden


def _date_range(p: dict) -> tuple[date | None, date | None]:
    """The form's partition_date and partition_date_to, checked."""
    start, end = _date(p["partition_date"], "partition_date"), _date(p["partition_date_to"], "partition_date_to")
    if end and not start:
        raise ParamError("partition_date_to: needs partition_date too")
    if start and end and end < start:
        raise ParamError(f"partition_date_to: {end} is before partition_date {start}")
    if start and end and (end - start).days >= MAX_RANGE_DAYS:
        raise ParamError(f"partition_date_to: a range of at most {MAX_RANGE_DAYS} days, got {(end - start).days + 1}")
    return start, end


def _as_date(value: datetime | date) -> date:
    return value.date() if isinstance(value, datetime) else value


def partition_date(values: dict[str, str], column: str, fmt: str) -> date | None:
    """The date a partition holds in its date column, or None when it has none that parses."""
    raw = values.get(column)
    if raw is None:
        return None
    try:
        return datetime.strptime(raw, fmt).date()
    except ValueError:
        return None
