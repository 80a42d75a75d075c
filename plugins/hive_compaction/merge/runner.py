"""The merge job's orchestration: for the partitions of one batch, prepare, stage, commit.

Three phases, so the cluster stays busy and the commit window stays short:

1. *prepare* each partition (driver threads, side by side; ``prepare.Preparer``): finish an
   interrupted commit, list its files, read their footers (a corrupt or foreign file skips the
   partition), and decide what to merge (``grouping``: skip rules, copy and rewrite groups).
2. *stage* every group outside the partitions: all rewrite groups of the batch in a few Spark
   jobs (``rewrite.RewriteEngine``), copy groups by concatenating ORC stripes / Parquet row
   groups in the driver's JVM (``copy_merge``). Each staged output is verified against its
   inputs before any input moves.
3. *commit* each partition with the journaled protocol of ``commit`` (driver threads;
   ``finish.Finisher``), partitions of one table in chunks under one Metastore lock
   (``commit_chunks``), each as soon as its groups are staged (``ReadyCommits``): a partition
   that only copies at once, the others as their rewrite jobs end, while later jobs still write.

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

from hive_compaction.commit import recovery as maintenance
from hive_compaction.merge import columnar, copy as copy_merge, executor_merges
from hive_compaction.merge.copy import CopyMergeError
from hive_compaction.merge.executor_merges import MergeRequest
from hive_compaction.merge.finish import Finisher
from hive_compaction.merge.grouping import Engine, Group, Work, staged_suffix
from hive_compaction.merge.job_spark import JobSpark
from hive_compaction.merge.outcome import failed
from hive_compaction.merge.prepare import Preparer
from hive_compaction.merge.rewrite import RewriteEngine
from hive_compaction.merge.step_times import StepTimes
from hive_compaction.model.batch import PartitionTask
from hive_compaction.model.results import PartitionResult
from hive_compaction.storage import listing
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.metastore_client import JobMetastore

log = logging.getLogger(__name__)

# At most this many partitions of a table commit under one Metastore lock (``Finisher.finish_chunk``):
# a Hive writer that asks for one of them meanwhile waits for that many commits at most.
COMMIT_CHUNK = 16


def commit_chunks(works: list[tuple[int, Work]], ways: int) -> list[list[tuple[int, Work]]]:
    """The partitions to copy and commit, in chunks of one table each, small enough that the work
    goes at least ``ways`` ways (the driver's cores)."""
    size = max(1, min(COMMIT_CHUNK, -(-len(works) // ways)))
    by_table: dict[str, list[tuple[int, Work]]] = {}
    for i, work in works:
        by_table.setdefault(work.task.table_name, []).append((i, work))
    return [ws[k : k + size] for ws in by_table.values() for k in range(0, len(ws), size)]


class ReadyCommits:
    """Each partition's copies and commit, started as soon as its rewrite groups are staged: a
    partition with none at once, the others as their rewrite jobs end (``RewriteEngine.stage``'s
    ``done``), in chunks of one table (``commit_chunks``). Committing while later rewrite jobs
    write keeps the driver's threads busy instead of idle until the last job ends (Iceberg's
    rewrite commits its file groups as they finish the same way, with partial progress on)."""

    def __init__(self, works: list[tuple[int, Work]], submit, ways: int):
        self._submit, self._ways = submit, ways
        self._index = {id(w): (i, w) for i, w in works}
        self._pending = {id(w): sum(g.engine is Engine.REWRITE for g in w.groups) for _, w in works}
        self._submitted: set[int] = set()
        self._futures: list = []
        self._lock = threading.Lock()
        self._start([(i, w) for i, w in works if not self._pending[id(w)]])

    def staged(self, items: list[tuple[Work, Group]]) -> None:
        """Rewrite groups staged (or failed): their partitions start once none of theirs is left."""
        ready = []
        with self._lock:
            for w, _ in items:
                self._pending[id(w)] -= 1
                if self._pending[id(w)] == 0:
                    ready.append(self._index[id(w)])
        self._start(ready)

    def fail_unreported(self) -> None:
        """Partitions whose rewrite groups the rewrites never reported fail, their files untouched
        (never committed without their outputs)."""
        with self._lock:
            left = [(i, w) for key, (i, w) in self._index.items() if self._pending[key] > 0]
        for _, w in left:
            w.error = w.error or "the rewrite stage ended without staging or failing its rewrite groups"
        self._start(left)

    def wait(self) -> None:
        for future in list(self._futures):
            future.result()

    def _start(self, works: list[tuple[int, Work]]) -> None:
        with self._lock:
            new = sorted(((i, w) for i, w in works if id(w) not in self._submitted), key=lambda iw: iw[0])
            self._submitted.update(id(w) for _, w in new)
            self._futures += [self._submit(chunk) for chunk in commit_chunks(new, self._ways)]


class BatchRunner:
    def __init__(
        self, spark: JobSpark, run: str, batch_id: str, dry_run: bool = False, metastore_uris: str | None = None
    ):
        self.spark = spark
        # The Metastore's lock and partition locations (location_switch), through Spark's Metastore client.
        self.metastore = JobMetastore(spark, metastore_uris)
        self.fs = HadoopFS(spark)
        self.run = run
        self.batch_id = batch_id
        self.dry_run = dry_run
        self.attempt = uuid.uuid4().hex[:12]
        self.owner = f"{run}/{self.attempt}"  # names this job in the journals it holds
        self.cores = cores = max(2, min(8, os.cpu_count() or 2))
        # Driver threads for per-partition work (listing, footers, copies, commits): twice the
        # cores, since a commit mostly waits (on a forced write, the storage, the Metastore), and
        # with one thread a core those waits would leave the cores idle.
        self.threads = 2 * cores
        # Copy merges at once: each holds a buffer of its largest stripe (up to the small-file limit).
        self._copies = threading.BoundedSemaphore(cores)
        self.preparer = Preparer(spark, self.fs, self.metastore, run, self.attempt, self.owner, dry_run)
        self.steps = StepTimes()
        # One rewrite thread more than the cores: while jobs keep the executors busy, the next
        # job's plan is built, so the executors need not wait for it between jobs.
        self.rewrites = RewriteEngine(spark, self.fs, run, cores + 1, self.steps)
        self.finisher = Finisher(spark, self.fs, self.metastore, run, self.attempt, self.owner, self.steps)

    def maintain(self, areas: list[dict], tasks: list[PartitionTask]) -> list[PartitionResult]:
        """Look after the work areas this job owns (``maintenance.maintain``); not in a dry run."""
        return [] if self.dry_run else maintenance.maintain(self.fs, self.run, self.owner, areas, tasks, self.metastore)

    # --- the batch --------------------------------------------------------------------------
    def run_batch(self, tasks: list[PartitionTask]) -> list[PartitionResult]:
        """Prepare every partition, stage all rewrites together, and copy and commit each as soon
        as its rewrites are staged.

        Partitions are prepared, copied and committed by ``threads`` driver threads side by side:
        that work is mostly waiting on the file system and the JVM, and partitions share nothing
        (each commit holds its own journal) but a chunk's Metastore lock."""
        results: dict[int, PartitionResult] = {}
        lock = threading.Lock()

        def done(i: int, result: PartitionResult) -> None:
            with lock:
                results[i] = result
                self._progress(len(results), len(tasks), result)

        def prepare(i: int, task: PartitionTask) -> Work | None:
            prepared = self._prepare(task)
            if isinstance(prepared, Work):
                return prepared
            done(i, prepared)
            return None

        def copy_and_commit(chunk: list[tuple[int, Work]]) -> None:
            copied = self.copy_in_tasks([w for _, w in chunk])
            for _, work in chunk:
                try:
                    with self._copies, self.steps.step("copy", work.task):
                        self.stage_copies(work, copied)
                except Exception as e:
                    log.exception("%s: copy failed", work.task.label)
                    work.error = work.error or f"{type(e).__name__}: {e}".splitlines()[0][:500]
            for (i, _), result in zip(chunk, self.finisher.finish_chunk([w for _, w in chunk])):
                done(i, result)

        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="partition") as pool:
            began = time.monotonic()
            prepared = list(pool.map(prepare, range(len(tasks)), tasks))
            works = [(i, w) for i, w in enumerate(prepared) if w is not None]
            log.info(
                "prepared %d partition(s) in %.1fs: %d with files to merge (%d files in %d groups)",
                len(tasks),
                time.monotonic() - began,
                len(works),
                sum(len(g.files) for _, w in works for g in w.groups),
                sum(len(w.groups) for _, w in works),
            )
            commits = ReadyCommits(works, lambda chunk: pool.submit(copy_and_commit, chunk), self.cores)
            self.rewrites.stage([w for _, w in works], commits.staged)
            commits.fail_unreported()
            commits.wait()
        summary = self.steps.summary()
        if summary:
            log.info("driver time by step: %s", summary)
        return [results[i] for i in range(len(tasks))]

    def _prepare(self, task: PartitionTask) -> Work | PartitionResult:
        """The partition's work (a rewrite's Spark session then starts soon), or its result: nothing to merge, or
        failed while preparing."""
        started = time.monotonic()
        try:
            with self.steps.step("prepare", task):
                prepared = self.preparer.prepare(task, started)
        except Exception as e:  # one bad partition must not stop the others
            log.exception("%s: failed while preparing", task.label)
            prepared = failed(task, e)
        if not isinstance(prepared, Work):
            prepared.seconds = round(time.monotonic() - started, 3)
        elif any(g.engine is Engine.REWRITE and self._spark_sql_rewrite(prepared, g) for g in prepared.groups):
            self.spark.make_session_soon()
        return prepared

    def _spark_sql_rewrite(self, work: Work, group: Group) -> bool:
        """Whether the group's rewrite may need Spark SQL's session (the columnar engine does not)."""
        return executor_merges.engine(self.spark) is None or columnar.why_not(work, group) is not None

    def _progress(self, done: int, total: int, r: PartitionResult) -> None:
        window = "" if r.reader_window_ms is None else f", reader window {r.reader_window_ms:.0f} ms"
        log.info(
            "[%d/%d] %s %s: %s %s(%d -> %d files, %d -> %d bytes, %s%s) in %.1fs",
            done,
            total,
            r.table,
            r.partition or "(table)",
            r.status,
            f"{r.reason} " if r.reason else "",
            r.files_before,
            r.files_after,
            r.bytes_before,
            r.bytes_after,
            r.mode or "-",
            window,
            r.seconds,
        )

    # --- phase 2: stage (rewrites: rewrite.RewriteEngine) -----------------------------------
    def copy_in_tasks(self, works: list[Work]) -> dict[int, tuple[str, dict]]:
        """The copy groups of ``works`` copied in one Spark job on the executors (the engine's jar:
        ``executor_merges``), by id(group): the output's name and what its task reported. Empty
        without the jar or executors (local mode): ``stage_copies`` then copies in the driver."""
        groups = [(w, n, g) for w in works if not w.error for n, g in enumerate(w.groups) if g.engine is Engine.COPY]
        # Spark local mode has no executor but the driver: the same JVM, without a Spark job's start.
        if (
            not groups
            or (self.spark.sparkContext.master or "").startswith("local")
            or executor_merges.engine(self.spark) is None
        ):
            return {}
        self.steps.first_merge("copy")
        names = [_copy_name(n, g) for _, n, g in groups]
        requests = [
            MergeRequest("copy", w.task.storage_format, [f.path for f in g.files], f"{w.staging}/{name}")
            for (w, _, g), name in zip(groups, names)
        ]
        try:
            docs = executor_merges.run(
                self.spark,
                requests,
                f"hive-compaction: copy merge of {len(groups)} group(s) of {works[0].task.table_name}",
            )
        except Exception as e:  # noqa: BLE001 - the job failed: its partitions fail, files untouched
            docs = [{"error": copy_merge.error_text(e)} for _ in requests]
        return {id(g): (name, doc) for (_, _, g), name, doc in zip(groups, names, docs)}

    def stage_copies(self, work: Work, copied: dict[int, tuple[str, dict]] | None = None) -> None:
        """The partition's copy groups, each copy-merged and verified: checked from what the
        executors' tasks reported (``copied``: ``copy_in_tasks``), else made in the driver's JVM."""
        began, verified, done, in_tasks = time.monotonic(), 0.0, [], 0.0
        for n, g in enumerate(work.groups):
            if work.error or g.engine is not Engine.COPY:
                continue
            self.steps.first_merge("copy")
            name, doc = (copied or {}).get(id(g), (None, None))
            name = name or _copy_name(n, g)
            try:
                if doc is not None and "copy" not in doc:
                    raise CopyMergeError(f"the copy task failed: {doc.get('error')}")
                in_tasks += 0 if doc is None else int(doc.get("task_nanos", 0)) / 1e9  # the copy's own time
                verified += copy_merge.stage(
                    self.spark, work.task.storage_format, g, work.staging, name, None if doc is None else doc["copy"]
                )
                done.append(g)
            except CopyMergeError as e:
                work.error = str(e)[:500]
        if done:
            log.info(
                "%s: copy-merged %d group(s) (%d files%s) in %.3fs, of which verifying %.3fs",
                work.task.label,
                len(done),
                sum(len(g.files) for g in done),
                ", in executor tasks" if copied else "",
                time.monotonic() - began + in_tasks,
                verified,
            )


def _copy_name(n: int, g: Group) -> str:
    """The name of a partition's n-th group's copied output (its staged name and its name in the partition)."""
    return f"{listing.MERGED_PREFIX}{uuid.uuid4().hex[:12]}-c{n:04d}{staged_suffix(g.files[0].name)}"
