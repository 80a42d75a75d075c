"""The merge job's driver time by step: summed over partitions and threads, averaged per partition."""

from __future__ import annotations

import re
import threading
from types import SimpleNamespace

from hive_compaction.merge.step_times import StepTimes


def test_steps_are_averaged_over_the_partitions_timed_in_the_order_first_timed():
    steps = StepTimes()
    assert steps.summary() is None
    a, b = object(), object()
    steps.add("prepare", 0.010, a)
    steps.add("prepare", 0.030, b)
    steps.add("commit", 0.050, a)  # b failed before its commit: still one of the two partitions
    assert steps.summary() == "prepare 20.0, commit 25.0 ms per partition (of 2)"


def test_threads_add_up_and_a_step_that_raises_is_still_timed():
    steps = StepTimes()
    partitions = [object() for _ in range(8)]

    def work(p):
        for _ in range(100):
            steps.add("commit", 0.001, p)
        try:
            with steps.step("statistics", p):
                raise OSError("the Metastore went away")
        except OSError:
            pass

    threads = [threading.Thread(target=work, args=(p,)) for p in partitions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m = re.fullmatch(r"commit ([0-9.]+), statistics ([0-9.]+) ms per partition \(of 8\)", steps.summary())
    assert m and float(m.group(1)) == 100.0 and 0 <= float(m.group(2)) < 1000


def test_the_first_merge_is_logged_once_whichever_engine_and_thread_begins_it(caplog):
    steps = StepTimes()
    caplog.set_level("INFO", logger="hive_compaction.merge.step_times")
    threads = [threading.Thread(target=steps.first_merge, args=(engine,)) for engine in ("copy", "rewrite") * 8]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and re.fullmatch(r"the first merge began \((copy|rewrite)\)", lines[0]), lines


def test_a_commits_protocol_steps_are_timed_each_from_the_one_before(monkeypatch):
    """``laps``: the commit code's reports (``commit.steps.reached``) in the committing thread
    time each step from the step before it; another thread's commit is not this one's."""
    from hive_compaction.commit import steps as protocol
    from hive_compaction.merge import step_times

    clock = iter([10.0, 10.004, 10.010, 10.011])
    monkeypatch.setattr(step_times, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    timer, partition = StepTimes(), object()
    with protocol.observed(timer.laps(partition)):
        other = threading.Thread(target=protocol.reached, args=(protocol.Step.JOURNALED, "db.t/other"))
        other.start()
        other.join()
        for step in (
            protocol.Step.STAGED,
            protocol.Step.JOURNALED,
            protocol.Step.INPUTS_MOVED,
            protocol.Step.OUTPUTS_MOVED,
        ):
            protocol.reached(step, "db.t/dt=1")
    protocol.reached(protocol.Step.MANIFEST_WRITTEN, "db.t/dt=1")  # outside the block: not timed
    assert timer.summary() == "journaled 4.0, inputs_moved 6.0, outputs_moved 1.0 ms per partition (of 1)"
