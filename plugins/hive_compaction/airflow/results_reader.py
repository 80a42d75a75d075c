"""The Airflow side of the results table (``model.result_table``): create it, read a run's batches,
drop old ones, through the Metastore hook's Thrift client (``hmsclient`` imported lazily)."""
from __future__ import annotations

import logging

from hive_compaction.model.result_table import (KEEP_DAYS, PARTITION_KEYS, TEXT_INPUT, TEXT_OUTPUT,
                                                TEXT_SERDE, partition_name, split_name)

log = logging.getLogger(__name__)


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
