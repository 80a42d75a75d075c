"""The real local stack for integration tests: a Hive Metastore service, Spark and Airflow.

One Metastore (on a free loopback port, state in a temporary folder) and one Airflow home
serve the whole session; each test makes its own database and tables.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "scripts")]

from harness import Stack  # noqa: E402


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("stack"))
    s.start()
    yield s
    s.stop()
