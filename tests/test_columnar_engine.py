"""The columnar engine (the engine's jar, ``merge.columnar``) merging real ORC and Parquet files in
Spark tasks, read afterwards by readers this project did not write: Spark's, pyarrow's (Arrow's
C++ readers) and, for the physical layout, the files' own footers.

The tables hold what Hive-centric shops and Spark's defaults write: decimals of precision below
and above 18, INT96 and micros timestamps, dates, chars, binary, arrays, maps, structs and nulls
in each; Parquet in Spark's default layout and in the legacy one (writeLegacyFormat, as Hive's
writer lays out decimals and lists). A merged partition must read the same rows, every value,
through each reader, and keep each column's physical type."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow.orc as po
import pyarrow.parquet as pq
import pytest

from copy_checks import footer_info
from harness import data_files
from hive_compaction.merge import columnar
from hive_compaction.merge.checksum import content, content_metrics
from hive_compaction.merge.executor_merges import ColumnarResult, MergeRequest
from hive_compaction.merge.grouping import Engine, Group
from hive_compaction.model.batch import PartitionTask

pytestmark = pytest.mark.integration

COLUMNS = (
    "id",
    "cast(id % 7 as int) as small",
    "if(id % 5 = 0, null, concat('s', id)) as text",
    "cast(id as decimal(10,2)) / 3 as amount",  # precision 14: INT64, or fixed-length in the legacy layout
    "cast(id as decimal(30,5)) * 1234567.1 as big_amount",  # precision 38: fixed-length
    "timestamp_seconds(id * 3601) as ts",
    "date_add(date'2001-01-01', cast(id as int)) as day",
    "if(id % 11 = 0, null, array(id, null, id + 1)) as numbers",
    "map('k', id, 'z', null) as attributes",
    "named_struct('a', id, 'b', if(id % 3 = 0, null, 'x')) as pair",
    "cast(id as double) / 7 as ratio",
    "if(id % 13 = 0, cast('-0.0' as float), cast(id as float)) as score",
    "id % 2 = 0 as even",
    "cast(cast(id % 10 as string) as binary) as raw",
)
# (storage format, Spark settings the files are written with)
LAYOUTS = {
    "orc": ("orc", {}),
    "parquet": ("parquet", {}),
    "parquet-hive-layout": (
        "parquet",
        {"spark.sql.parquet.writeLegacyFormat": "true", "spark.sql.parquet.outputTimestampType": "INT96"},
    ),
}


def write_partition(spark, folder: Path, fmt: str, settings: dict[str, str], files: int = 6, rows: int = 3000) -> None:
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        spark.range(rows).selectExpr(*COLUMNS).repartition(files).write.format(fmt).save(f"file://{folder}")
    finally:
        for key in settings:
            spark.conf.unset(key)
    for junk in folder.glob("_SUCCESS*"):
        junk.unlink()
    for junk in folder.glob("._SUCCESS*"):
        junk.unlink()


def task_for(tmp_path: Path, folder: Path, fmt: str) -> PartitionTask:
    return PartitionTask(
        "db",
        "t",
        "dt=1",
        ("1",),
        f"file://{folder}",
        f"file://{tmp_path}/t",
        fmt,
        f"file://{tmp_path}/.hc",
        target_file_size=1 << 30,
        small_file_limit=1 << 24,
        min_small_files=2,
        merge_mode="rewrite",
    )


def spark_content(spark, fmt: str, folder: Path) -> tuple[int, int, int]:
    df = spark.read.format(fmt).load(f"file://{folder}")
    return content(df.agg(*content_metrics(df.schema)).collect()[0])


def arrow_content(fmt: str, folder: Path) -> tuple[int, str]:
    """(rows, digest of the sorted rows) as Arrow's C++ readers read the folder's files."""
    rows = []
    for f in data_files(folder):
        table = pq.read_table(f) if fmt == "parquet" else po.ORCFile(str(f)).read()
        rows += [repr(tuple(r.values())) for r in table.to_pylist()]
    return len(rows), hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()


def physical(fmt: str, path: Path) -> str:
    """Arrow's reading of the file's schema (its types and the key-value metadata)."""
    return pq.read_schema(path).to_string(show_schema_metadata=True) if fmt == "parquet" else ""


def run_batch(spark, task: PartitionTask):
    from hive_compaction.merge.job_spark import JobSpark
    from hive_compaction.merge.runner import BatchRunner

    (result,) = BatchRunner(JobSpark(spark.sparkContext), "run1", "b0").run_batch([task])
    return result


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_columnar_merge_reads_the_same_through_every_reader_and_keeps_the_physical_layout(
    stack, spark, tmp_path, layout
):
    fmt, settings = LAYOUTS[layout]
    folder = tmp_path / "t" / "dt=1"
    write_partition(spark, folder, fmt, settings)
    inputs = data_files(folder)
    before = spark_content(spark, fmt, folder), arrow_content(fmt, folder)
    layout_before = {physical(fmt, f) for f in inputs}
    footer_before = footer_info(spark, fmt, f"file://{inputs[0]}")

    result = run_batch(spark, task_for(tmp_path, folder, fmt))

    assert result.status == "merged", result.reason
    assert result.mode == "rewrite" and "Spark SQL" not in (result.reason or ""), result.reason
    (output,) = data_files(folder)
    assert output.name.startswith("part-compacted-")
    assert (spark_content(spark, fmt, folder), arrow_content(fmt, folder)) == before
    assert before[0][0] == 3000
    after = footer_info(spark, fmt, f"file://{output}")
    assert after.schema == footer_before.schema and after.compression == footer_before.compression
    assert after.rows == 3000 and len(after.block_rows) == 1  # one stripe / row group, not the inputs' six
    if fmt == "parquet":
        assert {physical(fmt, output)} == layout_before  # as Arrow reads them; the footer's own text above
        assert dict(after.extra) == dict(footer_before.extra)  # Spark's schema and rebase keys read back
    else:
        assert dict(after.extra)["calendar"] == dict(footer_before.extra)["calendar"]
        assert dict(after.extra)["row_index_stride"] == dict(footer_before.extra)["row_index_stride"]


def test_a_group_the_engine_turns_down_is_rewritten_by_spark_sql_and_the_reason_says_why(stack, spark, tmp_path):
    """Parquet files with bloom filters: the engine would not keep them, so it writes nothing and
    Spark SQL rewrites the group; every row is kept and the partition's reason says so."""
    folder = tmp_path / "t" / "dt=1"
    spark.range(3000).selectExpr(*COLUMNS).repartition(6).write.option(
        "parquet.bloom.filter.enabled#id", "true"
    ).parquet(f"file://{folder}")
    for junk in [*folder.glob("_SUCCESS*"), *folder.glob("._SUCCESS*")]:
        junk.unlink()
    assert pq.ParquetFile(data_files(folder)[0]).metadata.row_group(0).column(0).to_dict().get("bloom_filter_offset"), (
        "the inputs have no bloom filter: the test would not test the fallback"
    )
    before = spark_content(spark, "parquet", folder)

    result = run_batch(spark, task_for(tmp_path, folder, "parquet"))

    assert result.status == "merged", result.reason
    assert "rewritten by Spark SQL" in result.reason and "bloom filters" in result.reason, result.reason
    assert len(data_files(folder)) == 1
    assert spark_content(spark, "parquet", folder) == before


def test_a_group_reported_done_without_an_output_fails_its_partition_and_moves_nothing(
    stack, spark, tmp_path, monkeypatch
):
    """Whatever an engine reports, a partition whose group has no staged output is never
    committed: its inputs would go to the trash with nothing holding their rows."""
    folder = tmp_path / "t" / "dt=1"
    write_partition(spark, folder, "orc", {})
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    monkeypatch.setattr(columnar.ColumnarEngine, "_job", lambda self, chunk: [])  # "done", nothing staged

    result = run_batch(spark, task_for(tmp_path, folder, "orc"))

    assert result.status == "failed" and "no staged output" in result.reason, result.reason
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def _work(tmp_path: Path, rows: int):
    from hive_compaction.merge.grouping import FileFooter, Work
    from hive_compaction.model.results import PartitionResult, Status
    from hive_compaction.storage.listing import DataFile

    f = DataFile(f"file://{tmp_path}/a.orc", 10)
    footer = FileFooter(
        rows=rows, block_rows=(rows,), schema="struct<id:bigint>", compression="ZLIB", version="", block_bytes=(10,)
    )
    task = task_for(tmp_path, tmp_path, "orc")
    result = PartitionResult("db.t", "dt=1", task.location, Status.FAILED)
    return Work(task, "pid", None, result, [f], {f.path: footer}, [], "zlib", 0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "written, read_back, footer_rows",
    [((100, 1, 2), (100, 1, 3), 100), ((100, 1, 2), (99, 1, 2), 100), ((99, 1, 2), (99, 1, 2), 100)],
    ids=["checksum", "rows read back", "rows of the footers"],
)
def test_a_columnar_output_is_staged_only_when_its_rows_and_checksums_agree(tmp_path, written, read_back, footer_rows):
    w = _work(tmp_path, footer_rows)
    g = Group(Engine.REWRITE, list(w.files))
    request = MergeRequest("columnar", "orc", [w.files[0].path], f"file://{tmp_path}/staging/out.orc")
    result = ColumnarResult(
        output=request.output,
        size=5,
        input_rows=written[0],
        input_checksum=written[1:],
        output_rows=read_back[0],
        output_checksum=read_back[1:],
    )
    columnar._accept(w, g, request, result)
    assert w.error and w.error.startswith("verification failed") and not g.staged

    fine = _work(tmp_path, footer_rows)
    good = Group(Engine.REWRITE, list(fine.files))
    columnar._accept(
        fine, good, request, ColumnarResult(request.output, 5, 1, footer_rows, (1, 2), footer_rows, (1, 2))
    )
    assert fine.error is None and [o.name for o in good.staged] == ["out.orc"] and good.rows == footer_rows
