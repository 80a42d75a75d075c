"""The merge and rollback jobs on Spark 3.5: a DAG run whose merge task submits to a Spark 3.5
``spark-submit`` (the newest 3.5.x of PyPI, in a virtualenv of its own: requirements-spark35.txt,
made in .state/spark35 by ``make jars``), against the stack's Metastore, then the rollback job on it.

The tables are written by that Spark 3.5 too (as on a 3.5 estate), one ORC and one Parquet, each
with a partition of large blocks (the copy path) and one of tiny blocks (the rewrite path). They
are read before and after by the test process's Spark 4.2, through the Metastore: another Spark
checks the 3.5 jobs' work. The job ships as a cluster node gets it: the job file and the zip
(``py_files``), the Spark install named by ``spark_submit: env_vars`` (PATH, SPARK_HOME,
PYSPARK_PYTHON), so the job's Python is the virtualenv's (docs/deploy.md: the supported matrix).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from harness import ROOT
from hive_compaction.package import build_zip
from test_end_to_end import assert_statistics_match_disk

pytestmark = pytest.mark.integration

SPARK35 = ROOT / ".state" / "spark35"
DB = "on_spark35"
TABLES = {"events_orc": "ORC", "events_parquet": "PARQUET"}
COPY_DATE, REWRITE_DATE = "2026-12-01", "2026-12-02"
# Between the two partitions' blocks: ~3,000-row stripes / row groups copy, ~50-row ones rewrite.
COPY_MIN_BLOCK = 16 * 1024
# Run by the Spark 3.5 spark-submit: the tables, written as the suite's demo tables are.
WRITE_TABLES = f"""
import sys
from demo_tables import create_table, fill, spark_session
spark = spark_session(sys.argv[1], sys.argv[2], app="spark35-tables")
for arg in sys.argv[3:]:
    table, storage = arg.split(":")
    create_table(spark, {DB!r}, table, storage)
    fill(spark, {DB!r}, table, [{COPY_DATE!r}], 2, 6000)
    fill(spark, {DB!r}, table, [{REWRITE_DATE!r}], 4, 200)
spark.stop()
"""


def spark35_env() -> dict[str, str]:
    """The environment that makes ``spark-submit`` the Spark 3.5 one, its driver and workers the
    virtualenv's Python (skips, saying why, when ``make jars`` did not make it)."""
    if not (SPARK35 / ".installed").exists():
        if os.environ.get("SUITE_REQUIRE_STACKS"):  # CI (.ci/run): may not skip
            pytest.fail(f"no Spark 3.5 in {SPARK35} (SUITE_REQUIRE_STACKS is set)", pytrace=False)
        pytest.skip(
            f"no Spark 3.5 in {SPARK35}: make jars installs requirements-spark35.txt there (is PyPI reachable?)"
        )
    (home,) = SPARK35.glob("lib/python*/site-packages/pyspark")
    return {
        "PATH": f"{SPARK35 / 'bin'}:{os.environ['PATH']}",
        "SPARK_HOME": str(home),
        "PYSPARK_PYTHON": str(SPARK35 / "bin" / "python"),
    }


def python_version() -> str:
    return subprocess.run(
        [str(SPARK35 / "bin" / "python"), "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def spark35_version() -> str:
    (version_file,) = SPARK35.glob("lib/python*/site-packages/pyspark/version.py")
    return re.search(r"__version__[^\"']*[\"']([^\"']+)", version_file.read_text()).group(1)


def test_a_dag_run_on_spark_35_merges_both_formats_by_copy_and_rewrite_and_rolls_back(stack, tmp_path):
    env35 = spark35_env()
    version = spark35_version()
    assert version.startswith("3.5."), version
    on_35 = rf"\(Spark {re.escape(version)}, Scala 2\.1[23]\.\d+, Java \S+, Python {re.escape(python_version())}\)"
    script = tmp_path / "write_tables.py"
    script.write_text(WRITE_TABLES)
    wrote = subprocess.run(
        [
            "spark-submit",
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            str(script),
            stack.metastore.uri,
            stack.metastore.warehouse,
            *[f"{t}:{s}" for t, s in TABLES.items()],
        ],
        env=stack.env(**env35, PYTHONPATH=str(ROOT / "scripts")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert wrote.returncode == 0, wrote.stdout[-3000:] + wrote.stderr[-3000:]
    before = {t: stack.snapshot(DB, t) for t in TABLES}
    content = {t: stack.content(DB, t) for t in TABLES}  # read by the test process's Spark 4.2
    for t in TABLES:
        assert {n: p["num_files"] for n, p in before[t].items()} == {f"dt={COPY_DATE}": 2, f"dt={REWRITE_DATE}": 4}

    shipped = build_zip(tmp_path / "hive_compaction.zip")
    cfg = stack.write_config(
        tmp_path / "c.yaml",
        [{"name": f"{DB}.{t}", "copy_min_block_size": COPY_MIN_BLOCK} for t in TABLES],
        py_files=str(shipped),
        spark_submit={"env_vars": env35},
        fan_out={"max_spark_jobs": 1},
    )  # one spark-submit: every partition on 3.5
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-5000:]
    assert re.findall(rf"hive_compaction: Spark ready \S+ after the driver's JVM started {on_35}", run.log), run.log[
        -5000:
    ]
    assert "Spark ready" not in re.sub(rf".*Spark ready .*{on_35}.*\n?", "", run.log)  # no other Spark ran a job
    modes = {(r["table"], r["partition"]): (r["status"], r["mode"]) for r in stack.results(cfg, run.run_id)}
    assert modes == {
        (f"{DB}.{t}", f"dt={d}"): ("merged", mode)
        for t in TABLES
        for d, mode in ((COPY_DATE, "copy"), (REWRITE_DATE, "rewrite"))
    }, modes
    assert "with the columnar engine" in run.log  # the engine's jar, built against 4.2, runs on 3.5
    for t in TABLES:
        assert stack.content(DB, t) == content[t], t  # every row, every column
        assert {n: p["num_files"] for n, p in stack.snapshot(DB, t).items()} == {n: 1 for n in before[t]}
        assert_statistics_match_disk(stack, DB, t, content[t])

    table = f"{DB}.events_orc"
    rollback = subprocess.run(
        stack.rollback_cmd(table, run.run_id, cfg, py_files=shipped),
        env=stack.env(cfg, **env35),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rollback.returncode == 0, rollback.stdout[-3000:] + rollback.stderr[-3000:]
    assert re.search(rf"hive_compaction: Spark ready {on_35}", rollback.stdout), rollback.stdout[-3000:]
    assert sum(line.startswith(f"rolled back {table} dt=") for line in rollback.stdout.splitlines()) == 2
    after = stack.snapshot(DB, "events_orc")
    for name, was in before["events_orc"].items():  # the original files and their statistics
        assert {k: after[name][k] for k in ("files", "hms_num_files", "hms_total_size")} == {
            k: was[k] for k in ("files", "hms_num_files", "hms_total_size")
        }, name
    assert stack.content(DB, "events_orc") == content["events_orc"]
