"""The reliability sweeps against the built wheel, installed unmodified (``make test-exhaustive``).

    exports=$(python scripts/wheel_sweeps.py [DEST]) && eval "$exports"   # DEST: .state/sweep-wheel

builds the wheel as the README's install does (``pip wheel --no-deps -w dist .`` in a clean copy
of pyproject.toml, README.md and plugins/, as tests/test_install.py builds it), installs it
unmodified with ``pip install --no-deps --target DEST/site`` (its dependencies are .venv's:
Airflow, pyspark and the rest are not installed again) and prints the environment under which
every process of a sweep imports that copy:

- ``PYTHONPATH`` starts with DEST/site: its entries come before site-packages and before the
  folder the editable install's ``.pth`` names (the checkout's plugins/), in the reliability
  script, in ``airflow dags test`` and its tasks, and in every spark-submit (Spark puts the
  caller's PYTHONPATH on its driver's and its Python workers' path);
- ``HIVE_COMPACTION_INSTALLED`` names DEST/site: ``harness`` and ``scripts/reliability.py``
  then put no plugins/ on sys.path, submit the installed copy's job files (``package_dir``), and
  reliability.py checks where the package and every job imported it from;
- ``AIRFLOW__CORE__PLUGINS_FOLDER``: an empty folder instead of plugins/ (Airflow puts its
  plugins folder on sys.path), as in an Airflow the wheel is installed into.

Without ``HIVE_COMPACTION_INSTALLED`` (``make test``, a run by hand) everything uses plugins/.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLED_ENV = "HIVE_COMPACTION_INSTALLED"
DEFAULT_DEST = ROOT / ".state" / "sweep-wheel"
# What scripts/fault_injection/sitecustomize.py prints in each process whose storage classes it wraps.
WRAPPED = re.compile(r"^fault hooks installed on (\S+)$", re.M)


def installed() -> Path | None:
    """The folder the wheel is installed in (``--target``), when the sweeps run against it."""
    site = os.environ.get(INSTALLED_ENV)
    return Path(site) if site else None


def package_dir() -> Path:
    """The ``hive_compaction`` package the harness runs: the installed wheel's or the checkout's."""
    site = installed()
    return site / "hive_compaction" if site else ROOT / "plugins" / "hive_compaction"


def plugins_folder() -> Path:
    """Airflow's plugins folder: the checkout's plugins/, or an empty one beside the installed wheel."""
    site = installed()
    return site.parent / "airflow-plugins" if site else ROOT / "plugins"


def outside(path: str | Path) -> bool:
    """Whether a module's file lies outside the installed wheel (always False on the checkout)."""
    site = installed()
    return site is not None and not Path(path).resolve().is_relative_to(site.resolve())


def build_and_install(dest: Path = DEFAULT_DEST) -> Path:
    """Build the wheel from a clean copy of the checkout, install it unmodified into dest/site."""
    dest = dest.resolve()
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "airflow-plugins").mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="sweep-wheel-") as tmp:
        src = Path(tmp)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, src / name)
        shutil.copytree(ROOT / "plugins", src / "plugins", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        _run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w", "dist", "."],
            src,
        )
        wheels = sorted((src / "dist").glob("hive_compaction-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one wheel, built {[w.name for w in wheels]}")
        (dest / "dist").mkdir()
        wheel = shutil.copy(wheels[0], dest / "dist")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-index",
            "--target",
            str(dest / "site"),
            str(wheel),
        ],
        dest,
    )
    return dest / "site"


def _run(cmd: list[str], cwd: Path) -> None:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def environment(site: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that make every process of a sweep import the wheel installed in ``site``."""
    base = os.environ if base is None else base
    return {
        INSTALLED_ENV: str(site),
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), base.get("PYTHONPATH")) if p),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(site.parent / "airflow-plugins"),
    }


def main() -> int:
    dest = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DEST
    site = build_and_install(dest)
    for key, value in environment(site).items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
