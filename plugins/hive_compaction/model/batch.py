"""One merge job's work, as the plan task hands it over: the tasks and their compact encoding.

Shared by the plan task (Airflow) and the merge job (Spark), so it needs the standard library
only: a Spark driver on a cluster node imports it from the zip shipped with ``--py-files``.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hive_compaction import __version__

# The commit's lease: a merge job's Metastore lock whose heartbeats stopped this long ago belongs
# to a dead job, and the next job takes it (storage.metastore_lock); the plan task prints it in
# the longest time readers can miss rows after a job dies mid-commit (report.reader_gap_note).
LOCK_LEASE_SECONDS = 10.0


class VersionMismatch(RuntimeError):
    """The batch was planned by another version of this package than the merge job's."""


def check_version(payload: dict[str, Any], version: str = __version__) -> None:
    """Refuse a batch planned by another version than the running job's (a stale ``py_files``
    zip, an old wheel on a gateway): the plan and the job must read the payload alike. Called
    before the job touches anything.

    The version is the imported package's own ``__version__`` (which the wheel's metadata is
    built from), not ``importlib.metadata``: on a node where a wheel is installed and a zip is
    shipped with ``--py-files``, the metadata names the wheel while the zip's code runs."""
    planned = payload.get("version")
    if planned != version:
        raise VersionMismatch(
            f"this batch was planned by hive-compaction {planned or '(a version that does not record it)'} "
            f"but this merge job is hive-compaction {version}: install the same version on the Airflow "
            f"workers and where the job runs (the wheel, or the zip given as py_files: make dist)"
        )


# One command-line argument may not exceed 128 KiB on Linux (MAX_ARG_STRLEN); stay well below.
MAX_ENCODED_BATCH = 96 * 1024


@dataclass(frozen=True)
class PartitionTask:
    """One partition to look at in a Spark job; everything the job needs, nothing it must ask."""

    database: str
    table: str
    partition: str
    values: tuple[str, ...]
    location: str
    table_location: str
    storage_format: str
    work_dir: str
    target_file_size: int
    small_file_limit: int
    min_small_files: int
    merge_mode: str
    commit_mode: str = "in_place"
    rewrite_engine: str = "columnar"
    lock_wait_seconds: int = 60
    require_locks: bool = True
    quiet_period_minutes: int = 0
    copy_min_block_size: int = 0
    sort_columns: tuple[str, ...] = ()
    num_files: int | None = None
    total_size: int | None = None
    num_rows: int | None = None
    table_parameters: dict[str, str] = field(default_factory=dict)
    # Why the partition is planned: its statistics say it has small files (or say nothing), or
    # it is listed to check them (a dated run lists every partition it selects; an audit lists
    # partitions this package has not looked at for a while). Orders the work, never decides it.
    reason: str = "statistics"
    listed_at: int | None = None
    # The partition's statistics parameters as planned (results.STATISTICS_KEYS it has): a
    # commit records them, a rollback restores them.
    statistics: dict[str, str] = field(default_factory=dict)

    @property
    def table_name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def label(self) -> str:
        return f"{self.table_name}/{self.partition}" if self.partition else self.table_name


def encode_batch(payload: dict[str, Any]) -> str:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode()


def decode_batch(text: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(zlib.decompress(base64.urlsafe_b64decode(text.encode())))
    return payload


def task_to_dict(t: PartitionTask) -> dict[str, Any]:
    d = asdict(t)
    d["values"], d["sort_columns"] = list(t.values), list(t.sort_columns)
    return d


def task_from_dict(d: dict[str, Any]) -> PartitionTask:
    return PartitionTask(**{**d, "values": tuple(d["values"]), "sort_columns": tuple(d.get("sort_columns", ()))})


# The fields of a task that vary per partition; the rest is the table's, sent once per batch.
PARTITION_FIELDS = (
    "partition",
    "values",
    "location",
    "num_files",
    "total_size",
    "num_rows",
    "reason",
    "listed_at",
    "statistics",
)


def batch_payload(
    run: str, batch: int, dry_run: bool, tasks: list[PartitionTask], maintain: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """What one merge job needs, compactly: each table's policy once, its partitions as rows
    (a location that follows Hive's ``table/name`` convention is left out). ``maintain`` lists
    the work areas whose old journals and expired runs this job looks after."""
    tables: dict[str, int] = {}
    rows = []
    for t in tasks:
        d = task_to_dict(t)
        shared = json.dumps({k: v for k, v in d.items() if k not in PARTITION_FIELDS}, sort_keys=True)
        index = tables.setdefault(shared, len(tables))
        if d["location"] == f"{t.table_location.rstrip('/')}/{t.partition}":
            d["location"] = None
        rows.append([index] + [d[k] for k in PARTITION_FIELDS])
    return {
        "version": __version__,
        "run": run,
        "batch": batch,
        "dry_run": dry_run,
        "tables": [json.loads(k) for k in tables],
        "partitions": rows,
        "maintain": list(maintain),
    }


def batch_tasks(payload: dict[str, Any]) -> list[PartitionTask]:
    out = []
    for row in payload["partitions"]:
        d = {**payload["tables"][row[0]], **dict(zip(PARTITION_FIELDS, row[1:]))}
        if d["location"] is None:
            d["location"] = f"{d['table_location'].rstrip('/')}/{d['partition']}"
        out.append(task_from_dict(d))
    return out
