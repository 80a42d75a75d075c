"""Hive tables described through Thrift, for the tests and sweeps that make their tables without
Spark's Hive catalog (test_hive_metastores and reliability.py on Hive 4, which no longer serves
the calls Spark's built-in Hive 2.3 client sends; test_kerberos_job: the test process's Spark has
no Kerberos login)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from hmsclient.genthrift.hive_metastore import ttypes

FORMATS = {
    "ORC": (
        "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat",
        "org.apache.hadoop.hive.ql.io.orc.OrcOutputFormat",
        "org.apache.hadoop.hive.ql.io.orc.OrcSerde",
    ),
    "PARQUET": (
        "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
        "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
        "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
    ),
}
COLUMNS = [("event_id", "bigint"), ("user_id", "string"), ("amount", "double")]


def storage_descriptor(at: str, storage: str) -> ttypes.StorageDescriptor:
    """A table's or partition's storage at ``at``: COLUMNS in ``storage`` (ORC, PARQUET)."""
    input_format, output_format, serde = FORMATS[storage]
    return ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema(n, t, "") for n, t in COLUMNS],
        location=at,
        inputFormat=input_format,
        outputFormat=output_format,
        compressed=False,
        numBuckets=-1,
        bucketCols=[],
        sortCols=[],
        parameters={},
        serdeInfo=ttypes.SerDeInfo(serializationLib=serde, parameters={"serialization.format": "1"}),
    )


def write_rows(spark, at: str, storage: str, seed: int, rows: int, files: int) -> None:
    """``rows`` rows of COLUMNS (event ids from ``seed`` * 1,000,000) in ``files`` files at ``at``."""
    (
        spark.range(rows)
        .selectExpr(f"id + {seed * 1_000_000} AS event_id", "concat('user-', id % 97) AS user_id", "id * 1.5 AS amount")
        .repartition(files)
        .write.mode("overwrite")
        .format(storage.lower())
        .save(at)
    )


def make_table(
    connect: Callable[[], AbstractContextManager],
    warehouse: str,
    spark,
    db: str,
    table: str,
    storage: str,
    dates: list[str] | None,
    files: int = 4,
    rows: int = 200,
    seed: int = 0,
) -> None:
    """An external table at ``<warehouse>/<db>.db/<table>`` made through Thrift (``connect()``:
    a Metastore client's context), each partition's ``files`` files written by Spark (``dates``
    None: a table without partitions; ``seed``: tables of other seeds hold other event ids)."""
    root = f"{warehouse}/{db}.db"
    location = f"{root}/{table}"
    with connect() as c:
        try:
            c.create_database(ttypes.Database(name=db, locationUri=root, parameters={}))
        except ttypes.AlreadyExistsException:
            pass
        if dates is None:
            write_rows(spark, location, storage, seed * 1000, rows, files)
        c.create_table(
            ttypes.Table(
                tableName=table,
                dbName=db,
                owner="tests",
                sd=storage_descriptor(location, storage),
                # external.table.purge: a DROP PARTITION deletes the partition's folder, as on a managed
                # table (Hive 4 keeps an external table's files otherwise; MSCK REPAIR would re-add it).
                parameters={"EXTERNAL": "TRUE", "external.table.purge": "TRUE"},
                tableType="EXTERNAL_TABLE",
                partitionKeys=[] if dates is None else [ttypes.FieldSchema("dt", "string", "")],
            )
        )
        for i, dt in enumerate(dates or []):
            write_rows(spark, f"{location}/dt={dt}", storage, seed * 1000 + i, rows, files)
        if dates:
            c.add_partitions(
                [
                    ttypes.Partition(
                        values=[dt],
                        dbName=db,
                        tableName=table,
                        parameters={},
                        sd=storage_descriptor(f"{location}/dt={dt}", storage),
                    )
                    for dt in dates
                ]
            )
