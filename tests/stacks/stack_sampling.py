"""The real stacks from Maven Central (``make jars``: HDFS, Hive Metastores 3.1 and 4.0).

``make test`` runs one variant of each module (one Metastore release, ...), drawn by a seed that
changes every day and is printed (both test processes collect the same tests; replay with
``SUITE_MATRIX_SEED=<seed>``), and leaves out the tests marked ``stacks_only``; ``make
test-stacks`` (``SUITE_STACKS=all``) runs every one. A stack
whose jars are not fetched (Maven Central unreachable when ``make jars`` ran) skips, saying so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from matrix_sampling import variants

JARS = Path(__file__).resolve().parents[2] / ".state" / "jars"


def sampled(name: str, values: list[str]) -> list[str]:
    """The variants of a stack module this run tries (see the module's head)."""
    return variants(name, values, every="SUITE_STACKS")


# Set by CI (.ci/run): a real stack that cannot be fetched fails the run instead of skipping.
REQUIRE_ENV = "SUITE_REQUIRE_STACKS"


def missing(why: str) -> None:
    """Skip, saying why; a failure where the stacks are required (CI)."""
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{why} ({REQUIRE_ENV} is set: the real stacks may not skip)", pytrace=False)
    pytest.skip(why)


def require_jars(stack: str) -> None:
    """Skip unless ``make jars`` fetched scripts/maven/<stack>/pom.xml (fail where required)."""
    if not (JARS / stack / ".fetched").exists():
        missing(f"the jars of scripts/maven/{stack} are not fetched (make jars; is Maven Central reachable?)")
