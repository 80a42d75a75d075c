"""Looking after a table's work area from a merge job: commits that jobs of earlier runs left
behind, torn journals, expired runs.

The merge job that owns a table's work area in a run (see ``batch.batch_payload``) calls
``maintain`` before its merges. Partitions it lists itself are finished by its own ``prepare``;
journals of other runs are finished here once they are old enough that no live job can own them.
"""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from hive_compaction.commit import location_switch
from hive_compaction.commit.in_place import ORPHAN_AGE_SECONDS, CommitHeld, CommitStopped, InputsChanged, recover
from hive_compaction.commit.record import CommitRecord, PurgeHold, UnsafeRecord
from hive_compaction.commit.work_area import WorkArea, journal_files, purge_expired, read_journal
from hive_compaction.model.batch import PartitionTask
from hive_compaction.model.results import FAILED_REASON_CHARS, REASON_CHARS, PartitionResult, Status
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.listing import data_files
from hive_compaction.storage.metastore_client import JobMetastore
from hive_compaction.storage.metastore_lock import LOCK_FAILURES, CommitConflict
from hive_compaction.storage.paths import partition_id

log = logging.getLogger(__name__)

# How long an orphan's replay waits for the partition's Metastore lock (a writer's, a rollback's).
ORPHAN_LOCK_WAIT_SECONDS = 60

def maintain(fs: HadoopFS, run: str, owner: str, areas: list[dict[str, Any]], tasks: list[PartitionTask],
             partitions: JobMetastore | None = None) -> list[PartitionResult]:
    """For each work area (``{"table", "table_location", "work_dir", "trash_retention_days"}``):
    finish the commits of other runs' jobs in partitions this job does not list itself (``owner``
    names this job in the journals it takes over), drop torn journals, purge expired runs (and
    retire the old folders of their location switches, asking ``partitions``). A work area that
    cannot be tidied is logged and does not stop the merges."""
    planned = {partition_id(t.table_name, t.partition) for t in tasks}
    old = time.time() * 1000 - ORPHAN_AGE_SECONDS * 1000
    results = []
    for a in areas:
        try:
            results += _maintain_area(fs, run, owner, a, planned, old, partitions)
        except Exception:
            log.exception("%s: could not look after the work area %s", a["table"], a["work_dir"])
    return results


def _maintain_area(fs: HadoopFS, run: str, owner: str, a: dict[str, Any], planned: set[str], old: float,
                   partitions: JobMetastore | None) -> list[PartitionResult]:
    results = []
    area, keep, unsafe = WorkArea(a["work_dir"]), {run}, False
    for entry in journal_files(fs, area):
        pid = entry.name[:-len(".json")]
        try:
            record = read_journal(fs, entry.path)
        except UnsafeRecord as e:  # never acted on: a person looks (and no run of the area is purged)
            log.error("%s: %s", entry.path, e)
            results.append(PartitionResult(e.table, e.partition, "", Status.FAILED,
                                           reason=f"{entry.path}: {e}"[:FAILED_REASON_CHARS]))
            unsafe = True
            continue
        if record is None and entry.modification_time < old:
            log.warning("removing the incomplete journal %s (its commit never started)", entry.path)
            fs.delete(entry.path)
        elif isinstance(record, PurgeHold):  # a purge holds it for a moment (work_area)
            if entry.modification_time < old:
                log.warning("removing the journal %s of a purge that is gone (its deletes are idempotent)", entry.path)
                fs.delete(entry.path)
        elif record is not None and record.run != run and pid not in planned and entry.modification_time < old:
            results.append(_recover_orphan(fs, area, pid, record, owner, a.get("table_location"), partitions))
            if results[-1].status is not Status.MERGED and fs.exists(entry.path):
                keep.add(record.run)  # its trash and staging are still needed
        elif record is not None:
            keep.add(record.run)
    if not unsafe:
        purge_expired(fs, area, a["trash_retention_days"], keep,
                      retire=(lambda m: location_switch.retire(fs, partitions, m)) if partitions else None)
    return results


def _recover_orphan(fs: HadoopFS, area: WorkArea, pid: str, record: CommitRecord, owner: str,
                    table_location: str | None, partitions: JobMetastore | None) -> PartitionResult:
    result = PartitionResult(record.table, record.partition, record.location, Status.MERGED,
                             reason=f"finished the commit run {record.run} left behind", recovered=True)
    switch = (lambda r: location_switch.recover_switch(fs, area, partitions, r, table_location or "", owner)) \
        if partitions else None
    try:
        # Held like a merge's own replay: a Hive writer waits, and so does a rollback.
        # Replayed under a lock unless it was committed without one (require_locks: false).
        with partitions.lock(record.table, record.partition, ORPHAN_LOCK_WAIT_SECONDS,
                             not record.unlocked) if partitions \
                else contextlib.nullcontext():
            manifest = recover(fs, area, pid, owner, table_location=table_location, switch=switch)
        if record.switched:
            if manifest is None:
                result.status, result.recovered = Status.SKIPPED, False
                result.reason = f"undid the location switch run {record.run} left unfinished"
                return result
            result.location = manifest.new_location
        files, _ = data_files(fs.list(result.location))
    except (CommitHeld, InputsChanged, *LOCK_FAILURES) as e:
        # Left mid-commit by a job this one may not replace, or a replay that stopped with files it
        # cannot account for: readers may miss rows, so never a success (the task fails, alerting).
        log.error("%s", e)
        why = "a commit of it is unfinished: " if isinstance(e, LOCK_FAILURES) else ""
        result.status, result.reason, result.recovered = Status.FAILED, f"{why}{e}"[:FAILED_REASON_CHARS], False
        return result
    except (CommitConflict, CommitStopped) as e:  # nothing of the commit is in: the partition is as it was
        log.warning("%s", e)
        result.status, result.reason, result.recovered = Status.SKIPPED, str(e)[:REASON_CHARS], False
        return result
    except Exception as e:
        log.exception("%s/%s: could not finish an interrupted commit", record.table, record.partition)
        result.status, result.reason = Status.FAILED, f"finishing an interrupted commit: {type(e).__name__}: {e}"
        return result
    result.listed = True
    result.files_after, result.bytes_after = len(files), sum(f.size for f in files)
    result.files_before = result.files_after - len(record.outputs) + len(record.inputs)
    result.bytes_before = (result.bytes_after - sum(o.size for o in record.outputs)
                           + sum(f.size for f in record.inputs))
    log.info("%s %s: %s (%d -> %d files)", result.table, result.partition or "(table)", result.reason,
             result.files_before, result.files_after)
    return result
