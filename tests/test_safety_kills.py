"""The kill matrix on the real stack, sampled: the merge job killed at every commit step and before a
storage call drawn from each third of a commit, a storage call failing, then one DAG
run repairs every partition, every row checked (``scripts/reliability.py`` runs every case)."""

from __future__ import annotations

import pytest

from fault_hooks import KILL_POINTS
from matrix_sampling import note_sample
from reliability import CALL, FAIL, call_sample, kill_matrix

pytestmark = pytest.mark.integration


def test_a_kill_at_every_commit_step_is_repaired_by_the_next_run(stack, tmp_path, matrix_rng):
    """The reliability script's kill matrix, sampled: one of the named kill points and one storage
    operation of the commit, drawn at random (``reliability.py`` kills at every named point,
    ``--every-call`` before every operation), ORC and Parquet taking turns; then one DAG run
    repairs them all. Each case's victim is the second of three partitions: it commits under a
    chunk's lock, with the chunk's first partition committed before it.

    The drawn storage operation is, by a coin, killed before or failing (``--every-call N
    --storage-errors`` fails each in turn). A failing one never leaves readers without rows: a
    first pass puts back what it had moved and fails the partition, past the commit point the
    merged file holds the rows; checked right after the failed job."""
    seed, rng = matrix_rng
    # Each case is a spark-submit of its own: one named point and one storage call per run (the
    # schedule explorer kills the same commit code at every call and step, every run);
    # reliability.py runs every one on the real stack (--every-call, --storage-errors).
    points = (rng.choice(KILL_POINTS), rng.choice(call_sample("in_place", rng, prefix=rng.choice((CALL, FAIL)))))
    sample = note_sample("kill matrix (in_place)", seed, points)
    figures = kill_matrix(
        stack,
        tmp_path,
        formats=("ORC", "PARQUET"),
        points=points,
        partitions=3,
        files=4,
        rows=250,
        db="faults",
        alternate=True,
    )
    assert figures["kill_points_tried"] == len(points), sample
    assert figures["recovery_run"] == "success", (sample, figures["problems"])
    assert figures["partitions_checked"] == 3 * len(points), sample
    assert figures["rows_checked"] == 3 * len(points) * 250, sample
    assert figures["rows_lost"] == 0 and figures["rows_duplicated"] == 0, sample
    assert figures["leftovers"] == 0 and figures["kills_not_reached"] == 0, (sample, figures["problems"])
    assert figures["rows_wrong_right_after"] == 0, (sample, figures["problems"])
    assert figures["calls_past_the_commit"] == [], sample
    assert figures["problems"] == [], sample
