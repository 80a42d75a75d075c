"""The tables as Airflow assets, and the events a run emits for what it compacted.

One asset per configured table: ``hive://<host>:<port>/<db>.<table>``, named so too, where the config's
``dag: asset_namespace`` names the Metastore (OpenLineage's naming of a Hive table, so lineage tools
join it with other jobs' datasets; two instances on two Metastores do not share assets), else
``hive://<db>/<table>`` (named ``<db>.<table>``). After a run
merged partitions of a table, its event carries each merged partition's name ("dt=2026-09-10")
as a partition key, so a downstream DAG with a ``PartitionedAssetTimetable`` runs per partition,
or per date through a mapper (``dags/hive_compaction_downstream_example.py``), and the figures
before and after in its extra. Airflow 3.3 gives every partition key of one task's outlet the same
extra: it holds the table's totals and, per partition (up to ``MAX_EVENT_PARTITIONS``), the
partition's own.

Tables matched by a pattern of the config get their events through one asset alias per pattern entry
(``<dag_id>:<entry>``), from one task whatever their number: Airflow 3.3's alias events carry
no partition keys, so those events list the merged partitions in their extra (``merged_partitions``)
instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Per-partition figures an event's extra carries at most (every partition's event carries it).
MAX_EVENT_PARTITIONS = 100
# Airflow's limit on a partition key (its ID_LEN).
MAX_PARTITION_KEY = 250
FIGURES = ("files_before", "files_after", "bytes_before", "bytes_after")


@dataclass(frozen=True)
class AliasEvent:
    """One pattern-matched table's event, added through its entry's alias."""

    entry: str
    table: str
    extra: dict


def alias_name(entry: str, dag_id: str = "hive_compaction") -> str:
    """The asset alias of a pattern entry of ``tables:`` in the DAG ``dag_id``."""
    return f"{dag_id}:{entry}"


def alias_events(report: dict) -> list[AliasEvent]:
    """The events of the tables a pattern matched (``report["matched_by"]``) that had partitions merged."""
    matched_by = report.get("matched_by") or {}
    return [
        AliasEvent(matched_by[table], table, {**e["extra"], "merged_partitions": e["partition_keys"]})
        for table, e in events(report).items()
        if table in matched_by
    ]


def table_asset(name: str, namespace: str | None = None):
    """The asset of table ``db.table``; ``namespace``: ``hive://<metastore host>:<port>``."""
    from airflow.sdk import Asset

    if namespace:
        return Asset(name=f"{namespace}/{name}", uri=f"{namespace}/{name}")
    return Asset(name=name, uri=f"hive://{name.replace('.', '/')}")


def events(report: dict) -> dict[str, dict]:
    """Per table that had partitions merged: ``{"partition_keys": the merged partitions' names,
    "extra": {the table, the run, its figures before and after, and per partition (up to
    MAX_EVENT_PARTITIONS) files, bytes and rows}}``. Nothing for a dry run. A non-partitioned
    table has no partition key of its own (Airflow then gives its event the run's key)."""
    if report.get("dry_run"):
        return {}
    out: dict[str, dict] = {}
    for r in sorted(report["partitions"], key=lambda r: (r["table"], r["partition"])):
        if r["status"] != "merged":
            continue
        e = out.setdefault(
            r["table"],
            {
                "partition_keys": [],
                "extra": {
                    "table": r["table"],
                    "run": report["run"],
                    "partitions_merged": 0,
                    "rows_merged": 0,
                    **{k: 0 for k in FIGURES},
                    "partitions": {},
                },
            },
        )
        x = e["extra"]
        x["partitions_merged"] += 1
        x["rows_merged"] += r.get("rows_merged") or 0
        for k in FIGURES:
            x[k] += r[k]
        if r["partition"]:
            if len(r["partition"]) <= MAX_PARTITION_KEY:
                e["partition_keys"].append(r["partition"])
            else:
                log.warning(
                    "%s %s...: the partition name is longer than an Airflow partition key (%d "
                    "characters): its event has no key",
                    r["table"],
                    r["partition"][:80],
                    MAX_PARTITION_KEY,
                )
        if len(x["partitions"]) < MAX_EVENT_PARTITIONS:
            x["partitions"][r["partition"]] = {**{k: r[k] for k in FIGURES}, "rows": r.get("rows")}
    for e in out.values():
        e["extra"]["partitions_not_detailed"] = e["extra"]["partitions_merged"] - len(e["extra"]["partitions"])
    return out
