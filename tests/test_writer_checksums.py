"""The rewrite's checksums taken by its write tasks (merge/writer_checksums.py) are the ones the
scans take (merge/checksum.py): of the rows read from the inputs, and of what the written files
hold, file by file, for ORC and Parquet and every kind of value the checksum tells apart."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hive_compaction.merge import writer_checksums
from hive_compaction.merge.checksum import content, content_metrics
from test_row_hash import SCHEMA, values


def scan(spark, fmt: str, paths: list[str]) -> tuple[int, int, int]:
    return content(spark.read.format(fmt).schema(SCHEMA).load(paths).agg(*content_metrics(SCHEMA)).first())


def files(folder) -> list[str]:
    return sorted(f"file://{f}" for f in folder.iterdir() if f.name.startswith("part-"))


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(values, min_size=1, max_size=12))
def test_the_write_tasks_take_the_checksums_the_scans_take(spark, tmp_path, fmt, rows):
    run = tmp_path / uuid.uuid4().hex
    spark.createDataFrame([tuple(r) for r in rows], SCHEMA).repartition(3).write.format(fmt).save(f"file://{run}/in")
    inputs = spark.read.format(fmt).schema(SCHEMA).load(files(run / "in"))
    by_file = writer_checksums.write(
        spark, inputs.coalesce(2), fmt, {"compression": "snappy"}, f"file://{run}/out", inputs, SCHEMA
    )
    assert by_file is not None, "the write tasks took no checksums"
    written = files(run / "out")
    assert sorted(by_file) == sorted(p.rsplit("/", 1)[1] for p in written)  # one sum per file left
    total = tuple(map(sum, zip(*by_file.values())))
    assert total == scan(spark, fmt, files(run / "in")) == scan(spark, fmt, written)
    assert total[0] == len(rows)
    for path in written:  # and file by file
        assert by_file[path.rsplit("/", 1)[1]] == scan(spark, fmt, [path])


def test_a_format_without_the_wrapped_writer_is_written_plainly(spark, tmp_path):
    df = spark.createDataFrame([(1, "a")], "id BIGINT, s STRING")
    assert writer_checksums.write(spark, df, "json", {}, f"file://{tmp_path}/out", df, df.schema) is None
    assert spark.read.json(f"file://{tmp_path}/out").count() == 1


def test_every_java_file_of_the_folder_is_compiled():
    """writer_checksums.SOURCES names the classes (a zipped package cannot be listed): all of them."""
    folder = Path(writer_checksums.__file__).parent / "jvm"
    assert {f.stem for f in folder.glob("*.java")} == set(writer_checksums.SOURCES)
