"""The merge job's side of the results table (``model.result_table``): record a batch's results
through the Metastore client in Spark's JVM (``storage.metastore_client.jvm_client``)."""

from __future__ import annotations

from hive_compaction.model.result_table import TEXT_INPUT, TEXT_OUTPUT, TEXT_SERDE, split_name
from hive_compaction.storage.metastore_client import jvm_client


def publish(spark, name: str, run: str, batch: int | str, params: dict[str, str], uris: str | None = None) -> None:
    """Record a batch's results: (re)create its partition with ``params``. A retried job
    replaces what an earlier attempt recorded. The Metastore is Spark's own (``hive-site.xml``,
    ``spark.hadoop.hive.metastore.uris``), else ``uris`` (the Airflow connection's address)."""
    client = jvm_client(spark, uris, f"record its results in {name}")
    api = spark._jvm.org.apache.hadoop.hive.metastore.api
    db, table = split_name(name)
    try:
        values = [run, str(batch)]
        try:
            client.dropPartition(db, table, values, True)
        except Exception as e:
            if "NoSuchObject" not in str(e):
                raise
        serde = api.SerDeInfo()
        serde.setSerializationLib(TEXT_SERDE)
        serde.setParameters({})
        sd = api.StorageDescriptor()
        sd.setCols([api.FieldSchema("unused", "string", "")])
        sd.setInputFormat(TEXT_INPUT)
        sd.setOutputFormat(TEXT_OUTPUT)
        sd.setSerdeInfo(serde)
        sd.setNumBuckets(-1)
        sd.setBucketCols([])
        sd.setSortCols([])
        sd.setParameters({})
        p = api.Partition()
        p.setDbName(db)
        p.setTableName(table)
        p.setValues(values)
        p.setSd(sd)
        p.setParameters(params)
        client.add_partition(p)
    finally:
        client.close()
