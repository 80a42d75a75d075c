"""Loaded by every Python process started with this folder on its PYTHONPATH (the harness puts it
there for a job a test injects faults into): wraps the job's storage and Metastore classes
(``fault_hooks.install``) when the package is importable, so the shipped code runs unmodified.
Says on stderr which copy of the package it wrapped (the wheel sweeps check it: wheel_sweeps.py)."""

import importlib.util
import os
import sys

if any(k.startswith("HIVE_COMPACTION_TEST_") for k in os.environ):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/
    if importlib.util.find_spec("hive_compaction") is not None and importlib.util.find_spec("py4j") is not None:
        import fault_hooks

        fault_hooks.install()
        sys.stderr.write(f"fault hooks installed on {sys.modules['hive_compaction'].__file__}\n")
