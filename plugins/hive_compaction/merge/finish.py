"""Phase 3 of the merge job, for one partition: commit its staged outputs under the Metastore's
lock, by the journaled in-place protocol (``commit.in_place``) or a location switch
(``commit.location_switch``), then describe the partition as it now is."""
from __future__ import annotations

import functools
import logging
import time

from hive_compaction.commit import location_switch
from hive_compaction.commit.in_place import commit, hold
from hive_compaction.commit.record import CommitRecord
from hive_compaction.merge.copy import partition_rows
from hive_compaction.merge.grouping import Work
from hive_compaction.merge.job_spark import JobSpark
from hive_compaction.merge.outcome import failed, histogram
from hive_compaction.merge.step_times import StepTimes
from hive_compaction.model.results import PartitionResult, STATISTICS_KEYS, Status, statistics_update
from hive_compaction.storage import listing
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.metastore_client import JobMetastore
from hive_compaction.storage.metastore_lock import LockTimeout

log = logging.getLogger(__name__)


class Finisher:
    """Commits the partitions of one merge job (``BatchRunner``): ``run``, ``attempt`` and
    ``owner`` name the job as its journals and new folders do."""

    def __init__(self, spark: JobSpark, fs: HadoopFS, metastore: JobMetastore, run: str, attempt: str,
                 owner: str, steps: StepTimes):
        self.spark, self.fs, self.metastore = spark, fs, metastore
        self.run, self.attempt, self.owner = run, attempt, owner
        self.steps = steps

    def finish(self, work: Work) -> PartitionResult:
        task, result = work.task, work.result
        try:
            if work.error:
                raise RuntimeError(work.error)
            inputs = [f for g in work.groups for f in g.files]
            outputs = [o for g in work.groups for o in g.staged]
            record = CommitRecord(
                run=self.run, pid=work.pid, owner=self.owner, attempt=self.attempt, staging=work.staging,
                table=task.table_name,
                partition=task.partition, location=task.location, outputs=outputs,
                inputs=[f.identity() for f in inputs])
            step = functools.partial(self.steps.step, partition=task)
            asked = time.monotonic()
            with self.metastore.lock(task.table_name, task.partition, task.lock_wait_seconds,
                                     task.require_locks) as held:
                self.steps.add("lock", time.monotonic() - asked, task)
                record.unlocked = result.unlocked = held is None
                # What a rollback restores: the statistics just before the commit, read under the
                # lock (the plan's may have changed since: another run's refresh, a Hive writer).
                with step("state read"):
                    current, descriptor = self.metastore.state(task.table_name, list(task.values))
                current = current or task.statistics
                record.stats_before = {k: current.get(k) for k in STATISTICS_KEYS}
                with step("commit"):
                    if task.commit_mode == location_switch.MODE:
                        result.location = self._switch(work, record, descriptor)
                        result.reader_window_ms = 0.0
                    else:
                        result.reader_window_ms = commit(self.fs, work.area, record).reader_window_ms
                with step("listing after"):
                    self._describe_merged(work, result, outputs)
                with step("statistics"):
                    self._write_statistics(task, result, current)
                released = time.monotonic()
            self.steps.add("unlock", time.monotonic() - released, task)
        except LockTimeout as e:  # a writer is at work: nothing moved, the backlog looks again
            log.warning("%s", e)
            result.status, result.reason = Status.SKIPPED, str(e)[:500]
        except Exception as e:
            log.exception("%s: failed", task.label)
            result = failed(task, e)
            result.files_before, result.bytes_before = work.result.files_before, work.result.bytes_before
            result.files_after, result.bytes_after = result.files_before, result.bytes_before
            result.sizes_before = result.sizes_after = work.result.sizes_before
        result.seconds = round(time.monotonic() - work.started, 3)
        return result

    def _describe_merged(self, work: Work, result: PartitionResult, outputs: list[dict]) -> None:
        """The committed partition's files, sizes and rows, listed again where it now reads."""
        task = work.task
        after, _ = listing.data_files(self.fs.list(result.location))
        result.status = Status.MERGED
        result.outputs = [o["name"] for o in outputs]
        result.rows_merged = sum(g.rows for g in work.groups)
        result.files_after, result.bytes_after = len(after), sum(f.size for f in after)
        result.sizes_after = histogram(task, after)
        # Footers known by file name: the untouched files' from prepare, the outputs' from staging.
        old_footers, new_footers = _footers_by_name(work)
        result.rows = partition_rows(self.spark, task.storage_format, after, {**old_footers, **new_footers})

    def _write_statistics(self, task, result: PartitionResult, current: dict[str, str]) -> None:
        """The committed partition's statistics, from the listing just made, written under the
        commit's lock (``current``: its parameters read under it): no writer that takes the lock
        comes between, unlike a refresh minutes later. If the write fails, the refresh does it."""
        update = statistics_update(result, current, time.time())
        try:
            if not update or self.metastore.update_parameters(task.table_name, task.partition, update):
                result.statistics_written = True
        except Exception as e:  # noqa: BLE001 - the commit is done; the refresh task writes them
            log.warning("%s: the statistics were not written with the commit (the refresh task writes them): %s",
                        task.label, str(e).splitlines()[0][:300] if str(e) else type(e).__name__)

    def _switch(self, work: Work, record: CommitRecord, descriptor: str | None) -> str:
        """Commit by a location switch (``location_switch``); returns the partition's new folder.
        ``descriptor``: the partition's storage descriptor as read under the lock."""
        task = work.task
        merged = {f.name for g in work.groups for f in g.files}
        fmt = task.storage_format
        old_footers, new_footers = _footers_by_name(work)
        record = record.but(
            mode=location_switch.MODE, values=list(task.values), table_location=task.table_location,
            new_location=location_switch.new_folder(task.table_location, task.partition, self.run, self.attempt),
            files=[f.identity() for f in work.files],
            descriptor=descriptor,  # compared with the partition's when it is switched
            copies=[f.name for f in work.files if f.name not in merged],
            rows=partition_rows(self.spark, fmt, work.files, old_footers))
        hold(self.fs, work.area, record)
        manifest = location_switch.build_and_switch(
            self.fs, work.area, self.metastore, record,
            lambda files: partition_rows(self.spark, fmt, files, new_footers))
        return manifest.new_location


def _footers_by_name(work: Work) -> tuple[dict, dict]:
    """The footers known by file name: the partition's files' (read while preparing) and the
    staged outputs' (read while staging, where they were)."""
    old = {f.name: work.footers[f.path] for f in work.files if f.path in work.footers}
    new = {o["name"]: g.footers[k] for g in work.groups for k, o in enumerate(g.staged) if k < len(g.footers)}
    return old, new
