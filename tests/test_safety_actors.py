"""The adversary matrices on the real stack, sampled: other actors (writers, a DROP PARTITION, a
stolen lock, a hung or restarting Metastore, other runs' and the same run's jobs, a rollback, a
purge, a reader) at the steps of an in-place commit and of a location switch, every row checked
(``scripts/reliability.py --adversaries`` runs every case)."""

from __future__ import annotations

import pytest

from fault_hooks import SWITCH_POINTS
from matrix_sampling import note_sample
from reliability import (
    ADVERSARIES,
    ADVERSARY_POINTS,
    JOB_ACTORS,
    METASTORE_FAULTS,
    SWITCH_ADVERSARIES,
    adversary_matrix,
    call_sample,
    covering_sample,
    print_matrix,
    switch_case_allowed,
)

pytestmark = pytest.mark.integration

# Each of these actors costs a spark-submit of its own: one of them acts per run, drawn, the other
# actors every run (the schedule explorer runs the same commit code against them all, every run).
COSTLY_ACTORS, COSTLY_PER_RUN = METASTORE_FAULTS + JOB_ACTORS, 1


def drawn_actors(actors, rng) -> tuple[str, ...]:
    """Every actor of ``actors`` but the costly ones, and ``COSTLY_PER_RUN`` of those, drawn."""
    costly = [a for a in actors if a in COSTLY_ACTORS]
    chosen = set(rng.sample(costly, COSTLY_PER_RUN))
    return tuple(a for a in actors if a not in COSTLY_ACTORS or a in chosen)


def test_other_actors_at_commit_steps_never_lose_or_duplicate_a_row(stack, tmp_path, matrix_rng):
    """The reliability script's adversary matrix, sampled: every step (the named ones and one
    storage operation of the commit drawn at random) meets an actor and every actor of the run
    acts at a step: writers adding a file or overwriting with the inputs' names, a DROP
    PARTITION, a stolen lock, and one drawn of a hung or restarting Metastore, a second
    committer of another run, the same run's job started again, a rollback and a purge; then
    every row is checked against what they left, before and after an MSCK REPAIR TABLE.
    ``scripts/reliability.py --adversaries`` runs every step with every actor."""
    seed, rng = matrix_rng
    points = ADVERSARY_POINTS + (rng.choice(call_sample("in_place", rng)),)
    actors = drawn_actors(ADVERSARIES, rng)
    cases = covering_sample(points, actors, rng)
    sample = note_sample("adversary matrix (in_place)", seed, cases)
    figures = adversary_matrix(stack, tmp_path, cases=cases)
    assert_nothing_lost(figures, points, actors, sample)


def test_other_actors_during_a_location_switch_never_lose_or_duplicate_a_row(stack, tmp_path, matrix_rng):
    """The same sampled matrix with commit_mode location_switch (one costly actor drawn of the
    restarting Metastore and the four jobs), plus a reader that lists the
    partition at the step and reads what it listed after the run: it gets exactly the rows
    before, or finds the files gone to the trash (a query that fails and is retried), never a mix.
    Writers by path and a DROP PARTITION after the switch's commit point are that mode's documented
    limits (``switch_case_allowed``), never sampled."""
    seed, rng = matrix_rng
    points = SWITCH_POINTS + call_sample("location_switch", rng)
    # The hung Metastore (a retry's spark-submit inside the pause) is sampled in place only, for
    # the budget; the full sweep runs it at every step of both modes.
    actors = drawn_actors(tuple(a for a in SWITCH_ADVERSARIES if a != "hang"), rng)
    cases = covering_sample(points, actors, rng, allowed=switch_case_allowed)
    sample = note_sample("adversary matrix (location_switch)", seed, cases)
    figures = adversary_matrix(stack, tmp_path, cases=cases, db="adversaries_switch", commit_mode="location_switch")
    assert_nothing_lost(figures, points, actors, sample)


def assert_nothing_lost(figures: dict, points, actors, sample: str) -> None:
    """Every step and actor of the sample ran (or its storage call lay past the commit's end), and
    nothing was lost, duplicated, re-created, left over or reported a success while rows differ."""
    print_matrix(figures)
    assert figures["cases"] + len(figures["calls_past_the_commit"]) >= len(points), sample
    assert {a for row in figures["matrix"].values() for a in row} == set(actors), sample
    assert figures["problems"] == [], (sample, figures["problems"])
    assert figures["recovery_run"] == "success", sample
    assert figures["rows_checked"] > 0 and figures["rows_lost"] == 0 and figures["rows_duplicated"] == 0, sample
    assert figures["folders_recreated"] == 0 and figures["journals_left"] == 0 and figures["not_reached"] == 0, sample
    assert figures["msck_changed"] == 0 and figures["statistics_wrong"] == 0, sample
    assert figures["false_successes"] == 0, sample
