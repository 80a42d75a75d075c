"""What a merge job found and did per partition, and how it travels back to Airflow.

The results travel through the Hive Metastore, the one service both sides already reach: the
Spark job records each batch as a partition ``run=<run>/batch=<n>`` of a small package table
(``results_table`` in the config), one parameter per examined partition. The refresh task
reads them with the same Thrift client it writes statistics with. So Airflow workers need no
client for the tables' storage (HDFS, viewfs, S3A, ... are only touched by Spark), and the
channel works in every deploy mode, including YARN and Kubernetes cluster mode, where the
driver's output never reaches the Airflow worker.

Pure logic: no Spark, no Thrift.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

# Hive's basic statistics keys (StatsSetupConst) and Spark's own copies of them.
NUM_FILES, TOTAL_SIZE, NUM_ROWS = "numFiles", "totalSize", "numRows"
SPARK_TOTAL_SIZE, SPARK_NUM_ROWS = "spark.sql.statistics.totalSize", "spark.sql.statistics.numRows"
# Set by the refresh task on every partition a run listed (epoch seconds): the audit lists the
# partitions not looked at for the longest time first.
LISTED_AT = "hive_compaction.listedAt"
# Set with it: how many small files (below the run's small-file limit) that listing left on
# disk, where the merge job recorded file sizes. The backlog (backlog.py) reads it.
SMALL_FILES = "hive_compaction.smallFiles"
# When a run meant to list a partition and did not (epoch seconds; never in a dry run): set by
# the plan task on the partitions the fan-out caps deferred, by the refresh on those whose merge
# failed or was not listed. Later than its last listing: the backlog plans it again. Not in
# STATISTICS_KEYS: a rollback leaves it, and the partition is listed again after one.
PLANNED_AT = "hive_compaction.plannedAt"
# Hive's record of which statistics are accurate: cleared where the row count it vouched for changed.
COLUMN_STATS_ACCURATE = "COLUMN_STATS_ACCURATE"
# Every partition parameter the refresh may change: a commit records them as they were, and a
# rollback restores exactly these (a key the partition did not have is removed again).
STATISTICS_KEYS = (
    NUM_FILES,
    TOTAL_SIZE,
    NUM_ROWS,
    SPARK_TOTAL_SIZE,
    SPARK_NUM_ROWS,
    LISTED_AT,
    SMALL_FILES,
    COLUMN_STATS_ACCURATE,
)

# Hive stores a parameter value in a VARCHAR(4000) column (Hive 2.3 to 4 schemas).
MAX_PARAM_CHARS = 4000
RESULT_KEY_PREFIX = "result."
REASON_CHARS = 400
# A failed partition's reason says what is where (which files are in the trash, which outputs in
# staging): kept longer, still well within the parameter column with the rest of the result.
FAILED_REASON_CHARS = 1500


class Status(str, Enum):
    MERGED = "merged"
    NOTHING_TO_DO = "nothing_to_do"
    WOULD_MERGE = "would_merge"
    SKIPPED = "skipped"
    FAILED = "failed"

    def __str__(self) -> str:  # JSON and log lines show the plain value
        return self.value


@dataclass
class PartitionResult:
    table: str
    partition: str
    location: str
    status: Status
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
    listed: bool = False  # the job listed the folder: files_after / bytes_after are the disk's truth
    stats_files: int | None = None  # what the Metastore said at planning time
    stats_bytes: int | None = None
    outputs: list[str] = field(default_factory=list)
    # Files per size bucket (size_histogram) before and after, where the job listed them.
    sizes_before: list[int] | None = None
    sizes_after: list[int] | None = None
    # How long readers listing the partition could miss the merged groups' rows (never see one
    # twice): in_place, the milliseconds from the first input leaving to the last output
    # arriving; location_switch, 0 (one Metastore call). None where nothing was committed.
    reader_window_ms: float | None = None
    unlocked: bool = False  # committed without the Metastore's lock (require_locks: false)
    # The merge job wrote the statistics itself, under the commit's lock: the refresh leaves them.
    statistics_written: bool = False

    @property
    def stale_statistics(self) -> bool:
        return statistics_were_stale(vars(self))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PartitionResult:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        values["status"] = Status(values["status"])
        return cls(**values)


def statistics_were_stale(r: dict[str, Any]) -> bool:
    """The Metastore's numFiles / totalSize disagreed with the listing before the run (``r``: a
    result's fields, as the report's dicts carry them)."""
    return bool(r.get("listed")) and (r.get("stats_files"), r.get("stats_bytes")) != (
        r["files_before"],
        r["bytes_before"],
    )


def small_files_left(r: dict[str, Any]) -> int | None:
    """Small files a listed partition holds after the run (the size buckets below the run's
    small-file limit: bucket_edges), or None where the job recorded no sizes."""
    after = r.get("sizes_after")
    if not r.get("listed") or not isinstance(after, (list, tuple)) or len(after) < 2:
        return None
    return int(after[0]) + int(after[1])


def statistics_update(result: PartitionResult, parameters: dict[str, str], now: float) -> dict[str, str | None]:
    """What the refresh writes to a listed partition whose parameters are ``parameters``: Hive's
    (and, where present, Spark's) statistics keys that differ from the disk, when it was listed
    and the small files left (None: remove the key)."""
    new: dict[str, str | None] = {
        NUM_FILES: str(result.files_after),
        TOTAL_SIZE: str(result.bytes_after),
        LISTED_AT: str(int(now)),
    }
    small = small_files_left(vars(result))
    new[SMALL_FILES] = None if small is None else str(small)  # unknown: no stale count stays
    if result.rows is not None:
        new[NUM_ROWS] = str(result.rows)
        if SPARK_NUM_ROWS in parameters:
            new[SPARK_NUM_ROWS] = str(result.rows)
        if NUM_ROWS in parameters and parameters[NUM_ROWS] != new[NUM_ROWS]:
            new[COLUMN_STATS_ACCURATE] = None  # it vouched for another row count
    if SPARK_TOTAL_SIZE in parameters:
        new[SPARK_TOTAL_SIZE] = str(result.bytes_after)
    return {k: v for k, v in new.items() if parameters.get(k) != v}


def encode_results(results: list[PartitionResult]) -> dict[str, str]:
    """Metastore parameters holding a batch's results: one key per partition, each value short
    enough for the Metastore's parameter column (long reasons and output lists are cut)."""
    params = {}
    for i, r in enumerate(results):
        d = r.to_dict()
        d["reason"] = d["reason"][: FAILED_REASON_CHARS if r.status is Status.FAILED else REASON_CHARS]
        text = json.dumps(d, separators=(",", ":"))
        if len(text) > MAX_PARAM_CHARS:
            d["outputs"] = d["outputs"][:3] + [f"... {len(r.outputs) - 3} more"]
            text = json.dumps(d, separators=(",", ":"))
        params[f"{RESULT_KEY_PREFIX}{i:05d}"] = text
    params["count"] = str(len(results))
    return params


def decode_results(params: dict[str, str]) -> list[PartitionResult]:
    """The results a batch recorded; raises ValueError when some are missing (a batch cut short)."""
    keys = sorted(k for k in params if k.startswith(RESULT_KEY_PREFIX))
    if "count" not in params or int(params["count"]) != len(keys):
        raise ValueError(f"the batch recorded {params.get('count', 'no')} result count but {len(keys)} result(s)")
    return [PartitionResult.from_dict(json.loads(params[k])) for k in keys]


# The file-size distribution the report shows: four buckets around the table's small-file
# limit L and target T: tiny (< L/4), small (L/4 to L: merged when there are enough), fine
# (L to T), at or above the target.
BUCKETS = 4


def bucket_edges(small_file_limit: int, target_file_size: int) -> tuple[int, int, int]:
    return small_file_limit // 4, small_file_limit, target_file_size


def size_histogram(sizes: Iterable[int], small_file_limit: int, target_file_size: int) -> list[int]:
    """Counts of ``sizes`` per bucket: a compact form of a partition's file sizes (4 integers),
    meant to travel in a PartitionResult as ``sizes_before`` / ``sizes_after``."""
    edges = bucket_edges(small_file_limit, target_file_size)
    counts = [0] * BUCKETS
    for s in sizes:
        counts[sum(1 for e in edges if s >= e)] += 1
    return counts
