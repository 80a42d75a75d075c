"""``make test-exhaustive`` runs the reliability sweeps against the built wheel, installed
unmodified (scripts/wheel_sweeps.py). Under the environment the script prints, as the Makefile
evaluates it: the reliability script, the harness's job commands, Airflow's plugins folder, and a
job's Python with the fault injection on its path resolve ``hive_compaction`` to the installed
copy, not to the checkout's plugins/ (which the editable install's ``.pth`` puts on sys.path).
No Spark: the one real slice is ``reliability.py --installed`` by hand (docs/development.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import hive_compaction

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import reliability, harness, hive_compaction, wheel_sweeps
from pathlib import Path
stack = harness.Stack(Path(sys.argv[2]))
env = stack.env(HIVE_COMPACTION_TEST_KILL_AT="nowhere")  # a job with faults injected, as the sweeps start it
job = harness.Stack.spark_submit_cmd("e30=")[-3]
# a job's Python: run from its script's folder (sys.path[0]), with the environment the harness gives it
p = __import__("subprocess").run([sys.executable, "-c", "import hive_compaction; print(hive_compaction.__file__)"],
                                 cwd=str(Path(job).parent), env=env, capture_output=True, text=True, check=True)
print(json.dumps({"module": hive_compaction.__file__, "version": hive_compaction.__version__, "job": job,
                  "package": str(wheel_sweeps.package_dir()),
                  "plugins": env["AIRFLOW__CORE__PLUGINS_FOLDER"], "job_module": p.stdout.strip(),
                  "wrapped": wheel_sweeps.WRAPPED.findall(p.stderr), "path": sys.path}))
"""


def test_the_sweeps_environment_resolves_the_installed_wheel(tmp_path):
    dest = tmp_path / "sweep-wheel"
    script = (
        f'exports=$({sys.executable} scripts/wheel_sweeps.py {dest}) && eval "$exports" && '
        f'cd {tmp_path} && {sys.executable} -c "$PROBE" {ROOT / "scripts"} {tmp_path / "stack"}'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVE_COMPACTION", "PYTHONPATH"))}
    p = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env={**env, "PROBE": PROBE}, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    site = (dest / "site").resolve()
    package = site / "hive_compaction"
    assert (site / f"hive_compaction-{hive_compaction.__version__}.dist-info").is_dir()
    assert seen["module"] == str(package / "__init__.py") and seen["version"] == hive_compaction.__version__
    assert seen["job"] == str(package / "jobs" / "compact_partitions.py")
    assert seen["package"] == str(package)  # the harness's rollback job too
    assert seen["job_module"] == str(package / "__init__.py")
    assert seen["wrapped"] == [str(package / "__init__.py")]  # the fault hooks wrapped the installed copy
    plugins = Path(seen["plugins"])
    assert plugins.is_dir() and not any(plugins.iterdir()) and plugins != ROOT / "plugins"
    # the checkout's plugins/ is on sys.path only through the editable install's .pth, after the wheel
    path = [str(Path(p).resolve()) for p in seen["path"] if p]
    checkout = [i for i, p in enumerate(path) if p.endswith("/plugins")]
    assert all(i > path.index(str(site)) for i in checkout), seen["path"]


def test_the_sweeps_report_a_job_or_dag_run_that_ran_another_copy(monkeypatch, tmp_path):
    """``reliability.py --installed``'s check of each job's output and each DAG run's log."""
    import harness
    import reliability
    import wheel_sweeps

    site = (tmp_path / "site").resolve()
    (site / "hive_compaction" / "jobs").mkdir(parents=True)
    monkeypatch.setenv(wheel_sweeps.INSTALLED_ENV, str(site))
    checkout = ROOT / "plugins" / "hive_compaction"
    outputs = iter(
        [
            f"fault hooks installed on {site}/hive_compaction/__init__.py\n",
            f"fault hooks installed on {checkout}/__init__.py\n",
            "no fault hooks\n",
        ]
    )
    logs = iter(
        [
            f"Spark-Submit cmd: spark-submit {site}/hive_compaction/jobs/compact_partitions.py --batch e30=",
            f"Spark-Submit cmd: spark-submit {checkout}/jobs/compact_partitions.py --batch e30=",
        ]
    )

    class Stack:
        def spark_submit(self, *args, **kwargs):
            return subprocess.CompletedProcess(args, 0, "", next(outputs))

        def run_dag(self, *args, **kwargs):
            return harness.DagRun(0, next(logs), "run")

    stack, seen = Stack(), {"jobs": 0, "dag_runs": 0, "problems": []}
    reliability.check_imports(stack, seen)
    for _ in range(3):
        stack.spark_submit("e30=")
    for _ in range(2):
        stack.run_dag(tmp_path / "config.yaml")
    assert seen["jobs"] == 3 and seen["dag_runs"] == 2
    assert len(seen["problems"]) == 3 and "plugins/hive_compaction" in seen["problems"][0], seen["problems"]
