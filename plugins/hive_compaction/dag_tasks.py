"""What the DAG's Python tasks do, kept out of the DAG file so it can be tested on its own."""
from __future__ import annotations

import json
import logging
from dataclasses import asdict

from . import config as config_mod
from .metastore import (NUM_FILES, NUM_ROWS, SPARK_NUM_ROWS, SPARK_TOTAL_SIZE, TOTAL_SIZE, Metastore,
                        PartitionInfo)
from .commit import WorkArea
from .paths import canonical, run_tag
from .planning import (batch_label, encode_batch, pack_batches, plan_table, split_oversized,
                       task_to_dict)
from .report import render, summarize

log = logging.getLogger(__name__)


def metastore_from_connection(conn_id: str) -> Metastore:
    from airflow.sdk import BaseHook
    conn = BaseHook.get_connection(conn_id)
    if not conn.host:
        raise config_mod.ConfigError(f"Airflow connection {conn_id!r} has no host for the Hive Metastore")
    host = conn.host.split("://", 1)[-1]
    return Metastore(host, conn.port or 9083,
                     timeout_seconds=float(conn.extra_dejson.get("timeout_seconds", 60)),
                     batch_size=int(conn.extra_dejson.get("batch_size", 500)))


def selected_tables(settings: config_mod.Settings, names: list[str] | None):
    if not names:
        return list(settings.tables)
    return [settings.table(n) for n in names]


def plan(settings: config_mod.Settings, hms: Metastore, run_id: str, tables: list[str] | None = None,
         dry_run: bool = False, max_map_length: int = 1024) -> dict:
    """Candidates from the Metastore, packed into Spark jobs. Returns the mapped tasks' kwargs
    (``spark_args``) and the plan the refresh task reads (``plan``)."""
    run = run_tag(run_id)
    tasks, skipped = [], []
    for tc in selected_tables(settings, tables):
        table = hms.table(tc.database, tc.table)
        partitions = hms.partitions(table, filter_expr=tc.policy.partition_filter)
        t, s = plan_table(table, tc.policy, partitions)
        log.info("%s: %d candidate partition(s), %d skipped", tc.name, len(t), len(s))
        tasks += t
        skipped += s
    batches, deferred = pack_batches(tasks, settings.fan_out, max_map_length)
    batches = split_oversized(batches, lambda b: encode_batch({"tasks": [task_to_dict(t) for t in b]}))
    batches = batches[:max_map_length]
    spark_args, described = [], []
    for i, batch in enumerate(batches):
        payload = {"run": run, "batch": i, "dry_run": dry_run, "tasks": [task_to_dict(t) for t in batch]}
        label = batch_label(batch)
        spark_args.append({"application_args": ["--batch", encode_batch(payload)],
                           "name": f"hive-compaction {label}"[:200]})
        described.append({"batch": i, "label": label,
                          "work_dirs": sorted({t.work_dir for t in batch}),
                          "partitions": [[t.table_name, t.partition] for t in batch]})
    log.info("planned %d partition(s) in %d Spark job(s); %d skipped, %d deferred; %d Metastore calls",
             len(tasks), len(batches), len(skipped), len(deferred), hms.calls)
    return {
        "spark_args": spark_args,
        "plan": {"run": run, "dry_run": dry_run, "batches": described,
                 "skipped": [asdict(s) for s in skipped],
                 "deferred": [{"table": t.table_name, "partition": t.partition} for t in deferred]},
    }


def read_results(plan: dict, read_text) -> list[dict]:
    """Every batch's results, from each table work area it touched. ``read_text(uri) -> str``."""
    results = []
    for b in plan["batches"]:
        for work_dir in b["work_dirs"]:
            uri = canonical(WorkArea(work_dir).results(plan["run"], str(b["batch"])))
            try:
                results += json.loads(read_text(uri))
            except FileNotFoundError as e:
                raise RuntimeError(f"batch {b['batch']} ({b['label']}) left no results at {uri}: "
                                   "did its merge task really succeed?") from e
    return results


def statistics_update(result: dict, before: PartitionInfo) -> dict[str, str]:
    """Hive's (and, where present, Spark's) statistics keys that differ from what is on disk."""
    new = {NUM_FILES: str(result["files_after"]), TOTAL_SIZE: str(result["bytes_after"])}
    if result.get("rows") is not None:
        new[NUM_ROWS] = str(result["rows"])
        if SPARK_NUM_ROWS in before.parameters:
            new[SPARK_NUM_ROWS] = str(result["rows"])
    if SPARK_TOTAL_SIZE in before.parameters:
        new[SPARK_TOTAL_SIZE] = str(result["bytes_after"])
    return {k: v for k, v in new.items() if before.parameters.get(k) != v}


def refresh(settings: config_mod.Settings, hms: Metastore, plan: dict, read_text) -> dict:
    """Write correct statistics for every partition the merge jobs looked at; return the report."""
    results = read_results(plan, read_text)
    if plan.get("dry_run"):
        log.info("dry run: no statistics written")
    else:
        by_table: dict[str, list[dict]] = {}
        for r in results:
            if r["status"] in ("merged", "nothing_to_do"):
                by_table.setdefault(r["table"], []).append(r)
        for name, rs in by_table.items():
            db, tbl = name.split(".", 1)
            table = hms.table(db, tbl)
            current = {p.name: p for p in hms.partitions(table, names=[r["partition"] for r in rs])}
            updates = {r["partition"]: u for r in rs
                       if r["partition"] in current and (u := statistics_update(r, current[r["partition"]]))}
            written = hms.update_statistics(table, updates)
            log.info("%s: statistics refreshed for %d partition(s)", name, written)
    text = render(results, plan["skipped"], plan["deferred"])
    log.info("run report\n%s", text)
    return {"summary": summarize(results, plan["skipped"], plan["deferred"]), "partitions": results,
            "skipped": plan["skipped"], "deferred": plan["deferred"], "dry_run": plan.get("dry_run", False)}
