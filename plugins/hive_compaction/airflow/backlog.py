"""The backlog: partitions of recent dates that still hold small files, and when a partition left
alone by a run will be looked at again.

A scheduled run lists every partition of its own date and, in the ``lookback_days`` before it,
the partitions for which the Metastore keeps a reason to look again (``pending``): never listed
by this package (late data), deferred by the fan-out caps or failed in a run and not listed
since, altered since the last listing, or left with small files by it (a quiet period, a skip),
else statistics that show small files. ``revisit`` says,
from the same rules, when that will be. Pure logic: no Airflow, no Thrift.
"""

from __future__ import annotations

from datetime import date, timedelta

from hive_compaction.airflow.config import TablePolicy
from hive_compaction.airflow.metastore_types import PartitionInfo
from hive_compaction.airflow.planning import DDL_TIME
from hive_compaction.model.results import LISTED_AT, NUM_FILES, PLANNED_AT, SMALL_FILES


def min_small(policy: TablePolicy) -> int:
    return max(policy.min_small_files, 2)


def pending(p: PartitionInfo, policy: TablePolicy) -> str | None:
    """Why a partition of the lookback window is planned again, or None when neither the
    Metastore's statistics nor this package's last listing say it holds small files."""
    if policy.small_file_limit <= 0:
        return None
    listed = p.stat(LISTED_AT)
    if listed is None:
        return "never listed by this package"
    planned = p.stat(PLANNED_AT)
    if planned is not None and planned > listed:
        return "deferred or failed in an earlier run and not listed since"
    ddl = p.stat(DDL_TIME)
    if ddl is not None and ddl > listed:
        return "altered since its last listing"
    small = p.stat(SMALL_FILES)
    if small is not None:
        return f"{small} small file(s) at its last listing" if small >= min_small(policy) else None
    files = p.stat(NUM_FILES)  # listed before smallFiles was recorded: the file count it wrote
    if files is None or files >= min_small(policy):
        return "statistics show small files" if files is not None else "no statistics"
    return None


def pending_after(r: dict, policy: TablePolicy) -> bool:
    """Whether the next scheduled runs will find ``pending`` true for a partition this run planned
    (``r``: its result as the report holds it), once the refresh has written what it writes."""
    from hive_compaction.model.results import small_files_left

    if policy.small_file_limit <= 0:
        return False
    if r["status"] == "failed" or not r.get("listed"):
        return True  # the refresh marks it (plannedAt) and writes no listedAt
    small = small_files_left(r)
    if small is None:
        return r["files_after"] >= min_small(policy)
    return small >= min_small(policy)


def next_scheduled_key(run_type: str, run_key: date | None, key_lag_days: int, today: date) -> date:
    """The partition key of the next scheduled run: the day after a scheduled run's own key, else
    the key of the next daily tick after ``today`` (UTC)."""
    if run_type == "scheduled" and run_key is not None:
        return run_key + timedelta(days=1)
    return today + timedelta(days=1) - timedelta(days=key_lag_days)


def revisit(
    day: date | None, policy: TablePolicy, key_lag_days: int, next_key: date, will_pend: bool, partitioned: bool = True
) -> str:
    """When the scheduled runs look at a partition of ``day`` (its table's date) again.

    The scheduled run keyed K lists every partition of the table date K - shift (shift: the
    table's lag beyond the DAG's) and, of the ``lookback_days`` before it, those ``pending``
    (``will_pend``: whether it will be, as this run leaves the Metastore)."""
    if not partitioned:
        return f"again in the scheduled run of {next_key} (every scheduled run lists this table)"
    if day is None:
        return (
            f"not again automatically: no date in its {policy.date_column!r} column; "
            "a run without a date (the form, no date) looks at it"
        )
    shift = timedelta(days=policy.partition_lag_days - key_lag_days)
    own_key = day + shift
    if own_key >= next_key:
        return f"again in the scheduled run of {own_key} (its own date)"
    if not will_pend:
        return (
            "not again automatically: the Metastore's statistics and its last listing show no small "
            "files; a run for its date lists it"
        )
    if policy.lookback_days and day >= next_key - shift - timedelta(days=policy.lookback_days):
        return f"again in the scheduled run of {next_key} (within lookback_days: {policy.lookback_days})"
    return f"not again automatically: older than lookback_days ({policy.lookback_days}); trigger a run for its date"
