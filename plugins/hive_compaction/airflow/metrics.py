"""A run's figures as Airflow metrics: sent through Airflow's own ``[metrics]`` backend (StatsD,
OpenTelemetry or Datadog, whichever the deployment configured; nothing where it configured none).

Named as Airflow names its own (``dagrun.duration.success.<dag_id>``): the figure first, the ids
last, under Airflow's ``statsd_prefix``; backends with tags also get ``dag_id`` and ``table``.

- ``hive_compaction.<figure>.<dag_id>``: the run's totals;
- ``hive_compaction.table.<figure>.<dag_id>.<db>.<table>``: each configured table's.

The figures (docs/operations.md lists them): counters of partitions ``listed``, ``merged``,
``skipped``, ``failed``, ``deferred`` and ``recovered``, of ``files_before`` / ``files_after`` and
``bytes_before`` / ``bytes_after`` of the merged partitions and of ``rows_verified`` (the merged
rows whose content checksums matched); the gauge ``backlog_partitions`` (partitions left for later
runs by the fan-out caps); the timers ``merge_seconds`` (the merge jobs' time in the partitions)
and, for the run, ``run_seconds`` (from the plan to the report).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields

log = logging.getLogger(__name__)

PREFIX = "hive_compaction"


@dataclass
class Figures:
    partitions_listed: int = 0
    partitions_merged: int = 0
    partitions_skipped: int = 0
    partitions_failed: int = 0
    partitions_deferred: int = 0
    partitions_recovered: int = 0
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rows_verified: int = 0
    merge_seconds: float = 0.0

    def add_result(self, r: dict) -> None:
        self.partitions_listed += bool(r.get("listed"))
        self.partitions_recovered += bool(r.get("recovered"))
        self.merge_seconds += r.get("seconds") or 0.0
        if r["status"] == "merged":
            self.partitions_merged += 1
            self.files_before += r["files_before"]
            self.files_after += r["files_after"]
            self.bytes_before += r["bytes_before"]
            self.bytes_after += r["bytes_after"]
            self.rows_verified += r.get("rows_merged") or 0
        elif r["status"] == "skipped":
            self.partitions_skipped += 1
        elif r["status"] == "failed":
            self.partitions_failed += 1


def figures(report: dict) -> tuple[Figures, dict[str, Figures]]:
    """The run's totals and each table's, from the refresh task's report (``tasks.refresh``)."""
    # Every table the run selected (its dates: None for a table without partition dates), even one with nothing to do.
    tables: dict[str, Figures] = {name: Figures() for name in report.get("dates") or {}}

    def of(name: str) -> Figures:
        return tables.setdefault(name, Figures())

    for r in report["partitions"]:
        of(r["table"]).add_result(r)
    for s in report["skipped"]:
        of(s["table"]).partitions_skipped += 1
    for d in report["deferred"]:
        of(d["table"]).partitions_deferred += 1
    total = Figures()
    for f in tables.values():
        for name in (x.name for x in fields(Figures)):
            setattr(total, name, getattr(total, name) + getattr(f, name))
    return total, tables


def send(dag_id: str, report: dict, planned_at: float | None = None) -> None:
    """Send the run's figures. A metrics backend that fails never fails the run: it is logged."""
    try:
        from airflow.sdk.observability import stats
    except ImportError:  # an Airflow without the Task SDK's stats module (before 3.1)
        log.info("no metrics sent: this Airflow has no airflow.sdk.observability.stats")
        return
    total, tables = figures(report)
    try:
        _send(stats, f"{PREFIX}.{{}}.{dag_id}", total, {"dag_id": dag_id})
        if planned_at is not None:
            stats.timing(f"{PREFIX}.run_seconds.{dag_id}", (time.time() - planned_at) * 1000, tags={"dag_id": dag_id})
        for name, f in tables.items():
            _send(stats, f"{PREFIX}.table.{{}}.{dag_id}.{name}", f, {"dag_id": dag_id, "table": name})
    except Exception as e:  # noqa: BLE001 - the statistics are written; metrics are a by-product
        log.warning("the run's metrics were not all sent: %s: %s", type(e).__name__, e)
        return
    log.info(
        "metrics sent: %s.<figure>.%s (%d partition(s) merged, %d failed, %d deferred) and %d table(s)",
        PREFIX,
        dag_id,
        total.partitions_merged,
        total.partitions_failed,
        total.partitions_deferred,
        len(tables),
    )


def _send(stats, name: str, f: Figures, tags: dict[str, str]) -> None:
    for field in fields(Figures):
        value = getattr(f, field.name)
        if field.name == "merge_seconds":
            stats.timing(name.format(field.name), value * 1000, tags=tags)
        else:
            stats.incr(name.format(field.name), value, tags=tags)
    stats.gauge(name.format("backlog_partitions"), f.partitions_deferred, tags=tags)
