"""Where a test may inject a fault into the commit protocol (kill the job, change the files).

The shipped code only calls the callable that ``HIVE_COMPACTION_FAULT_HOOK`` names
(``module:function``, called with the point, the partition's label and its location); tests set it
(``scripts/fault_hooks.py``). Unset, as in production, nothing happens. Its own module, imported by
every module with a fault point and importing nothing of the package.
"""
from __future__ import annotations

import importlib
import os

FAULT_HOOK_ENV = "HIVE_COMPACTION_FAULT_HOOK"
# The in-place commit's steps (``commit.in_place``) where a test kills the job.
KILL_POINTS = ("staged", "journaled", "input_moved", "inputs_moved", "output_moved", "outputs_moved",
               "manifest_written")
# Also "outputs_moving": after the last check before the outputs move in; a kill there leaves what
# one at "inputs_moved" leaves, another writer acting there is the case worth a step of its own.
# And "listed": once the partition's listing for the journal is taken, before the journal; a kill
# there leaves what one at "staged" leaves.


def fault_point(point: str, label: str = "", location: str = "") -> None:
    spec = os.environ.get(FAULT_HOOK_ENV)
    if spec:
        module, _, name = spec.partition(":")
        getattr(importlib.import_module(module), name)(point, label, location)
