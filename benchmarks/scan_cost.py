"""Reader cost of copy-merged files: how much slower a full scan of a stripe / row-group copied
partition is than a rewritten one, by the size of the copied blocks.

    .venv/bin/python benchmarks/scan_cost.py [--rows 1500000] [--files 512 128 32 8]
                                             [--formats orc parquet] [--repeat 3] [--json PATH]

One local stack. Per format, one table whose partitions hold the same rows (``--rows``) in
``--files`` small files each (one stripe / row group per file: the block size is the partition's
bytes divided by its files). Two byte-for-byte copies of it are merged by our merge job, one in
``copy`` mode (the blocks are kept as they are) and one in ``rewrite`` mode (re-encoded into
blocks of the writer's default size), one output file per partition either way. Then every
partition of both is scanned in full (``count`` and a hash of every column, so every block is
decoded), ``--repeat`` times, and the fastest scan kept. Printed per block size: the copied and
rewritten scan seconds and their ratio. ``auto``'s ``copy_min_block_size`` is chosen from it:
per format the smallest block size from which on a copied scan costs at most ``--tolerance``
(default 1.25) times a rewritten one, and the largest of those over the formats.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "scripts"), str(ROOT / "plugins")]

from harness import Stack
from merge_speed import DB, ONE_OUTPUT, SPARK_CONF, clone_table, content, log

DATE0 = "2026-02-01"


def make_source(stack: Stack, fmt: str, files: list[int], rows: int) -> dict[str, int]:
    """Partition date -> files in it, all with ``rows`` rows."""
    from demo_tables import create_table, fill

    table = f"scan_src_{fmt}"
    create_table(stack.spark, DB, table, fmt.upper())
    layout = {}
    for i, n in enumerate(files):
        dt = f"2026-02-{i + 1:02d}"
        fill(stack.spark, DB, table, [dt], n, rows)
        layout[dt] = n
    return layout


def merge(stack: Stack, work: Path, table: str, mode: str) -> None:
    cfg = stack.write_config(
        work / f"{table}.yaml",
        [{"name": f"{DB}.{table}", "merge_mode": mode, "copy_min_block_size": 0, **ONE_OUTPUT}],
        spark_conf=SPARK_CONF,
    )
    for args in stack.plan_batches(cfg, run_id=f"scan-{table}")["spark_args"]:
        p = stack.spark_submit(args["application_args"][1], cfg)
        if p.returncode != 0:
            raise RuntimeError(f"{table} ({mode}): merge job failed:\n{(p.stdout + p.stderr)[-3000:]}")
    for name, part in stack.snapshot(DB, table).items():
        if part["num_files"] != 1:
            raise RuntimeError(f"{table}/{name} ({mode}): {part['num_files']} files after the merge, not 1")


def scan_seconds(stack: Stack, table: str, dt: str, repeat: int) -> float:
    """The fastest of ``repeat`` full scans of one partition (every column decoded)."""
    from pyspark.sql.types import MapType

    spark = stack.spark
    spark.sql(f"REFRESH TABLE {DB}.{table}")
    # every column decoded; a map is hashed by its keys and values (Spark hashes no map itself)
    columns = [
        f"map_keys({f.name}), map_values({f.name})" if isinstance(f.dataType, MapType) else f.name
        for f in spark.table(f"{DB}.{table}").schema.fields
    ]
    query = f"SELECT count(*), bit_xor(xxhash64({', '.join(columns)})) FROM {DB}.{table} WHERE dt = '{dt}'"
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        spark.sql(query).collect()
        took = time.perf_counter() - t0
        best = took if best is None else min(best, took)
    return best


def bench(stack: Stack, work: Path, fmt: str, files: list[int], rows: int, repeat: int) -> list[dict]:
    layout = make_source(stack, fmt, files, rows)
    src = f"scan_src_{fmt}"
    source = stack.snapshot(DB, src)
    expected = content(stack, src)
    tables = {mode: f"scan_{mode}_{fmt}" for mode in ("copy", "rewrite")}
    for mode, table in tables.items():
        clone_table(stack, src, table)
        merge(stack, work, table, mode)
        if content(stack, table) != expected:
            raise RuntimeError(f"{table}: rows differ from the source after the {mode} merge")
    out = []
    for dt, n in layout.items():
        name = f"dt={dt}"
        block = source[name]["bytes"] // n
        seconds = {mode: scan_seconds(stack, table, dt, repeat) for mode, table in tables.items()}
        row = {
            "format": fmt,
            "files": n,
            "block_bytes": block,
            "partition_bytes": source[name]["bytes"],
            "copy_scan_seconds": round(seconds["copy"], 3),
            "rewrite_scan_seconds": round(seconds["rewrite"], 3),
            "ratio": round(seconds["copy"] / seconds["rewrite"], 2),
        }
        log(
            f"{fmt} blocks of {block / 1024:7.0f} KB ({n} files): copied {row['copy_scan_seconds']:.2f}s, "
            f"rewritten {row['rewrite_scan_seconds']:.2f}s, ratio {row['ratio']:.2f}"
        )
        out.append(row)
    return out


def threshold(rows: list[dict], tolerance: float) -> int | None:
    """Per format, the smallest measured block size from which on every copied scan stays within
    ``tolerance`` of a rewritten one; the largest of those over the formats (one setting serves
    both). None when a format has no such size."""
    chosen = []
    for fmt in {r["format"] for r in rows}:
        mine = sorted((r for r in rows if r["format"] == fmt), key=lambda r: r["block_bytes"])
        fine = [r["block_bytes"] for i, r in enumerate(mine) if all(x["ratio"] <= tolerance for x in mine[i:])]
        if not fine:
            return None
        chosen.append(fine[0])
    return max(chosen) if chosen else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_500_000, help="rows per partition (~45 MB of ORC)")
    ap.add_argument(
        "--files",
        type=int,
        nargs="+",
        default=[512, 128, 32, 8],
        help="files per partition, one partition per value (their block size follows)",
    )
    ap.add_argument("--formats", nargs="+", type=str.lower, choices=["orc", "parquet"], default=["orc", "parquet"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=1.25)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="scan-cost-") as tmp:
        stack = Stack(Path(tmp) / "stack")
        stack.start()
        try:
            os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
            rows = [r for fmt in args.formats for r in bench(stack, Path(tmp), fmt, args.files, args.rows, args.repeat)]
        finally:
            stack.stop()
    chosen = threshold(rows, args.tolerance)
    log(
        f"\nsmallest block size whose copied scan is within {args.tolerance}x of a rewritten one: "
        + (f"{chosen / 1024:.0f} KB" if chosen else "none of those measured")
    )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "tolerance": args.tolerance, "threshold_bytes": chosen}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
