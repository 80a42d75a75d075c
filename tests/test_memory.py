"""Memory stays bounded: a partition several times larger than the merge job's whole JVM heap
(more than twice the heap) compacts, in rewrite and in copy mode, with every row verified."""

from __future__ import annotations

import shlex

import pytest

from matrix_sampling import variants

pytestmark = pytest.mark.integration

# A 512 MiB heap failed once in CI (java.lang.OutOfMemoryError, rewrite mode): the inputs' 64 MiB
# stripes are read and written as whole arrays, which G1 must place in contiguous free regions and
# never moves (GC logs here: up to 425 of 512 regions humongous, live set after a full GC ~130 MiB).
# That is the inputs' stripe size meeting a tiny heap, not a partition held in memory; 640 MiB
# leaves room for it, and the partition is still more than twice the heap.
HEAP = "640m"
PARTITION_BYTES = 1400 * 1024**2  # > 2x the heap, incompressible


@pytest.mark.parametrize("mode", variants("test_memory: merge mode", ["rewrite", "copy"]))
def test_a_partition_larger_than_the_heap_compacts(stack, tmp_path, mode):
    from pyspark.sql import functions as F

    db, table = "memory", f"big_{mode}"
    spark = stack.spark
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
    # Uncompressed: no codec would shrink these bytes, and compressing 1.4 GB twice (the inputs,
    # the rewrite's output) only spent the suite's time.
    spark.sql(
        f"CREATE TABLE {db}.{table} (id BIGINT, blob BINARY) PARTITIONED BY (dt STRING) STORED AS ORC "
        "TBLPROPERTIES ('orc.compress'='NONE')"
    )
    rows = PARTITION_BYTES // 1024
    # 1 KiB a row: two sha2-512 digests of the id, eight times (ORC stores BINARY as it is and the
    # table has no codec, so the bytes stay 1 KiB a row; sixteen digests a row only cost time).
    digests = [F.unhex(F.sha2(F.concat(F.col("id").cast("string"), F.lit(str(i))), 512)) for i in range(2)]
    blob = F.concat(*digests * 8)
    # Eight slices of the range, eight input files, without a shuffle of the 1.4 GB.
    (
        spark.range(0, rows, 1, 8)
        .select("id", blob.alias("blob"), F.lit("2026-11-01").alias("dt"))
        .write.insertInto(f"{db}.{table}")
    )
    before = spark.sql(
        f"SELECT count(*) AS n, sum(cast(xxhash64(id, blob) AS DECIMAL(38,0))) AS h FROM {db}.{table}"
    ).collect()[0]
    folder = stack.partition_location(db, table, "dt=2026-11-01")
    inputs = [f for f in folder.iterdir() if f.suffix == ".orc"]
    assert len(inputs) == 8 and sum(f.stat().st_size for f in inputs) > 2 * 640 * 1024**2

    cfg = stack.write_config(
        tmp_path / "c.yaml",
        [{"name": f"{db}.{table}", "merge_mode": mode, "small_file_limit": "1GB", "target_file_size": "2GB"}],
    )
    batch = stack.plan_batches(cfg, run_id=f"memory-{mode}")["spark_args"][0]["application_args"][1]
    cmd = stack.spark_submit_cmd(batch)
    # The whole local-mode JVM (driver and executor) gets HEAP; spark.testing.memory only lets Spark
    # start below its 450 MiB minimum, the real limit is the -Xmx that --driver-memory sets.
    cmd[1:1] = ["--driver-memory", HEAP, "--conf", "spark.testing.memory=471859200"]
    import subprocess

    # Real work: the JVM's full compiler, not the tests' quick start (scripts/harness.py).
    p = subprocess.run(cmd, env=stack.env(cfg, SPARK_SUBMIT_OPTS=""), capture_output=True, text=True, timeout=1200)
    causes = [line for line in (p.stdout + p.stderr).splitlines() if "Caused by" in line or "Error" in line][:12]
    assert p.returncode == 0, shlex.join(cmd[:6]) + "\n" + "\n".join(causes)
    outputs = [f for f in folder.iterdir() if f.suffix == ".orc"]
    assert len(outputs) == 1 and outputs[0].name.startswith("part-compacted-")
    assert outputs[0].stat().st_size > 2 * 640 * 1024**2  # still more than twice the heap
    spark.sql(f"REFRESH TABLE {db}.{table}")
    after = spark.sql(
        f"SELECT count(*) AS n, sum(cast(xxhash64(id, blob) AS DECIMAL(38,0))) AS h FROM {db}.{table}"
    ).collect()[0]
    assert (after["n"], after["h"]) == (before["n"], before["h"]) and after["n"] == rows
