"""The Spark side: for each partition of a batch, list, group, rewrite, verify, commit.

Inputs are removed from a partition only after the merged output is durable and verified
against them: same row count and same order-independent content checksum (the sum of a 64-bit
hash of every row, so a lost, altered or duplicated row changes it).
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .commit import WorkArea, commit, fault_point, recover
from .hadoop_fs import HadoopFS, is_hidden
from .paths import partition_id
from .planning import PartitionTask
from .sizing import DataFile, pack_small_files

log = logging.getLogger(__name__)

_ORC_CODECS = {"NONE": "none", "ZLIB": "zlib", "SNAPPY": "snappy", "LZO": "lzo", "LZ4": "lz4", "ZSTD": "zstd"}
_PARQUET_CODECS = {"UNCOMPRESSED": "none", "SNAPPY": "snappy", "GZIP": "gzip", "LZO": "lzo",
                   "BROTLI": "brotli", "LZ4": "lz4", "ZSTD": "zstd", "LZ4_RAW": "lz4_raw"}


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


def checksum_columns(df: DataFrame):
    return [F.count(F.lit(1)).alias("rows"),
            F.coalesce(F.sum(row_hash(df).cast("decimal(38,0)")), F.lit(0).cast("decimal(38,0)")).alias("checksum")]


def content_checksum(df: DataFrame) -> tuple[int, int]:
    row = df.agg(*checksum_columns(df)).collect()[0]
    return int(row["rows"]), int(row["checksum"])


class BatchRunner:
    def __init__(self, spark: SparkSession, run: str, batch_id: str, dry_run: bool = False):
        self.spark = spark
        self.fs = HadoopFS(spark)
        self.run = run
        self.batch_id = batch_id
        self.dry_run = dry_run

    def run_batch(self, tasks: list[PartitionTask]) -> list[PartitionResult]:
        results = []
        total_bytes = sum(t.total_size or 0 for t in tasks)
        done_bytes = 0
        for i, task in enumerate(tasks, 1):
            log.info("[%d/%d] %s: starting", i, len(tasks), task.label)
            started = time.monotonic()
            try:
                result = self.compact(task)
            except Exception as e:  # one bad partition must not stop the others
                log.exception("%s: failed", task.label)
                result = PartitionResult(task.table_name, task.partition, task.location, "failed",
                                         reason=f"{type(e).__name__}: {e}".splitlines()[0][:500])
            result.seconds = round(time.monotonic() - started, 3)
            done_bytes += task.total_size or result.bytes_before
            log.info("[%d/%d] %s: %s %s (%d -> %d files, %d -> %d bytes) in %.1fs; %s of ~%s bytes done",
                     i, len(tasks), task.label, result.status, result.reason, result.files_before,
                     result.files_after, result.bytes_before, result.bytes_after, result.seconds,
                     done_bytes, total_bytes)
            results.append(result)
        self._write_results(tasks, results)
        return results

    def _write_results(self, tasks: list[PartitionTask], results: list[PartitionResult]) -> None:
        by_area: dict[str, list[dict]] = {}
        for task, result in zip(tasks, results):
            by_area.setdefault(task.work_dir, []).append(asdict(result))
        for work_dir, items in by_area.items():
            self.fs.write_text_atomic(WorkArea(work_dir).results(self.run, self.batch_id),
                                      json.dumps(items, indent=1))

    def data_files(self, location: str) -> tuple[list[DataFile], list[str]]:
        """(visible data files, visible sub-folders) of a partition folder."""
        entries = [e for e in self.fs.list(location) if not is_hidden(e.name)]
        return ([e.as_data_file() for e in entries if not e.is_dir],
                [e.name for e in entries if e.is_dir])

    def compact(self, task: PartitionTask) -> PartitionResult:
        area = WorkArea(task.work_dir)
        pid = partition_id(task.table_name, task.partition)
        recovered = recover(self.fs, area, pid) is not None if not self.dry_run else False
        files, folders = self.data_files(task.location)
        result = PartitionResult(task.table_name, task.partition, task.location, "nothing_to_do",
                                 files_before=len(files), bytes_before=sum(f.size for f in files),
                                 recovered=recovered, mode="rewrite")
        result.files_after, result.bytes_after = result.files_before, result.bytes_before
        if folders:
            return self._skip(result, f"holds sub-folders {folders[:3]}: not a flat Hive partition")
        quiet_ms = task.quiet_period_minutes * 60_000
        newest = max((f.modification_time for f in files), default=0)
        if quiet_ms and time.time() * 1000 - newest < quiet_ms:
            return self._skip(result, f"written to {(time.time() * 1000 - newest) / 60_000:.1f} min ago, "
                                      f"within the quiet period of {task.quiet_period_minutes} min")
        empty = [f.name for f in files if f.size == 0]
        if empty:
            return self._skip(result, f"holds zero-byte file(s) {empty[:3]}")
        groups = pack_small_files(files, small_file_limit=task.small_file_limit,
                                  target_file_size=task.target_file_size,
                                  min_small_files=task.min_small_files)
        bad = self.unreadable(task, [f for g in groups for f in g])
        if bad:
            return self._skip(result, "unreadable or foreign file(s): " + "; ".join(bad[:3]))
        result.groups = len(groups)
        result.files_merged = sum(len(g) for g in groups)
        if not groups:
            result.rows = self._count_rows(task, files) if task.num_rows is None or recovered else task.num_rows
            return result
        if self.dry_run:
            result.status = "would_merge"
            result.files_after = result.files_before - result.files_merged + len(groups)
            return result

        staging = area.staging(self.run, pid)
        self.fs.delete(staging, recursive=True)  # leftovers of an earlier attempt of this run
        codec = self.codec(task, groups[0][0])
        outputs = []
        for g, group in enumerate(groups):
            staged, rows = self._rewrite_group(task, group, f"{staging}/group-{g}", codec)
            outputs += staged
            result.rows_merged += rows
        fault_point("staged", task.label, task.location)
        self._check_unchanged(task, [f for g in groups for f in g])
        record = {
            "run": self.run, "pid": pid, "table": task.table_name, "partition": task.partition,
            "location": task.location,
            "inputs": [{"name": f.name, "size": f.size} for g in groups for f in g],
            "outputs": [{"staged": o["staged"], "name": o["name"], "size": o["size"]} for o in outputs],
            "stats_before": {"numFiles": task.num_files, "totalSize": task.total_size, "numRows": task.num_rows},
        }
        commit(self.fs, area, record)
        after, _ = self.data_files(task.location)
        result.status = "merged"
        result.outputs = [o["name"] for o in outputs]
        result.files_after, result.bytes_after = len(after), sum(f.size for f in after)
        result.rows = self._count_rows(task, after)
        return result

    def _skip(self, result: PartitionResult, reason: str) -> PartitionResult:
        result.status, result.reason = "skipped", reason
        return result

    def _count_rows(self, task: PartitionTask, files: list[DataFile]) -> int | None:
        if not files:
            return 0
        return self.spark.read.format(task.storage_format).load([f.path for f in files]).count()

    def _check_unchanged(self, task: PartitionTask, inputs: list[DataFile]) -> None:
        for f in inputs:
            st = self.fs.status(f.path)
            if st is None or st.size != f.size or st.modification_time != f.modification_time:
                raise RuntimeError(f"input {f.name} of {task.label} changed while it was being merged; "
                                   "nothing was committed, the next run will plan it again")

    def _rewrite_group(self, task: PartitionTask, group: list[DataFile], staging: str,
                       codec: str) -> tuple[list[dict], int]:
        """Rewrite a group into one staged file; (staged outputs, rows) once verified."""
        fmt = task.storage_format
        df = self.spark.read.format(fmt).load([f.path for f in group])
        observed = Observation(f"in-{uuid.uuid4().hex[:8]}")
        (df.observe(observed, *checksum_columns(df)).coalesce(1)
           .write.format(fmt).option("compression", codec).mode("errorifexists").save(staging))
        expected = (int(observed.get["rows"]), int(observed.get["checksum"]))
        staged = [e for e in self.fs.list(staging) if not e.is_dir and not is_hidden(e.name)]
        actual = content_checksum(self.spark.read.format(fmt).load([e.path for e in staged])) if staged else (0, 0)
        if actual != expected:
            raise RuntimeError(f"verification failed for {task.label}: inputs had {expected[0]} rows "
                               f"(checksum {expected[1]}), staged output has {actual[0]} (checksum {actual[1]}); "
                               "nothing was committed")
        tag = uuid.uuid4().hex[:12]
        return [{"staged": e.path, "name": f"part-compacted-{tag}-{n:05d}{_suffix(e.name)}", "size": e.size}
                for n, e in enumerate(staged)], expected[0]

    def unreadable(self, task: PartitionTask, files: list[DataFile]) -> list[str]:
        """Inputs whose footer cannot be read as the table's format (corrupt, truncated, foreign)."""
        bad = []
        for f in files:
            try:
                self._footer(task.storage_format, f.path, lambda reader: None)
            except Exception as e:  # py4j wraps the Java reader's exception
                detail = str(e).splitlines()
                java = next((line for line in detail if "Exception" in line), detail[0] if detail else "")
                bad.append(f"{f.name} ({java.strip()[:160]})")
        return bad

    def _footer(self, fmt: str, path: str, use):
        """Open a file's footer with the ORC or Parquet Java reader and apply ``use`` to it."""
        jvm = self.spark._jvm
        conf = self.spark._jsc.hadoopConfiguration()
        p = jvm.org.apache.hadoop.fs.Path(path)
        if fmt == "orc":
            reader = jvm.org.apache.orc.OrcFile.createReader(p, jvm.org.apache.orc.OrcFile.readerOptions(conf))
        else:
            reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
                jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(p, conf))
        try:
            return use(reader)
        finally:
            reader.close()

    def codec(self, task: PartitionTask, sample: DataFile) -> str:
        """The inputs' own compression codec (never Spark's session default)."""
        if task.storage_format == "orc":
            kind = self._footer("orc", sample.path, lambda r: str(r.getCompressionKind().name()))
            return _ORC_CODECS.get(kind, "snappy")

        def first_codec(reader):
            blocks = reader.getFooter().getBlocks()
            if blocks.size() and blocks.get(0).getColumns().size():
                return str(blocks.get(0).getColumns().get(0).getCodec().name())
            return None
        kind = self._footer("parquet", sample.path, first_codec)
        if kind:
            return _PARQUET_CODECS.get(kind, "snappy")
        return (task.table_parameters.get("parquet.compression") or "snappy").lower()


def _suffix(name: str) -> str:
    """Keep Spark's '.snappy.orc'-style ending, so the codec stays visible in the name."""
    parts = name.split(".")
    return "." + ".".join(parts[-2:]) if len(parts) >= 3 else ("." + parts[-1] if len(parts) == 2 else "")
