"""One committer per commit mode, chosen once per partition (``for_mode``): what the mode refuses
before anything is read, whether its commits may share one Metastore lock (a chunk), and the
commit itself, from a partition's staged work and its decided record (``commit.record``) to where
the partition now reads. ``merge.finish`` and ``merge.prepare`` ask the committer, never the mode."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from hive_compaction.commit import in_place, location_switch
from hive_compaction.commit.record import CommitRecord
from hive_compaction.merge.copy import partition_rows
from hive_compaction.merge.grouping import Work
from hive_compaction.merge.job_spark import JobSpark
from hive_compaction.model.batch import PartitionTask
from hive_compaction.storage.capabilities import IN_PLACE, LOCATION_SWITCH
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.metastore_client import JobMetastore


class Job(Protocol):
    """What a committer uses of the merge job that commits (``merge.finish.Finisher``)."""

    spark: JobSpark
    fs: HadoopFS
    metastore: JobMetastore
    run: str
    attempt: str


@dataclass(frozen=True)
class Committed:
    location: str  # the folder the partition reads now
    reader_window_ms: float | None  # how long readers listing it could miss the merged groups' rows


class Committer(Protocol):
    mode: str
    chunked: bool  # its commits of one table's partitions may run under one lock (``Finisher.finish_chunk``)

    def refusal(self, task: PartitionTask) -> str | None:
        """Why this mode cannot commit ``task``'s partition, known before a footer is read."""

    def commit(self, job: Job, work: Work, record: CommitRecord, descriptor: str | None) -> Committed:
        """Commit ``work`` under the partition's lock (``descriptor``: its storage descriptor read
        under it). Raises what ``commit.in_place`` and ``commit.location_switch`` raise."""


class InPlace:
    """The journaled in-place protocol (``commit.in_place``): the partition keeps its folder."""

    mode, chunked = IN_PLACE, True

    def refusal(self, task: PartitionTask) -> str | None:
        return None

    def commit(self, job: Job, work: Work, record: CommitRecord, descriptor: str | None) -> Committed:
        manifest = in_place.commit(job.fs, work.area, record)
        return Committed(work.result.location, manifest.reader_window_ms)


class LocationSwitch:
    """A new folder and one ``alter_partition`` (``commit.location_switch``): alone under its own
    lock, since its commit point is the Metastore call."""

    mode, chunked = LOCATION_SWITCH, False

    def refusal(self, task: PartitionTask) -> str | None:
        if not task.partition:
            return "commit_mode location_switch switches a partition's location: the table is not partitioned"
        return None

    def commit(self, job: Job, work: Work, record: CommitRecord, descriptor: str | None) -> Committed:
        task = work.task
        merged = {f.name for g in work.groups for f in g.files}
        fmt = task.storage_format
        old_footers, new_footers = footers_by_name(work)
        record = record.but(
            mode=LOCATION_SWITCH,
            values=list(task.values),
            table_location=task.table_location,
            new_location=location_switch.new_folder(task.table_location, task.partition, job.run, job.attempt),
            files=[f.identity() for f in work.files],
            descriptor=descriptor,  # compared with the partition's when it is switched
            decided_at=time.time(),
            copies=[f.name for f in work.files if f.name not in merged],
            rows=partition_rows(job.spark, fmt, work.files, old_footers),
        )
        # Where the old files move at the finish: made before the journal, renamed by a takeover.
        record = record.but(moving_trash=f"{work.area.trash_of(record)}{in_place.MOVING_TRASH}")
        job.fs.make_folders(record.moving_trash)
        in_place.hold(job.fs, work.area, record)
        manifest = location_switch.build_and_switch(
            job.fs, work.area, job.metastore, record, lambda files: partition_rows(job.spark, fmt, files, new_footers)
        )
        return Committed(manifest.new_location, 0.0)


_BY_MODE: dict[str, Committer] = {IN_PLACE: InPlace(), LOCATION_SWITCH: LocationSwitch()}


def for_mode(mode: str) -> Committer:
    """The committer of ``commit_mode`` (one the config accepted)."""
    return _BY_MODE[mode]


def footers_by_name(work: Work) -> tuple[dict, dict]:
    """The footers known by file name: the partition's files' (read while preparing) and the
    staged outputs' (read while staging, where they were)."""
    old = {f.name: work.footers[f.path] for f in work.files if f.path in work.footers}
    new = {o.name: g.footers[k] for g in work.groups for k, o in enumerate(g.staged) if k < len(g.footers)}
    return old, new
