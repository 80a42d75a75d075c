"""Failure alerts: which tables, partitions and why, handed to the notifiers the config names.

Every task's ``on_failure_callback`` is a ``FailureAlert``. It logs one message and calls each
configured notifier (any ``airflow.sdk.BaseNotifier`` subclass, e.g. the SMTP or Slack
providers' notifiers) with the task's context plus ``failure``: a dict with ``message``,
``tables``, ``partitions``, ``reason``, ``task`` and ``run_id``, so the notifiers' templated
arguments can say ``{{ failure.message }}``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import yaml

from hive_compaction.airflow import config as config_mod

log = logging.getLogger("hive_compaction")

MAX_LISTED = 20  # partitions named in a message; the rest are counted
REASON_CHARS = 1000
# What the Spark provider's "Cannot execute: <command>. Error code is: N." means when N is one the
# merge and rollback jobs give for a cause of their own (their docstrings: jobs/compact_partitions.py,
# jobs/rollback.py); said before the command line, which the length limit may cut.
JOB_EXIT_CODES = {
    3: "the Spark driver's Kerberos login failed (the task log's `error: Kerberos login failed` line "
    "names the principal and keytab, or the ticket cache, and why); nothing was touched"
}


# The DAG's per-table asset event tasks: "compacted.<db>.<table>" (this TaskGroup, the table).
ASSET_EVENT_GROUP = "compacted"
ASSET_EVENT_TASKS = f"{ASSET_EVENT_GROUP}."
# The one task of that group for every table a pattern of the config matched (no dot: no table's id).
PATTERN_EVENTS_TASK = "by_pattern"


def failure(
    task_id: str,
    run_id: str,
    *,
    map_index: int = -1,
    label: str | None = None,
    plan: dict | None = None,
    exception: BaseException | str | None = None,
    results: list[dict] | None = None,
    tables: list[str] | None = None,
    try_number: int | None = None,
    asked: list[tuple[str, str]] | None = None,
) -> dict:
    """What a failed task held and why.

    ``plan``: the plan task's XCom (batches of [table, partition]); a merge task holds the batch of
    its map index, the refresh every batch. ``results``: what the failed merge job recorded, if it
    got that far (its failed partitions' reasons beat the exception's "spark-submit returned 1").
    ``tables``: for a failure before there is a plan (the tables the run was asked to compact).
    ``asked``: (table, partition)s the run's form named, where there is no plan (a rollback)."""
    pairs = _planned(task_id, map_index, plan) or list(asked or [])
    failed = [r for r in results or [] if r.get("status") == "failed"]
    if failed:  # the job says which partitions failed: name those first
        reasons = [f"{r['table']}/{r['partition'] or '(table)'}: {r.get('reason') or 'failed'}" for r in failed]
        reason = "; ".join(reasons)
        pairs = [(r["table"], r["partition"]) for r in failed] + [
            x for x in pairs if x not in {(r["table"], r["partition"]) for r in failed}
        ]
    else:
        reason = _reason(exception)
    table_names = sorted({t for t, _ in pairs} or set(tables or []))
    partitions = [f"{t}/{p}" if p else t for t, p in pairs]
    where = f"{task_id}[{map_index}]" if map_index is not None and map_index >= 0 else task_id
    if label:
        where += f" ({label})"
    named = ", ".join(partitions[:MAX_LISTED]) + (
        f" and {len(partitions) - MAX_LISTED} more" if len(partitions) > MAX_LISTED else ""
    )
    tries = f", try {try_number}" if try_number else ""
    message = (
        f"hive_compaction: {where} failed in run {run_id}{tries}. "
        f"Tables: {', '.join(table_names) or 'none planned'}. "
        f"Partitions: {named or 'none planned yet'}. Reason: {reason}"
    )
    return {
        "message": message,
        "task": where,
        "run_id": run_id,
        "tables": table_names,
        "partitions": partitions,
        "reason": reason,
    }


def _planned(task_id: str, map_index: int, plan: dict | None) -> list[tuple[str, str]]:
    """The (table, partition)s of ``plan`` that the task ``task_id`` (of ``map_index``) held."""
    if not plan:
        return []
    batches = plan.get("batches") or []
    only = None
    if task_id == "merge":
        batches = [b for b in batches if b.get("batch") == map_index]
    elif task_id == ASSET_EVENT_TASKS + PATTERN_EVENTS_TASK:  # the pattern-matched tables' partitions
        only = set(plan.get("matched_by") or {})
    elif task_id.startswith(ASSET_EVENT_TASKS):  # a table's asset event: that table's partitions
        only = {task_id[len(ASSET_EVENT_TASKS) :]}
    elif task_id != "refresh_metastore":
        batches = []
    return [(t, p) for b in batches for t, p in b.get("partitions", []) if only is None or t in only]


def _reason(exception: BaseException | str | None) -> str:
    if exception is None:
        return "unknown (the task failed without an exception: killed, timed out or marked failed)"
    text = exception if isinstance(exception, str) else f"{type(exception).__name__}: {exception}"
    text = " ".join(str(text).split())
    code = re.search(r"Cannot execute: .*Error code is: (\d+)\.", text)
    if code and int(code.group(1)) in JOB_EXIT_CODES:
        text = f"{JOB_EXIT_CODES[int(code.group(1))]}. {text}"
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS] + " ..."


def build(spec: config_mod.AlertSpec):
    """A fresh notifier (Airflow renders a notifier's templated fields in place: one per alert)."""
    cls = config_mod.import_notifier(spec.notifier, f"alerts: notifier {spec.notifier!r}")
    try:
        return cls(**spec.kwargs)
    except Exception as e:
        raise config_mod.ConfigError(
            f"alerts: notifier {spec.notifier!r} cannot be created with kwargs "
            f"{sorted(spec.kwargs)}: {type(e).__name__}: {e}"
        ) from e


def check(settings: config_mod.Settings) -> None:
    """For the plan task: every configured notifier can be created (ConfigError naming it if not)."""
    for spec in settings.alerts:
        build(spec)


def lenient_specs(path: str | Path | None = None) -> tuple[config_mod.AlertSpec, ...]:
    """For DAG parsing when the config does not load: the usable ``alerts`` entries even though
    another part of the config (or another entry) is wrong, so that the plan task's failure on it
    still reaches the notifiers. Never raises; what it drops is logged (the plan task fails on
    it, naming it)."""
    try:
        raw = yaml.safe_load(Path(path or config_mod.config_path()).read_text()) or {}
        entries = (raw.get("alerts") or []) if isinstance(raw, dict) else []
    except Exception:  # noqa: BLE001 - unreadable: the plan task says why
        return ()
    specs: list[config_mod.AlertSpec] = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        try:
            specs += config_mod.parse({"alerts": [entry]}).alerts
        except Exception as e:  # noqa: BLE001 - a bad entry is left out, the others still alert
            log.warning("alerts[%d] left out: %s", i, e)
    return tuple(specs)


class FailureAlert:
    """``on_failure_callback`` of the DAG's tasks (runs in the failed task's process)."""

    def __init__(self, specs: tuple[config_mod.AlertSpec, ...], config_path: str | Path | None = None):
        self.specs = tuple(specs)
        self.config_path = config_path  # the DAG's config (its tables name a failed plan's scope)

    def __call__(self, context: dict) -> None:
        try:
            info = describe(context, self.config_path)
        except Exception as e:  # noqa: BLE001 - an alert must still go out
            ti = context.get("ti")
            info = failure(getattr(ti, "task_id", "?"), context.get("run_id", "?"), exception=context.get("exception"))
            log.warning("could not look up what the failed task held: %s", e)
        log.error("%s", info["message"])
        context["failure"] = info
        for spec in self.specs:
            try:
                build(spec)(context)
            except Exception as e:  # noqa: BLE001 - one broken notifier must not silence the others
                log.error("alert through %s failed: %s: %s", spec.notifier, type(e).__name__, e)


def describe(context: dict, config_path: str | Path | None = None) -> dict:
    """``failure(...)`` from a task's context: the plan from XCom, a failed merge job's recorded
    results from the Metastore (best effort: a job killed mid-way recorded none)."""
    ti = context["ti"]
    task_id, map_index = ti.task_id, getattr(ti, "map_index", -1)
    plan, asked = None, None
    if task_id != "plan":
        try:
            plan = ti.xcom_pull(task_ids="plan", key="plan", map_indexes=-1)
        except Exception as e:  # noqa: BLE001 - the alert goes out without the plan
            log.warning("could not read the plan from XCom: %s", e)
    results = _recorded(plan, map_index, config_path) if task_id == "merge" and plan else None
    tables = None
    if plan is None:
        params = context.get("params") or {}
        # the merge form's tables, the rollback form's table (and partitions), else every configured table
        tables = list(params.get("tables") or []) or (
            [params["table"]]
            if isinstance(params.get("table"), str)
            else [t.name for t in config_mod.load_lenient(config_path)[0].tables]
        )
        if isinstance(params.get("table"), str) and isinstance(params.get("partitions"), list):
            asked = [(params["table"], p) for p in params["partitions"] if isinstance(p, str) and p.strip()]
    return failure(
        task_id,
        context.get("run_id") or getattr(ti, "run_id", "?"),  # type: ignore[arg-type]  # a run id, or "?"
        map_index=map_index,
        label=getattr(ti, "rendered_map_index", None) if task_id == "merge" else None,
        plan=plan,
        exception=context.get("exception"),
        results=results,
        tables=tables,
        try_number=getattr(ti, "try_number", None),
        asked=asked,
    )


def _recorded(plan: dict, batch: int, config_path: str | Path | None) -> list[dict] | None:
    """A merge job's results as it recorded them, read through the Metastore connection of the
    DAG's config (``config_path``: the file beside the DAG, wherever the package is installed)."""
    from hive_compaction.airflow import results_reader
    from hive_compaction.airflow.metastore_hook import Metastore
    from hive_compaction.model.results import decode_results

    try:
        settings = config_mod.load(config_path)
        with Metastore(metastore_conn_id=settings.metastore_conn_id) as hms:
            recorded = results_reader.read(hms, plan["results_table"], plan["run"], [batch])
        return [r.to_dict() for r in decode_results(recorded[batch])] if batch in recorded else None
    except Exception as e:  # noqa: BLE001 - the alert goes out with the exception instead
        log.warning("could not read batch %s's recorded results: %s", batch, e)
        return None
