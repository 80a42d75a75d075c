"""Tables by pattern at scale: the plan task on a Metastore of many tables, named one by one or by one pattern.

    .venv/bin/python benchmarks/table_patterns_scale.py [--tables 1000] [--partitions 30] [--databases 2]
                                                        [--threads 4] [--metastore-port PORT] [--json PATH]

Starts its own Hive Metastore (embedded Derby, temporary state folder) unless ``--metastore-port`` names one
running, registers ``--tables`` partitioned tables of ``--partitions`` daily partitions each, spread over
``--databases`` databases, through the raw Thrift API (metadata only: no data files; a table already there
with its partitions is reused), then plans a scheduled run (the last date's key, a 7-day lookback) as the
DAG's plan task does: the config's names resolved (``table_resolution.resolve``), the form's selection, then
``dag_tasks.plan``. Once with every table named, once with one pattern (``bench_pat_*.*``, so the databases
are listed too). Per config: the plan's wall time, its Metastore calls, the partitions planned, and the
DAG's task count (the DAG file imported with the config).

Checks (exit code 1 when one fails): both configs plan the same partitions; the pattern's calls are the
names' minus one ``get_table_req`` per table plus the listing (``get_all_databases``, one ``get_tables`` per
database, the tables' objects in batches); the pattern's DAG has the same task count whatever the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "scripts", ROOT / "plugins", ROOT / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes

from hive_compaction.airflow import config as config_mod, table_resolution, tasks as dag_tasks
from hive_compaction.airflow.metastore_hook import Metastore as HMS
from hive_compaction.airflow.run_params import select
from local_stack import Metastore as LocalMetastore, free_port
from planning_scale import COLUMNS, local_folder, precreate, storage

PREFIX = "bench_pat_"
PATTERN = f"{PREFIX}*.*"
FIRST_DATE = date(2026, 1, 1)
BATCH_SIZE = 500
# plan, merge, refresh_metastore, and the asset events: one task per named table, one for the pattern's
FIXED_TASKS = 3


def log(msg: str = "") -> None:
    print(msg, flush=True)


def names(tables: int, databases: int) -> list[tuple[str, str]]:
    return [(f"{PREFIX}{i % databases}", f"t{i:05d}") for i in range(tables)]


# --- registration ------------------------------------------------------------------------------


def register(port: int, db: str, table: str, partitions: int, existing: set[str]) -> bool:
    """One table and its partitions (the last date's with 5 files, the others with 1); False: reused.
    ``existing``: the tables already there (asking a missing table's partitions is an internal error)."""
    with hmsclient.HMSClient(host="127.0.0.1", port=port) as c:
        if f"{db}.{table}" in existing:
            if len(c.get_partition_names(db, table, -1)) == partitions:
                return False
            c.drop_table(db, table, True)
        c.create_table(
            ttypes.Table(
                tableName=table,
                dbName=db,
                owner="benchmark",
                sd=storage(None, COLUMNS),
                tableType="EXTERNAL_TABLE",
                partitionKeys=[ttypes.FieldSchema("dt", "string", None)],
                parameters={"EXTERNAL": "TRUE"},
            )
        )
        location = c.get_table(db, table).sd.location.rstrip("/")
        root, parts = local_folder(location), []
        for i in range(partitions):
            dt = (FIRST_DATE + timedelta(days=i)).isoformat()
            if root is not None:
                precreate(root / f"dt={dt}")
            files = 5 if i == partitions - 1 else 1
            parts.append(
                ttypes.Partition(
                    values=[dt],
                    dbName=db,
                    tableName=table,
                    sd=storage(f"{location}/dt={dt}", COLUMNS),
                    parameters={"numFiles": str(files), "totalSize": str(files * 1024)},
                )
            )
        c.add_partitions(parts)
        return True


def register_all(
    port: int, warehouse: str | None, tables: list[tuple[str, str]], partitions: int, threads: int
) -> dict:
    started = time.perf_counter()
    existing: set[str] = set()
    with hmsclient.HMSClient(host="127.0.0.1", port=port) as c:
        for db in sorted({d for d, _ in tables}):
            with contextlib.suppress(ttypes.AlreadyExistsException):
                c.create_database(
                    ttypes.Database(name=db, parameters={}, locationUri=f"{warehouse}/{db}.db" if warehouse else None)
                )
            existing |= {f"{db}.{t}" for t in c.get_tables(db, "*")}
    with ThreadPoolExecutor(threads) as pool:  # the Metastore serves each client in a thread of its own
        made = sum(pool.map(lambda t: register(port, *t, partitions, existing), tables))
    seconds = time.perf_counter() - started
    log(f"registered {made} table(s) x {partitions} partitions ({len(tables) - made} reused) in {seconds:.1f} s")
    return {"tables_made": made, "seconds": round(seconds, 1)}


# --- planning ----------------------------------------------------------------------------------


def settings_of(entries: list[str], results_db: str) -> config_mod.Settings:
    return config_mod.parse(
        {
            "tables": entries,
            "defaults": {"quiet_period_minutes": 0},
            "results_table": f"{results_db}.hive_compaction_results",
        },
        "<table_patterns_scale>",
    )


def plan_once(port: int, settings: config_mod.Settings, key: str, run_id: str) -> dict:
    """The plan task's work, timed: resolve the names, select the scheduled run's dates, plan (a dry run:
    nothing is marked in the Metastore, so both configs plan the same)."""
    with HMS("127.0.0.1", port, batch_size=BATCH_SIZE) as hms:
        started = time.perf_counter()
        resolution = table_resolution.resolve(settings, hms)
        resolved = resolution.settings(settings)
        selection = select(resolved, {"dry_run": True}, "scheduled", None, partition_key=key)
        out = dag_tasks.plan(resolved, hms, run_id, selection, resolution=resolution)
        seconds = time.perf_counter() - started
        return {
            "seconds": round(seconds, 2),
            "calls": hms.calls,
            "tables": len(resolved.tables),
            "planned": sum(len(b["partitions"]) for b in out["plan"]["batches"]),
            "deferred": len(out["plan"]["deferred"]),
            "batches": len(out["spark_args"]),
        }


def dag_task_count(entries: list[str], folder: Path) -> int:
    """The DAG's task count with this config (the DAG file imported in a process of its own)."""
    cfg = folder / f"dag-{len(entries)}.yaml"
    cfg.write_text(json.dumps({"tables": entries}))
    code = (
        "from airflow.models import DagBag; import sys; b = DagBag(dag_folder=sys.argv[1]); "
        "assert not b.import_errors, b.import_errors; print(len(b.dags['hive_compaction'].tasks))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "dags")],
        capture_output=True,
        text=True,
        env={**os.environ, config_mod.CONFIG_ENV: str(cfg)},
        timeout=600,
        check=True,
    )
    return int(p.stdout.strip().splitlines()[-1])


def run(args, port: int, warehouse: str | None, folder: Path) -> dict:
    tables = names(args.tables, args.databases)
    figures: dict = {
        "tables": args.tables,
        "partitions_per_table": args.partitions,
        "databases": args.databases,
        "batch_size": BATCH_SIZE,
        "registration": register_all(port, warehouse, tables, args.partitions, args.threads),
    }
    key = (FIRST_DATE + timedelta(days=args.partitions - 1)).isoformat()
    configs = {"by_name": [f"{d}.{t}" for d, t in tables], "by_pattern": [PATTERN]}
    results_db = tables[0][0]
    plan_once(port, settings_of(configs["by_pattern"], results_db), key, "bench__warmup")  # the Metastore's JIT
    for kind, entries in configs.items():
        r = plan_once(port, settings_of(entries, results_db), key, f"bench__{kind}")
        r["dag_tasks"] = dag_task_count(entries, folder)
        figures[kind] = r
        log(
            f"{kind:>10}: plan {r['seconds']:.2f} s, {r['calls']} Metastore calls, {r['tables']} tables, "
            f"{r['planned']} partitions planned in {r['batches']} job(s) ({r['deferred']} deferred); "
            f"DAG of {r['dag_tasks']} tasks"
        )
    per_db = [sum(1 for d, _ in tables if d == db) for db in sorted({d for d, _ in tables})]
    listing = 1 + len(per_db) + sum(math.ceil(n / BATCH_SIZE) for n in per_db)
    named, pattern = figures["by_name"], figures["by_pattern"]
    figures["checks"] = [
        {"name": "both plan the same partitions", "ok": named["planned"] == pattern["planned"] > 0},
        {
            "name": f"pattern calls = name calls - {args.tables} get_table_req + {listing} listing calls",
            "ok": pattern["calls"] == named["calls"] - args.tables + listing,
            "value": pattern["calls"],
        },
        {"name": "the pattern's DAG does not grow with the tables", "ok": pattern["dag_tasks"] == FIXED_TASKS + 1},
        {"name": "the names' DAG has a task per table", "ok": named["dag_tasks"] == FIXED_TASKS + args.tables},
    ]
    figures["ok"] = all(c["ok"] for c in figures["checks"])
    for c in figures["checks"]:
        log(f"{'ok  ' if c['ok'] else 'FAIL'} {c['name']}")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=30, help="daily partitions per table")
    p.add_argument("--databases", type=int, default=2)
    p.add_argument("--threads", type=int, default=4, help="Thrift clients registering tables at once")
    p.add_argument("--metastore-port", type=int, help="use a Hive Metastore already running on 127.0.0.1:PORT")
    p.add_argument("--json", metavar="PATH", help="write the figures here instead of stdout's last line")
    args = p.parse_args(argv)
    if min(args.tables, args.partitions, args.databases, args.threads) < 1 or args.databases > args.tables:
        p.error("--tables, --partitions, --databases and --threads must be positive, databases <= tables")
    wall, local = time.perf_counter(), None
    with tempfile.TemporaryDirectory(prefix="table_patterns_scale-") as tmp:
        try:
            if args.metastore_port:
                port, warehouse = args.metastore_port, None
            else:
                local = LocalMetastore(Path(tmp) / "metastore", free_port())
                local.start()
                port, warehouse = local.port, local.warehouse
            figures = run(args, port, warehouse, Path(tmp))
        finally:
            if local is not None:
                with contextlib.redirect_stdout(sys.stderr):  # keep the JSON the last line of stdout
                    local.stop()
    figures["wall_seconds"] = round(time.perf_counter() - wall, 1)
    text = json.dumps(figures, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n")
    else:
        print(text, flush=True)
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
