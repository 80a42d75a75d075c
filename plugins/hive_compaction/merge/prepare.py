"""Phase 1 of the merge job, for one partition: finish an interrupted commit of it, list its
files, refuse what its storage or modes cannot merge, read their footers (a corrupt or foreign
file skips the partition), and decide what to merge (``grouping``: skip rules, copy and rewrite
groups)."""

from __future__ import annotations

import logging
import threading
import time

from hive_compaction.commit import location_switch
from hive_compaction.commit.in_place import CommitHeld, CommitStopped, InputsChanged, recover
from hive_compaction.commit.record import CommitRecord, UnsafeRecord
from hive_compaction.commit.work_area import WorkArea
from hive_compaction.merge import committers, grouping
from hive_compaction.merge.copy import partition_rows, readable_footers
from hive_compaction.merge.grouping import Engine, Group, Work
from hive_compaction.merge.job_spark import JobSpark
from hive_compaction.merge.outcome import histogram
from hive_compaction.merge.sizing import enough_small_files, small_files
from hive_compaction.model.batch import PartitionTask
from hive_compaction.model.results import PartitionResult, Status
from hive_compaction.storage import capabilities as storage, listing
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.listing import DataFile
from hive_compaction.storage.metastore_client import JobMetastore
from hive_compaction.storage.metastore_lock import LOCK_FAILURES, CommitConflict
from hive_compaction.storage.paths import partition_id

log = logging.getLogger(__name__)


class Preparer:
    """Prepares the partitions of one merge job (``BatchRunner``): ``run``, ``attempt`` and
    ``owner`` name the job as its journals and staging folders do."""

    def __init__(
        self, spark: JobSpark, fs: HadoopFS, metastore: JobMetastore, run: str, attempt: str, owner: str, dry_run: bool
    ):
        self.spark, self.fs, self.metastore = spark, fs, metastore
        self.run, self.attempt, self.owner, self.dry_run = run, attempt, owner, dry_run
        self._private_areas: set[str] = set()
        self._areas_lock = threading.Lock()

    def prepare(self, task: PartitionTask, started: float) -> Work | PartitionResult:
        """The partition's Work (groups to stage), or its result when nothing is to be staged."""
        area = WorkArea(task.work_dir)
        pid = partition_id(task.table_name, task.partition)
        manifest = self._recover(task, area, pid)
        if isinstance(manifest, PartitionResult):
            return manifest
        recovered = manifest is not None
        files, folders = listing.data_files(self.fs.list(task.location))
        result = PartitionResult(
            task.table_name,
            task.partition,
            task.location,
            Status.NOTHING_TO_DO,
            files_before=len(files),
            bytes_before=sum(f.size for f in files),
            files_after=len(files),
            bytes_after=sum(f.size for f in files),
            recovered=recovered,
            listed=True,
            stats_files=task.num_files,
            stats_bytes=task.total_size,
        )
        result.sizes_before = result.sizes_after = histogram(task, files)
        decided = self._decide(task, files, folders, result)
        if isinstance(decided, PartitionResult):
            return decided
        groups, footers = decided
        self._private_area(area)
        codec = grouping.output_codec(footers[groups[0].files[0].path])
        return Work(
            task,
            pid,
            area,
            result,
            files,
            footers,
            groups,
            codec,
            started,
            staging=f"{area.staging(self.run, pid)}/{self.attempt}",
        )

    def _recover(self, task: PartitionTask, area: WorkArea, pid: str) -> CommitRecord | PartitionResult | None:
        """Finish a commit of the partition another run left behind (under the Metastore's lock):
        its manifest, None when there was none, or the partition's result when it must not be
        merged now (a commit still held or unaccounted for, another writer's conflict, a location
        switch finished)."""
        try:
            manifest = None
            if not self.dry_run and self.fs.exists(area.journal(pid)):
                with self.metastore.lock(task.table_name, task.partition, task.lock_wait_seconds, task.require_locks):
                    manifest = recover(
                        self.fs,
                        area,
                        pid,
                        self.owner,
                        location=task.location,
                        switch=lambda record: location_switch.recover_switch(
                            self.fs, area, self.metastore, record, task.table_location, self.owner
                        ),
                    )
        except (CommitHeld, InputsChanged, UnsafeRecord, *LOCK_FAILURES) as e:
            # Left mid-commit (readers may miss rows), a replay that stopped with files it cannot
            # account for, or a journal naming another folder (the partition was moved since it was
            # written): never a success; the task fails and says what is where.
            log.error("%s", e)
            why = "a commit of it is unfinished: " if isinstance(e, LOCK_FAILURES) else ""
            return PartitionResult(
                task.table_name,
                task.partition,
                task.location,
                Status.FAILED,
                reason=f"{why}{e}",
                listed=False,
                stats_files=task.num_files,
                stats_bytes=task.total_size,
            )
        except (CommitConflict, CommitStopped) as e:  # nothing of the commit is in: the partition is as it was
            return PartitionResult(
                task.table_name,
                task.partition,
                task.location,
                Status.SKIPPED,
                reason=str(e),
                listed=False,
                stats_files=task.num_files,
                stats_bytes=task.total_size,
            )
        if manifest is not None and manifest.switched:
            return PartitionResult(
                task.table_name,
                task.partition,
                manifest.new_location,
                Status.SKIPPED,
                reason=f"finished the location switch run {manifest.run} left behind "
                f"(the partition reads {manifest.new_location})",
                listed=False,
                recovered=True,
            )
        return manifest

    def _decide(
        self, task: PartitionTask, files: list[DataFile], folders: list[str], result: PartitionResult
    ) -> tuple[list[Group], dict] | PartitionResult:
        """The groups to stage and the files' footers, or the listed partition's ``result`` when
        it is skipped, has nothing to merge, or is a dry run's."""

        def skip(reason: str) -> PartitionResult:
            result.status, result.reason = Status.SKIPPED, reason
            return result

        reason = grouping.skip_reason(task, files, folders, time.time() * 1000) or (
            self._refusal(task) if files else None
        )
        if reason:
            return skip(reason)
        small = small_files(files, task.small_file_limit)
        if not enough_small_files(small, task.min_small_files):
            # The Metastore's row count only if its file count and size are the disk's too.
            trusted = task.num_rows is not None and not result.recovered and not result.stale_statistics
            result.rows = task.num_rows if trusted else partition_rows(self.spark, task.storage_format, files)
            return result
        footers, bad = readable_footers(self.spark, task.storage_format, files, small)
        if bad:
            return skip("unreadable or foreign file(s): " + "; ".join(bad[:3]))
        groups = grouping.group(task, files, small, footers)
        # Small files kept out of copy groups by their footers (e.g. another calendar), or why auto rewrote.
        result.reason = grouping.copy_notes(task, small, footers, files)
        # Files to rewrite whose Parquet layouts differ, each layout kept in outputs of its own.
        rewritten = any(g.engine is Engine.REWRITE for g in groups)  # then every small file is rewritten
        apart = grouping.layout_notes(task, small, footers) if rewritten else ""
        if apart:
            log.warning("%s: %s", task.label, apart)
            result.reason = ". ".join(n for n in (result.reason, apart) if n)
        result.groups = len(groups)
        result.files_merged = sum(len(g.files) for g in groups)
        result.mode = "+".join(sorted({g.engine.value for g in groups}))
        if not groups:
            result.rows = sum(ft.rows for ft in footers.values())
            return result
        if self.dry_run:
            result.status = Status.WOULD_MERGE
            result.files_after = result.files_before - result.files_merged + len(groups)
            result.sizes_after = None  # not known before the merge
            return result
        return groups, footers

    def _refusal(self, task: PartitionTask) -> str | None:
        """Why the partition's storage or configured modes cannot merge it, known before a footer
        is read (a dry run says so too)."""
        return (
            committers.for_mode(task.commit_mode).refusal(task)
            or storage.commit_refusal(
                self.fs.resolved_scheme(task.location),
                task.commit_mode,
                mounted=storage.scheme(task.location) in storage.MOUNT_SCHEMES,
            )
            or grouping.copy_refused(task)
        )

    def _private_area(self, area: WorkArea) -> None:
        """The work area is created readable by its owner only; one that exists wider is
        used as it is (an administrator may have widened it on purpose) with a warning."""
        with self._areas_lock:
            if area.root in self._private_areas:
                return
            self._private_areas.add(area.root)
        if not self.fs.make_private_folder(area.root):
            mode = self.fs.permission(area.root)
            # (S3A reports made-up modes: there the bucket's policies decide who may write)
            if mode & 0o022 and not storage.is_object_store(self.fs.resolved_scheme(area.root)):
                log.warning(
                    "work area %s is writable by others (mode %o): its journals decide which files move; "
                    "restrict it to the account that runs the merges (chmod 700)",
                    area.root,
                    mode,
                )
