"""What the DAG's Python tasks do, kept out of the DAG file so it can be tested on its own."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import date

from hive_compaction.airflow import backlog, config as config_mod, results_reader
from hive_compaction.airflow.metastore_hook import Metastore
from hive_compaction.airflow.metastore_types import TableInfo, unescape_path_name
from hive_compaction.airflow.planning import (
    Skipped,
    batch_label,
    one_task_per_folder,
    pack_batches,
    plan_table,
    priority,
    split_oversized,
    table_refusal,
    table_work_dir,
)
from hive_compaction.airflow.report import distribution, note, reader_gap_note, render, render_distribution, summarize
from hive_compaction.airflow.run_params import RunSelection, partition_date
from hive_compaction.airflow.table_resolution import Resolution
from hive_compaction.model import result_table
from hive_compaction.model.batch import LOCK_LEASE_SECONDS, PartitionTask, batch_payload, encode_batch
from hive_compaction.model.results import (
    NUM_FILES,
    PLANNED_AT,
    TOTAL_SIZE,
    PartitionResult,
    Status,
    decode_results,
    statistics_update,
)
from hive_compaction.storage.capabilities import IN_PLACE
from hive_compaction.storage.paths import run_tag

log = logging.getLogger(__name__)


def partitions_in_dates(
    hms: Metastore, table: TableInfo, tc: config_mod.TableConfig, dates: tuple | None, skipped: list[Skipped]
):
    """The table's partitions (of the date range, when there is one), fetched in batches.

    Dates are matched against partition names client-side, so no user input ever becomes part
    of a Metastore filter expression."""
    if dates is None or not table.partition_keys:
        return hms.partitions(table, filter_expr=tc.policy.partition_filter)
    if tc.policy.date_column not in [k for k, _ in table.partition_keys]:
        skipped.append(
            Skipped(
                tc.name,
                "",
                f"has no partition column {tc.policy.date_column!r} to select "
                "dates by (set date_column for it in the config)",
            )
        )
        return []
    first, last = dates
    if tc.policy.partition_filter:
        return [
            p
            for p in hms.partitions(table, filter_expr=tc.policy.partition_filter)
            if _in_range(dict(zip([k for k, _ in table.partition_keys], p.values)), tc, first, last)
        ]
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


@dataclass
class Candidates:
    """What the Metastore offers a run: the partitions to list (own dates first), those left
    alone, the tables read, their work areas, and the planned partitions the backlog would not
    pick as the Metastore stands (for a dry run's report)."""

    tasks: list[PartitionTask] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    tables: dict[str, TableInfo] = field(default_factory=dict)
    areas: dict[str, dict] = field(default_factory=dict)
    own_date: set[int] = field(default_factory=set)  # id(task) of the run's own dates (else: lookback)
    unpicked: list[tuple[str, str]] = field(default_factory=list)


def plan(
    settings: config_mod.Settings,
    hms: Metastore,
    run_id: str,
    selection: RunSelection,
    max_map_length: int = 1024,
    now: float | None = None,
    resolution: Resolution | None = None,
) -> dict:
    """Partitions from the Metastore, packed into Spark jobs. Returns the mapped tasks' kwargs
    (``spark_args``) and the plan the refresh task reads (``plan``). Touches no table storage:
    listing, recovery of interrupted commits and purges are the Spark jobs' work. Outside a dry
    run it marks the partitions the caps deferred (``results.PLANNED_AT``), so that the backlog
    looks at them again. ``resolution``: the tables the config's patterns matched (table_resolution),
    with their Metastore objects."""
    run, dry_run = run_tag(run_id), selection.dry_run
    now = time.time() if now is None else now
    found = candidates(hms, selection, now, resolution.infos if resolution else None)
    batches, deferred = pack(settings, found, selection, run, max_map_length)
    if batches:
        results_reader.ensure(hms, settings.results_table)
        pruned = results_reader.prune(hms, settings.results_table, now)
        if pruned:
            log.info(
                "dropped %d batch record(s) older than %d days from %s",
                pruned,
                result_table.KEEP_DAYS,
                settings.results_table,
            )
    if not dry_run:
        _mark_planned(hms, {(t.table_name, t.partition) for t in deferred}, now, found.tables)
    spark_args, described = job_arguments(settings, hms, found, batches, run, dry_run)
    log.info(
        "planned %d partition(s) in %d Spark job(s); %d skipped, %d deferred; %d Metastore calls",
        len(found.tasks) - len(deferred),
        len(batches),
        len(found.skipped),
        len(deferred),
        hms.calls,
    )
    if any(t.commit_mode == IN_PLACE for batch in batches for t in batch):
        log.info("%s", reader_gap_note(settings.retries, config_mod.MERGE_RETRY_DELAY_SECONDS, LOCK_LEASE_SECONDS))
    planned = describe(settings, selection, found, described, deferred, run, now)
    if resolution and resolution.entries:
        selected = {tc.name for tc in selection.tables}
        planned["by_pattern"] = resolution.describe()
        planned["matched_by"] = {t: e for t, e in resolution.matched_by.items() if t in selected}
    return {"spark_args": spark_args, "plan": planned}


def candidates(
    hms: Metastore, selection: RunSelection, now: float, known: dict[str, TableInfo] | None = None
) -> Candidates:
    """Each selected table's partitions of the run's dates and of its lookback window, planned
    by the table's policy (one task per folder). ``known``: tables already read (by name)."""
    found = Candidates()
    for tc in selection.tables:
        table = found.tables[tc.name] = (known or {}).get(tc.name) or hms.table(tc.database, tc.table)
        dates, window = selection.dates.get(tc.name), selection.lookback.get(tc.name)
        if window and table.partition_keys:
            # a lookback window comes with the run's dates
            partitions = list(partitions_in_dates(hms, table, tc, (window[0], dates[1]), found.skipped))  # type: ignore[index]
            own = [p for p in partitions if _in_range(_values(table, p), tc, *dates)]  # type: ignore[misc]
            back = [p for p in partitions if not _in_range(_values(table, p), tc, *dates)]  # type: ignore[misc]
        else:
            own, back = list(partitions_in_dates(hms, table, tc, dates, found.skipped)), []
        t, s = plan_table(table, tc.policy, own, list_all=dates is not None, now=now)
        b, s2 = plan_table(table, tc.policy, back, now=now, pick=backlog.pending)
        by_name = {p.name: p for p in own}
        found.unpicked += [
            (x.table_name, x.partition)
            for x in t
            if x.partition in by_name and not backlog.pending(by_name[x.partition], tc.policy)
        ]
        log.info(
            "%s: %d partition(s) to list (%d by statistics, %d selected by date, %d audited, %d from the "
            "backlog of %s), %d skipped",
            tc.name,
            len(t) + len(b),
            *(sum(1 for x in t if x.reason == r) for r in ("statistics", "selected", "audit")),
            len(b),
            f"{window[0]} to {window[1]}" if window else "no lookback",
            len(s) + len(s2),
        )
        found.own_date.update(id(x) for x in t)
        found.tasks += t + b
        found.skipped += s + s2
        if not table_refusal(table, tc.policy.commit_mode):
            found.areas[tc.name] = {
                "table": tc.name,
                "table_location": table.location,
                "work_dir": table_work_dir(table, tc.policy),
                "trash_retention_days": tc.policy.trash_retention_days,
            }
    found.tasks, shared = one_task_per_folder(found.tasks)
    found.skipped += shared
    return found


def pack(
    settings: config_mod.Settings, found: Candidates, selection: RunSelection, run: str, max_map_length: int
) -> tuple[list[list[PartitionTask]], list[PartitionTask]]:
    """(batches, deferred) within the fan-out caps and the command line's size. When the caps
    defer some: the run's own dates go first (the likeliest small files first, by statistics),
    then the backlog, oldest date first."""
    policies = {tc.name: tc.policy for tc in selection.tables}
    limit = max(1, min(settings.fan_out.max_spark_jobs, max_map_length))
    tasks = sorted(
        found.tasks,
        key=lambda x: (
            (0, (), priority(x))
            if id(x) in found.own_date
            else (1, _task_date(found.tables, policies, x) or date.max, priority(x))
        ),
    )
    capacity = limit * settings.fan_out.max_partitions_per_job
    batches, deferred = pack_batches(tasks[:capacity], settings.fan_out, max_map_length)
    deferred += tasks[capacity:]
    batches = split_oversized(batches, lambda b: encode_batch(batch_payload(run, 0, selection.dry_run, b)))
    for overflow in batches[limit:]:  # splitting for the command line made too many: next run
        deferred += overflow
    return batches[:limit], deferred


def job_arguments(
    settings: config_mod.Settings,
    hms: Metastore,
    found: Candidates,
    batches: list[list[PartitionTask]],
    run: str,
    dry_run: bool,
) -> tuple[list[dict], list[dict]]:
    """Each merge task's arguments (its encoded batch, its application name) and its line in
    the plan. Each table's work area is looked after (old journals, expired runs) by one job:
    the first that lists its partitions, else the first job."""
    owner = {}
    for i, batch in reversed(list(enumerate(batches))):
        owner.update({t.table_name: i for t in batch})
    spark_args, described = [], []
    for i, batch in enumerate(batches):
        maintain = [a for name, a in found.areas.items() if owner.get(name, 0) == i]
        payload = batch_payload(run, i, dry_run, batch, maintain)
        payload["results_table"] = settings.results_table
        payload["metastore_uris"] = hms.uris  # for a Spark without hive-site.xml
        label = batch_label(batch)
        spark_args.append(
            {"application_args": ["--batch", encode_batch(payload)], "name": f"hive-compaction {label}"[:200]}
        )
        described.append({"batch": i, "label": label, "partitions": [[t.table_name, t.partition] for t in batch]})
    return spark_args, described


def describe(
    settings: config_mod.Settings,
    selection: RunSelection,
    found: Candidates,
    described: list[dict],
    deferred: list[PartitionTask],
    run: str,
    planned_at: float,
) -> dict:
    """The plan the refresh task and the report read."""
    dry_run = selection.dry_run
    plan = {
        "run": run,
        "dry_run": dry_run,
        "batches": described,
        "results_table": settings.results_table,
        "planned_at": planned_at,
        "dates": {k: [str(v[0]), str(v[1])] if v else None for k, v in selection.dates.items()},
        "lookback": {k: [str(v[0]), str(v[1])] for k, v in selection.lookback.items()},
        # the sizes the run used (the form may override them), for the report's buckets, and what
        # says when a partition left alone is looked at again (revisit_text)
        "policies": {tc.name: _policy_fields(tc.policy) for tc in selection.tables},
        "partitioned": {k: bool(t.partition_keys) for k, t in found.tables.items()},
        "revisit": {"next_key": str(selection.next_key or date.today()), "key_lag_days": selection.key_lag_days},
        "skipped": [{**asdict(s), "again": SKIPPED_AGAIN} for s in found.skipped],
        # for a dry run's report: planned partitions the backlog would not pick as things stand
        "unpicked": [list(u) for u in found.unpicked],
    }
    # Deferred partitions were marked planned (outside a dry run): the backlog picks them.
    unpicked = set(found.unpicked)
    plan["deferred"] = [
        {
            "table": t.table_name,
            "partition": t.partition,
            "again": revisit_text(
                plan, t.table_name, t.partition, not dry_run or (t.table_name, t.partition) not in unpicked
            ),
        }
        for t in deferred
    ]
    return plan


def add_revisits(plan: dict, results: list[dict]) -> list[dict]:
    """Results (the report's dicts) of partitions the run left alone (skipped, failed; in a dry
    run every one it would merge) get ``again``: when the scheduled runs look at them again, as
    the refresh leaves the Metastore (a dry run leaves it as the plan found it)."""
    dry_run, unpicked = plan.get("dry_run"), {tuple(u) for u in plan.get("unpicked", [])}
    for d in results:
        if d["status"] in ("skipped", "failed") or (dry_run and d["status"] == "would_merge"):
            policy = config_mod.TablePolicy(**plan["policies"][d["table"]])
            will_pend = (d["table"], d["partition"]) not in unpicked if dry_run else backlog.pending_after(d, policy)
            d["again"] = revisit_text(plan, d["table"], d["partition"], will_pend)
    return results


def revisit_text(plan: dict, table: str, partition: str, will_pend: bool) -> str:
    """When the scheduled runs look at a partition the run left alone again (backlog.revisit),
    from what the plan recorded."""
    policy = config_mod.TablePolicy(**plan["policies"][table])
    day = partition_date(name_values(partition), policy.date_column, policy.date_format) if partition else None
    return backlog.revisit(
        day,
        policy,
        plan["revisit"]["key_lag_days"],
        date.fromisoformat(plan["revisit"]["next_key"]),
        will_pend,
        partitioned=plan["partitioned"].get(table, True),
    )


# What plan() keeps of each table's policy for the refresh task's report.
_REPORTED_POLICY = (
    "small_file_limit",
    "target_file_size",
    "min_small_files",
    "partition_lag_days",
    "lookback_days",
    "date_column",
    "date_format",
)


def _policy_fields(policy: config_mod.TablePolicy) -> dict:
    return {k: getattr(policy, k) for k in _REPORTED_POLICY}


def _values(table: TableInfo, p) -> dict[str, str]:
    return dict(zip([k for k, _ in table.partition_keys], p.values))


def _task_date(tables: dict[str, TableInfo], policies: dict, t) -> date | None:
    policy = policies[t.table_name]
    return partition_date(_values(tables[t.table_name], t), policy.date_column, policy.date_format)


# A partition (or table) the plan skips (a refused table, a location outside the table, no date
# column) is skipped by every run that selects it, as long as the reason holds.
SKIPPED_AGAIN = "skipped again by every run that selects it while this holds"


def _mark_planned(
    hms: Metastore, partitions: set[tuple[str, str]], now: float, tables: dict[str, TableInfo] | None = None
) -> None:
    """Write ``PLANNED_AT`` to (table, partition)s a run meant to list and did not (the backlog
    reads it)."""
    by_table: dict[str, dict[str, dict]] = {}
    for table_name, partition in sorted(partitions):
        by_table.setdefault(table_name, {})[partition] = {PLANNED_AT: str(int(now))}
    for name, updates in by_table.items():
        table = (tables or {}).get(name) or hms.table(*name.split(".", 1))
        hms.update_statistics(table, updates)
        log.info("%s: %d partition(s) marked to be looked at again (%s)", name, len(updates), PLANNED_AT)


def read_results(hms: Metastore, plan: dict) -> list[PartitionResult]:
    """Every batch's results, as its merge job recorded them in the results table."""
    numbers = [b["batch"] for b in plan["batches"]]
    recorded = results_reader.read(hms, plan["results_table"], plan["run"], numbers) if numbers else {}
    results = []
    for b in plan["batches"]:
        if b["batch"] not in recorded:
            raise RuntimeError(
                f"batch {b['batch']} ({b['label']}) recorded no results in {plan['results_table']}: "
                "did its merge task really succeed?"
            )
        try:
            results += decode_results(recorded[b["batch"]])
        except ValueError as e:
            raise RuntimeError(f"batch {b['batch']} ({b['label']}): incomplete results: {e}") from e
    return results


def changed_since_planned(r: PartitionResult, parameters: dict[str, str]) -> bool:
    """Whether a partition's file count or size in the Metastore differs from what the plan read
    (``stats_files`` / ``stats_bytes``): someone wrote statistics since, perhaps after files the
    merge job's listing did not see."""

    def planned(v: int | None) -> str | None:
        return None if v is None else str(v)

    return parameters.get(NUM_FILES) != planned(r.stats_files) or parameters.get(TOTAL_SIZE) != planned(r.stats_bytes)


def _refresh_table(hms: Metastore, name: str, rs: list[PartitionResult], now: float) -> list[PartitionResult]:
    """Write the disk's statistics to the partitions ``rs`` of the table ``name``; return those whose statistics
    changed since they were planned (left for the next run)."""
    db, tbl = name.split(".", 1)
    table = hms.table(db, tbl)
    current = {p.name: p.parameters for p in hms.partitions(table, names=[r.partition for r in rs])}
    moved_on, updates = [], {}
    for r in (r for r in rs if r.partition in current):
        if changed_since_planned(r, current[r.partition]):
            moved_on.append(r)
        elif update := statistics_update(r, current[r.partition], now):
            updates[r.partition] = update
    written = hms.update_statistics(table, updates)
    stale = sum(1 for r in rs if r.stale_statistics)
    log.info(
        "%s: statistics refreshed for %d partition(s) (%d had statistics that disagreed with the disk)",
        name,
        written,
        stale,
    )
    if moved_on:
        log.warning(
            "%s: statistics of %d partition(s) changed since they were planned (another writer?), "
            "left for the next run rather than overwritten with an older listing: %s",
            name,
            len(moved_on),
            ", ".join(r.partition for r in moved_on[:10]),
        )
    return moved_on


def refresh(settings: config_mod.Settings, hms: Metastore, plan: dict, now: float | None = None) -> dict:
    """Write the disk's statistics to every partition the merge jobs listed (merged or not);
    return the report."""
    now = time.time() if now is None else now
    results = read_results(hms, plan)
    if plan.get("dry_run"):
        log.info("dry run: no statistics written")
    else:
        by_table: dict[str, list[PartitionResult]] = {}
        revisit: set[tuple[str, str]] = set()
        for r in results:
            # A merge job writes a committed partition's statistics under its lock; the rest here.
            if r.listed and r.status is not Status.FAILED and not r.statistics_written:
                by_table.setdefault(r.table, []).append(r)
        for name, rs in by_table.items():
            revisit |= {(r.table, r.partition) for r in _refresh_table(hms, name, rs, now)}
        # failed, never listed, or changed since: the backlog looks at them again
        _mark_planned(
            hms, revisit | {(r.table, r.partition) for r in results if r.status is Status.FAILED or not r.listed}, now
        )
    dicts = add_revisits(plan, [r.to_dict() for r in results])
    summary = summarize(dicts, plan["skipped"], plan["deferred"])
    tables = distribution(dicts, plan["skipped"], plan["deferred"], plan.get("policies") or {})
    line = note(dicts, summary, tables, plan.get("dry_run", False))
    text = render(dicts, plan["skipped"], plan["deferred"])
    if plan.get("by_pattern"):  # what the config's patterns matched when the run planned
        text += "\n\ntables by pattern\n" + "\n".join(
            f"{e['entry']}: {len(e['tables'])} table(s) {', '.join(e['tables'])}"
            + (f"; excluded {', '.join(e['excluded'])}" if e["excluded"] else "")
            for e in plan["by_pattern"]
        )
    log.info("run report\n%s\n\nfile sizes per table\n%s\n\nrun note: %s", text, render_distribution(tables), line)
    return {
        "summary": summary,
        "note": line,
        "tables": tables,
        "partitions": dicts,
        "skipped": plan["skipped"],
        "deferred": plan["deferred"],
        "dry_run": plan.get("dry_run", False),
        "dates": plan.get("dates", {}),
        "lookback": plan.get("lookback", {}),
        "run": plan["run"],
        "planned_at": plan.get("planned_at"),
        "by_pattern": plan.get("by_pattern", []),
        "matched_by": plan.get("matched_by", {}),
    }
