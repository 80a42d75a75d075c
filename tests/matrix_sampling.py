"""The seeded samples ``make test`` takes, each printed in the suite's summary:

- the safety matrices (``test_safety_kills``, ``test_safety_actors``): a new seed each run, the
  same cases again with ``SUITE_MATRIX_SEED=<seed>`` (the ``matrix_rng`` fixture); ``make
  test-exhaustive`` runs every case;
- the variants of a parametrized test whose variants walk the same path (ORC or Parquet, one
  commit step or another, ...: ``variants``): one per run, drawn when the tests are collected by
  a seed that changes every day (both test processes collect the same tests), replayed with
  ``SUITE_MATRIX_SEED=<seed>``; ``make test-full`` (``SUITE_VARIANTS=all``) runs every one.
  Tests that are variants of each other without being one parametrized test (a module fixture
  each) carry ``@pytest.mark.variant(group, name)``: one name per group is kept the same way
  (``deselect_undrawn``).
"""

from __future__ import annotations

import os
import random
import time

from reliability import SEED_ENV
from suite_budget import record_note

ALL_VARIANTS_ENV = "SUITE_VARIANTS"  # "all": every variant (make test-full)


def note_sample(name: str, seed: int, cases) -> str:
    text = f"{name}: seed {seed}, {len(cases)} case(s) {list(cases)} (replay: {SEED_ENV}={seed})"
    record_note(text)
    print(text)
    return text


def variants(name: str, values: list, every: str = ALL_VARIANTS_ENV) -> list:
    """The variants of ``name`` (a parametrized test, a stack module) this run tries: one, drawn
    by the day's seed (or ``SUITE_MATRIX_SEED``), or all of them when the environment variable
    ``every`` is "all"."""
    if os.environ.get(every) == "all":
        return list(values)
    seed = int(os.environ.get(SEED_ENV) or time.strftime("%Y%m%d", time.gmtime()))
    pick = [random.Random(f"{name}/{seed}").choice(list(values))]
    note_sample(name, seed, [getattr(p, "id", None) or p for p in pick])
    return pick


def deselect_undrawn(config, items) -> None:
    """Keep, of the tests marked ``variant(group, name)``, those of the name drawn for each group
    (``variants``); the others are deselected, as ``-m`` deselects."""
    groups: dict[str, set[str]] = {}
    for item in items:
        mark = item.get_closest_marker("variant")
        if mark:
            groups.setdefault(mark.args[0], set()).add(mark.args[1])
    drawn = {group: set(variants(group, sorted(names))) for group, names in groups.items()}
    keep, drop = [], []
    for item in items:
        mark = item.get_closest_marker("variant")
        (drop if mark and mark.args[1] not in drawn[mark.args[0]] else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
