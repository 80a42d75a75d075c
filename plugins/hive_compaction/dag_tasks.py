"""What the DAG's Python tasks do, kept out of the DAG file so it can be tested on its own."""
from __future__ import annotations

import json
import time
import logging
from dataclasses import asdict

from . import config as config_mod
from .metastore import (NUM_FILES, NUM_ROWS, SPARK_NUM_ROWS, SPARK_TOTAL_SIZE, TOTAL_SIZE, Metastore,
                        PartitionInfo, TableInfo, unescape_path_name)
from .commit import WorkArea
from .paths import canonical, run_tag
from .run_params import RunSelection, partition_date
from .planning import (Skipped, batch_label, encode_batch, pack_batches, plan_table, split_oversized,
                       table_work_dir, task_to_dict)
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


def pending_commits(work_dir: str, read_journals) -> frozenset[str]:
    """Partitions of a table whose commit was interrupted (a journal is left in its work area)."""
    if read_journals is None:
        return frozenset()
    return frozenset(j["partition"] for j in read_journals(canonical(f"{work_dir}/journal")))


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


def plan(settings: config_mod.Settings, hms: Metastore, run_id: str, tables: list[str] | None = None,
         dry_run: bool = False, max_map_length: int = 1024, read_journals=None,
         selection: RunSelection | None = None) -> dict:
    """Candidates from the Metastore, packed into Spark jobs. Returns the mapped tasks' kwargs
    (``spark_args``) and the plan the refresh task reads (``plan``). ``read_journals(uri)``
    returns the journals in a folder (none when it does not exist); ``selection`` (the run's
    validated form values) overrides ``tables`` and ``dry_run``."""
    if selection is None:
        selection = RunSelection(tuple(selected_tables(settings, tables)), {}, dry_run)
    dry_run = selection.dry_run
    run = run_tag(run_id)
    tasks, skipped = [], []
    for tc in selection.tables:
        table = hms.table(tc.database, tc.table)
        partitions = list(partitions_in_dates(hms, table, tc, selection.dates.get(tc.name), skipped))
        pending = pending_commits(table_work_dir(table, tc.policy), read_journals)
        if pending:
            log.warning("%s: %d interrupted commit(s) to finish first: %s", tc.name, len(pending), sorted(pending)[:5])
            # Whatever dates this run selects: a half-done commit must not wait for its date to come again.
            missing = sorted(pending - {p.name for p in partitions})
            if missing and table.partition_keys:
                partitions += list(hms.partitions(table, names=missing))
        t, s = plan_table(table, tc.policy, partitions, pending=pending)
        log.info("%s: %d candidate partition(s), %d skipped", tc.name, len(t), len(s))
        tasks += t
        skipped += s
    batches, deferred = pack_batches(tasks, settings.fan_out, max_map_length)
    batches = split_oversized(batches, lambda b: encode_batch({"tasks": [task_to_dict(t) for t in b]}))
    limit = max(1, min(settings.fan_out.max_spark_jobs, max_map_length))
    for overflow in batches[limit:]:  # splitting for the command line made too many: next run
        deferred += overflow
    batches = batches[:limit]
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
                 "dates": {k: [str(v[0]), str(v[1])] if v else None for k, v in selection.dates.items()},
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
            "skipped": plan["skipped"], "deferred": plan["deferred"], "dry_run": plan.get("dry_run", False),
            "dates": plan.get("dates", {}), "run": plan["run"]}


def read_text(uri: str) -> str:
    """Read a small file the Spark job wrote, on any file system Airflow's ObjectStoragePath knows."""
    from airflow.sdk import ObjectStoragePath
    return ObjectStoragePath(uri).read_text()


def read_json_files(folder: str) -> list[dict]:
    """Every ``*.json`` in a folder (none when the folder does not exist)."""
    from airflow.sdk import ObjectStoragePath
    path = ObjectStoragePath(folder)
    if not path.exists():
        return []
    out = []
    for p in sorted(path.glob("*.json")):
        try:
            out.append(json.loads(p.read_text()))
        except ValueError:
            # A journal is written completely before its commit moves a file: an empty or torn
            # one (a job killed while writing it) stands for a commit that never started. The
            # merge job discards it when it next works on that partition.
            log.warning("ignoring %s: incomplete JSON (a commit that never started)", p)
    return out


WORK_FOLDERS = ("trash", "manifests", "runs", "staging")


def purge_expired(settings: config_mod.Settings, hms: Metastore, now: float | None = None) -> list[str]:
    """Delete work-area folders (trash, manifests, results, staging) of runs older than each
    table's ``trash_retention_days``. A run's age is the newest change in any of its folders; a
    run with an interrupted commit (a journal) is never purged. Returns the folders deleted."""
    from airflow.sdk import ObjectStoragePath
    now = time.time() if now is None else now
    deleted = []
    for tc in settings.tables:
        try:
            table = hms.table(tc.database, tc.table)
        except Exception as e:  # noqa: BLE001 - a dropped table must not stop the others' cleanup
            log.warning("%s: cannot read the table (%s); its work area is left alone", tc.name, e)
            continue
        root = ObjectStoragePath(canonical(table_work_dir(table, tc.policy)))
        if not root.exists():
            continue
        pending_runs = {j["run"] for j in read_json_files(str(root / "journal"))}
        ages: dict[str, float] = {}
        for folder in WORK_FOLDERS:
            if not (root / folder).exists():
                continue
            for run_dir in (root / folder).iterdir():
                try:
                    changed = max([run_dir.fs.modified(run_dir.path).timestamp()]
                                  + [c.fs.modified(c.path).timestamp() for c in run_dir.iterdir()]
                                  if run_dir.is_dir() else [run_dir.fs.modified(run_dir.path).timestamp()])
                except FileNotFoundError:  # a running job removed it meanwhile (its staging): not ours
                    continue
                ages[run_dir.name] = max(ages.get(run_dir.name, 0.0), changed)
        cutoff = now - tc.policy.trash_retention_days * 86400
        for run, changed in sorted(ages.items()):
            if changed >= cutoff or run in pending_runs:
                continue
            for folder in WORK_FOLDERS:
                target = root / folder / run
                try:
                    target.fs.rm(target.path, recursive=True)
                    deleted.append(str(target))
                except FileNotFoundError:
                    pass
        log.info("%s: %d expired folder(s) purged from %s", tc.name,
                 sum(1 for d in deleted if d.startswith(str(root))), root)
    return deleted


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
