"""A decided commit of one partition for tests that run the commit code in their own process:
its work area, the staged outputs written, and the journal's record."""

from __future__ import annotations

from pathlib import Path

from hive_compaction.commit.record import CommitRecord, StagedOutput
from hive_compaction.commit.work_area import WorkArea
from hive_compaction.storage.listing import RecordedFile
from hive_compaction.storage.paths import partition_id


def decided_commit(
    tmp_path: Path,
    table: str,
    partition: str,
    run: str,
    folder: Path,
    inputs: list[RecordedFile],
    outputs: dict[str, str],
) -> tuple[WorkArea, CommitRecord, Path]:
    """(work area, record, staged folder) of a commit of ``folder``'s ``inputs`` (identities)
    into ``outputs`` (name -> text, written into the staging folder)."""
    pid = partition_id(table, partition)
    area = WorkArea(f"file://{tmp_path}/.hive_compaction/{folder.parent.name}")
    staged = Path(area.staging(run, pid)[len("file://") :]) / "attempt-1"
    staged.mkdir(parents=True)
    for name, text in outputs.items():
        (staged / name).write_text(text)
    record = CommitRecord(
        run=run,
        pid=pid,
        owner=f"{run}/1",
        table=table,
        partition=partition,
        location=f"file://{folder}",
        table_location=f"file://{folder.parent}",
        inputs=inputs,
        outputs=[StagedOutput(f"file://{staged / n}", n, (staged / n).stat().st_size) for n in outputs],
        staging=f"file://{staged}",
    )  # the attempt's own staging folder, as a merge job names it
    return area, record, staged
