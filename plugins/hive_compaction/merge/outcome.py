"""What the merge job reports for a partition beyond its status: a failure's result, and the
file size histograms before and after."""

from __future__ import annotations

from hive_compaction.model.batch import PartitionTask
from hive_compaction.model.results import FAILED_REASON_CHARS, PartitionResult, Status, size_histogram
from hive_compaction.storage.listing import DataFile


def failed(task: PartitionTask, e: Exception) -> PartitionResult:
    """The result of a partition whose work stopped at ``e`` (its first line, shortened)."""
    return PartitionResult(
        task.table_name,
        task.partition,
        task.location,
        Status.FAILED,
        reason=f"{type(e).__name__}: {e}".splitlines()[0][:FAILED_REASON_CHARS],
    )


def histogram(task: PartitionTask, files: list[DataFile]) -> list[int]:
    return size_histogram([f.size for f in files], task.small_file_limit, task.target_file_size)
