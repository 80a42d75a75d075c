"""The Spark side: for the partitions of one batch, list, group, stage, verify, commit.

Three phases, so the cluster stays busy and the commit window stays short:

1. *prepare* each partition (driver threads, side by side): finish an interrupted commit, list
   its files, read their footers (a corrupt or foreign file skips the partition), and group the
   small files: ``copy`` groups (same schema, codec and version, blocks above the floor) and
   ``rewrite`` groups.
2. *stage* every group outside the partitions: all rewrite groups of a table in one Spark job
   (each group one task streaming its files into one output; no shuffle, no job per group),
   copy groups by concatenating ORC stripes / Parquet row groups in the driver's JVM. Each
   staged output is verified against its inputs before any input moves: a rewrite by row count
   and an order-independent content checksum (the sum of a 64-bit hash of every row, taken in
   the same pass as the write and again from the output, for all groups in one more job); a
   copy by its footer (rows per block) and a hash of every copied byte range.
3. *commit* each partition with the journaled protocol of ``commit`` (driver threads).

File listings, footers, byte-range hashes and renames go through ``jvm_helper``: one py4j
round trip per partition or group, not several per file. A failing partition never stops the
others; its files stay as they were.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .commit import commit, fault_point, recover
from .copy_merge import CopyMergeError, FileFooter, error_text, copy_merge, read_footers, tiny_blocks
from .hadoop_fs import HadoopFS, is_hidden
from .paths import partition_id
from .batch import PartitionTask
from .results import PartitionResult, Status
from .sizing import DataFile, pack_small_files, small_files
from .work_area import WorkArea, journaled, purge_expired

log = logging.getLogger(__name__)

# Footer codec names -> the writer's "compression" option.
_CODECS = {"NONE": "none", "UNCOMPRESSED": "none", "ZLIB": "zlib", "SNAPPY": "snappy", "LZO": "lzo",
           "LZ4": "lz4", "ZSTD": "zstd", "GZIP": "gzip", "BROTLI": "brotli", "LZ4_RAW": "lz4_raw"}


@dataclass
class Group:
    mode: str  # "copy" | "rewrite"
    files: list[DataFile]
    staged: list[dict] = field(default_factory=list)  # {"staged", "name", "size"}
    rows: int = 0
    want: tuple[int, int] = (0, 0)  # rows and content checksum of the inputs, seen while writing
    footers: list[FileFooter] = field(default_factory=list)  # of the staged outputs, where read


@dataclass
class Work:
    """One partition on its way through the phases."""
    task: PartitionTask
    pid: str
    area: WorkArea
    result: PartitionResult
    files: list[DataFile]
    footers: dict[str, FileFooter]
    groups: list[Group]
    codec: str
    started: float
    error: str | None = None
    staging: str = ""  # this attempt's own staging folder: a retry never touches another attempt's


def _contains_map(dt: T.DataType) -> bool:
    if isinstance(dt, T.MapType):
        return True
    if isinstance(dt, T.ArrayType):
        return _contains_map(dt.elementType)
    if isinstance(dt, T.StructType):
        return any(_contains_map(f.dataType) for f in dt.fields)
    return False


def _hashable(c, dt: T.DataType):
    """xxhash64 refuses maps: a map column is hashed as its entries (an array of key-value
    structs, in the file's order, which a rewrite keeps), a map nested deeper as its JSON text
    (slower: about twice the cost of the whole hash)."""
    if isinstance(dt, T.MapType) and not (_contains_map(dt.keyType) or _contains_map(dt.valueType)):
        return F.map_entries(c)
    return F.to_json(c) if _contains_map(dt) else c


def row_hash(schema: T.StructType):
    """A 64-bit hash over every column of a row; null flags keep (null, 1) apart from (1, null)."""
    cols = []
    for f in schema.fields:
        c = F.col(f"`{f.name}`")
        cols += [_hashable(c, f.dataType), c.isNull()]
    return F.xxhash64(*cols)


# The file a write task makes: part-<task's partition index>-<job uuid>...
_TASK_FILE = re.compile(r"part-(\d{5})-")


def _decimal(c):
    return c.cast("decimal(38,0)")


def _content_metrics(schema: T.StructType) -> list:
    """Rows and content checksum (the sum of every row's hash; order-independent), for observe().
    Columns are unresolved expressions: built once, they serve every branch read with ``schema``
    (each built column is several py4j calls)."""
    return [F.count(F.lit(1)).alias("rows"),
            F.coalesce(F.sum(_decimal(row_hash(schema))), _decimal(F.lit(0))).alias("checksum")]


class BatchRunner:
    def __init__(self, spark: SparkSession, run: str, batch_id: str, dry_run: bool = False):
        self.spark = spark
        self.fs = HadoopFS(spark)
        self.run = run
        self.batch_id = batch_id
        self.dry_run = dry_run
        self.attempt = uuid.uuid4().hex[:12]
        # A file Spark cannot read must fail the job, never be skipped silently in both the write
        # and the verification pass (a cluster's defaults may turn skipping on).
        spark.conf.set("spark.sql.files.ignoreCorruptFiles", "false")
        spark.conf.set("spark.sql.files.ignoreMissingFiles", "false")
        # Driver threads for per-partition work (listing, footers, copies, commits).
        self.threads = max(2, min(8, os.cpu_count() or 2))
        # Every read below names its files, already listed by us: without this, Spark starts a
        # listing job for each read of more than 32 paths (~0.3 s each, per rewrite group).
        spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1000000")
        # A union of single-partition branches keeps one partition per branch (Spark 4 would
        # otherwise zip them into one task): see _rewrite_job.
        spark.conf.set("spark.sql.unionOutputPartitioning", "false")

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
            self.stage_rewrites([w for _, w in works])
            list(pool.map(copy_and_commit, *zip(*works)) if works else [])
        return [results[i] for i in range(len(tasks))]

    def _progress(self, done: int, total: int, r: PartitionResult) -> None:
        log.info("[%d/%d] %s %s: %s %s(%d -> %d files, %d -> %d bytes, %s) in %.1fs", done, total, r.table,
                 r.partition or "(table)", r.status, f"{r.reason} " if r.reason else "", r.files_before,
                 r.files_after, r.bytes_before, r.bytes_after, r.mode or "-", r.seconds)

    def _failed(self, task: PartitionTask, e: Exception) -> PartitionResult:
        return PartitionResult(task.table_name, task.partition, task.location, Status.FAILED,
                               reason=f"{type(e).__name__}: {e}".splitlines()[0][:500])

    # --- work areas -------------------------------------------------------------------------
    # A journal this old belongs to a job that is gone: a commit holds its journal for seconds.
    ORPHAN_AGE_SECONDS = 600

    def maintain(self, areas: list[dict], tasks: list[PartitionTask]) -> list[PartitionResult]:
        """For each work area (``{"table", "work_dir", "trash_retention_days"}``): finish the
        commits that jobs of earlier runs left behind in partitions this job does not list
        itself (those are finished by ``prepare``), drop torn journals, purge expired runs."""
        if self.dry_run:
            return []
        planned = {partition_id(t.table_name, t.partition) for t in tasks}
        old = time.time() * 1000 - self.ORPHAN_AGE_SECONDS * 1000
        results = []
        for a in areas:
            try:
                results += self._maintain_area(a, planned, old)
            except Exception:  # a work area we cannot tidy must not stop the merges
                log.exception("%s: could not look after the work area %s", a["table"], a["work_dir"])
        return results

    def _maintain_area(self, a: dict, planned: set[str], old: float) -> list[PartitionResult]:
        results = []
        area, keep = WorkArea(a["work_dir"]), {self.run}
        for entry, record in journaled(self.fs, area):
            pid = entry.name[:-len(".json")]
            if record is None and entry.modification_time < old:
                log.warning("removing the incomplete journal %s (its commit never started)", entry.path)
                self.fs.delete(entry.path)
            elif record is not None and record["run"] != self.run and pid not in planned \
                    and entry.modification_time < old:
                results.append(self._recover_orphan(area, pid, record))
            elif record is not None:
                keep.add(record["run"])
        purge_expired(self.fs, area, a["trash_retention_days"], keep)
        return results

    def _recover_orphan(self, area: WorkArea, pid: str, record: dict) -> PartitionResult:
        result = PartitionResult(record["table"], record["partition"], record["location"], Status.MERGED,
                                 reason=f"finished the commit run {record['run']} left behind", recovered=True)
        try:
            recover(self.fs, area, pid)
            files, _ = self.data_files(record["location"])
        except Exception as e:
            log.exception("%s/%s: could not finish an interrupted commit", record["table"], record["partition"])
            result.status, result.reason = Status.FAILED, f"finishing an interrupted commit: {type(e).__name__}: {e}"
            return result
        result.listed = True
        result.files_after, result.bytes_after = len(files), sum(f.size for f in files)
        result.files_before = result.files_after - len(record["outputs"]) + len(record["inputs"])
        result.bytes_before = (result.bytes_after - sum(o["size"] for o in record["outputs"])
                               + sum(f["size"] for f in record["inputs"]))
        log.info("%s %s: %s (%d -> %d files)", result.table, result.partition or "(table)", result.reason,
                 result.files_before, result.files_after)
        return result

    # --- phase 1: prepare -------------------------------------------------------------------
    # Folders writers keep in a partition while they write (Hive, MapReduce, Spark).
    WRITER_STAGING = (".hive-staging", "_temporary", ".spark-staging")

    def data_files(self, location: str) -> tuple[list[DataFile], list[str]]:
        """(visible data files, sub-folders: visible ones and writers' staging folders)."""
        entries = self.fs.list(location)
        visible = [e for e in entries if not is_hidden(e.name)]
        folders = [e.name for e in entries if e.is_dir]
        return ([e.as_data_file() for e in visible if not e.is_dir],
                [f for f in folders if not is_hidden(f) or f.startswith(self.WRITER_STAGING)])

    def prepare(self, task: PartitionTask, started: float) -> Work | PartitionResult:
        area = WorkArea(task.work_dir)
        pid = partition_id(task.table_name, task.partition)
        recovered = recover(self.fs, area, pid) is not None if not self.dry_run else False
        files, folders = self.data_files(task.location)
        result = PartitionResult(task.table_name, task.partition, task.location, Status.NOTHING_TO_DO,
                                 files_before=len(files), bytes_before=sum(f.size for f in files),
                                 files_after=len(files), bytes_after=sum(f.size for f in files),
                                 recovered=recovered, listed=True, stats_files=task.num_files,
                                 stats_bytes=task.total_size)

        def skip(reason: str) -> PartitionResult:
            result.status, result.reason = Status.SKIPPED, reason
            return result

        writing = [f for f in folders if f.startswith(self.WRITER_STAGING)]
        if writing:
            return skip(f"a writer is still writing into it ({writing[:3]})")
        if folders:
            return skip(f"holds sub-folders {folders[:3]}: not a flat Hive partition")
        age_ms = time.time() * 1000 - max((f.modification_time for f in files), default=0)
        if task.quiet_period_minutes and age_ms < task.quiet_period_minutes * 60_000:
            return skip(f"written to {age_ms / 60_000:.1f} min ago, within the quiet period of "
                        f"{task.quiet_period_minutes} min")
        empty = [f.name for f in files if f.size == 0]
        if empty:
            return skip(f"holds zero-byte file(s) {empty[:3]}")
        small = small_files(files, task.small_file_limit)
        if len(small) < max(task.min_small_files, 2):
            # The Metastore's row count only if its file count and size are the disk's too.
            trusted = task.num_rows is not None and not recovered and not result.stale_statistics
            result.rows = task.num_rows if trusted else self._rows(task, files)
            return result
        footers, bad = {}, []
        for f, ft in zip(files, read_footers(self.spark, task.storage_format, [f.path for f in files])):
            if not isinstance(ft, CopyMergeError):
                footers[f.path] = ft
            elif f in small:  # a big file we will not touch may be anything
                bad.append(f"{f.name} ({str(ft).split(': ', 1)[-1][:160]})")
        if bad:
            return skip("unreadable or foreign file(s): " + "; ".join(bad[:3]))
        if task.merge_mode == "copy" and task.sort_columns:
            return skip("merge_mode copy cannot keep the table's SORTED BY order; use auto or rewrite")
        groups = self.group(task, files, small, footers)
        result.groups = len(groups)
        result.files_merged = sum(len(g.files) for g in groups)
        result.mode = "+".join(sorted({g.mode for g in groups}))
        if not groups:
            result.rows = sum(ft.rows for ft in footers.values())
            return result
        if self.dry_run:
            result.status = Status.WOULD_MERGE
            result.files_after = result.files_before - result.files_merged + len(groups)
            return result
        codec = _CODECS.get(footers[groups[0].files[0].path].compression.split("+")[0], "snappy")
        return Work(task, pid, area, result, files, footers, groups, codec, started,
                    staging=f"{area.staging(self.run, pid)}/{self.attempt}")

    def group(self, task: PartitionTask, files: list[DataFile], small: list[DataFile],
              footers: dict[str, FileFooter]) -> list[Group]:
        """Copy groups where the inputs allow it, rewrite groups for the rest (Hudi-style packing)."""
        pack = dict(small_file_limit=task.small_file_limit, min_small_files=2)
        groups: list[Group] = []
        rest = list(small)
        if task.merge_mode in ("auto", "copy") and not task.sort_columns:
            floor = task.copy_min_block_size if task.merge_mode == "auto" else 0
            compatible: dict[tuple, list[DataFile]] = {}
            for f in small:
                ft = footers[f.path]
                if ft.block_rows and not tiny_blocks(ft, floor):  # same floor as copy_merge.copy_groups
                    compatible.setdefault(ft.copy_key, []).append(f)
            for candidates in compatible.values():
                groups += [Group("copy", g) for g in
                           pack_small_files(candidates, target_file_size=task.target_file_size, **pack)]
            copied = {f.path for g in groups for f in g.files}
            rest = [f for f in small if f.path not in copied] if task.merge_mode == "auto" else []
        if rest:
            # Re-encoding changes the size: pack by the output size predicted from bytes per row.
            capacity = int(task.target_file_size / self.expansion(files, rest, footers))
            groups += [Group("rewrite", g) for g in pack_small_files(rest, target_file_size=capacity, **pack)]
        return groups

    @staticmethod
    def expansion(files: list[DataFile], rewrite: list[DataFile], footers: dict[str, FileFooter]) -> float:
        """Predicted output bytes per input byte for a rewrite, Hudi-style from earlier writes: the
        bytes per row of the partition's big (already compacted) files over that of the small ones.
        1.0 (outputs no bigger than their inputs) when there is nothing to learn from."""
        names = {f.path for f in rewrite}
        big = [f for f in files if f.path not in names and f.path in footers and footers[f.path].rows]
        in_rows = sum(footers[f.path].rows for f in rewrite)
        if not big or not in_rows:
            return 1.0
        out_per_row = sum(f.size for f in big) / sum(footers[f.path].rows for f in big)
        in_per_row = sum(f.size for f in rewrite) / in_rows
        return min(1.0, max(0.25, out_per_row / in_per_row))

    # --- phase 2: stage ---------------------------------------------------------------------
    def stage_rewrites(self, works: list[Work]) -> None:
        """Every rewrite group of the batch in a few Spark jobs: one job per table (up to
        ``REWRITE_GROUPS_PER_JOB`` groups), in which each group is one task streaming its files
        into one output file, so every executor core is busy, with no shuffle and no job per
        group. The table's jobs run side by side from driver threads. A failing group fails only
        its partition."""
        items = [(w, g) for w in works for g in w.groups if g.mode == "rewrite"]
        if not items:
            return
        began = time.monotonic()
        schemas = self._read_schemas(items)
        log.info("read the schema of %d table(s) in %.1fs", len({w.task.table_name for w, _ in items}),
                 time.monotonic() - began)
        jobs: dict[tuple, list[tuple[Work, Group]]] = {}
        for w, g in items:
            schema = schemas[id(w)]
            if isinstance(schema, Exception):
                w.error = w.error or f"cannot read the files to rewrite: {schema}"[:500]
                continue
            # One job writes one format with one codec and one schema (a union needs one schema).
            jobs.setdefault((w.task.work_dir, w.task.storage_format, w.codec, id(schema)), []).append((w, g))
        chunks = []
        for job_items in jobs.values():
            # Biggest groups first: Spark starts tasks in order, so the long ones do not come last.
            job_items.sort(key=lambda item: -sum(f.size for f in item[1].files))
            for k in range(0, len(job_items), self.REWRITE_GROUPS_PER_JOB):
                chunks.append(job_items[k:k + self.REWRITE_GROUPS_PER_JOB])
        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="rewrite") as pool:
            list(pool.map(lambda chunk: self._rewrite_or_isolate(chunk, schemas[id(chunk[0][0])]), chunks))

    def _rewrite_or_isolate(self, chunk: list[tuple[Work, Group]], schema: T.StructType) -> None:
        """Run one rewrite job; if it fails (say a file whose footer reads fine but whose data
        does not), run each of its groups in a job of its own, so the failure stays with the
        partition that caused it."""
        try:
            self._rewrite_job(chunk, schema)
            return
        except Exception as e:
            if len(chunk) == 1:
                w = chunk[0][0]
                log.error("%s: rewrite failed: %s", w.task.label, error_text(e))
                w.error = w.error or f"rewrite failed: {error_text(e)}".splitlines()[0][:500]
                return
            log.warning("a rewrite job of %d group(s) failed (%s); rewriting each group on its own to find "
                        "the partition(s) at fault", len(chunk), error_text(e).splitlines()[0][:300])
        for item in chunk:
            if not item[0].error:
                self._rewrite_or_isolate([item], schema)

    # A union of this many file scans still plans quickly; each group is one task of the job.
    REWRITE_GROUPS_PER_JOB = 100

    def _read_schemas(self, items: list[tuple[Work, Group]]) -> dict[int, T.StructType | Exception]:
        """The schema every rewrite of a partition reads and writes, per Work: the union of the
        schemas of the table's files being rewritten in this batch (files written before a column
        was added are read into the newest schema). One small Spark read per table, over one file
        per distinct footer schema, instead of a schema inference per group. Should the union
        fail for the table (incompatible types), each partition is tried on its own."""
        per_work: dict[int, dict[str, str]] = {}  # id(work) -> footer schema -> one file with it
        tables: dict[str, dict[int, Work]] = {}
        for w, g in items:
            reps = per_work.setdefault(id(w), {})
            for f in g.files:
                reps.setdefault(w.footers[f.path].schema, f.path)
            tables.setdefault(w.task.table_name, {})[id(w)] = w

        def union(fmt: str, reps: dict[str, str]):
            files = sorted(set(reps.values()))
            # One schema needs no merge: ORC then reads that file's footer in the driver (a merge
            # is a Spark job, ~1-2 s in a fresh application).
            return self.spark.read.format(fmt).option("mergeSchema", str(len(files) > 1).lower()).load(files).schema

        out: dict[int, T.StructType | Exception] = {}
        for table, table_works in tables.items():
            reps: dict[str, str] = {}
            for key in table_works:
                for k, v in per_work[key].items():
                    reps.setdefault(k, v)
            try:
                schema = union(next(iter(table_works.values())).task.storage_format, reps)
                for key in table_works:
                    out[key] = schema
            except Exception as e:
                log.warning("%s: the files to rewrite have no common schema (%s); trying each partition "
                            "on its own", table, error_text(e))
                for key, w in table_works.items():
                    try:
                        out[key] = union(w.task.storage_format, per_work[key])
                    except Exception as e2:
                        out[key] = RuntimeError(error_text(e2))
        return out

    def _rewrite_job(self, items: list[tuple[Work, Group]], schema: T.StructType) -> None:
        """Rewrite groups (of one table) in one Spark job, then verify and stage each output.

        Each group is one branch of a union: its files read with ``schema``, observed (rows and
        content checksum, taken in the same pass as the write), ``coalesce(1)`` (one task, no
        shuffle), sorted within the task if the table is SORTED BY. With
        ``spark.sql.unionOutputPartitioning`` off, the union's partitions are the branches' in
        order, so task i writes group i's single file ``part-0000i-...``. One more job reads all
        outputs back; a group whose output differs in rows or checksum fails its partition."""
        first = items[0][0]
        fmt, codec = first.task.storage_format, first.codec
        job_dir = f"{first.area.root}/staging/{self.run}/rewrite-{uuid.uuid4().hex[:12]}"
        branches = []
        planning = time.monotonic()
        reads, observations = self._observed_reads(fmt, schema, [[f.path for f in g.files] for _, g in items],
                                                   "group")
        for (w, _), df in zip(items, reads):
            branch = df.coalesce(1)
            sort = [c for c in w.task.sort_columns if c in df.columns]
            if sort:
                branch = branch.sortWithinPartitions(*sort)  # spills to disk when a group exceeds memory
            branches.append(branch)
        started = time.monotonic()
        log.info("%s: rewriting %d group(s) in one Spark job (plan built in %.1fs)", first.task.table_name,
                 len(items), started - planning)
        try:
            functools.reduce(DataFrame.unionAll, branches).write.format(fmt).option("compression", codec).save(job_dir)
            written = time.monotonic()
            for w, _ in items:
                fault_point("rewritten", w.task.label, w.task.location)
            outputs: dict[int, list] = {}
            for e in self.fs.list(job_dir):
                m = _TASK_FILE.match(e.name)
                if m and not e.is_dir:
                    outputs.setdefault(int(m.group(1)), []).append(e)
            for i, ((w, g), observed) in enumerate(zip(items, observations)):
                metrics = observed.get
                g.want = (int(metrics["rows"]), int(metrics["checksum"]))
                in_footers = sum(w.footers[f.path].rows for f in g.files)
                if g.want[0] != in_footers and not w.error:
                    w.error = (f"verification failed: Spark read {g.want[0]} rows from inputs whose footers hold "
                               f"{in_footers}; nothing was committed")
                g.rows = g.want[0]
                g.staged = [{"staged": e.path, "name": e.name, "size": e.size} for e in outputs.get(i, [])]
            self._verify_rewrites(items, schema)
            log.info("%s: rewrote %d group(s) (%d files) in %.1fs, read back and verified in %.1fs",
                     first.task.table_name, len(items), sum(len(g.files) for _, g in items),
                     written - started, time.monotonic() - written)
            # Each verified output moves to its partition's staging folder, where the commit
            # protocol (and recovery, and cleanup) expects it.
            moves = []
            for w, g in items:
                if w.error:
                    continue
                tag = uuid.uuid4().hex[:12]
                staged = []
                for k, o in enumerate(g.staged):
                    target = f"{w.staging}/rewrite-{tag}-{k}{_suffix(o['name'])}"
                    moves.append((o["staged"], target))
                    staged.append({"staged": target, "name": f"part-compacted-{tag}-{k:05d}{_suffix(o['name'])}",
                                   "size": o["size"]})
                g.staged = staged
            self.fs.move_all(moves)
        finally:
            self.fs.delete(job_dir, recursive=True)

    def _observed_reads(self, fmt: str, schema: T.StructType, path_lists: list[list[str]],
                        tag: str) -> tuple[list[DataFrame], list[Observation]]:
        """One read per list of files, each observed for rows and content checksum (taken as
        the read is consumed, by whatever job consumes it)."""
        metrics = _content_metrics(schema)
        reads, observations = [], []
        for i, paths in enumerate(path_lists):
            observed = Observation(f"{tag}-{i}-{uuid.uuid4().hex[:8]}")
            reads.append(self.spark.read.format(fmt).schema(schema).load(paths).observe(observed, *metrics))
            observations.append(observed)
        return reads, observations

    def _verify_rewrites(self, items: list[tuple[Work, Group]], schema: T.StructType) -> None:
        """Read the staged outputs of many groups back in one job and compare each group's rows
        and content checksum with what its write pass observed in the inputs. Each group's read
        is observed on its own and the union goes to Spark's ``noop`` sink: one stage, no
        shuffle, nothing written."""
        written = [(w, g) for w, g in items if g.staged and not w.error]
        got: dict[int, tuple[int, int]] = {}
        if written:
            fmt = written[0][0].task.storage_format
            branches, observations = self._observed_reads(fmt, schema, [[o["staged"] for o in g.staged]
                                                                         for _, g in written], "out")
            functools.reduce(DataFrame.unionAll, branches).write.format("noop").mode("overwrite").save()
            got = {id(g): (int(o.get["rows"]), int(o.get["checksum"])) for (_, g), o in zip(written, observations)}
        for w, g in items:
            if w.error:
                continue
            have = got.get(id(g), (0, 0))
            if have != g.want:
                w.error = (f"verification failed: inputs had {g.want[0]} rows (checksum {g.want[1]}), the staged "
                           f"output has {have[0]} (checksum {have[1]}); nothing was committed")
                log.error("%s: %s", w.task.label, w.error)

    def stage_copies(self, work: Work) -> None:
        """Concatenate stripes / row groups in the driver's JVM; each output is checked against
        its inputs' footers and bytes in the same call."""
        if work.error:
            return
        fmt = work.task.storage_format
        for n, g in enumerate(work.groups):
            if g.mode != "copy":
                continue
            name = f"part-compacted-{uuid.uuid4().hex[:12]}-c{n:04d}{_suffix(g.files[0].name)}"
            staged = f"{work.staging}/{name}"
            try:
                footer, size = copy_merge(self.spark, fmt, [f.path for f in g.files], staged)  # verified too
            except CopyMergeError as e:
                work.error = str(e)[:500]
                return
            g.staged = [{"staged": staged, "name": name, "size": size}]
            g.rows, g.footers = footer.rows, [footer]

    # --- phase 3: commit --------------------------------------------------------------------
    def finish(self, work: Work) -> PartitionResult:
        task, result = work.task, work.result
        try:
            if work.error:
                raise RuntimeError(work.error)
            fault_point("staged", task.label, task.location)
            inputs = [f for g in work.groups for f in g.files]
            outputs = [o for g in work.groups for o in g.staged]
            commit(self.fs, work.area, check_inputs=lambda: self._check_unchanged(task, inputs), record={
                "run": self.run, "pid": work.pid, "staging": work.staging, "table": task.table_name,
                "partition": task.partition, "location": task.location,
                "inputs": [{"name": f.name, "size": f.size} for f in inputs],
                "outputs": outputs,
                "stats_before": {"numFiles": task.num_files, "totalSize": task.total_size, "numRows": task.num_rows},
            })
            after, _ = self.data_files(task.location)
            result.status = Status.MERGED
            result.outputs = [o["name"] for o in outputs]
            result.rows_merged = sum(g.rows for g in work.groups)
            result.files_after, result.bytes_after = len(after), sum(f.size for f in after)
            # Footers known by file name: the untouched files' from prepare, the outputs' from staging.
            known = {f.name: work.footers[f.path] for f in work.files if f.path in work.footers}
            known.update({o["name"]: g.footers[k] for g in work.groups for k, o in enumerate(g.staged)
                          if k < len(g.footers)})
            result.rows = self._rows(task, after, known)
        except Exception as e:
            log.exception("%s: failed", task.label)
            result = self._failed(task, e)
            result.files_before, result.bytes_before = work.result.files_before, work.result.bytes_before
            result.files_after, result.bytes_after = result.files_before, result.bytes_before
        result.seconds = round(time.monotonic() - work.started, 3)
        return result

    def _rows(self, task: PartitionTask, files: list[DataFile], known: dict[str, FileFooter] | None = None) -> int:
        """Rows in the partition, from the files' footers (no data is read); ``known``: footers
        already read, by file name."""
        known = dict(known or {})  # file name -> footer
        unknown = [f for f in files if f.name not in known]
        for f, ft in zip(unknown, read_footers(self.spark, task.storage_format, [f.path for f in unknown])):
            if isinstance(ft, CopyMergeError):
                raise ft
            known[f.name] = ft
        return sum(known[f.name].rows for f in files)

    def _check_unchanged(self, task: PartitionTask, inputs: list[DataFile]) -> None:
        for f, st in zip(inputs, self.fs.statuses([f.path for f in inputs])):
            if st is None or st.size != f.size or st.modification_time != f.modification_time:
                raise RuntimeError(f"input {f.name} of {task.label} changed while it was being merged; "
                                   "nothing was committed, the next run will plan it again")


def _suffix(name: str) -> str:
    """Keep Spark's '.snappy.orc'-style ending, so the codec stays visible in the name."""
    parts = name.split(".")
    return "." + ".".join(parts[-2:]) if len(parts) >= 3 else ("." + parts[-1] if len(parts) == 2 else "")
