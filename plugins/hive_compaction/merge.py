"""The Spark side: for the partitions of one batch, list, group, stage, verify, commit.

Three phases, so the cluster stays busy and the commit window stays short:

1. *prepare* each partition: finish an interrupted commit, list its files, read their footers
   (a corrupt or foreign file skips the partition), and group the small files: ``copy`` groups
   (same schema, codec and version, blocks above the floor) and ``rewrite`` groups.
2. *stage* every group outside the partitions: all rewrite groups of the batch side by side
   (a Spark job per group, one task streaming its files into one output, submitted from driver
   threads so every executor core is busy), copy groups by concatenating ORC stripes / Parquet
   row groups. Each staged output is verified against its inputs before any
   input moves: a rewrite by row count and an order-independent content checksum (the sum of a
   64-bit hash of every row, taken in the same pass as the write and again from the output); a
   copy by its footer (rows per block) and a hash of every copied byte range.
3. *commit* each partition with the journaled protocol of ``commit``.

A failing partition never stops the others; its files stay as they were.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .commit import WorkArea, commit, fault_point, recover
from .copy_merge import CopyMergeError, FileFooter, copy_merge, footer_info, tiny_blocks, verify_copy
from .hadoop_fs import HadoopFS, is_hidden
from .paths import partition_id
from .planning import PartitionTask
from .sizing import DataFile, pack_small_files, small_files

log = logging.getLogger(__name__)

# Footer codec names -> the writer's "compression" option.
_CODECS = {"NONE": "none", "UNCOMPRESSED": "none", "ZLIB": "zlib", "SNAPPY": "snappy", "LZO": "lzo",
           "LZ4": "lz4", "ZSTD": "zstd", "GZIP": "gzip", "BROTLI": "brotli", "LZ4_RAW": "lz4_raw"}


@dataclass
class PartitionResult:
    table: str
    partition: str
    location: str
    status: str  # merged | nothing_to_do | would_merge | skipped | failed
    reason: str = ""
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    rows: int | None = None  # rows in the partition after the merge, where known
    rows_merged: int = 0
    groups: int = 0
    files_merged: int = 0
    mode: str = ""
    seconds: float = 0.0
    recovered: bool = False
    outputs: list[str] = field(default_factory=list)


@dataclass
class Group:
    mode: str  # "copy" | "rewrite"
    files: list[DataFile]
    staged: list[dict] = field(default_factory=list)  # {"staged", "name", "size"}
    rows: int = 0


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


def _contains_map(dt: T.DataType) -> bool:
    if isinstance(dt, T.MapType):
        return True
    if isinstance(dt, T.ArrayType):
        return _contains_map(dt.elementType)
    if isinstance(dt, T.StructType):
        return any(_contains_map(f.dataType) for f in dt.fields)
    return False


def row_hash(df: DataFrame):
    """A 64-bit hash over every column of a row; null flags keep (null, 1) apart from (1, null)."""
    cols = []
    for f in df.schema.fields:
        c = F.col(f"`{f.name}`")
        cols += [F.to_json(c) if _contains_map(f.dataType) else c, c.isNull()]
    return F.xxhash64(*cols)


def _decimal(c):
    return c.cast("decimal(38,0)")


class BatchRunner:
    def __init__(self, spark: SparkSession, run: str, batch_id: str, dry_run: bool = False):
        self.spark = spark
        self.fs = HadoopFS(spark)
        self.run = run
        self.batch_id = batch_id
        self.dry_run = dry_run

    # --- the batch --------------------------------------------------------------------------
    def run_batch(self, tasks: list[PartitionTask]) -> list[PartitionResult]:
        results: dict[int, PartitionResult] = {}
        works: list[tuple[int, Work]] = []
        for i, task in enumerate(tasks):
            started = time.monotonic()
            try:
                prepared = self.prepare(task, started)
            except Exception as e:  # one bad partition must not stop the others
                log.exception("%s: failed while preparing", task.label)
                prepared = self._failed(task, e)
            if isinstance(prepared, Work):
                works.append((i, prepared))
            else:
                prepared.seconds = round(time.monotonic() - started, 3)
                results[i] = prepared
                self._progress(len(results), len(tasks), prepared)
        self.stage_rewrites([w for _, w in works])
        for i, work in works:
            self.stage_copies(work)
            results[i] = self.finish(work)
            self._progress(len(results), len(tasks), results[i])
        ordered = [results[i] for i in range(len(tasks))]
        self._write_results(tasks, ordered)
        return ordered

    def _progress(self, done: int, total: int, r: PartitionResult) -> None:
        log.info("[%d/%d] %s %s: %s %s(%d -> %d files, %d -> %d bytes, %s) in %.1fs", done, total, r.table,
                 r.partition or "(table)", r.status, f"{r.reason} " if r.reason else "", r.files_before,
                 r.files_after, r.bytes_before, r.bytes_after, r.mode or "-", r.seconds)

    def _failed(self, task: PartitionTask, e: Exception) -> PartitionResult:
        return PartitionResult(task.table_name, task.partition, task.location, "failed",
                               reason=f"{type(e).__name__}: {e}".splitlines()[0][:500])

    def _write_results(self, tasks: list[PartitionTask], results: list[PartitionResult]) -> None:
        by_area: dict[str, list[dict]] = {}
        for task, result in zip(tasks, results):
            by_area.setdefault(task.work_dir, []).append(asdict(result))
        for work_dir, items in by_area.items():
            self.fs.write_text_atomic(WorkArea(work_dir).results(self.run, self.batch_id),
                                      json.dumps(items, indent=1))

    # --- phase 1: prepare -------------------------------------------------------------------
    def data_files(self, location: str) -> tuple[list[DataFile], list[str]]:
        """(visible data files, visible sub-folders) of a partition folder."""
        entries = [e for e in self.fs.list(location) if not is_hidden(e.name)]
        return ([e.as_data_file() for e in entries if not e.is_dir],
                [e.name for e in entries if e.is_dir])

    def prepare(self, task: PartitionTask, started: float) -> Work | PartitionResult:
        area = WorkArea(task.work_dir)
        pid = partition_id(task.table_name, task.partition)
        recovered = recover(self.fs, area, pid) is not None if not self.dry_run else False
        files, folders = self.data_files(task.location)
        result = PartitionResult(task.table_name, task.partition, task.location, "nothing_to_do",
                                 files_before=len(files), bytes_before=sum(f.size for f in files),
                                 files_after=len(files), bytes_after=sum(f.size for f in files),
                                 recovered=recovered)

        def skip(reason: str) -> PartitionResult:
            result.status, result.reason = "skipped", reason
            return result

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
            result.rows = task.num_rows if task.num_rows is not None and not recovered else self._rows(task, files)
            return result
        footers, bad = {}, []
        for f in files:
            try:
                footers[f.path] = footer_info(self.spark, task.storage_format, f.path)
            except CopyMergeError as e:
                if f in small:  # a big file we will not touch may be anything
                    bad.append(f"{f.name} ({str(e).split(': ', 1)[-1][:160]})")
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
            result.status = "would_merge"
            result.files_after = result.files_before - result.files_merged + len(groups)
            return result
        self.fs.delete(area.staging(self.run, pid), recursive=True)  # an earlier attempt's leftovers
        codec = _CODECS.get(footers[groups[0].files[0].path].compression.split("+")[0], "snappy")
        return Work(task, pid, area, result, files, footers, groups, codec, started)

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
        """Every rewrite group of the batch at once: one Spark job per group (one task streaming the
        group's files into one output), submitted side by side from driver threads, so all
        executor cores stay busy without a shuffle. A failing group fails only its partition."""
        items = [(w, g) for w in works for g in w.groups if g.mode == "rewrite"]
        if not items:
            return
        threads = max(2, self.spark.sparkContext.defaultParallelism)
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rewrite") as pool:
            futures = [(w, pool.submit(self._rewrite, w, n, g)) for n, (w, g) in enumerate(items)]
            for w, future in futures:
                try:
                    future.result()
                except Exception as e:
                    log.exception("%s: rewrite failed", w.task.label)
                    w.error = w.error or f"{type(e).__name__}: {e}".splitlines()[0][:500]

    def _rewrite(self, work: Work, n: int, group: Group) -> None:
        """Rewrite one group to one staged file; verified (rows, content checksum) before use."""
        task = work.task
        fmt = task.storage_format
        # mergeSchema: files written before a column was added are read into the newest schema.
        df = self.spark.read.format(fmt).option("mergeSchema", "true").load([f.path for f in group.files])
        observed = Observation(f"in-{uuid.uuid4().hex[:8]}")
        out = df.observe(observed, F.count(F.lit(1)).alias("rows"),
                         F.coalesce(F.sum(_decimal(row_hash(df))), _decimal(F.lit(0))).alias("checksum"))
        out = out.coalesce(1)
        sort = [c for c in task.sort_columns if c in df.columns]
        if sort:
            out = out.sortWithinPartitions(*sort)  # spills to disk when a group exceeds memory
        staging = f"{work.area.staging(self.run, work.pid)}/group-{n}"
        self.fs.delete(staging, recursive=True)
        out.write.format(fmt).option("compression", work.codec).save(staging)
        want = (int(observed.get["rows"]), int(observed.get["checksum"]))
        staged = [e for e in self.fs.list(staging) if not e.is_dir and not is_hidden(e.name)]
        written = self.spark.read.format(fmt).load([e.path for e in staged]) if staged else None
        got = (0, 0)
        if written is not None:
            r = written.agg(F.count(F.lit(1)).alias("rows"), F.sum(_decimal(row_hash(written))).alias("c")).collect()[0]
            got = (int(r["rows"]), int(r["c"] or 0))
        if got != want:
            raise RuntimeError(f"verification failed: inputs had {want[0]} rows (checksum {want[1]}), the staged "
                               f"output has {got[0]} (checksum {got[1]}); nothing was committed")
        tag = uuid.uuid4().hex[:12]
        group.staged = [{"staged": e.path, "name": f"part-compacted-{tag}-{k:05d}{_suffix(e.name)}", "size": e.size}
                        for k, e in enumerate(staged)]
        group.rows = want[0]

    def stage_copies(self, work: Work) -> None:
        """Concatenate stripes / row groups in the driver's JVM, then check footers and bytes."""
        if work.error:
            return
        fmt = work.task.storage_format
        for n, g in enumerate(work.groups):
            if g.mode != "copy":
                continue
            name = f"part-compacted-{uuid.uuid4().hex[:12]}-c{n:04d}{_suffix(g.files[0].name)}"
            staged = f"{work.area.staging(self.run, work.pid)}/{name}"
            try:
                footer = copy_merge(self.spark, fmt, [f.path for f in g.files], staged)
                verify_copy(self.spark, fmt, [f.path for f in g.files], staged)
            except CopyMergeError as e:
                work.error = str(e)[:500]
                return
            g.staged = [{"staged": staged, "name": name, "size": self.fs.status(staged).size}]
            g.rows = footer.rows

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
                "run": self.run, "pid": work.pid, "table": task.table_name, "partition": task.partition,
                "location": task.location,
                "inputs": [{"name": f.name, "size": f.size} for f in inputs],
                "outputs": outputs,
                "stats_before": {"numFiles": task.num_files, "totalSize": task.total_size, "numRows": task.num_rows},
            })
            after, _ = self.data_files(task.location)
            result.status = "merged"
            result.outputs = [o["name"] for o in outputs]
            result.rows_merged = sum(g.rows for g in work.groups)
            result.files_after, result.bytes_after = len(after), sum(f.size for f in after)
            result.rows = self._rows(task, after, work.footers)
        except Exception as e:
            log.exception("%s: failed", task.label)
            result = self._failed(task, e)
            result.files_before, result.bytes_before = work.result.files_before, work.result.bytes_before
            result.files_after, result.bytes_after = result.files_before, result.bytes_before
        result.seconds = round(time.monotonic() - work.started, 3)
        return result

    def _rows(self, task: PartitionTask, files: list[DataFile], known: dict[str, FileFooter] | None = None) -> int:
        """Rows in the partition, from the files' footers (no data is read)."""
        known = known or {}
        return sum((known.get(f.path) or footer_info(self.spark, task.storage_format, f.path)).rows for f in files)

    def _check_unchanged(self, task: PartitionTask, inputs: list[DataFile]) -> None:
        for f in inputs:
            st = self.fs.status(f.path)
            if st is None or st.size != f.size or st.modification_time != f.modification_time:
                raise RuntimeError(f"input {f.name} of {task.label} changed while it was being merged; "
                                   "nothing was committed, the next run will plan it again")


def _suffix(name: str) -> str:
    """Keep Spark's '.snappy.orc'-style ending, so the codec stays visible in the name."""
    parts = name.split(".")
    return "." + ".".join(parts[-2:]) if len(parts) >= 3 else ("." + parts[-1] if len(parts) == 2 else "")
