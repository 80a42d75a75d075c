"""The commit protocol's steps, named once.

The commit code reports each step it passes (``reached``) to whoever observes the committing
thread: the merge job's step timer (``merge.step_times``: the time from one step to the next, per
partition, in the job's log), the tests' fault injection (from outside, under ``scripts/``: a kill
or an actor at a step) and the schedule explorer (``scripts/explorer``: its traces name them). A step
added here and reported by the code is timed, killable and traced without another change.

``INPUT_MOVED`` and ``OUTPUT_MOVED`` (after the first move of a batch) are the only steps inside
one storage call (``HadoopFS.move_all``): the fault injection splits that batch to reach them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from enum import Enum

# typing's: an alias evaluated at import, and collections.abc.Callable[...] needs Python 3.9 (the job side runs on 3.8)
from typing import Callable


class Step(str, Enum):
    STAGED = "staged"  # the outputs are staged: the commit asks for the partition's lock next
    JOURNALED = "journaled"  # the journal is published: the commit is decided
    INPUT_MOVED = "input_moved"  # (in place) the first input is in the trash
    INPUTS_MOVED = "inputs_moved"  # (in place) every input is in the trash
    OUTPUTS_MOVING = "outputs_moving"  # (in place) the last check passed; the outputs move in next
    OUTPUT_MOVED = "output_moved"  # (in place) the first output is in the partition
    OUTPUTS_MOVED = "outputs_moved"  # (in place) every output is in: the commit point
    FOLDER_BUILT = "folder_built"  # (switch) the new folder holds its files, not yet checked
    SWITCHED = "switched"  # (switch) the Metastore names the new folder: the commit point
    MANIFEST_WRITTEN = "manifest_written"  # the manifest is written; the journal goes next

    def __str__(self) -> str:  # the name in logs and f-strings, on every Python the job runs on
        return self.value


# The steps a commit passes, in order, by mode.
IN_PLACE_STEPS = (
    Step.STAGED,
    Step.JOURNALED,
    Step.INPUT_MOVED,
    Step.INPUTS_MOVED,
    Step.OUTPUTS_MOVING,
    Step.OUTPUT_MOVED,
    Step.OUTPUTS_MOVED,
    Step.MANIFEST_WRITTEN,
)
SWITCH_STEPS = (Step.STAGED, Step.JOURNALED, Step.FOLDER_BUILT, Step.SWITCHED, Step.MANIFEST_WRITTEN)
# Reached inside one batch of moves, not by a call of the commit code.
WITHIN_A_BATCH = (Step.INPUT_MOVED, Step.OUTPUT_MOVED)

Observer = Callable[[Step, str], None]  # (step, the partition's label)
_observers: list[Observer] = []  # for every thread (the fault injection)
# The committing thread's own (the step timer): a context variable, so that each thread (and each
# greenlet or task sharing one) has its own.
_mine: ContextVar[Observer | None] = ContextVar("commit_step_observer", default=None)


def reached(step: Step, label: str) -> None:
    """The commit of ``label`` (``table/partition``) passed ``step``."""
    mine = _mine.get()
    if mine is not None:
        mine(step, label)
    for observer in _observers:
        observer(step, label)


@contextmanager
def observed(observer: Observer) -> Iterator[None]:
    """Report the steps this thread's commits pass to ``observer`` while in the block."""
    token = _mine.set(observer)
    try:
        yield
    finally:
        _mine.reset(token)


def observe_all(observer: Observer) -> None:
    """Report every thread's steps to ``observer`` from now on."""
    _observers.append(observer)


def stop_observing(observer: Observer) -> None:
    if observer in _observers:
        _observers.remove(observer)
