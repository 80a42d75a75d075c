"""What a rewrite's verification costs: the same groups written without it and with it, side by side.

    .venv/bin/python benchmarks/checksum_cost.py [--groups 100] [--files 10] [--rows 20000] [--rounds 2]
                                                 [--json PATH]

One Spark application (``local[2]``, the merge job's settings), ``--groups`` folders of
``--files`` small ORC files with the demo table's columns (``--rows`` rows per group). Each
round writes every group to one file the way the merge job's rewrite does (one union, a
``coalesce(1)`` branch per group: one task per group) and times:

  plain      the write alone (the unverified baseline);
  scan       what the rewrite does after it: one scan of the inputs and one of the outputs, each
             taking every file's rows and content checksum (``row_hash``), grouped by file;
  observed   the alternative: the write with each branch observed (the inputs' checksums taken
             as rows flow into the writer), then the outputs' scan;
  cached     the inputs read once: each group's read persisted (Spark's cache, memory and disk)
             as the write decodes it, the inputs' checksums taken from the cache, then the
             outputs' scan;
  writer     what the rewrite does since 2026-11-27: the write tasks take the checksums of the
             rows they write (``merge/writer_checksums.py``), then the outputs' scan.

It prints each design's verification share of its rewrite time: scan = (inputs' + outputs'
scans) / (plain + both scans); observed = (observed - plain + outputs' scan) / (observed +
outputs' scan); cached = (cached write - plain + cache's sums + outputs' scan) / (cached write +
cache's sums + outputs' scan); writer = (writer's write - plain + outputs' scan) / (writer's
write + outputs' scan). Every group's checksums must agree across inputs, outputs,
observations, the cache and the write tasks (exit code 1 otherwise). The last round counts (the
first warms the JVM's compilers). In the merge job two such jobs run side by side, which this does
not: see docs/performance.md, "At scale: 200 partitions".
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "scripts", ROOT / "plugins"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def make_groups(spark, root: Path, groups: int, files: int, rows: int) -> list[list[str]]:
    from demo_tables import events

    out = []
    for g in range(groups):
        folder = root / f"g{g:05d}"
        events(spark, "2026-01-01", rows, g).drop("dt").repartition(files).write.orc(str(folder))
        out.append(sorted(f"file://{p}" for p in folder.glob("*.orc")))
    return out


def write(
    spark,
    schema,
    groups: list[list[str]],
    target: str,
    observe: bool = False,
    cache: bool = False,
    by_writer: bool = False,
):
    """The union write; with ``observe`` the Observation of each group (in order), with
    ``cache`` each group's persisted read (in order), with ``by_writer`` the write tasks'
    checksums by group (the rewrite's way)."""
    from pyspark import StorageLevel
    from pyspark.sql import DataFrame, Observation

    from hive_compaction.merge.checksum import content_metrics

    metrics = content_metrics(schema)
    branches, extra = [], []
    for files in groups:
        df = spark.read.format("orc").schema(schema).load(files)
        if observe:
            extra.append(Observation())
            df = df.observe(extra[-1], *metrics)
        if cache:
            df = df.persist(StorageLevel.MEMORY_AND_DISK)
            extra.append(df)
        branches.append(df.coalesce(1))
    union = functools.reduce(DataFrame.unionAll, branches)
    if by_writer:
        from hive_compaction.merge import writer_checksums

        probe = spark.read.format("orc").schema(schema).load(groups[0])
        by_file = writer_checksums.write(spark, union, "orc", {}, target, probe, schema)
        if by_file is None:
            raise RuntimeError("the write tasks took no checksums (see the log)")
        out: dict[int, tuple[int, int, int]] = {}
        for name, got in by_file.items():
            g = task_index(name)
            out[g] = tuple(a + b for a, b in zip(out.get(g, (0, 0, 0)), got))
        return out
    union.write.format("orc").save(target)
    return extra


def cached_sums(schema, cached: list) -> dict[int, tuple[int, int, int]]:
    """Per group, rows and checksums from its persisted read, in one job over the cache (one task
    per core: a task per cached block cost twice as much)."""
    from pyspark.sql import DataFrame, functions as F

    from hive_compaction.merge.checksum import content, content_metrics

    tagged = [df.withColumn("__group", F.lit(g)) for g, df in enumerate(cached)]
    union = functools.reduce(DataFrame.unionAll, tagged)
    union = union.coalesce(union.sparkSession.sparkContext.defaultParallelism)
    rows = union.groupBy("__group").agg(*content_metrics(schema)).collect()
    return {r["__group"]: content(r) for r in rows}


def sums(spark, schema, group_of: dict[str, int]) -> dict[int, tuple[int, int, int]]:
    """Per group, rows and checksums of its files, in one scan grouped by file (as the rewrite's
    ``_sums``)."""
    from urllib.parse import unquote, urlsplit

    from hive_compaction.merge.checksum import content, content_metrics

    by_path = {urlsplit(p).path: g for p, g in group_of.items()}
    df = spark.read.format("orc").schema(schema).load(list(group_of))
    path = df.metadataColumn("_metadata").getField("file_path")
    out: dict[int, tuple[int, int, int]] = {}
    for r in df.groupBy(path.alias("file")).agg(*content_metrics(schema)).collect():
        g = by_path[urlsplit(unquote(r["file"])).path]
        out[g] = tuple(a + b for a, b in zip(out.get(g, (0, 0, 0)), content(r)))
    return out


def read_back(spark, schema, target: str) -> dict[int, tuple[int, int, int]]:
    """Per task index (= group), rows and checksums of the written files, in one scan."""
    files = [f"file://{p}" for p in Path(target.removeprefix("file://")).glob("part-*")]
    return sums(spark, schema, {f: task_index(f) for f in files})


def task_index(file: str) -> int:
    """The index of the write task (= the group) that wrote ``file`` (part-<index>-...)."""
    import re

    return int(re.search(r"part-(\d{5})-", file).group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--designs",
        nargs="+",
        choices=["observed", "cached", "writer"],
        default=["observed", "cached", "writer"],
        help="besides the plain write and the scans",
    )
    args = ap.parse_args()
    from pyspark.sql import SparkSession

    from hive_compaction.merge.checksum import content

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("checksum-cost")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.unionOutputPartitioning", "false")
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "1000000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="checksum-cost-"))
    try:
        began = time.monotonic()
        groups = make_groups(spark, work / "in", args.groups, args.files, args.rows)
        schema = spark.read.orc(groups[0][0]).schema
        print(
            f"{args.groups} groups x {args.files} files x {args.rows // args.files} rows made in "
            f"{time.monotonic() - began:.1f}s",
            flush=True,
        )
        rounds = []
        for n in range(args.rounds):
            t = time.monotonic()
            write(spark, schema, groups, f"file://{work}/plain-{n}", observe=False)
            plain = time.monotonic() - t
            t = time.monotonic()
            inputs = sums(spark, schema, {f: g for g, files in enumerate(groups) for f in files})
            in_scan = time.monotonic() - t
            t = time.monotonic()
            outputs = read_back(spark, schema, f"file://{work}/plain-{n}")
            out_scan = time.monotonic() - t
            r = {
                "plain_write_s": plain,
                "inputs_scan_s": in_scan,
                "outputs_scan_s": out_scan,
                "scan_share": (in_scan + out_scan) / (plain + in_scan + out_scan),
            }
            agree = [inputs, outputs]  # each a group -> (rows, checksum, checksum2) map
            said = [f"round {n + 1}: write {plain:.1f}s; scans: inputs {in_scan:.1f}s, outputs {out_scan:.1f}s"]
            if "writer" in args.designs:  # first: the cached design leaves the heap full
                t = time.monotonic()
                agree.append(write(spark, schema, groups, f"file://{work}/writer-{n}", by_writer=True))
                writer_s = time.monotonic() - t
                t = time.monotonic()
                agree.append(read_back(spark, schema, f"file://{work}/writer-{n}"))
                writer_out_scan = time.monotonic() - t
                r |= {
                    "writer_write_s": writer_s,
                    "writer_outputs_scan_s": writer_out_scan,
                    "writer_share": (writer_s - plain + writer_out_scan) / (writer_s + writer_out_scan),
                }
                said.append(f"the write tasks' checksums: write {writer_s:.1f}s, outputs {writer_out_scan:.1f}s")
            if "observed" in args.designs:
                t = time.monotonic()
                observed = write(spark, schema, groups, f"file://{work}/observed-{n}", observe=True)
                agree.append(dict(enumerate(content(o.get) for o in observed)))
                observed_s = time.monotonic() - t
                r |= {
                    "observed_write_s": observed_s,
                    "observed_share": (observed_s - plain + out_scan) / (observed_s + out_scan),
                }
                said.append(f"observed write {observed_s:.1f}s")
            if "cached" in args.designs:
                t = time.monotonic()
                cached = write(spark, schema, groups, f"file://{work}/cached-{n}", cache=True)
                cached_s = time.monotonic() - t
                t = time.monotonic()
                agree.append(cached_sums(schema, cached))
                cache_sums_s = time.monotonic() - t
                for df in cached:
                    df.unpersist()
                agree.append(read_back(spark, schema, f"file://{work}/cached-{n}"))
                r |= {
                    "cached_write_s": cached_s,
                    "cache_sums_s": cache_sums_s,
                    "cached_share": (cached_s - plain + cache_sums_s + out_scan) / (cached_s + cache_sums_s + out_scan),
                }
                said.append(f"cached write {cached_s:.1f}s + sums from the cache {cache_sums_s:.1f}s")
            mismatched = sum(1 for g in range(len(groups)) if len({m.get(g) for m in agree}) != 1)
            r |= {"groups_mismatched": mismatched, "rows": sum(v[0] for v in inputs.values())}
            rounds.append({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()})
            shares = ", ".join(f"{k.removesuffix('_share')} {v:.3f}" for k, v in r.items() if k.endswith("_share"))
            print(
                f"{'; '.join(said)}. Verification share: {shares} (target <= 0.15); {mismatched} group(s) mismatched",
                flush=True,
            )
            for folder in (f"plain-{n}", f"observed-{n}", f"cached-{n}", f"writer-{n}"):
                shutil.rmtree(work / folder, ignore_errors=True)
        if args.json:
            args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "rounds": rounds}))
        return 1 if any(r["groups_mismatched"] for r in rounds) else 0
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
