"""The Airflow side of the results table (``model.result_table``): create it, read a run's batches,
drop old ones, through the Metastore hook's public methods."""

from __future__ import annotations

import logging

from hive_compaction.airflow.metastore_hook import Metastore
from hive_compaction.model.result_table import (
    KEEP_DAYS,
    PARTITION_KEYS,
    TEXT_INPUT,
    TEXT_OUTPUT,
    TEXT_SERDE,
    partition_name,
    split_name,
)

log = logging.getLogger(__name__)


def ensure(hms: Metastore, name: str) -> None:
    """Create the results table (external, no data) unless it exists."""
    db, table = split_name(name)
    if hms.table_exists(db, table):
        return
    if hms.create_external_table(
        db,
        table,
        ["unused"],
        PARTITION_KEYS,
        (TEXT_INPUT, TEXT_OUTPUT, TEXT_SERDE),
        {"comment": "hive_compaction: merge results per run and batch"},
    ):
        log.info("created the results table %s", name)


def read(hms: Metastore, name: str, run: str, batches: list[int]) -> dict[int, dict[str, str]]:
    """Each recorded batch's parameters, by batch number (batches that recorded nothing are absent)."""
    db, table = split_name(name)
    found = hms.partition_records(db, table, [partition_name(run, b) for b in batches])
    return {int(p.values[1]): p.parameters for p in found}


def read_run(hms: Metastore, name: str, run: str) -> dict[int, dict[str, str]]:
    """Every batch a run recorded (for people and tools looking back at a run)."""
    db, table = split_name(name)
    prefix = f"run={run}/"
    names = [n for n in hms.partition_names_of(db, table) if n.startswith(prefix)]
    return read(hms, name, run, [int(n[len(prefix) + len("batch=") :]) for n in names])


def prune(hms: Metastore, name: str, now: float, keep_days: int = KEEP_DAYS) -> int:
    """Drop the batches recorded more than ``keep_days`` ago; returns how many."""
    db, table = split_name(name)
    cutoff = now - keep_days * 86400
    old = [
        p
        for p in hms.partition_records(db, table, hms.partition_names_of(db, table))
        if p.create_time and p.create_time < cutoff
    ]
    return sum(hms.drop_partition(db, table, p.values) for p in old)
