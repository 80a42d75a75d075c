"""Phase 3 of the merge job, for one partition: commit its staged outputs under the Metastore's
lock, by its mode's committer (``merge.committers``: the journaled in-place protocol or a location
switch), then describe the partition as it now is.

Partitions of one table whose copies are done commit in chunks (``Finisher.finish_chunk``): one
Metastore lock request, one read of their state, one write of their statistics and one release
for the chunk, where each costs ~10-40 ms of the Metastore's work per partition; each partition's
file-system commit stays its own (its journal, checks and moves, each step checking the lock)."""
from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field

from hive_compaction.commit import location_switch
from hive_compaction.commit.in_place import JournalHeld, recover
from hive_compaction.commit.record import CommitRecord, StagedOutput
from hive_compaction.commit.steps import Step, observed, reached
from hive_compaction.merge import committers
from hive_compaction.merge.committers import footers_by_name
from hive_compaction.merge.copy import partition_rows
from hive_compaction.merge.grouping import Work
from hive_compaction.merge.job_spark import JobSpark
from hive_compaction.merge.outcome import failed, histogram
from hive_compaction.merge.step_times import StepTimes
from hive_compaction.model.batch import PartitionTask
from hive_compaction.model.results import STATISTICS_KEYS, PartitionResult, Status, statistics_update
from hive_compaction.storage import listing
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.metastore_client import JobMetastore, PartitionState, same_location
from hive_compaction.storage.metastore_lock import CommitConflict, HeldLock, LockTimeout, check_lock_held, summary

log = logging.getLogger(__name__)


@dataclass
class Chunk:
    """Partitions of one table committed under one Metastore lock: the lock, their state read
    under it (keyed by their values), and the statistics their commits left to write at its end."""
    lock: HeldLock
    states: dict[tuple[str, ...], PartitionState]
    statistics: list[tuple[PartitionTask, PartitionResult, dict[str, str]]] = field(default_factory=list)


def in_chunks(work: Work) -> bool:
    """Whether a partition's commit may run in a chunk: a partition (a table without partitions
    goes alone) whose outputs are staged and whose committer commits in chunks."""
    return not work.error and bool(work.task.partition) and committers.for_mode(work.task.commit_mode).chunked


class Finisher:
    """Commits the partitions of one merge job (``BatchRunner``): ``run``, ``attempt`` and
    ``owner`` name the job as its journals and new folders do."""

    def __init__(self, spark: JobSpark, fs: HadoopFS, metastore: JobMetastore, run: str, attempt: str,
                 owner: str, steps: StepTimes):
        self.spark, self.fs, self.metastore = spark, fs, metastore
        self.run, self.attempt, self.owner = run, attempt, owner
        self.steps = steps

    def finish_chunk(self, works: list[Work]) -> list[PartitionResult]:
        """Commit ``works`` (partitions of one table), those that may (``in_chunks``) under one
        lock (``JobMetastore.lock_chunk``) if every one of them is free now; else, and for the
        others, each alone (``finish``): a busy partition waits alone and never holds the others
        back. The results in the order of ``works``."""
        members = [w for w in works if in_chunks(w)]
        done: dict[int, PartitionResult] = {}
        if len(members) > 1:
            table, n = members[0].task.table_name, len(members)
            began = time.monotonic()
            with self.metastore.lock_chunk(table, [w.task.partition for w in members]) as lock:
                if lock is not None:
                    locked = time.monotonic()
                    log.info("%s: committing %d partitions under one Metastore lock (%s)", table, n, lock.lock_id)
                    chunk = Chunk(lock, _chunk_states(self.metastore, table, members))
                    read = time.monotonic()
                    for w in members:
                        done[id(w)] = self.finish(w, chunk)
                    written = time.monotonic()
                    self._write_chunk_statistics(table, chunk)
                    released = time.monotonic()
            if lock is not None:  # the chunk's Metastore time, shared by its partitions
                for step, seconds in (("lock", locked - began), ("state read", read - locked),
                                      ("statistics", released - written), ("unlock", time.monotonic() - released)):
                    for w in members:
                        self.steps.add(step, seconds / n, w.task)
        return [done[id(w)] if id(w) in done else self.finish(w) for w in works]

    def finish(self, work: Work, chunk: Chunk | None = None) -> PartitionResult:
        """Commit one partition under its own lock, or under its ``chunk``'s (which reads its
        state and writes its statistics for it); its protocol's steps timed (``StepTimes.laps``)."""
        with observed(self.steps.laps(work.task)):
            return self._finish(work, chunk)

    def _finish(self, work: Work, chunk: Chunk | None) -> PartitionResult:
        task, result = work.task, work.result
        reached(Step.STAGED, task.label)
        try:
            if work.error:
                raise RuntimeError(work.error)
            unstaged = [n for n, g in enumerate(work.groups) if not g.staged]
            if unstaged:  # never move inputs out without the output that holds their rows
                raise RuntimeError(
                    f"group(s) {unstaged} of {len(work.groups)} have no staged output; nothing was committed")
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
                                     task.require_locks, chunk=chunk and chunk.lock) as held:
                if chunk is None:
                    self.steps.add("lock", time.monotonic() - asked, task)
                record.unlocked = result.unlocked = held is None
                # What a rollback restores: the statistics just before the commit, read under the
                # lock (the plan's may have changed since: another run's refresh, a Hive writer).
                if chunk is not None and tuple(task.values) in chunk.states:
                    state = chunk.states[tuple(task.values)]
                else:
                    with step("state read"):
                        state = self.metastore.state(task.table_name, list(task.values))
                if held is not None and self.fs.exists(work.area.journal(work.pid)):
                    self._finish_left(work)  # a job that died since this one prepared left it
                _check_location(task, state)
                current, descriptor = state.parameters or task.statistics, state.descriptor
                record.stats_before = {k: current.get(k) for k in STATISTICS_KEYS}
                with step("commit"):
                    self._commit(work, record, descriptor, locked=held is not None)
                with step("listing after"):
                    self._describe_merged(work, result, outputs)
                if chunk is not None:
                    chunk.statistics.append((task, result, current))
                else:
                    with step("statistics"):
                        self._write_statistics(task, result, current)
                released = time.monotonic()
            if chunk is None:
                self.steps.add("unlock", time.monotonic() - released, task)
        except (LockTimeout, PartitionMoved, LeftCommitFinished) as e:
            # nothing of this job's moved: the next run looks again
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

    def _commit(self, work: Work, record: CommitRecord, descriptor: str | None, locked: bool) -> None:
        """The partition's commit, by its mode's committer; a dead job's journal found there is
        finished first when this job holds the lock (``_finish_left``)."""
        result = work.result
        try:
            done = committers.for_mode(work.task.commit_mode).commit(self, work, record, descriptor)
            result.location, result.reader_window_ms = done.location, done.reader_window_ms
        except JournalHeld:
            if not locked:
                raise
            self._finish_left(work)

    def _finish_left(self, work: Work) -> None:
        """Another job's journal was found at the commit, and this job holds the partition's lock:
        that job is gone (a live one would hold the lock, or stop at its next step), so its commit
        is finished here, under the lock, before any writer that waits for the lock comes in
        (``recover``, as a replay at the start of a merge). This job's merge of the partition,
        made from files that commit replaced, is given up: LeftCommitFinished."""
        task = work.task
        check_lock_held()  # lost meanwhile: the journal is no longer this job's to finish
        recover(self.fs, work.area, work.pid, self.owner, location=task.location, switch=lambda record:
                location_switch.recover_switch(self.fs, work.area, self.metastore, record, task.table_location,
                                               self.owner))
        raise LeftCommitFinished(f"{task.label}: an interrupted commit of another run was found and finished under "
                                 "the lock; this job's merge of the partition is left for the next run")

    def _describe_merged(self, work: Work, result: PartitionResult, outputs: list[StagedOutput]) -> None:
        """The committed partition's files, sizes and rows, listed again where it now reads."""
        task = work.task
        after, _ = listing.data_files(self.fs.list(result.location))
        result.status = Status.MERGED
        result.outputs = [o.name for o in outputs]
        result.rows_merged = sum(g.rows for g in work.groups)
        result.files_after, result.bytes_after = len(after), sum(f.size for f in after)
        result.sizes_after = histogram(task, after)
        # Footers known by file name: the untouched files' from prepare, the outputs' from staging.
        old_footers, new_footers = footers_by_name(work)
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
                        task.label, summary(e))

    def _write_chunk_statistics(self, table: str, chunk: Chunk) -> None:
        """``_write_statistics`` for the chunk's committed partitions, in one read and one alter,
        while its lock is held. If the lock was lost or the write fails, the refresh task writes
        them (a lock lost mid-chunk also fails a partition, and so the job: its retry or the next
        run lists them)."""
        now, updates, written = time.time(), [], set()
        for task, result, current in chunk.statistics:
            update = statistics_update(result, current, now)
            if update:
                updates.append((task.partition, list(task.values), update))
            else:
                result.statistics_written = True
        if not updates:
            return
        try:
            chunk.lock.check()
            written = self.metastore.update_parameters_all(table, updates)
        except Exception as e:  # noqa: BLE001 - the commits are done; the refresh task writes them
            log.warning("%s: the statistics of %d committed partition(s) were not written with their commits (the "
                        "refresh task writes them): %s", chunk.lock.label, len(updates),
                        summary(e))
        for task, result, _ in chunk.statistics:
            if task.partition in written:
                result.statistics_written = True


class LeftCommitFinished(CommitConflict):
    """This job found another job's interrupted commit of the partition and finished it instead
    of its own (``Finisher._finish_left``)."""


class PartitionMoved(CommitConflict):
    """The partition's location changed since it was planned (``ALTER TABLE ... SET LOCATION``):
    the folder that was merged is no longer the partition's; nothing was committed."""


def _chunk_states(metastore: JobMetastore, table: str, members: list[Work]) -> dict:
    """The chunk's partitions' state in one read; none if that failed (each is read alone)."""
    try:
        return metastore.states(table, [w.task.partition for w in members])
    except Exception as e:  # noqa: BLE001 - each commit reads its partition's then
        log.warning("%s: could not read %d partitions' state at once (each is read alone): %s", table,
                    len(members), summary(e))
        return {}


def _check_location(task: PartitionTask, state: PartitionState) -> None:
    """Under the commit's lock: the partition still reads the folder that was merged (a dropped
    one is the commit's to see: it stops without re-creating the folder)."""
    if state.location is not None and not same_location(state.location, task.location):
        raise PartitionMoved(f"{task.label}: the partition reads {state.location} now, not the folder that was "
                             f"merged ({task.location}): moved since it was planned; nothing was committed, the next "
                             "run plans it at its new folder")
