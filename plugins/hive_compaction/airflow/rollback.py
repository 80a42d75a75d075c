"""The rollback DAG's logic: its form (Params), the check of a request against the runs that
committed something, the rollback job's arguments, and its report.

The form cannot offer the runs as a pick list: a Param's choices are fixed when the DAG file is
parsed, and parsing must not call the Metastore (a slow or unreachable one would stall the DAG
processor). So the run is typed (or pasted from the merge DAG's run list) and the ``check`` task
validates it against the results table, where every merge job recorded what it committed; a
wrong one fails that task with the runs that did commit something to the table, before any Spark
job starts. Partitions already rolled back (recorded by earlier rollbacks) no longer count.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field

from hive_compaction.airflow.config import Settings
from hive_compaction.airflow.metastore_hook import Metastore
from hive_compaction.airflow.run_params import ParamError
from hive_compaction.model import rollbacks
from hive_compaction.model.result_table import KEEP_DAYS, partition_name, split_name
from hive_compaction.model.results import NUM_FILES, NUM_ROWS, TOTAL_SIZE, Status, decode_results
from hive_compaction.storage.paths import run_tag

log = logging.getLogger(__name__)

TABLE_PATTERN = r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$"
LISTED_RUNS = 20  # how many runs an error lists (newest first)


def params_schema(table_names: list[str]) -> dict[str, dict]:
    """JSON schema of each form field. The table is typed with the configured ones offered (a
    table taken out of the config can still be rolled back); table and run have no default, so
    the form requires them."""
    table: dict = {
        "type": "string",
        "pattern": TABLE_PATTERN,
        "title": "Table",
        "description": "database.table to roll back: a configured table, or one no longer in the config",
    }
    if table_names:
        table["examples"] = sorted(table_names)  # the UI offers them as suggestions
    return {
        "table": table,
        "run": {
            "type": "string",
            "minLength": 1,
            "maxLength": 250,
            "title": "Run",
            "description": "The hive_compaction run to undo: its run id (the merge DAG's run list shows it) "
            "or the run tag of its report. A run that committed nothing to the table fails "
            "the check task, which then lists the runs that did",
        },
        "partitions": {
            "type": ["null", "array"],
            "items": {"type": "string"},
            "uniqueItems": True,
            # blank lines (the form's textarea) are dropped by check()
            "title": "Partitions",
            "description": "Only these partitions of the run (dt=2026-01-01), one "
            "per line; empty: every partition it committed",
        },
        "dry_run": {
            "type": "boolean",
            "title": "Dry run",
            "description": "List what would move back (in the rollback task's log and the report); move nothing",
        },
    }


PARAM_DEFAULTS = {"partitions": None, "dry_run": False}  # table and run: required, no default


@dataclass
class CommittedRun:
    """What one merge run committed in a table and no rollback has undone since."""

    run: str
    partitions: set[str] = field(default_factory=set)
    recorded_at: int = 0


@dataclass(frozen=True)
class Request:
    """A checked rollback request: the table, the run's tag, the partitions (all the run committed
    when none were named), the dry run, and the table's work_dir (None: beside the table)."""

    table: str
    run: str
    partitions: tuple[str, ...]
    all_partitions: bool
    dry_run: bool
    work_dir: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["partitions"] = list(self.partitions)
        return d


def committed_runs(hms: Metastore, results_table: str, table: str) -> dict[str, CommittedRun]:
    """The runs whose merges committed partitions of ``table`` (the results table's records: the
    last ``KEEP_DAYS`` days), less the partitions rollbacks have restored since."""
    db, tbl = split_name(results_table)
    if not hms.table_exists(db, tbl):
        return {}
    runs: dict[str, CommittedRun] = {}
    rolled_back: set[tuple[str, str]] = set()
    for rec in hms.partition_records(db, tbl, hms.partition_names_of(db, tbl)):
        run = rec.values[0]
        undone = rollbacks.decode(rec.parameters)
        if undone is not None:
            if undone["table"] == table and not undone["dry_run"]:
                rolled_back |= {
                    (undone["of_run"], p["partition"])
                    for p in undone["partitions"]
                    if p.get("state") in ("restored", "already rolled back")
                }
            continue
        try:
            results = decode_results(rec.parameters)
        except (ValueError, KeyError) as e:  # a batch cut short: what it did commit is in its trash and manifests
            log.warning(
                "%s %s: unreadable results (%s); its partitions are not offered", results_table, "/".join(rec.values), e
            )
            continue
        for r in results:
            if r.table == table and r.status is Status.MERGED:
                entry = runs.setdefault(run, CommittedRun(run))
                entry.partitions.add(r.partition)
                entry.recorded_at = max(entry.recorded_at, rec.create_time)
    for run, entry in runs.items():
        entry.partitions -= {p for r, p in rolled_back if r == run}
    return {run: e for run, e in runs.items() if e.partitions}


def describe_runs(runs: dict[str, CommittedRun]) -> str:
    """The runs, newest first, as an error lists them."""
    newest = sorted(runs.values(), key=lambda e: (e.recorded_at, e.run), reverse=True)
    text = "; ".join(
        f"{e.run} ({len(e.partitions)} partition(s): {', '.join(sorted(e.partitions)[:3])}"
        f"{', ...' if len(e.partitions) > 3 else ''})"
        for e in newest[:LISTED_RUNS]
    )
    return text + (f"; and {len(newest) - LISTED_RUNS} older" if len(newest) > LISTED_RUNS else "")


def check(settings: Settings, hms: Metastore, params: dict) -> Request:
    """The form's values checked against the Metastore; ParamError naming the field otherwise.
    Nothing is moved before this passed."""
    table = params.get("table")
    if not isinstance(table, str) or not _is_table_name(table):
        raise ParamError(f"table: expected database.table, got {table!r}")
    table = table.strip().lower()
    if not hms.table_exists(*split_name(table)):
        raise ParamError(f"table: the Metastore has no table {table}")
    runs = committed_runs(hms, settings.results_table, table)
    if not runs:
        raise ParamError(
            f"table: no run committed a compaction of {table} that is not rolled back yet, in the "
            f"{KEEP_DAYS} days {settings.results_table} keeps (nothing to roll back)"
        )
    run = params.get("run")
    if not isinstance(run, str) or not run.strip():
        raise ParamError(
            f"run: required; runs that committed something to {table}, newest first: {describe_runs(runs)}"
        )
    tag = run_tag(run.strip())
    if tag not in runs:
        raise ParamError(
            f"run: {run.strip()!r} has nothing committed to {table} that is not rolled back yet; runs "
            f"that have, newest first: {describe_runs(runs)}"
        )
    named = _partitions(params.get("partitions"))
    missing = sorted(set(named) - runs[tag].partitions)
    if missing:
        raise ParamError(
            f"partitions: {missing} not committed to {table} by run {tag} (or rolled back already); "
            f"it committed {sorted(runs[tag].partitions)}"
        )
    dry_run = params.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ParamError(f"dry_run: expected true or false, got {dry_run!r}")
    configured = [t for t in settings.tables if t.name == table]
    work_dir = (configured[0].policy if configured else settings.defaults).work_dir
    return Request(table, tag, tuple(named) or tuple(sorted(runs[tag].partitions)), not named, dry_run, work_dir)


def _is_table_name(text: str) -> bool:
    return re.fullmatch(TABLE_PATTERN, text.strip()) is not None


def _partitions(value) -> list[str]:
    """The form's partitions: a list (the UI's one per line), blank lines dropped."""
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        value = value.splitlines()
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ParamError(f"partitions: expected a list of partition names like dt=2026-01-01, got {value!r}")
    return list(dict.fromkeys(p.strip() for p in value if p.strip()))


def job_arguments(settings: Settings, request: Request, metastore_uris: str | None, record_as: str) -> list[str]:
    """The rollback job's command-line arguments (``jobs/rollback.py``). The partitions are named
    only when the form named some: else the job takes every partition the run committed."""
    args = ["--table", request.table, "--run", request.run]
    for p in request.partitions if not request.all_partitions else ():
        args += ["--partition", p]
    if metastore_uris:
        args += ["--metastore", metastore_uris]  # for a Spark without hive-site.xml, as the merges get it
    if request.work_dir:
        args += ["--work-dir", request.work_dir]
    if request.dry_run:
        args.append("--dry-run")
    return args + ["--results-table", settings.results_table, "--record-as", record_as]


def read_record(hms: Metastore, results_table: str, record_as: str) -> dict | None:
    """What the rollback job recorded (``model.rollbacks.decode``), or None."""
    db, tbl = split_name(results_table)
    name = partition_name(rollbacks.record_run(run_tag(record_as)), 0)
    for rec in hms.partition_records(db, tbl, [name]):
        return rollbacks.decode(rec.parameters)
    return None


def report(record: dict) -> dict:
    """The rollback's report: per partition what moved back and the statistics written, and totals."""
    parts = record["partitions"]
    done = [p for p in parts if p["state"] in ("restored", "would restore")]
    summary = {
        "partitions": len(parts),
        "partitions_restored": len(done),
        "already_rolled_back": sum(1 for p in parts if p["state"] == "already rolled back"),
        "files_moved_back": sum(p["files_back"] for p in done),
        "bytes_moved_back": sum(p["bytes_back"] for p in done),
        "merged_files_moved_out": sum(p["outputs_out"] for p in done),
        "statistics_restored": 0 if record["dry_run"] else len(parts),
    }
    verb = "would move back" if record["dry_run"] else "moved back"
    note = (
        f"{'dry run: ' if record['dry_run'] else ''}rollback of run {record['of_run']} in {record['table']}: "
        f"{summary['partitions_restored']} partition(s), {summary['files_moved_back']} original file(s) {verb}, "
        f"{summary['merged_files_moved_out']} merged file(s) out"
        + ("" if record["dry_run"] else f", statistics restored for {summary['statistics_restored']}")
        + (f"; stopped: {record['error']}" if record.get("error") else "")
    )
    return {
        "table": record["table"],
        "run": record["of_run"],
        "dry_run": record["dry_run"],
        "summary": summary,
        "note": note,
        "partitions": parts,
        "error": record.get("error"),
    }


def render(rep: dict) -> str:
    """The report as a fixed-width table for the task log."""
    header = ("partition", "state", "files back", "merged out", "numFiles", "totalSize", "numRows")
    rows = [header] + [
        (
            p["partition"] or "-",
            p["state"],
            str(p["files_back"]),
            str(p["outputs_out"]),
            *(str(p["statistics"].get(k) or "-") for k in (NUM_FILES, TOTAL_SIZE, NUM_ROWS)),
        )
        for p in sorted(rep["partitions"], key=lambda p: p["partition"])
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + ["", rep["note"]])
