"""The package's results table in the Hive Metastore: how merge jobs hand their results to Airflow.

One partition ``run=<run>/batch=<n>`` per merge job, holding the job's results as partition
parameters (``results.encode_results``); no data file is ever written to it. The plan task
creates the table if it is missing, each merge job records its batch at the end (through the
Metastore client in Spark's own JVM, so it authenticates as Spark does: Kerberos, delegation
tokens), and the refresh task reads the batches; the plan task drops batches older than ``KEEP_DAYS``.

The Thrift side (Airflow) imports ``hmsclient`` lazily; the Spark side needs only pyspark.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

PARTITION_KEYS = ("run", "batch")
# A plain text table's storage classes: the table never holds data, but the Metastore wants some.
TEXT_INPUT = "org.apache.hadoop.mapred.TextInputFormat"
TEXT_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
TEXT_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"


def split_name(name: str) -> tuple[str, str]:
    db, _, table = name.partition(".")
    return db, table


def partition_name(run: str, batch: int | str) -> str:
    return f"run={run}/batch={batch}"  # run tags are path-safe (paths.run_tag): nothing to escape


# --- Airflow side (Thrift, hmsclient) -----------------------------------------------------------
def ensure(hms, name: str) -> None:
    """Create the results table (external, no data) unless it exists."""
    from hmsclient.genthrift.hive_metastore import ttypes
    db, table = split_name(name)
    if table in hms._call("get_tables", db, table):
        return
    sd = ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema("unused", "string", "results are kept in partition parameters")],
        inputFormat=TEXT_INPUT, outputFormat=TEXT_OUTPUT,
        compressed=False, numBuckets=-1, bucketCols=[], sortCols=[], parameters={},
        serdeInfo=ttypes.SerDeInfo(serializationLib=TEXT_SERDE, parameters={}))
    t = ttypes.Table(tableName=table, dbName=db, owner="hive_compaction", sd=sd,
                     partitionKeys=[ttypes.FieldSchema(k, "string", "") for k in PARTITION_KEYS],
                     parameters={"EXTERNAL": "TRUE", "comment": "hive_compaction: merge results per run and batch"},
                     tableType="EXTERNAL_TABLE")
    try:
        hms._call("create_table", t)
        log.info("created the results table %s", name)
    except ttypes.AlreadyExistsException:
        pass  # another run created it meanwhile


def read(hms, name: str, run: str, batches: list[int]) -> dict[int, dict[str, str]]:
    """Each recorded batch's parameters, by batch number (batches that recorded nothing are absent)."""
    db, table = split_name(name)
    found = hms._call("get_partitions_by_names", db, table, [partition_name(run, b) for b in batches])
    return {int(p.values[1]): dict(p.parameters or {}) for p in found}


def read_run(hms, name: str, run: str) -> dict[int, dict[str, str]]:
    """Every batch a run recorded (for people and tools looking back at a run)."""
    db, table = split_name(name)
    prefix = f"run={run}/"
    names = [n for n in hms._call("get_partition_names", db, table, -1) if n.startswith(prefix)]
    return read(hms, name, run, [int(n[len(prefix) + len("batch="):]) for n in names])


# Recorded runs are kept this long: the history of what each run found and did.
KEEP_DAYS = 30


def prune(hms, name: str, now: float, keep_days: int = KEEP_DAYS) -> int:
    """Drop the batches recorded more than ``keep_days`` ago; returns how many."""
    from hmsclient.genthrift.hive_metastore import ttypes
    db, table = split_name(name)
    cutoff = now - keep_days * 86400
    names = hms._call("get_partition_names", db, table, -1)
    dropped = 0
    for i in range(0, len(names), hms.batch_size):
        for p in hms._call("get_partitions_by_names", db, table, names[i:i + hms.batch_size]):
            if p.createTime and p.createTime < cutoff:
                try:
                    hms._call("drop_partition", db, table, p.values, True)
                    dropped += 1
                except ttypes.NoSuchObjectException:
                    pass
    return dropped


# --- Spark side (py4j, the Metastore client in Spark's JVM) --------------------------------------
def jvm_hive_conf(spark, uris: str | None, purpose: str):
    """The Hive configuration a Metastore client in Spark's JVM uses: Spark's own Metastore
    (``hive-site.xml``, ``spark.hadoop.hive.metastore.uris``), else ``uris`` (the Airflow
    connection's address). Worth keeping: making one costs tens of milliseconds."""
    hive_conf = spark._jvm.org.apache.hadoop.hive.conf.HiveConf
    conf = hive_conf(spark._jsc.hadoopConfiguration(), hive_conf._java_lang_class)
    if not (conf.get("hive.metastore.uris") or "").strip():
        if not uris:
            raise RuntimeError(f"this Spark application knows no Hive Metastore (hive.metastore.uris) to {purpose}")
        conf.set("hive.metastore.uris", uris)
    return conf


def jvm_client(spark, uris: str | None, purpose: str, conf=None):
    """A Metastore client in Spark's JVM (``conf``: one ``jvm_hive_conf`` made, else a new one).
    The caller closes it."""
    conf = conf if conf is not None else jvm_hive_conf(spark, uris, purpose)
    return spark._jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)


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
        except Exception as e:  # noqa: BLE001 - NoSuchObjectException: the usual case
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
