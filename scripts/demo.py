"""Run the whole job end to end on the embedded local stack and show what changed.

Starts the Hive Metastore (if it is not running), (re)creates the demo tables full of small
files, runs the real DAG with ``airflow dags test`` (plan -> mapped spark-submits -> refresh)
and prints, per partition, files and bytes before and after, read from the file system and
from the Metastore. Expects the environment of ``scripts/env.sh`` (``make demo`` sets it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_stack import Metastore, StackError

ROOT = Path(__file__).resolve().parents[1]


def partition_snapshot(port: int, database: str, table: str, local_path=None) -> dict[str, dict]:
    """Per partition: data files on disk (names, bytes) and the Metastore's statistics.
    ``local_path(location)``: the folder on this machine (default: a file: URI's path)."""
    from hmsclient import hmsclient
    from hmsclient.genthrift.hive_metastore.ttypes import GetTableRequest

    out = {}
    with hmsclient.HMSClient(host="127.0.0.1", port=port) as c:
        t = c.get_table_req(GetTableRequest(dbName=database, tblName=table)).table  # Hive 4 has no get_table
        keys = [k.name for k in t.partitionKeys]
        for p in c.get_partitions(database, table, -1):
            folder = local_path(p.sd.location) if local_path else Path(urlsplit(p.sd.location).path)
            files = {
                f.name: f.stat().st_size for f in folder.iterdir() if f.is_file() and not f.name.startswith(("_", "."))
            }
            name = "/".join(f"{k}={v}" for k, v in zip(keys, p.values))
            out[name] = {
                "files": files,
                "num_files": len(files),
                "bytes": sum(files.values()),
                "hms_num_files": p.parameters.get("numFiles"),
                "hms_total_size": p.parameters.get("totalSize"),
                "hms_num_rows": p.parameters.get("numRows"),
            }
    return out


def run_report(log_text: str) -> str:
    """The refresh task's report table, cut out of the DAG run's log."""
    lines = log_text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip().endswith("run report")]
    if not starts:
        return "(no run report in the log: did the refresh task run?)"
    out = []
    for line in lines[starts[-1] + 1 :]:
        out.append(line.split(" [hive_compaction.airflow.tasks]")[0])
        if "[hive_compaction.airflow.tasks]" in line:
            break
    return "\n".join(out)


def run(cmd: list[str], log: Path | None = None) -> int:
    print("$", " ".join(cmd), flush=True)
    if log is None:
        return subprocess.call(cmd, cwd=ROOT)
    with open(log, "w") as f:
        return subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)


def main() -> int:
    state = Path(os.environ["HIVE_COMPACTION_STATE"])
    port = int(os.environ["HIVE_METASTORE_PORT"])
    try:
        Metastore(state, port).start()
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if run(["airflow", "db", "migrate"], state / "airflow-db-migrate.log"):
        print(f"error: airflow db migrate failed; see {state / 'airflow-db-migrate.log'}", file=sys.stderr)
        return 1
    if run([sys.executable, "scripts/demo_tables.py"], state / "demo-tables.log"):
        print(f"error: creating the demo tables failed; see {state / 'demo-tables.log'}", file=sys.stderr)
        return 1
    tables = [("demo", "events_orc"), ("demo", "events_parquet")]
    before = {t: partition_snapshot(port, *t) for t in tables}
    log = state / "demo-dag-run.log"
    code = run(["airflow", "dags", "test", "hive_compaction", date.today().isoformat()], log)
    print(run_report(log.read_text()))
    after = {t: partition_snapshot(port, *t) for t in tables}

    print(f"\n{'table':<22}{'partition':<16}{'files':>12}{'bytes':>20}{'Metastore numFiles/totalSize/numRows':>40}")
    for t in tables:
        for name in sorted(after[t]):
            b, a = before[t].get(name, {}), after[t][name]
            print(
                f"{'.'.join(t):<22}{name:<16}{b.get('num_files', '-'):>5} -> {a['num_files']:<4}"
                f"{b.get('bytes', '-'):>9} -> {a['bytes']:<8}"
                f"{a['hms_num_files']:>16} / {a['hms_total_size']} / {a['hms_num_rows']}"
            )
    print(f"\nDAG run {'succeeded' if code == 0 else 'FAILED'}; full log: {log}")
    return code


if __name__ == "__main__":
    sys.exit(main())
