"""The merge job's orchestration: for the partitions of one batch, prepare, stage, commit.

Three phases, so the cluster stays busy and the commit window stays short:

1. *prepare* each partition (driver threads, side by side): finish an interrupted commit, list
   its files, read their footers (a corrupt or foreign file skips the partition), and decide
   what to merge (``grouping``: skip rules, copy and rewrite groups).
2. *stage* every group outside the partitions: all rewrite groups of the batch in a few Spark
   jobs (``rewrite.RewriteEngine``), copy groups by concatenating ORC stripes / Parquet row
   groups in the driver's JVM (``copy_merge``). Each staged output is verified against its
   inputs before any input moves.
3. *commit* each partition with the journaled protocol of ``commit`` (driver threads).

File listings, footers and renames go through ``jvm_helper``: one py4j round trip per partition
or group, not several per file. A failing partition never stops the others; its files stay as
they were.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession

from hive_compaction.commit import location_switch, recovery as maintenance
from hive_compaction.commit.in_place import CommitHeld, InputsChanged, commit, hold, recover
from hive_compaction.commit.work_area import WorkArea
from hive_compaction.merge import copy as copy_merge, grouping
from hive_compaction.merge.copy import CopyMergeError, partition_rows, readable_footers
from hive_compaction.merge.grouping import Engine, Work, staged_suffix
from hive_compaction.merge.rewrite import RewriteEngine
from hive_compaction.merge.sizing import enough_small_files, small_files
from hive_compaction.model.batch import PartitionTask
from hive_compaction.model.results import (CommitRecord, FAILED_REASON_CHARS, PartitionResult,
                                           STATISTICS_KEYS, Status, size_histogram)
from hive_compaction.storage import capabilities as storage, listing
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.listing import DataFile
from hive_compaction.storage.metastore_client import CommitConflict, JobMetastore, LockTimeout
from hive_compaction.storage.paths import partition_id

log = logging.getLogger(__name__)


class BatchRunner:
    def __init__(self, spark: SparkSession, run: str, batch_id: str, dry_run: bool = False,
                 metastore_uris: str | None = None):
        self.spark = spark
        # The Metastore's lock and partition locations (location_switch), through Spark's Metastore client.
        self.metastore = JobMetastore(spark, metastore_uris)
        self.fs = HadoopFS(spark)
        self.run = run
        self.batch_id = batch_id
        self.dry_run = dry_run
        self.attempt = uuid.uuid4().hex[:12]
        self.owner = f"{run}/{self.attempt}"  # names this job in the journals it holds
        self._private_areas: set[str] = set()
        self._areas_lock = threading.Lock()
        # A file Spark cannot read must fail the job, never be skipped silently in both the write
        # and the verification pass (a cluster's defaults may turn skipping on).
        spark.conf.set("spark.sql.files.ignoreCorruptFiles", "false")
        spark.conf.set("spark.sql.files.ignoreMissingFiles", "false")
        # Driver threads for per-partition work (listing, footers, copies, commits).
        self.threads = max(2, min(8, os.cpu_count() or 2))
        # Every read below names its files, already listed by us: without this, Spark starts a
        # listing job for each read of more than 32 paths (~0.3 s each, per rewrite group).
        spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1000000")
        # What Spark counts a file as when it packs files into a scan's tasks (4 MB by default): on
        # small files that makes a task per 32 files, and the checksum scans of the rewrites read
        # thousands of them. Counted this small, files pack into about one task per core (Spark
        # still splits a scan into at least as many tasks as cores): 1,000 ORC files of 2,000 rows
        # were checksummed in 3.0 s against 4.0 s here. Each rewrite group is one task anyway.
        # A value set for the application (spark_conf, spark-defaults) is kept.
        if not spark.sparkContext.getConf().contains("spark.sql.files.openCostInBytes"):
            spark.conf.set("spark.sql.files.openCostInBytes", str(64 * 1024))
        # A union of single-partition branches keeps one partition per branch (Spark 4 would
        # otherwise zip them into one task): see rewrite.RewriteEngine._rewrite_job.
        spark.conf.set("spark.sql.unionOutputPartitioning", "false")
        self.rewrites = RewriteEngine(spark, self.fs, run, self.threads)

    def maintain(self, areas: list[dict], tasks: list[PartitionTask]) -> list[PartitionResult]:
        """Look after the work areas this job owns (``maintenance.maintain``); not in a dry run."""
        return [] if self.dry_run else maintenance.maintain(self.fs, self.run, self.owner, areas, tasks,
                                                            self.metastore)

    # --- the batch --------------------------------------------------------------------------
    def run_batch(self, tasks: list[PartitionTask]) -> list[PartitionResult]:
        """Prepare every partition, stage all rewrites together, then copy and commit each.

        Partitions are prepared, copied and committed by ``threads`` driver threads side by side:
        that work is mostly waiting on the file system and the JVM, and partitions share nothing
        (each commit holds its own journal)."""
        results: dict[int, PartitionResult] = {}
        lock = threading.Lock()

        def done(i: int, result: PartitionResult) -> None:
            with lock:
                results[i] = result
                self._progress(len(results), len(tasks), result)

        def prepare(i: int, task: PartitionTask) -> Work | None:
            started = time.monotonic()
            try:
                prepared = self.prepare(task, started)
            except Exception as e:  # one bad partition must not stop the others
                log.exception("%s: failed while preparing", task.label)
                prepared = self._failed(task, e)
            if isinstance(prepared, Work):
                return prepared
            prepared.seconds = round(time.monotonic() - started, 3)
            done(i, prepared)
            return None

        def copy_and_commit(i: int, work: Work) -> None:
            try:
                self.stage_copies(work)
            except Exception as e:
                log.exception("%s: copy failed", work.task.label)
                work.error = work.error or f"{type(e).__name__}: {e}".splitlines()[0][:500]
            done(i, self.finish(work))

        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="partition") as pool:
            began = time.monotonic()
            prepared = list(pool.map(prepare, range(len(tasks)), tasks))
            works = [(i, w) for i, w in enumerate(prepared) if w is not None]
            log.info("prepared %d partition(s) in %.1fs: %d with files to merge (%d files in %d groups)",
                     len(tasks), time.monotonic() - began, len(works),
                     sum(len(g.files) for _, w in works for g in w.groups), sum(len(w.groups) for _, w in works))
            self.rewrites.stage([w for _, w in works])
            list(pool.map(copy_and_commit, *zip(*works)) if works else [])
        return [results[i] for i in range(len(tasks))]

    def _progress(self, done: int, total: int, r: PartitionResult) -> None:
        window = "" if r.reader_window_ms is None else f", reader window {r.reader_window_ms:.0f} ms"
        log.info("[%d/%d] %s %s: %s %s(%d -> %d files, %d -> %d bytes, %s%s) in %.1fs", done, total, r.table,
                 r.partition or "(table)", r.status, f"{r.reason} " if r.reason else "", r.files_before,
                 r.files_after, r.bytes_before, r.bytes_after, r.mode or "-", window, r.seconds)

    def _failed(self, task: PartitionTask, e: Exception) -> PartitionResult:
        return PartitionResult(task.table_name, task.partition, task.location, Status.FAILED,
                               reason=f"{type(e).__name__}: {e}".splitlines()[0][:FAILED_REASON_CHARS])

    # --- phase 1: prepare -------------------------------------------------------------------
    def prepare(self, task: PartitionTask, started: float) -> Work | PartitionResult:
        area = WorkArea(task.work_dir)
        pid = partition_id(task.table_name, task.partition)
        try:
            manifest = None
            if not self.dry_run and self.fs.exists(area.journal(pid)):
                with self.metastore.lock(task.table_name, task.partition, task.lock_wait_seconds):
                    manifest = recover(self.fs, area, pid, self.owner, location=task.location, switch=lambda record:
                                       location_switch.recover_switch(self.fs, area, self.metastore, record,
                                                                      task.table_location))
        except (CommitHeld, InputsChanged, LockTimeout) as e:
            # Left mid-commit (readers may miss rows), or a replay that stopped with files it cannot
            # account for: never a success; the task fails and says what is where.
            log.error("%s: %s", task.label, e)
            why = "a commit of it is unfinished: " if isinstance(e, LockTimeout) else ""
            return PartitionResult(task.table_name, task.partition, task.location, Status.FAILED,
                                   reason=f"{why}{e}", listed=False, stats_files=task.num_files,
                                   stats_bytes=task.total_size)
        except CommitConflict as e:  # nothing of the commit had moved: the partition is as another writer left it
            return PartitionResult(task.table_name, task.partition, task.location, Status.SKIPPED, reason=str(e),
                                   listed=False, stats_files=task.num_files, stats_bytes=task.total_size)
        recovered = manifest is not None
        if recovered and manifest.get("mode") == location_switch.MODE:
            return PartitionResult(task.table_name, task.partition, manifest["new_location"], Status.SKIPPED,
                                   reason=f"finished the location switch run {manifest['run']} left behind "
                                          f"(the partition reads {manifest['new_location']})",
                                   listed=False, recovered=True)
        files, folders = listing.data_files(self.fs.list(task.location))
        result = PartitionResult(task.table_name, task.partition, task.location, Status.NOTHING_TO_DO,
                                 files_before=len(files), bytes_before=sum(f.size for f in files),
                                 files_after=len(files), bytes_after=sum(f.size for f in files),
                                 recovered=recovered, listed=True, stats_files=task.num_files,
                                 stats_bytes=task.total_size)
        result.sizes_before = result.sizes_after = _histogram(task, files)

        def skip(reason: str) -> PartitionResult:
            result.status, result.reason = Status.SKIPPED, reason
            return result

        reason = grouping.skip_reason(task, files, folders, time.time() * 1000)
        if reason:
            return skip(reason)
        small = small_files(files, task.small_file_limit)
        if not enough_small_files(small, task.min_small_files):
            # The Metastore's row count only if its file count and size are the disk's too.
            trusted = task.num_rows is not None and not recovered and not result.stale_statistics
            result.rows = task.num_rows if trusted else partition_rows(self.spark, task.storage_format, files)
            return result
        footers, bad = readable_footers(self.spark, task.storage_format, files, small)
        if bad:
            return skip("unreadable or foreign file(s): " + "; ".join(bad[:3]))
        reason = grouping.copy_refused(task)
        if reason:
            return skip(reason)
        groups = grouping.group(task, files, small, footers)
        # Small files kept out of copy groups by their footers (e.g. another calendar), or why auto rewrote.
        result.reason = grouping.copy_notes(task, small, footers, files)
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
        reason = self._storage_refusal(task.location)
        if reason:
            return skip(reason)
        if task.commit_mode == location_switch.MODE and not task.partition:
            return skip("commit_mode location_switch switches a partition's location: the table is not partitioned")
        self._private_area(area)
        codec = grouping.output_codec(footers[groups[0].files[0].path])
        return Work(task, pid, area, result, files, footers, groups, codec, started,
                    staging=f"{area.staging(self.run, pid)}/{self.attempt}")

    def _storage_refusal(self, location: str) -> str | None:
        return storage.commit_refusal(self.fs.resolved_scheme(location))

    def _private_area(self, area: WorkArea) -> None:
        """The work area is created readable by its owner only; one that exists wider is
        used as it is (an administrator may have widened it on purpose) with a warning."""
        with self._areas_lock:
            if area.root in self._private_areas:
                return
            self._private_areas.add(area.root)
        if not self.fs.make_private_folder(area.root):
            mode = self.fs.permission(area.root)
            if mode & 0o022:
                log.warning("work area %s is writable by others (mode %o): its journals decide which files move; "
                            "restrict it to the account that runs the merges (chmod 700)", area.root, mode)

    # --- phase 2: stage (rewrites: rewrite.RewriteEngine) -----------------------------------
    def stage_copies(self, work: Work) -> None:
        """The partition's copy groups, each copy-merged and verified in the driver's JVM."""
        began, verified, copied = time.monotonic(), 0.0, []
        for n, g in enumerate(work.groups):
            if work.error or g.engine is not Engine.COPY:
                continue
            name = f"part-compacted-{uuid.uuid4().hex[:12]}-c{n:04d}{staged_suffix(g.files[0].name)}"
            try:
                verified += copy_merge.stage(self.spark, work.task.storage_format, g, work.staging, name)
                copied.append(g)
            except CopyMergeError as e:
                work.error = str(e)[:500]
        if copied:
            log.info("%s: copy-merged %d group(s) (%d files) in %.3fs, of which verifying %.3fs", work.task.label,
                     len(copied), sum(len(g.files) for g in copied), time.monotonic() - began, verified)

    # --- phase 3: commit --------------------------------------------------------------------
    def finish(self, work: Work) -> PartitionResult:
        task, result = work.task, work.result
        try:
            if work.error:
                raise RuntimeError(work.error)
            inputs = [f for g in work.groups for f in g.files]
            outputs = [o for g in work.groups for o in g.staged]
            record = CommitRecord(
                run=self.run, pid=work.pid, owner=self.owner, attempt=self.attempt, staging=work.staging, table=task.table_name,
                partition=task.partition, location=task.location, outputs=outputs,
                inputs=[f.identity() for f in inputs])
            with self.metastore.lock(task.table_name, task.partition, task.lock_wait_seconds):
                # What a rollback restores: the statistics just before the commit, read under the
                # lock (the plan's may have changed since: another run's refresh, a Hive writer).
                current = self.metastore.parameters(task.table_name, list(task.values)) or task.statistics
                record.stats_before = {k: current.get(k) for k in STATISTICS_KEYS}
                if task.commit_mode == location_switch.MODE:
                    result.location = self._switch(work, record.to_dict())
                    result.reader_window_ms = 0.0
                else:
                    result.reader_window_ms = commit(self.fs, work.area, record.to_dict())["reader_window_ms"]
            after, _ = listing.data_files(self.fs.list(result.location))
            result.status = Status.MERGED
            result.outputs = [o["name"] for o in outputs]
            result.rows_merged = sum(g.rows for g in work.groups)
            result.files_after, result.bytes_after = len(after), sum(f.size for f in after)
            result.sizes_after = _histogram(task, after)
            # Footers known by file name: the untouched files' from prepare, the outputs' from staging.
            known = {f.name: work.footers[f.path] for f in work.files if f.path in work.footers}
            known.update({o["name"]: g.footers[k] for g in work.groups for k, o in enumerate(g.staged)
                          if k < len(g.footers)})
            result.rows = partition_rows(self.spark, task.storage_format, after, known)
        except LockTimeout as e:  # a writer is at work: nothing moved, the backlog looks again
            log.warning("%s", e)
            result.status, result.reason = Status.SKIPPED, str(e)[:500]
        except Exception as e:
            log.exception("%s: failed", task.label)
            result = self._failed(task, e)
            result.files_before, result.bytes_before = work.result.files_before, work.result.bytes_before
            result.files_after, result.bytes_after = result.files_before, result.bytes_before
            result.sizes_before = result.sizes_after = work.result.sizes_before
        result.seconds = round(time.monotonic() - work.started, 3)
        return result

    def _switch(self, work: Work, record: dict) -> str:
        """Commit by a location switch (``location_switch``); returns the partition's new folder."""
        task = work.task
        merged = {f.name for g in work.groups for f in g.files}
        fmt = task.storage_format
        old_footers = {f.name: work.footers[f.path] for f in work.files if f.path in work.footers}
        new_footers = {o["name"]: g.footers[k] for g in work.groups for k, o in enumerate(g.staged)
                       if k < len(g.footers)}
        record = {**record, "mode": location_switch.MODE, "values": list(task.values),
                  "table_location": task.table_location,
                  "new_location": location_switch.new_folder(task.table_location, task.partition, self.run,
                                                             self.attempt),
                  "files": [f.identity() for f in work.files],
                  "copies": [f.name for f in work.files if f.name not in merged],
                  "rows": partition_rows(self.spark, fmt, work.files, old_footers)}
        hold(self.fs, work.area, record)
        manifest = location_switch.build_and_switch(
            self.fs, work.area, self.metastore, record,
            lambda files: partition_rows(self.spark, fmt, files, new_footers))
        return manifest["new_location"]


def _histogram(task: PartitionTask, files: list[DataFile]) -> list[int]:
    return size_histogram([f.size for f in files], task.small_file_limit, task.target_file_size)
