"""The seeded sample the safety matrices take in ``make test`` (``test_safety_kills``,
``test_safety_actors``): a new seed each run, printed in the suite's summary; the same cases again
with ``SUITE_MATRIX_SEED=<seed>`` (the ``matrix_rng`` fixture). ``make test-exhaustive`` runs every
case."""
from __future__ import annotations

from reliability import SEED_ENV
from suite_budget import record_note


def note_sample(name: str, seed: int, cases) -> str:
    text = f"{name}: seed {seed}, {len(cases)} case(s) {list(cases)} (replay: {SEED_ENV}={seed})"
    record_note(text)
    print(text)
    return text
