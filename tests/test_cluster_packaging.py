"""What a driver on a cluster node gets: the job file and the zip shipped with --py-files.

The merge job runs from a folder holding only those two files, with the packages the Airflow
side uses (yaml, hmsclient, thrift, airflow) made unimportable in the driver, every row kept."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hive_compaction.package import build_zip
from hive_compaction.storage import jvm_helper

ROOT = Path(__file__).resolve().parents[1]
# Every Java source of the JVM helper: compiled together at run time, so each must ship.
JVM_SOURCES = [f"hive_compaction/storage/jvm/{name}.java" for name in jvm_helper.SOURCES]
# sitecustomize for the driver: those packages are found nowhere, as if not installed, and this
# package only in a zip (not from the development install of the venv).
BLOCKER = """
import sys
from importlib.machinery import PathFinder

class _NotInstalled(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in ("yaml", "hmsclient", "thrift", "airflow"):
            return None
        if name == "hive_compaction":
            return PathFinder.find_spec(name, [p for p in sys.path if p.endswith(".zip")], target)
        return PathFinder.find_spec(name, path, target)

sys.meta_path[:] = [_NotInstalled if f is PathFinder else f for f in sys.meta_path]
"""


def test_zip_holds_the_package_and_the_jvm_helper_source(tmp_path):
    z = build_zip(tmp_path / "hc.zip")
    names = zipfile.ZipFile(z).namelist()
    assert "hive_compaction/merge/runner.py" in names and set(JVM_SOURCES) <= set(names)
    assert "hive_compaction/jobs/compact_partitions.py" in names and "hive_compaction/jobs/rollback.py" in names
    assert not [n for n in names if "__pycache__" in n]


def test_the_package_builds_as_a_wheel_with_its_modules_and_dependencies(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    [wheel] = tmp_path.glob("hive_compaction-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    package = ROOT / "plugins" / "hive_compaction"
    modules = {
        f"hive_compaction/{f.relative_to(package)}" for f in package.rglob("*.py") if "__pycache__" not in f.parts
    }
    assert modules <= set(names) and set(JVM_SOURCES) <= set(names)
    # the Spark side's entry points travel inside the package (the config's merge_job default)
    assert {"hive_compaction/jobs/compact_partitions.py", "hive_compaction/jobs/rollback.py"} <= set(names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    for dep in ("apache-airflow", "hmsclient", "thrift_sasl", "PyYAML", "pydantic"):
        assert f"Requires-Dist: {dep}" in meta, meta
    # the floors are the tested versions (requirements.txt); the version is the package's own
    import hive_compaction

    assert f"Version: {hive_compaction.__version__}\n" in meta
    for floor in ("apache-airflow>=3.3.2", "apache-airflow-providers-apache-spark>=6.3.4", "pyspark>=4.2.0"):
        assert f"Requires-Dist: {floor}" in meta, meta
    assert "Requires-Python: >=3.11" in meta


def test_the_entry_points_do_not_edit_sys_path():
    for f in [
        ROOT / "dags" / "hive_compaction_dag.py",
        *(ROOT / "spark_jobs").glob("*.py"),
        *(ROOT / "plugins" / "hive_compaction" / "jobs").glob("*.py"),
    ]:
        assert "sys.path" not in f.read_text(), f


@pytest.mark.integration
def test_the_merge_job_runs_from_only_the_job_file_and_the_zip(stack, tmp_path):
    db, table = "packaged", "events"
    stack.make_table(db, table, "ORC", ["2026-09-01"], files=4, rows=200)
    content = stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "merge_mode": "rewrite"}])
    batch = stack.plan_batches(cfg, run_id="packaged")["spark_args"][0]["application_args"][1]

    node = tmp_path / "node"
    (node / "blocker").mkdir(parents=True)
    (node / "blocker" / "sitecustomize.py").write_text(BLOCKER)
    job = shutil.copy(
        ROOT / "plugins" / "hive_compaction" / "jobs" / "compact_partitions.py", node / "compact_partitions.py"
    )
    shipped = build_zip(node / "hive_compaction.zip")
    cmd = [
        "spark-submit",
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--py-files",
        str(shipped),
        str(job),
        "--batch",
        batch,
    ]
    p = subprocess.run(
        cmd, cwd=node, env=stack.env(cfg, PYTHONPATH=str(node / "blocker")), capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "rewrote 1 group(s)" in p.stdout
    snap = stack.snapshot(db, table)
    assert snap["dt=2026-09-01"]["num_files"] == 1
    assert stack.content(db, table) == content
    # The blocker was in force: the same driver fails at once on the Airflow side's modules.
    probe = subprocess.run(
        ["python", "-c", "import yaml"],
        cwd=node,
        env=stack.env(cfg, PYTHONPATH=str(node / "blocker")),
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "No module named 'yaml'" in probe.stderr
    probe = subprocess.run(
        ["python", "-c", "import hive_compaction"],
        cwd=node,
        env=stack.env(cfg, PYTHONPATH=str(node / "blocker")),
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "No module named 'hive_compaction'" in probe.stderr
