"""Fault injection for the tests: kill the merge job, or run a command, at a commit step.

The shipped code only calls the callable named by ``HIVE_COMPACTION_FAULT_HOOK`` (see
``commit.fault_point``); this module is that callable in tests, put on the job's PYTHONPATH by
the harness. Driven by environment variables, so a test reaches every step of the protocol
without relying on timing:

- ``HIVE_COMPACTION_TEST_KILL_AT="<point>[:<text>]"`` kills the job with SIGKILL at that point
  (for the partition whose label contains <text>, if given);
- ``HIVE_COMPACTION_TEST_KILL_AT_CALL="<n>[:<text>]"`` kills the job with SIGKILL just before
  the n-th storage operation (``HadoopFS.before_operation``: every call, every single move of a
  batch, each step of a journal's publication) that the thread committing the partition makes
  from its first commit step (``staged``) on: a sweep over n stops the commit between any two
  of its file-system calls;
- ``HIVE_COMPACTION_TEST_HOOK_AT="<point>[:<text>]"`` (or ``"call:<n>[:<text>]"``: before the
  n-th storage operation of each partition's commit, counted as for the kill) runs the shell
  command in ``HIVE_COMPACTION_TEST_HOOK_CMD`` there, with the partition's folder in
  ``HIVE_COMPACTION_PARTITION_DIR``; several entries separated by ``;`` give each partition its own
  step (the sampled adversary matrix pauses every case of one job at its own step).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from urllib.parse import urlsplit

KILL_ENV = "HIVE_COMPACTION_TEST_KILL_AT"
KILL_AT_CALL_ENV = "HIVE_COMPACTION_TEST_KILL_AT_CALL"
HOOK_ENV = "HIVE_COMPACTION_TEST_HOOK_AT"
HOOK_CMD_ENV = "HIVE_COMPACTION_TEST_HOOK_CMD"
# What the harness sets for a job that must load this module.
HOOK_SPEC = "fault_hooks:at"

log = logging.getLogger("hive_compaction.fault_hooks")


CALL = "call:"


def _entries(setting: str | None) -> list[tuple[str, str]]:
    """(point, text) of each ``;``-separated ``<point>[:<text>]`` entry; a point ``call:<n>``
    keeps its number."""
    out = []
    for entry in filter(None, (setting or "").split(";")):
        if entry.startswith(CALL):
            n, _, text = entry[len(CALL):].partition(":")
            out.append((f"{CALL}{n}", text))
        else:
            name, _, text = entry.partition(":")
            out.append((name, text))
    return out


def _matches(setting: str | None, point: str, label: str) -> bool:
    return any(name == point and text in label for name, text in _entries(setting))
# .calls: storage operations this thread made since its commit began (None: not counting);
# .label, .location: that commit's partition.
_counting = threading.local()


def _hooks_at_calls() -> list[tuple[int, str]]:
    return [(int(name[len(CALL):]), text) for name, text in _entries(os.environ.get(HOOK_ENV)) if name.startswith(CALL)]


def _count_operation(operation: str, uri: str) -> None:
    calls = getattr(_counting, "calls", None)
    if calls is None:
        return
    _counting.calls = calls = calls + 1
    if any(calls == n and text in _counting.label for n, text in _hooks_at_calls()):
        _run_hook(f"{CALL}{calls} (before {operation} {uri})", _counting.label, _counting.location)
    kill_at_call = os.environ.get(KILL_AT_CALL_ENV, "")
    if kill_at_call and calls == int(kill_at_call.partition(":")[0]) and \
            kill_at_call.partition(":")[2] in _counting.label:
        log.warning("test kill point call:%d reached (before %s %s): killing the job with SIGKILL", calls,
                    operation, uri)
        os.kill(os.getpid(), signal.SIGKILL)


if os.environ.get(KILL_AT_CALL_ENV) or _hooks_at_calls():
    from hive_compaction.storage.hadoop_fs import HadoopFS
    HadoopFS.before_operation = staticmethod(_count_operation)


def _run_hook(where: str, label: str, location: str) -> None:
    log.warning("test hook at %s for %s", where, label)
    subprocess.run(os.environ[HOOK_CMD_ENV], shell=True, check=True,
                   env={**os.environ, "HIVE_COMPACTION_PARTITION_DIR": urlsplit(location).path})


def at(point: str, label: str, location: str) -> None:
    if point == "staged" and (os.environ.get(KILL_AT_CALL_ENV) or _hooks_at_calls()):
        # Count this thread's operations from its commit's start (the thread's next partition
        # starts again). Counting on from there, an in-place commit's listing for its journal is
        # its first operation: each number is reached once (counting again from "listed" ran an
        # actor at call:1 twice).
        _counting.calls, _counting.label, _counting.location = 0, label, location
    if _matches(os.environ.get(HOOK_ENV), point, label):
        _run_hook(point, label, location)
    if _matches(os.environ.get(KILL_ENV), point, label):
        log.warning("test kill point %s reached for %s: killing the job with SIGKILL", point, label)
        os.kill(os.getpid(), signal.SIGKILL)
