"""What the DAG's Python tasks do, kept out of the DAG file so it can be tested on its own."""
from __future__ import annotations

import time
import logging
from dataclasses import asdict

from . import config as config_mod
from . import result_table
from .metastore import Metastore, TableInfo, unescape_path_name
from .paths import run_tag
from .batch import batch_payload, encode_batch
from .planning import (Skipped, batch_label, pack_batches, plan_table, priority, split_oversized,
                       table_refusal, table_work_dir)
from .report import distribution, note, render, render_distribution, summarize
from .results import PartitionResult, Status, decode_results, statistics_update
from .run_params import RunSelection, partition_date

log = logging.getLogger(__name__)


def partitions_in_dates(hms: Metastore, table: TableInfo, tc: config_mod.TableConfig,
                        dates: tuple | None, skipped: list[Skipped]):
    """The table's partitions (of the date range, when there is one), fetched in batches.

    Dates are matched against partition names client-side, so no user input ever becomes part
    of a Metastore filter expression."""
    if dates is None or not table.partition_keys:
        return hms.partitions(table, filter_expr=tc.policy.partition_filter)
    if tc.policy.date_column not in [k for k, _ in table.partition_keys]:
        skipped.append(Skipped(tc.name, "", f"has no partition column {tc.policy.date_column!r} to select "
                                            "dates by (set date_column for it in the config)"))
        return []
    first, last = dates
    if tc.policy.partition_filter:
        return [p for p in hms.partitions(table, filter_expr=tc.policy.partition_filter)
                if _in_range(dict(zip([k for k, _ in table.partition_keys], p.values)), tc, first, last)]
    names = [n for n in hms.partition_names(table) if _in_range(name_values(n), tc, first, last)]
    return hms.partitions(table, names=names) if names else []


def _in_range(values: dict[str, str], tc: config_mod.TableConfig, first, last) -> bool:
    d = partition_date(values, tc.policy.date_column, tc.policy.date_format)
    return d is not None and first <= d <= last


def name_values(name: str) -> dict[str, str]:
    """``dt=2024-01-01/hr=%2F`` -> {"dt": "2024-01-01", "hr": "/"}."""
    out = {}
    for part in name.split("/"):
        key, _, value = part.partition("=")
        out[unescape_path_name(key)] = unescape_path_name(value)
    return out


def plan(settings: config_mod.Settings, hms: Metastore, run_id: str, selection: RunSelection,
         max_map_length: int = 1024, now: float | None = None) -> dict:
    """Partitions from the Metastore, packed into Spark jobs. Returns the mapped tasks' kwargs
    (``spark_args``) and the plan the refresh task reads (``plan``). Touches no table storage:
    listing, recovery of interrupted commits and purges are the Spark jobs' work."""
    run, dry_run = run_tag(run_id), selection.dry_run
    tasks, skipped, areas = [], [], {}
    for tc in selection.tables:
        table = hms.table(tc.database, tc.table)
        dates = selection.dates.get(tc.name)
        partitions = partitions_in_dates(hms, table, tc, dates, skipped)
        t, s = plan_table(table, tc.policy, partitions, list_all=dates is not None, now=now)
        log.info("%s: %d partition(s) to list (%d by statistics, %d selected by date, %d audited), %d skipped",
                 tc.name, len(t), *(sum(1 for x in t if x.reason == r) for r in ("statistics", "selected", "audit")),
                 len(s))
        tasks += t
        skipped += s
        if not table_refusal(table):
            areas[tc.name] = {"table": tc.name, "table_location": table.location,
                              "work_dir": table_work_dir(table, tc.policy),
                              "trash_retention_days": tc.policy.trash_retention_days}
    limit = max(1, min(settings.fan_out.max_spark_jobs, max_map_length))
    # Statistics order the work: when the caps defer some, the likeliest small files go first.
    tasks.sort(key=priority)
    capacity = limit * settings.fan_out.max_partitions_per_job
    batches, deferred = pack_batches(tasks[:capacity], settings.fan_out, max_map_length)
    deferred += tasks[capacity:]
    batches = split_oversized(batches, lambda b: encode_batch(batch_payload(run, 0, dry_run, b)))
    for overflow in batches[limit:]:  # splitting for the command line made too many: next run
        deferred += overflow
    batches = batches[:limit]
    if batches:
        result_table.ensure(hms, settings.results_table)
        pruned = result_table.prune(hms, settings.results_table, time.time() if now is None else now)
        if pruned:
            log.info("dropped %d batch record(s) older than %d days from %s", pruned, result_table.KEEP_DAYS,
                     settings.results_table)
    # Each table's work area is looked after (old journals, expired runs) by one job: the first
    # that lists its partitions, else the first job.
    owner = {}
    for i, batch in reversed(list(enumerate(batches))):
        owner.update({t.table_name: i for t in batch})
    spark_args, described = [], []
    for i, batch in enumerate(batches):
        maintain = [a for name, a in areas.items() if owner.get(name, 0) == i]
        payload = batch_payload(run, i, dry_run, batch, maintain)
        payload["results_table"] = settings.results_table
        payload["metastore_uris"] = hms.uris  # for a Spark without hive-site.xml
        label = batch_label(batch)
        spark_args.append({"application_args": ["--batch", encode_batch(payload)],
                           "name": f"hive-compaction {label}"[:200]})
        described.append({"batch": i, "label": label,
                          "partitions": [[t.table_name, t.partition] for t in batch]})
    log.info("planned %d partition(s) in %d Spark job(s); %d skipped, %d deferred; %d Metastore calls",
             len(tasks) - len(deferred), len(batches), len(skipped), len(deferred), hms.calls)
    return {
        "spark_args": spark_args,
        "plan": {"run": run, "dry_run": dry_run, "batches": described, "results_table": settings.results_table,
                 "dates": {k: [str(v[0]), str(v[1])] if v else None for k, v in selection.dates.items()},
                 # the sizes the run used (the form may override them), for the report's buckets
                 "policies": {tc.name: {"small_file_limit": tc.policy.small_file_limit,
                                        "target_file_size": tc.policy.target_file_size} for tc in selection.tables},
                 "skipped": [asdict(s) for s in skipped],
                 "deferred": [{"table": t.table_name, "partition": t.partition} for t in deferred]},
    }


def read_results(hms: Metastore, plan: dict) -> list[PartitionResult]:
    """Every batch's results, as its merge job recorded them in the results table."""
    numbers = [b["batch"] for b in plan["batches"]]
    recorded = result_table.read(hms, plan["results_table"], plan["run"], numbers) if numbers else {}
    results = []
    for b in plan["batches"]:
        if b["batch"] not in recorded:
            raise RuntimeError(f"batch {b['batch']} ({b['label']}) recorded no results in {plan['results_table']}: "
                               "did its merge task really succeed?")
        try:
            results += decode_results(recorded[b["batch"]])
        except ValueError as e:
            raise RuntimeError(f"batch {b['batch']} ({b['label']}): incomplete results: {e}") from e
    return results


def refresh(settings: config_mod.Settings, hms: Metastore, plan: dict, now: float | None = None) -> dict:
    """Write the disk's statistics to every partition the merge jobs listed (merged or not);
    return the report."""
    now = time.time() if now is None else now
    results = read_results(hms, plan)
    if plan.get("dry_run"):
        log.info("dry run: no statistics written")
    else:
        by_table: dict[str, list[PartitionResult]] = {}
        for r in results:
            if r.listed and r.status is not Status.FAILED:
                by_table.setdefault(r.table, []).append(r)
        for name, rs in by_table.items():
            db, tbl = name.split(".", 1)
            table = hms.table(db, tbl)
            current = {p.name: p for p in hms.partitions(table, names=[r.partition for r in rs])}
            updates = {r.partition: u for r in rs
                       if r.partition in current and (u := statistics_update(r, current[r.partition].parameters, now))}
            written = hms.update_statistics(table, updates)
            stale = sum(1 for r in rs if r.stale_statistics)
            log.info("%s: statistics refreshed for %d partition(s) (%d had statistics that disagreed with the disk)",
                     name, written, stale)
    dicts = [r.to_dict() for r in results]
    summary = summarize(dicts, plan["skipped"], plan["deferred"])
    tables = distribution(dicts, plan["skipped"], plan["deferred"], plan.get("policies") or {})
    line = note(dicts, summary, tables, plan.get("dry_run", False))
    text = render(dicts, plan["skipped"], plan["deferred"])
    log.info("run report\n%s\n\nfile sizes per table\n%s\n\nrun note: %s", text, render_distribution(tables), line)
    return {"summary": summary, "note": line, "tables": tables, "partitions": dicts,
            "skipped": plan["skipped"], "deferred": plan["deferred"], "dry_run": plan.get("dry_run", False),
            "dates": plan.get("dates", {}), "run": plan["run"]}


def compacted_tables(report: dict) -> dict[str, dict]:
    """Per table that had partitions merged: the asset event's extra (partitions, dates, figures)."""
    if report.get("dry_run"):
        return {}
    out: dict[str, dict] = {}
    for r in report["partitions"]:
        if r["status"] != "merged":
            continue
        e = out.setdefault(r["table"], {"partitions": [], "files_before": 0, "files_after": 0})
        e["partitions"].append(r["partition"])
        e["files_before"] += r["files_before"]
        e["files_after"] += r["files_after"]
    for table, e in out.items():
        e["dates"] = (report.get("dates") or {}).get(table)
    return out
