"""The README's "Install into an existing Airflow", step by step, word for word.

The wheel is built from a clean copy of what it is built from (no ``build/`` left over from
another build), installed *not* editable into a fresh virtual environment, and the DAG runs
from a fresh dags folder holding only the DAG file and its YAML, with a fresh AIRFLOW_HOME, no
``HIVE_COMPACTION_CONFIG``, no ``PYTHONPATH``, from a working folder outside the checkout: the
checkout is not importable.

What "an existing Airflow" is here: installing Airflow, the Spark provider and pyspark into the
fresh environment from pip's cache would cost about a minute, so the fresh environment gets
them from the test environment instead, through a ``.pth`` line naming a folder of links to the
test environment's site-packages *minus* this package (its editable install's finder and
metadata are left out; a folder named by a ``.pth`` line does not have its own ``.pth`` files
read anyway). Step 2 runs with ``--no-index``: pip must find every dependency the wheel
declares already satisfied, at the tested versions, so nothing is downloaded. ``airflow``'s
console script is written into the fresh environment's ``bin`` as pip writes it, and
``spark-submit`` is pyspark's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

import hive_compaction
from hive_compaction.storage.paths import partition_id

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
WHEEL = f"hive_compaction-{hive_compaction.__version__}-py3-none-any.whl"
# The commands of the README's steps, as written there.
BUILD = "pip wheel --no-deps -w dist ."
INSTALL = f"pip install dist/{WHEEL}"
COPY = 'cp dags/hive_compaction_dag.py dags/hive_compaction.yaml "$AIRFLOW_HOME/dags/"'
CONNECTIONS = ("AIRFLOW_CONN_HIVE_METASTORE=", "AIRFLOW_CONN_SPARK_DEFAULT=")
DAGS_TEST = "airflow dags test hive_compaction"


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("### Install into an existing Airflow\n")
    return text[start : text.index("\n## ", start)]


def test_the_readme_recipe_has_at_most_ten_steps_and_these_commands():
    section = readme_section()
    steps = re.findall(r"^(\d+)\. ", section, re.M)
    assert steps and len(steps) <= 10 and steps == [str(i) for i in range(1, len(steps) + 1)], steps
    flat = re.sub(r"\s+", " ", section)  # a command may wrap between lines of the Markdown
    for command in (BUILD, INSTALL, COPY, *CONNECTIONS, DAGS_TEST, "PYSPARK_PYTHON", "HIVE_COMPACTION_CONFIG"):
        assert command in flat, command


def run(cmd, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw)
    assert p.returncode == 0, f"{cmd}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return p


def shared_site_packages(dest: Path) -> Path:
    """Links to the test environment's site-packages, this package's editable install left out."""
    site = Path(sysconfig.get_paths()["purelib"])
    dest.mkdir()
    for entry in site.iterdir():
        if (
            entry.name.startswith(("hive_compaction", "__editable__", "__editable___", "_hive_compaction"))
            or entry.suffix == ".pth"
        ):
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


def console_script(venv: Path, name: str, target: str) -> None:
    """What pip writes for a ``console_scripts`` entry point."""
    module, func = target.split(":")
    script = venv / "bin" / name
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom {module} import {func}\n"
        f"if __name__ == '__main__':\n    sys.exit({func}())\n"
    )
    script.chmod(0o755)


def test_install_into_an_existing_airflow_word_for_word(stack, tmp_path):
    timings = {}
    t0 = time.monotonic()
    # the tables: one partition with many small files, one already a single file
    db, table = "installed", "events"
    stack.make_table(
        db, table, "ORC", ["2026-11-24", "2026-11-25"], files=4, rows=120, single_file_dates=("2026-11-24",)
    )
    stack.make_table(db, "damaged", "ORC", ["2026-11-25"], files=4, rows=40)  # for the failing run at the end
    timings["make tables"] = time.monotonic() - t0
    before, content = stack.snapshot(db, table), stack.content(db, table)
    assert {k: v["num_files"] for k, v in before.items()} == {"dt=2026-11-24": 1, "dt=2026-11-25": 4}
    timings["read tables"] = time.monotonic() - t0 - timings["make tables"]

    # an existing Airflow: a fresh venv with the tested dependencies (module docstring)
    t = time.monotonic()
    venv = tmp_path / "airflow-venv"
    run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    site = Path(
        run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    (site / "existing_airflow.pth").write_text(f"{shared_site_packages(tmp_path / 'shared')}\n")
    console_script(venv, "airflow", "airflow.__main__:main")
    home = tmp_path / "airflow-home"
    (home / "dags").mkdir(parents=True)
    pyspark_bin = (
        Path(run([sys.executable, "-c", "import pyspark; print(pyspark.__file__)"]).stdout.strip()).resolve().parent
        / "bin"
    )
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "HIVE_COMPACTION", "PYSPARK", "SPARK", "VIRTUAL_ENV", "PYTHON"))
    }
    test_bin = str(Path(sys.executable).parent)
    env = {
        **keep,
        "PATH": os.pathsep.join(
            [
                str(venv / "bin"),
                str(pyspark_bin),
                *[p for p in keep.get("PATH", "").split(os.pathsep) if p and p != test_bin],
            ]
        ),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    if "SPARK_SUBMIT_OPTS" in stack.env():  # the test stack's quicker JVM start (not part of the recipe)
        env["SPARK_SUBMIT_OPTS"] = stack.env()["SPARK_SUBMIT_OPTS"]
    timings["venv"] = time.monotonic() - t

    # 1. build the wheel (in a clean copy of what it is built from)
    t = time.monotonic()
    src = tmp_path / "checkout"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "plugins", src / "plugins", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(ROOT / "dags", src / "dags", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run(["bash", "-c", BUILD], cwd=src, env=env)
    assert (src / "dist" / WHEEL).is_file()
    timings["1 wheel"] = time.monotonic() - t

    # 2. install it, not editable (--no-index: every dependency is already there, at a tested version)
    t = time.monotonic()
    run(["bash", "-c", INSTALL.replace("pip install ", "pip install --no-index ", 1)], cwd=src, env=env)
    work = tmp_path / "elsewhere"  # no checkout in the working folder
    work.mkdir()
    probe = run(
        [
            "python",
            "-c",
            "import hive_compaction, json, sys, importlib.metadata as m; print(json.dumps("
            "[hive_compaction.__file__, sys.path, m.version('hive-compaction'), "
            "__import__('shutil').which('airflow'),"
            " __import__('shutil').which('spark-submit')]))",
        ],
        cwd=work,
        env=env,
    )
    module, path, version, airflow_bin, spark_submit = json.loads(probe.stdout)
    assert Path(module).is_relative_to(site), module
    assert version == hive_compaction.__version__
    assert not [p for p in path if p and Path(p).resolve().is_relative_to(ROOT)], path
    assert Path(airflow_bin).parent == venv / "bin" and Path(spark_submit).parent == pyspark_bin
    assert (site / "hive_compaction" / "jobs" / "compact_partitions.py").is_file()
    assert (site / "hive_compaction" / "storage" / "jvm" / "HiveCompactionHelper.java").is_file()
    timings["2 install"] = time.monotonic() - t

    # 3. only the DAG file and its YAML in the dags folder
    run(["bash", "-c", COPY], cwd=src, env=env)
    assert sorted(f.name for f in (home / "dags").iterdir()) == ["hive_compaction.yaml", "hive_compaction_dag.py"]
    # 4. the YAML names the tables (and the connections, as shipped)
    stack.write_config(home / "dags" / "hive_compaction.yaml", [{"name": f"{db}.{table}"}])
    # 5. the connections from the environment; 6. Spark: spark-submit on the PATH, PYSPARK_PYTHON
    env.update(
        {
            "AIRFLOW_CONN_HIVE_METASTORE": json.dumps(
                {"conn_type": "generic", "host": "127.0.0.1", "port": stack.port}
            ),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "PYSPARK_PYTHON": str(venv / "bin" / "python"),
        }
    )
    t = time.monotonic()
    run(["airflow", "db", "migrate"], cwd=work, env=env)  # the existing Airflow's database
    timings["db migrate"] = time.monotonic() - t

    # 8. try it
    t = time.monotonic()
    p = subprocess.run(
        ["bash", "-c", f"{DAGS_TEST} 2030-03-01T00:00:00"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = p.stdout + p.stderr
    timings["8 dags test"] = time.monotonic() - t
    print("install test timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    assert p.returncode == 0 and re.search(r"DagRun Finished: .*state=success", log), log[-6000:]
    # the merge job that ran is the installed package's copy
    assert str(site / "hive_compaction" / "jobs" / "compact_partitions.py") in log, log[-6000:]

    after = stack.snapshot(db, table)
    assert after["dt=2026-11-25"]["num_files"] == 1 < before["dt=2026-11-25"]["num_files"]
    assert after["dt=2026-11-24"]["files"] == before["dt=2026-11-24"]["files"]
    assert stack.content(db, table) == content
    for name, part in after.items():  # statistics refreshed: equal to the disk
        assert part["hms_num_files"] == str(part["num_files"]), (name, part)
        assert part["hms_total_size"] == str(part["bytes"]), (name, part)

    # The same two files define the rollback DAG; its job (rollback.py beside the merge job, in the
    # wheel) lists what would move back. A dry run: the merge above stays.
    merge_run = re.search(r"DagRun Finished: .*?run_id=([^,]+),", log).group(1)
    conf = json.dumps({"table": f"{db}.{table}", "run": merge_run, "dry_run": True})
    p = subprocess.run(
        ["airflow", "dags", "test", "hive_compaction_rollback", "2030-03-02T00:00:00", "--conf", conf],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = p.stdout + p.stderr
    assert p.returncode == 0 and re.search(r"DagRun Finished: .*state=success", log), log[-6000:]
    assert str(site / "hive_compaction" / "jobs" / "rollback.py") in log, log[-6000:]
    assert "dry run: rollback of run" in log and "original file(s) would move back" in log, log[-6000:]
    assert stack.snapshot(db, table) == after

    # A merge that fails: the alert carries the reason the job recorded for the partition, read
    # through the config beside the DAG file (no HIVE_COMPACTION_CONFIG: the user's install). The
    # partition's journal is damaged (a record with its fields missing), which the job refuses.
    journals = stack.work_area(db, "damaged") / "journal"
    journals.mkdir(parents=True, exist_ok=True)
    pid = partition_id(f"{db}.damaged", "dt=2026-11-25")
    (journals / f"{pid}.json").write_text(json.dumps({"table": f"{db}.damaged", "partition": "dt=2026-11-25"}))
    damaged_before = stack.snapshot(db, "damaged")
    stack.write_config(home / "dags" / "hive_compaction.yaml", [{"name": f"{db}.damaged"}])
    p = subprocess.run(
        ["bash", "-c", f"{DAGS_TEST} 2030-03-03T00:00:00"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = p.stdout + p.stderr
    assert p.returncode != 0 and re.search(r"DagRun Finished: .*state=failed", log), log[-6000:]
    assert "cannot read the config file" not in log, log[-6000:]
    alert = next(
        (
            line
            for line in log.splitlines()
            if "hive_compaction: merge[0]" in line and f"{db}.damaged/dt=2026-11-25: the commit record" in line
        ),
        None,
    )
    assert alert is not None and "is refused, nothing was moved" in alert, log[-6000:]
    assert stack.snapshot(db, "damaged") == damaged_before
