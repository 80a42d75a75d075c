"""Which partitions are candidates, and how they are packed into a bounded number of Spark jobs.

Pure logic: the Metastore is read by ``metastore_hook``; the files of a partition are listed again by
the Spark job at merge time (``sizing``), so stale statistics can never cause a wrong merge.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from hive_compaction.airflow.config import FanOut, TablePolicy
from hive_compaction.airflow.metastore_types import PartitionInfo, TableInfo
from hive_compaction.model.batch import MAX_ENCODED_BATCH, PartitionTask
from hive_compaction.model.results import LISTED_AT, NUM_FILES, NUM_ROWS, PLANNED_AT, STATISTICS_KEYS, TOTAL_SIZE
from hive_compaction.storage.capabilities import IN_PLACE, plan_refusal
from hive_compaction.storage.paths import canonical, default_work_dir, file_system, location_problem


@dataclass(frozen=True)
class Skipped:
    table: str
    partition: str
    reason: str


def table_refusal(table: TableInfo, commit_mode: str = IN_PLACE) -> str | None:
    """Why a whole table is not compacted in ``commit_mode``, or None."""
    if table.table_type.upper() == "VIRTUAL_VIEW":
        return "is a view"
    if table.transactional:
        return "is a transactional (ACID) table: Hive's own compactor owns its files"
    if table.bucketed:
        return f"is bucketed ({table.num_buckets} buckets): merging files would break the bucket layout"
    if table.storage_format is None:
        return f"has an unsupported storage format ({table.input_format or 'unknown'}); only ORC and Parquet are merged"
    return plan_refusal(table.location, commit_mode)


DDL_TIME = "transient_lastDdlTime"


def candidate(partition: PartitionInfo, policy: TablePolicy) -> bool:
    """From statistics: worth listing at merge time? Missing statistics mean yes (list it)."""
    if policy.small_file_limit <= 0:
        return False
    num_files = partition.stat(NUM_FILES)
    return num_files is None or num_files >= policy.min_small_files


def audit_due(partition: PartitionInfo, policy: TablePolicy, now: float) -> bool:
    """Statistics may be stale (writers that append, files copied in, MSCK REPAIR): list a
    partition this package never listed, last listed more than ``audit_days`` ago, altered
    (a Hive insert, an ALTER) after it was last listed, or deferred or failed in a run since."""
    if policy.small_file_limit <= 0 or policy.audit_days <= 0:
        return False
    listed = partition.stat(LISTED_AT)
    if listed is None:
        return True
    ddl, planned = partition.stat(DDL_TIME), partition.stat(PLANNED_AT)
    return (
        listed < now - policy.audit_days * 86400
        or (ddl is not None and ddl > listed)
        or (planned is not None and planned > listed)
    )


def priority(task: PartitionTask) -> tuple:
    """Which partitions come first when the fan-out caps defer some: those whose statistics
    show small files (most files first), then the ones listed longest ago (never: first)."""
    flagged = task.reason == "statistics"
    return (
        0 if flagged else 1,
        -(task.num_files or 0) if flagged else (task.listed_at or 0),
        task.table_name,
        task.partition,
    )


def table_work_dir(table: TableInfo, policy: TablePolicy, work_root: str | None = None) -> str:
    return default_work_dir(table.location, table.database, table.table, policy.work_dir or work_root)


def plan_table(
    table: TableInfo,
    policy: TablePolicy,
    partitions,
    work_root: str | None = None,
    list_all: bool = False,
    now: float | None = None,
    pick=None,
):
    """(tasks, skipped) for one table's partitions (an iterable of PartitionInfo).

    The statistics never decide alone that a partition needs nothing: with ``list_all`` (a run
    that selected dates) every partition is planned, to be listed by the Spark job; otherwise
    those whose statistics show small files, plus those due for an audit (``audit_due``). With
    ``pick`` (the backlog: ``backlog.pending``), exactly the partitions it gives a reason for,
    planned with reason "backlog"."""
    tasks: list[PartitionTask] = []
    skipped: list[Skipped] = []
    refusal = table_refusal(table, policy.commit_mode)
    work_dir = table_work_dir(table, policy, work_root)
    if not refusal and file_system(work_dir) != file_system(table.location):
        refusal = (
            f"its work_dir {work_dir} is on another file system than the table ({file_system(table.location)}): "
            "a commit moves files between them by renames, which cannot cross file systems; set work_dir on "
            "the table's file system, or leave it unset (a folder beside the table)"
        )
    if refusal:
        return tasks, [Skipped(table.name, "", refusal)]
    now = time.time() if now is None else now
    folders: dict[str, str] = {}
    for p in partitions:
        reason = _why_planned(p, policy, list_all, now, pick)
        if reason is None:
            continue
        problem = location_problem(p.location, table.location, bool(table.partition_keys))
        if not problem and canonical(p.location) in folders:
            # One folder, two partitions: a commit holds a partition, so both could be merged at once.
            problem = f"shares its folder {p.location} with partition {folders[canonical(p.location)]}"
        folders.setdefault(canonical(p.location), p.name)
        if problem:
            skipped.append(Skipped(table.name, p.name, problem))
        else:
            tasks.append(_task(table, policy, p, work_dir, reason))
    return tasks, skipped


def _why_planned(p: PartitionInfo, policy: TablePolicy, list_all: bool, now: float, pick) -> str | None:
    """Why ``p`` is planned (plan_table's reasons), or None: it is not."""
    if pick is not None:
        return "backlog" if pick(p, policy) else None
    if candidate(p, policy):
        return "statistics"
    if policy.small_file_limit > 0 and list_all:
        return "selected"
    return "audit" if audit_due(p, policy, now) else None


def _task(table: TableInfo, policy: TablePolicy, p: PartitionInfo, work_dir: str, reason: str) -> PartitionTask:
    return PartitionTask(
        database=table.database,
        table=table.table,
        partition=p.name,
        values=p.values,
        location=p.location,
        table_location=table.location,
        storage_format=table.storage_format,  # type: ignore[arg-type]  # None: plan_table refused the table
        work_dir=work_dir,
        target_file_size=policy.target_file_size,
        small_file_limit=policy.small_file_limit,
        min_small_files=policy.min_small_files,
        merge_mode=policy.merge_mode,
        rewrite_engine=policy.rewrite_engine,
        commit_mode=policy.commit_mode,
        lock_wait_seconds=policy.lock_wait_seconds,
        require_locks=policy.require_locks,
        quiet_period_minutes=policy.quiet_period_minutes,
        copy_min_block_size=policy.copy_min_block_size,
        sort_columns=tuple(c for c, _ in table.sort_columns),
        num_files=p.stat(NUM_FILES),
        total_size=p.stat(TOTAL_SIZE),
        num_rows=p.stat(NUM_ROWS),
        table_parameters={k: v for k, v in table.parameters.items() if k in ("orc.compress", "parquet.compression")},
        reason=reason,
        listed_at=p.stat(LISTED_AT),
        statistics={k: p.parameters[k] for k in STATISTICS_KEYS if k in p.parameters},
    )


def one_task_per_folder(tasks: list[PartitionTask]) -> tuple[list[PartitionTask], list[Skipped]]:
    """Partitions of different tables that share a folder (external tables over one location):
    only the first is merged this run. Each table's commit holds the partition in its own work
    area, so two tables' jobs could otherwise merge the same files at once."""
    first: dict[str, PartitionTask] = {}
    kept, skipped = [], []
    for t in tasks:
        other = first.setdefault(canonical(t.location), t)
        if other is t:
            kept.append(t)
        else:
            skipped.append(
                Skipped(
                    t.table_name,
                    t.partition,
                    f"shares its folder {t.location} with "
                    f"{other.table_name} {other.partition or '(table)'}, merged by this run instead",
                )
            )
    return kept, skipped


def pack_batches(tasks: list[PartitionTask], fan_out: FanOut, max_map_length: int = 1024):
    """(batches, deferred): tasks spread over at most ``min(max_spark_jobs, max_map_length)`` jobs.

    The number of jobs grows with the bytes and the partition count to be merged; each job gets
    at most ``max_partitions_per_job`` partitions; the biggest partitions are placed first, each on
    the least loaded job (LPT), so jobs finish close together. What does not fit is deferred to
    the next run rather than making more jobs than allowed.
    """
    if not tasks:
        return [], []
    limit = max(1, min(fan_out.max_spark_jobs, max_map_length))
    total = sum(t.total_size or 0 for t in tasks)
    wanted = max(
        math.ceil(total / fan_out.max_bytes_per_job), math.ceil(len(tasks) / fan_out.max_partitions_per_job), 1
    )
    n = min(limit, wanted)
    batches: list[list[PartitionTask]] = [[] for _ in range(n)]
    load = [0] * n
    deferred: list[PartitionTask] = []
    for t in sorted(tasks, key=lambda t: (-(t.total_size or 0), t.table_name, t.partition)):
        open_batches = [i for i in range(n) if len(batches[i]) < fan_out.max_partitions_per_job]
        if not open_batches:
            deferred.append(t)
            continue
        i = min(open_batches, key=lambda i: (load[i], len(batches[i]), i))
        batches[i].append(t)
        load[i] += t.total_size or 0
    return [sorted(b, key=lambda t: (t.table_name, t.partition)) for b in batches if b], deferred


def batch_label(batch: list[PartitionTask], shown: int = 3) -> str:
    """What the Airflow UI shows for a mapped merge task: its tables and partitions."""
    by_table: dict[str, list[str]] = {}
    for t in batch:
        by_table.setdefault(t.table_name, []).append(t.partition or "(table)")
    parts = []
    for table, names in by_table.items():
        more = f" +{len(names) - shown} more" if len(names) > shown else ""
        parts.append(f"{table}: {', '.join(names[:shown])}{more}")
    return "; ".join(parts)


def split_oversized(batches: list[list[PartitionTask]], encode) -> list[list[PartitionTask]]:
    """Halve any batch whose encoded payload would not fit on a command line."""
    out: list[list[PartitionTask]] = []
    stack = list(reversed(batches))
    while stack:
        b = stack.pop()
        if len(b) > 1 and len(encode(b)) > MAX_ENCODED_BATCH:
            stack.extend([b[len(b) // 2 :], b[: len(b) // 2]])
        else:
            out.append(b)
    return out
