"""The rewrite's schema, converted from one file's footer in the driver (rewrite.footer_schema),
is the schema a Spark read of that file infers, for ORC and Parquet and every kind of column;
without the conversion (a format it does not know) Spark reads it."""

from __future__ import annotations

import logging

import pytest

from hive_compaction.merge.job_spark import JobSpark
from hive_compaction.merge.rewrite import footer_schema

COLUMNS = """cast(id as bigint) a, cast(id as string) `b c`, cast(id as tinyint) ti, cast(id as smallint) si,
  cast(id as int) i, cast(id as float) f, cast(id as double) d, cast(id as decimal(20, 3)) dec,
  cast(id as decimal(5, 1)) dec_small, id % 2 = 0 flag, binary('ab') bin, date'2020-01-01' dt,
  timestamp'2020-01-01 00:00:00' ts, timestamp_ntz'2020-01-01 00:00:00' ts_ntz,
  cast('x' as varchar(5)) vc, cast('y' as char(3)) ch, map('k', id) m,
  map('k', named_struct('t', timestamp'2020-01-01 00:00:00', 'v', cast(id as double))) m_nested,
  named_struct('x', id, 'y', array(id), 'z', named_struct('q', cast(null as string))) s,
  array(named_struct('e', id)) arr, if(id = 1, null, id) maybe"""


def one_file(folder) -> str:
    (f,) = [p for p in folder.iterdir() if p.name.startswith("part-")]
    return f"file://{f}"


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_the_footers_schema_is_the_one_spark_reads(spark, tmp_path, fmt, caplog):
    spark.sql(f"select {COLUMNS} from range(3)").coalesce(1).write.format(fmt).save(f"file://{tmp_path}/t")
    path = one_file(tmp_path / "t")
    with caplog.at_level(logging.WARNING, logger="hive_compaction.merge.rewrite"):
        got = footer_schema(JobSpark(spark.sparkContext), fmt, path)
    assert not caplog.records, "the footer's conversion failed and Spark read the schema instead"
    assert got == spark.read.format(fmt).load(path).schema
    assert got.fieldNames()[:2] == ["a", "b c"] and all(f.nullable for f in got.fields)


def test_a_hive_written_orc_footer_keeps_its_char_and_varchar_as_spark_reads_them(spark, tmp_path, caplog):
    """Hive's ORC writer names columns _col0.. and records CHAR and VARCHAR types, which Spark reads
    as strings marked with their declared type."""
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    orc = jvm.org.apache.orc
    schema = orc.TypeDescription.fromString(
        "struct<_col0:varchar(5),_col1:char(3),_col2:decimal(10,2),_col3:timestamp,_col4:map<string,array<int>>>"
    )
    path = f"file://{tmp_path}/000000_0"
    orc.OrcFile.createWriter(
        jvm.org.apache.hadoop.fs.Path(path), orc.OrcFile.writerOptions(conf).setSchema(schema)
    ).close()
    with caplog.at_level(logging.WARNING, logger="hive_compaction.merge.rewrite"):
        got = footer_schema(JobSpark(spark.sparkContext), "orc", path)
    assert not caplog.records
    assert got == spark.read.orc(path).schema
    assert got["_col0"].metadata == {"__CHAR_VARCHAR_TYPE_STRING": "varchar(5)"}


def test_a_format_without_a_footer_conversion_is_read_by_spark(spark, tmp_path):
    spark.sql("select id, cast(id as string) s from range(2)").coalesce(1).write.json(f"file://{tmp_path}/t")
    path = one_file(tmp_path / "t")
    assert footer_schema(JobSpark(spark.sparkContext), "json", path) == spark.read.json(path).schema
