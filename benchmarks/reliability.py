"""Reliability figures: kill the merge job with SIGKILL at every step of the commit protocol,
let the next DAG run repair it, and check every row.

    python benchmarks/reliability.py [--formats ORC PARQUET] [--partitions 2] [--files 4] [--rows 250]

For each format and kill point, a table is made, its merge job is killed at that point (through
the test-only kill hook, not by timing), then one real DAG run over all the tables must finish
every interrupted commit. Prints: kill points tried, runs, partitions and rows checked, rows
lost, rows duplicated, leftovers (anything but data files in a partition folder, journals,
staging). Exit code 1 if anything was lost, duplicated or left over.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "scripts"),
                str(Path(__file__).resolve().parents[1] / "plugins")]

from harness import Stack  # noqa: E402
from hive_compaction.commit import KILL_POINTS  # noqa: E402


def kill_matrix(stack: Stack, work: Path, formats=("ORC", "PARQUET"), points=KILL_POINTS,
                partitions: int = 2, files: int = 4, rows: int = 250, db: str = "reliability") -> dict:
    dates = [f"2026-04-{d:02d}" for d in range(1, partitions + 1)]
    victim = dates[-1]
    tables = {(fmt, point): f"k_{fmt.lower()}_{point}" for fmt in formats for point in points}
    for (fmt, _), table in tables.items():
        stack.make_table(db, table, fmt, dates, files=files, rows=rows)
    before = {t: stack.rows(db, t) for t in tables.values()}
    figures = {"kill_points_tried": 0, "runs": 0, "partitions_checked": 0, "rows_checked": 0,
               "rows_lost": 0, "rows_duplicated": 0, "leftovers": 0, "kills_not_reached": 0,
               "recovery_run": None, "problems": []}
    for (fmt, point), table in tables.items():
        cfg = stack.write_config(work / f"{table}.yaml", [{"name": f"{db}.{table}"}])
        planned = stack.plan_batches(cfg, run_id=f"killed-{table}")
        p = stack.spark_submit(planned["spark_args"][0]["application_args"][1],
                               HIVE_COMPACTION_TEST_KILL_AT=f"{point}:dt={victim}")
        figures["kill_points_tried"] += 1
        figures["runs"] += 1
        if p.returncode == 0 or f"test kill point {point} reached" not in p.stdout + p.stderr:
            figures["kills_not_reached"] += 1
            figures["problems"].append(f"{table}: the kill at {point} did not happen")

    cfg = stack.write_config(work / "all.yaml", [{"name": f"{db}.{t}"} for t in tables.values()])
    run = stack.run_dag(cfg)
    figures["runs"] += 1
    figures["recovery_run"] = run.state
    if run.state != "success":  # say why, so a failure in CI can be diagnosed from its output
        figures["problems"] += [line.strip()[:400] for line in run.log.splitlines()
                                if re.search(r"FAILED |ERROR hive_compaction|Error: |Exception: ", line)][-20:]
    for table in tables.values():
        after = stack.rows(db, table)
        for name in sorted(set(before[table]) | set(after)):
            old, new = Counter(before[table].get(name, [])), Counter(after.get(name, []))
            figures["partitions_checked"] += 1
            figures["rows_checked"] += sum(old.values())
            figures["rows_lost"] += sum((old - new).values())
            figures["rows_duplicated"] += sum((new - old).values())
        snap = stack.snapshot(db, table)
        for name, part in snap.items():
            folder = stack.partition_location(db, table, name)
            extra = [f.name for f in folder.iterdir()
                     if f.name not in part["files"] and not (f.name.startswith(".") and f.name.endswith(".crc")
                                                            and f.name[1:-4] in part["files"])]
            if extra:
                figures["leftovers"] += len(extra)
                figures["problems"].append(f"{table}/{name}: leftovers {extra}")
            if part["hms_num_files"] != str(part["num_files"]) or part["hms_total_size"] != str(part["bytes"]):
                figures["problems"].append(f"{table}/{name}: Metastore statistics differ from the disk")
        # Staging outside the partitions may keep a killed attempt's files until the trash retention
        # purges them; an unfinished journal would be a real leftover.
        area = Path(str(stack.metastore.state)) / "warehouse" / f"{db}.db" / ".hive_compaction" / table
        figures["leftovers"] += len(list((area / "journal").glob("*.json")))
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", nargs="+", default=["ORC", "PARQUET"])
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rows", type=int, default=250)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        stack = Stack(Path(tmp))
        stack.start()
        try:
            f = kill_matrix(stack, Path(tmp), args.formats, KILL_POINTS, args.partitions, args.files, args.rows)
        finally:
            stack.stop()
    for key in ("kill_points_tried", "runs", "partitions_checked", "rows_checked", "rows_lost",
                "rows_duplicated", "leftovers", "kills_not_reached", "recovery_run"):
        print(f"{key:>20}: {f[key]}")
    for problem in f["problems"]:
        print(f"problem: {problem}")
    print(json.dumps(f))
    ok = f["recovery_run"] == "success" and not (f["rows_lost"] or f["rows_duplicated"] or f["leftovers"]
                                                 or f["kills_not_reached"] or f["problems"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
