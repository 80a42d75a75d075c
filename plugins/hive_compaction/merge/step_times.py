"""Where a merge job's per-partition driver time goes, step by step (prepare, copy, the lock, the
commit, ...): summed over the job's partitions and driver threads, logged once at its end as
milliseconds per partition, so a slow step shows in the task's log (and ``benchmarks/merge_speed.py``
reads the line), and when its first merge began: the end of the job's fixed start. Within a
commit, the protocol's steps (``commit.steps``) are timed too, each from the step before it
(``laps``): "journaled" is the time from the staged outputs to the published journal (the lock,
the state read, the listing), "inputs_moved" the moves of the inputs, and so on."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from contextlib import contextmanager

from hive_compaction.commit.steps import Observer, Step

log = logging.getLogger(__name__)


class StepTimes:
    def __init__(self):
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = defaultdict(float)
        self._partitions: set[int] = set()
        self._merging = False

    def first_merge(self, engine: str) -> None:
        """Log, the first time only, that merging began (``engine``: the first copy, or the
        first rewrite job's write): everything before it is the job's fixed start."""
        with self._lock:
            if self._merging:
                return
            self._merging = True
        log.info("the first merge began (%s)", engine)

    def add(self, step: str, seconds: float, partition: object) -> None:
        with self._lock:
            self._seconds[step] += seconds
            self._partitions.add(id(partition))

    @contextmanager
    def step(self, name: str, partition: object):
        began = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - began, partition)

    def laps(self, partition: object) -> Observer:
        """An observer of one partition's commit steps (``commit.steps.observed``) that times each
        from the one before it; the first seen starts the clock."""
        last: list[float] = []

        def lap(step: Step, label: str) -> None:
            now = time.monotonic()
            if last:
                self.add(step.value, now - last[0], partition)
            last[:] = [now]

        return lap

    def summary(self) -> str | None:
        """ "prepare 20.1, copy 15.0, ... ms per partition (of N)", the steps in the order first
        timed; None when nothing was timed."""
        with self._lock:
            n = len(self._partitions)
            if not n:
                return None
            steps = ", ".join(f"{name} {1000 * s / n:.1f}" for name, s in self._seconds.items())
            return f"{steps} ms per partition (of {n})"
