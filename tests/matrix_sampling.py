"""The seeded samples ``make test`` takes, each printed in the suite's summary:

- the safety matrices (``test_safety_kills``, ``test_safety_actors``): a new seed each run, the
  same cases again with ``SUITE_MATRIX_SEED=<seed>`` (the ``matrix_rng`` fixture); ``make
  test-exhaustive`` runs every case;
- the variants of a parametrized test whose variants walk the same path (ORC or Parquet, one
  commit step or another, ...: ``variants``): one per run, drawn when the tests are collected by
  a seed that changes every day (both test processes collect the same tests), replayed with
  ``SUITE_MATRIX_SEED=<seed>``; ``make test-full`` (``SUITE_VARIANTS=all``) runs every one.
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
