"""The wheel's build beyond pyproject.toml's: the merge engine's jar, built into the package before
setuptools copies it (scripts/build_engine.py, as ``make engine`` builds it)."""

import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUILDER = Path(__file__).resolve().parent / "scripts" / "build_engine.py"


class BuildPyWithEngine(build_py):
    def run(self):
        # A copy of the sources without scripts/ (the tests' wheel builds) carries the jar already built.
        if BUILDER.exists():
            runpy.run_path(str(BUILDER))["build"]()
        super().run()


setup(cmdclass={"build_py": BuildPyWithEngine})
