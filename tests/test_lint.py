"""The code passes its linter, its formatter's check and its type checker, as pyproject.toml
configures them (``[tool.ruff]``, ``[tool.mypy]``) at the versions requirements.txt pins. Each
tool runs from this venv (``sys.executable -m ...``) on the checkout; a finding fails the test
with the tool's own output. Fast: no Spark, no stack."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(module: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` in the checkout; skipped when the tool is not installed."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed in {sys.prefix} (requirements.txt pins it: make venv)")
    env = {**os.environ, "NO_COLOR": "1", "MYPY_FORCE_COLOR": "0", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_ruff_finds_nothing():
    p = tool("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert p.returncode == 0, p.stdout + p.stderr


def test_ruff_format_would_change_nothing():
    """On the files ``[tool.ruff.format]`` does not exclude (pyproject.toml says why the rest are)."""
    p = tool("ruff", "format", "--no-cache", "--check", "--diff", ".")
    assert p.returncode == 0, p.stdout[-20000:] + p.stderr


def test_mypy_finds_nothing():
    p = tool("mypy", "--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary", "--no-pretty")
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_checks_can_fail(tmp_path):
    """The same tools, with this checkout's configuration, on a module with one finding of each."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    bad = tmp_path / "plugins" / "hive_compaction" / "model"
    bad.mkdir(parents=True)
    (bad.parent / "__init__.py").write_text("")
    (bad / "__init__.py").write_text("")
    (tmp_path / "spark_jobs").mkdir()
    (tmp_path / "spark_jobs" / "entry.py").write_text("")
    (bad / "wrong.py").write_text(
        "import os\n\n\ndef half(n: int) -> int:\n    return n / 2\n\n\ndef same(n):\n    return n\n\n\nx = [1,2]\n"
    )
    for module, args, finding in (
        ("ruff", ["check", "--no-cache", "."], "F401"),
        ("ruff", ["format", "--no-cache", "--check", "plugins"], "wrong.py"),
        ("mypy", ["--no-incremental", "--cache-dir", os.devnull], "[return-value]"),
        # model/ is strict: an unannotated function is a finding there
        ("mypy", ["--no-incremental", "--cache-dir", os.devnull], "[no-untyped-def]"),
    ):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed in {sys.prefix} (requirements.txt pins it: make venv)")
        p = subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert p.returncode != 0 and finding in p.stdout + p.stderr, (module, p.stdout + p.stderr)


JOB_SIDE = ("model", "storage", "commit", "merge", "jobs")
IMPORT_ALL = """import importlib, pkgutil, sys
sys.path.insert(0, sys.argv[1])
failed = []
for sub in sys.argv[2:]:
    for m in pkgutil.iter_modules(importlib.import_module("hive_compaction." + sub).__path__):
        try:
            importlib.import_module("hive_compaction.%s.%s" % (sub, m.name))
        except Exception as e:
            failed.append("hive_compaction.%s.%s: %s: %s" % (sub, m.name, type(e).__name__, e))
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_the_job_side_imports_on_its_oldest_python():
    """The checkers run on 3.11; the merge and rollback jobs also run on Python 3.8 (Spark 3.5): each
    job-side module imports there (an annotation-only name such as collections.abc.Callable[...]
    used at run time would not). The Spark 3.5 virtualenv of ``make jars`` has that Python and py4j."""
    python = ROOT / ".state" / "spark35" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no {python} (make jars makes it, on Python 3.8 where there is one)")
    p = subprocess.run(
        [str(python), "-c", IMPORT_ALL, str(ROOT / "plugins"), *JOB_SIDE], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stdout + p.stderr
