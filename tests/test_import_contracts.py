"""The package's import rules are checked by a tool (import-linter, pyproject.toml's
``[tool.importlinter]``; docs/architecture.md draws them): they hold, and a wrong import breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "plugins" / "hive_compaction"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package under ``package_parent``, with this checkout's contracts."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(package_parent), os.environ.get("PYTHONPATH", "")]),
        "COLUMNS": "250",
        "NO_COLOR": "1",
    }  # one contract per line
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(ROOT / "pyproject.toml")],
        cwd=package_parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_package_keeps_its_import_contracts():
    p = lint_imports(PACKAGE.parent)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout, p.stdout


def test_a_commit_module_importing_the_airflow_side_breaks_them(tmp_path):
    copy = tmp_path / "hive_compaction"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    wrong = copy / "commit" / "in_place.py"
    wrong.write_text(wrong.read_text() + "\nfrom hive_compaction.airflow import config  # noqa: E402 - on purpose\n")
    p = lint_imports(tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "hive_compaction.commit.in_place -> hive_compaction.airflow.config" in out, out  # the copy was read
    for contract in (
        "Layers: (airflow | jobs) above merge above commit above storage above model BROKEN",
        "The job side (jobs, merge, commit, storage, model) imports no Airflow, yaml or hmsclient BROKEN",
    ):
        assert contract in out, out
