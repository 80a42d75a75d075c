"""Fault injection for the tests, from outside the shipped code: kill a job, or run a command,
at a step of the commit protocol or before any one storage call.

The shipped jobs have no hook, no kill point and no test branch. Every storage operation of a
job is a call on one class (``storage.hadoop_fs.HadoopFS``: each single move of a batch, and
the write, publish and delete steps of a journal or manifest, are calls of their own), and every
Metastore lock and location switch one on another (``storage.metastore_client.JobMetastore``).
``install()`` wraps those two classes' methods; the steps below are recognised from the calls
and the paths they name. A job gets the wrappers from ``fault_injection/sitecustomize.py``, which
the harness puts on its PYTHONPATH when a test sets one of these variables:

- ``HIVE_COMPACTION_TEST_KILL_AT="<step>[:<text>]"`` kills the job with SIGKILL at that step
  (for the partition whose label or paths contain <text>, if given);
- ``HIVE_COMPACTION_TEST_KILL_AT_CALL="<n>[:<text>]"`` kills the job with SIGKILL just before the
  n-th storage call the thread committing the partition makes from its commit's start (the
  partition's Metastore lock request): a sweep over n stops the commit between any two of its
  file-system calls;
- ``HIVE_COMPACTION_TEST_FAIL_AT_CALL="<n>[:<text>]"``: that call fails instead (an ``OSError``
  raised where the storage would raise its own), the job going on as it would after a storage
  error;
- ``HIVE_COMPACTION_TEST_HOOK_AT="<step>[:<text>]"`` (or ``"call:<n>[:<text>]"``) runs the shell
  command in ``HIVE_COMPACTION_TEST_HOOK_CMD`` there, with the partition's folder in
  ``HIVE_COMPACTION_PARTITION_DIR``; several entries separated by ``;`` give each partition its
  own step (the sampled adversary matrix pauses every case of one job at its own step).

The commit protocol's steps are ``hive_compaction.commit.steps.Step`` (the code reports them to its
step timer; ``tests/test_commit_protocol.py`` checks that these wrappers see each one the code
reports, where the code reports it); the others are the harness's own. As the wrappers see them:

- ``staged``: the partition's outputs are staged; its commit asks for the Metastore lock next
  (also when a job asks for it to replay a journal), or its commit chunk asks for one lock on
  all its partitions (``JobMetastore.lock_chunk``: each partition's ``staged`` fires then, once);
- ``listed``: the commit has listed the partition for its journal;
- ``journaled``: the journal is published (``create_exclusive`` of ``journal/<id>.json``);
- ``input_moved`` / ``inputs_moved``: after the first / the last input moved to the trash;
- ``outputs_moving``: before the staged outputs move into the partition;
- ``output_moved`` / ``outputs_moved``: after the first / the last output moved in;
- ``manifest_written``: the manifest is published (``manifests/<run>/<id>/<attempt>.json``);
- ``rewritten``: the rewrite's Spark job wrote its files, before they are listed and checked;
- ``purging``: a purge decided to delete a run (the label is the run's name);
- ``rollback_outputs_moved``: a rollback moved the merged files out of the partition;
- ``folder_built``: a location switch's new folder holds its files, before it is checked;
- ``switched``: the Metastore names the new folder.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import signal
import subprocess
import threading
from urllib.parse import unquote, urlsplit

from hive_compaction.commit.steps import IN_PLACE_STEPS, SWITCH_STEPS, Step

KILL_ENV = "HIVE_COMPACTION_TEST_KILL_AT"
KILL_AT_CALL_ENV = "HIVE_COMPACTION_TEST_KILL_AT_CALL"
FAIL_AT_CALL_ENV = "HIVE_COMPACTION_TEST_FAIL_AT_CALL"
HOOK_ENV = "HIVE_COMPACTION_TEST_HOOK_AT"
HOOK_CMD_ENV = "HIVE_COMPACTION_TEST_HOOK_CMD"

# The in-place commit's steps where the kill matrix kills the job, in order (a kill at
# outputs_moving leaves what one at inputs_moved does: only checks lie between them).
KILL_POINTS = tuple(s.value for s in IN_PLACE_STEPS if s is not Step.OUTPUTS_MOVING)
# A location switch's.
SWITCH_POINTS = tuple(s.value for s in SWITCH_STEPS)
# After the first move of a batch (only these need a batch split in two).
_FIRST_OF = {"inputs": Step.INPUT_MOVED.value, "outputs": Step.OUTPUT_MOVED.value}
_ALL_OF = {
    "inputs": Step.INPUTS_MOVED.value,
    "outputs": Step.OUTPUTS_MOVED.value,
    "rolled_back": "rollback_outputs_moved",
}
CALL = "call:"
VERSIONS_FOLDER = "/_compacted/"  # storage.paths.VERSIONS_FOLDER: a location switch's new folders

log = logging.getLogger("hive_compaction.fault_hooks")


class _Commit(threading.local):
    """What the wrappers know of the commit this thread runs."""

    calls: int | None = None  # storage calls since the commit began (None: not counting)
    label = ""  # table/partition
    folder = None  # () -> the partition's folder
    listed = True  # its "listed" step seen
    new_folder = None  # a location switch's new folder, once outputs moved into it
    purge_root = None  # a purge's work area, once it listed the journals (then it deletes runs)
    purged: frozenset = frozenset()
    chunk_staged: frozenset = frozenset()  # partitions whose "staged" fired as their chunk's lock was asked for


_now = _Commit()


def _entries(setting: str | None) -> list[tuple[str, str]]:
    """(point, text) of each ``;``-separated ``<point>[:<text>]`` entry; a point ``call:<n>``
    keeps its number."""
    out = []
    for entry in filter(None, (setting or "").split(";")):
        if entry.startswith(CALL):
            n, _, text = entry[len(CALL) :].partition(":")
            out.append((f"{CALL}{n}", text))
        else:
            name, _, text = entry.partition(":")
            out.append((name, text))
    return out


def _matches(setting: str | None, point: str, haystack: str) -> bool:
    return any(name == point and text in haystack for name, text in _entries(setting))


def _named(point: str) -> bool:
    return any(name == point for env in (KILL_ENV, HOOK_ENV) for name, _ in _entries(os.environ.get(env)))


def _counting_wanted() -> bool:
    return bool(os.environ.get(KILL_AT_CALL_ENV) or os.environ.get(FAIL_AT_CALL_ENV)) or any(
        name.startswith(CALL) for name, _ in _entries(os.environ.get(HOOK_ENV))
    )


def _path(uri: str) -> str:
    return urlsplit(str(uri)).path.rstrip("/")


def _run_hook(where: str, label: str, folder: str | None) -> None:
    log.warning("test hook at %s for %s", where, label)
    subprocess.run(
        os.environ[HOOK_CMD_ENV],
        shell=True,
        check=True,
        env={**os.environ, "HIVE_COMPACTION_PARTITION_DIR": folder or ""},
    )


def _step(point: str, haystack: str, folder: str | None = None) -> None:
    """The job reached ``point`` for the partition ``haystack`` names (its label, its paths)."""
    label = _now.label or haystack
    if _matches(os.environ.get(HOOK_ENV), point, haystack):
        _run_hook(point, label, folder or (_now.folder() if _now.folder else None))
    if _matches(os.environ.get(KILL_ENV), point, haystack):
        log.warning("test kill point %s reached for %s: killing the job with SIGKILL", point, label)
        os.kill(os.getpid(), signal.SIGKILL)


def _count(operation: str, uri) -> None:
    """Before each storage call: the commit's n-th call, for the call-numbered hooks and kill."""
    calls = _now.calls
    if calls is None:
        return
    _now.calls = calls = calls + 1
    for name, text in _entries(os.environ.get(HOOK_ENV)):
        if name == f"{CALL}{calls}" and text in _now.label:
            _run_hook(f"{CALL}{calls} (before {operation} {uri})", _now.label, _now.folder() if _now.folder else None)
    n, _, text = os.environ.get(KILL_AT_CALL_ENV, "").partition(":")
    if n and calls == int(n) and text in _now.label:
        log.warning(
            "test kill point %s%d reached (before %s %s): killing the job with SIGKILL", CALL, calls, operation, uri
        )
        os.kill(os.getpid(), signal.SIGKILL)
    n, _, text = os.environ.get(FAIL_AT_CALL_ENV, "").partition(":")
    if n and calls == int(n) and text in _now.label:
        log.warning("test storage fault at %s%d (%s %s)", CALL, calls, operation, uri)
        raise OSError(f"test storage fault at {CALL}{calls}: {operation} {uri} failed")


def _begin_commit(metastore, table: str, partition: str, staged: bool = True) -> None:
    """A partition's commit (or replay) asks for its lock, or begins under its chunk's
    (``staged`` then fired already, as the chunk's lock was asked for): its steps and calls
    count from here."""
    values = [unquote(kv.partition("=")[2]) for kv in partition.split("/")] if partition else []
    _now.label = f"{table}/{partition}"

    def folder() -> str:
        return _path((metastore.location(table, values) if values else metastore.table_location(table)) or "")

    # The partition's folder as the commit begins: after a location switch's commit point the
    # Metastore names the new one, but the test's actors are keyed by the folder it merged.
    began = folder() if os.environ.get(HOOK_ENV) else None
    _now.folder = (lambda: began) if began else folder
    _now.listed, _now.new_folder = False, None
    _now.calls = 0 if _counting_wanted() else None
    if staged:
        _step(Step.STAGED.value, _now.label)


def _kind(pairs: list) -> str | None:
    src, dst = str(pairs[0][0]), str(pairs[0][1])
    if "/rolled-back/" in dst:
        return "rolled_back"
    if "/trash/" in dst and "/trash/" not in src:  # into the staging folder's trash (or the run's)
        return "inputs"
    if "/trash/" in src:  # a roll back, or a switch's old files back
        return None
    if "/staging/" in src and VERSIONS_FOLDER in dst:
        return "build"
    if "/staging/" in src and "/staging/" not in dst:
        return "outputs"
    return None


def _record_label(text: str) -> tuple[str, str | None]:
    try:
        record = json.loads(text)
        return f"{record['table']}/{record['partition']} {record.get('location', '')}", _path(record["location"])
    except (ValueError, KeyError, TypeError):
        return "", None


def _wrap_storage(cls) -> dict:
    """Wrap HadoopFS's storage calls; returns the originals."""
    originals = {
        name: inspect.getattr_static(cls, name)
        for name in (
            "list",
            "statuses",
            "move_all",
            "copy",
            "delete",
            "read_text_if_exists",
            "_write",
            "_publish_new",
            "_replace",
            "_delete_temporary",
            "_make_folder",
            "create_exclusive",
            "write_text_atomic",
            "rename_folder",
        )
    }
    o = originals

    def list_(self, uri):
        _count("list", uri)
        path = _path(uri)
        if _now.new_folder and path == _now.new_folder:
            _now.new_folder = None
            _step(Step.FOLDER_BUILT.value, f"{_now.label} {uri}")
        if re.search(r"/staging/[^/]+/rewrite-[0-9a-f]+$", path):
            _step("rewritten", f"{_now.label} {uri}")
        if path.endswith("/journal"):
            _now.purge_root, _now.purged = path[: -len("/journal")], frozenset()
        elif path.endswith("/trash"):
            _now.purge_root = None
        elif _now.purge_root and path.startswith(f"{_now.purge_root}/trash/"):
            run = path[len(f"{_now.purge_root}/trash/") :]
            if "/" not in run and run not in _now.purged:
                _now.purged |= {run}
                _step("purging", run, _now.purge_root)
        found = o["list"](self, uri)
        if not _now.listed:
            _now.listed = True
            _step("listed", f"{_now.label} {uri}")
        return found

    def statuses(self, uris):
        if uris:
            _count("statuses", uris[0])
        return o["statuses"](self, uris)

    def move_all(self, pairs, create_folders=True):
        pairs = list(pairs)
        if not pairs:
            return 0
        kind = _kind(pairs)
        src, dst = str(pairs[0][0]), str(pairs[0][1])
        haystack = f"{_now.label} {src} {dst}"
        folder = _path(src).rsplit("/", 1)[0] if kind in ("inputs", "rolled_back") else _path(dst).rsplit("/", 1)[0]
        if kind == "outputs":
            _step(Step.OUTPUTS_MOVING.value, haystack, folder)
        if kind == "build":
            _now.new_folder = _path(dst).rsplit("/", 1)[0]
        if _now.calls is not None:
            batches = [[p] for p in pairs]  # a kill or an actor between any two moves
        elif kind in _FIRST_OF and _named(_FIRST_OF[kind]):
            batches = [pairs[:1], pairs[1:]]
        else:
            batches = [pairs]
        moved = 0
        for i, batch in enumerate(batches):
            for p in batch:
                _count("move", p[0])
            if batch:
                moved += o["move_all"](self, batch, create_folders)
            if i == 0 and moved and kind in _FIRST_OF:
                _step(_FIRST_OF[kind], haystack, folder)
        if kind in _ALL_OF:
            _step(_ALL_OF[kind], haystack, folder)
        return moved

    def copy(self, src, dst):
        _count("copy", src)
        return o["copy"](self, src, dst)

    def delete(self, uri, recursive=False):
        _count("delete", uri)
        return o["delete"](self, uri, recursive)

    def rename_folder(self, src, dst):
        _count("rename folder", src)
        return o["rename_folder"](self, src, dst)

    def read_text_if_exists(self, uri):
        _count("read", uri)
        return o["read_text_if_exists"](self, uri)

    def _write(self, uri, text, how=None):
        _count("write", uri)
        return o["_write"](self, uri, text, how)

    def _publish_new(self, tmp, uri, how):
        _count("publish", uri)
        return o["_publish_new"](self, tmp, uri, how)

    def _replace(self, tmp, uri, how):
        _count("publish", uri)
        return o["_replace"](self, tmp, uri, how)

    def _delete_temporary(self, tmp):
        _count("delete", tmp)
        return o["_delete_temporary"](self, tmp)

    def _make_folder(self, folder):
        _count("mkdirs", folder)
        return o["_make_folder"](self, folder)

    def create_exclusive(self, uri, text):
        published = o["create_exclusive"](self, uri, text)
        if published and re.search(r"/journal/[^/]+\.json$", str(uri)):
            haystack, folder = _record_label(text)
            _step(Step.JOURNALED.value, f"{_now.label} {haystack}", folder)
        return published

    def write_text_atomic(self, uri, text):
        o["write_text_atomic"](self, uri, text)
        if re.search(r"/manifests/[^/]+/[^/]+(/[^/]+)?\.json$", str(uri)):
            haystack, folder = _record_label(text)
            _step(Step.MANIFEST_WRITTEN.value, f"{_now.label} {haystack}", folder)

    wrapped = {
        "list": list_,
        "statuses": statuses,
        "move_all": move_all,
        "copy": copy,
        "delete": delete,
        "read_text_if_exists": read_text_if_exists,
        "_write": _write,
        "_publish_new": _publish_new,
        "_replace": _replace,
        "_delete_temporary": _delete_temporary,
        "_make_folder": _make_folder,
        "create_exclusive": create_exclusive,
        "write_text_atomic": write_text_atomic,
        "rename_folder": rename_folder,
    }
    for name, f in wrapped.items():
        setattr(cls, name, f)
    return originals


def _wrap_metastore(cls) -> dict:
    originals = {name: inspect.getattr_static(cls, name) for name in ("lock", "lock_chunk", "switch")}

    def lock(self, table, partition, wait_seconds, required=True, chunk=None):
        # Under its chunk's lock, or alone after its chunk's request was refused: "staged" fired already.
        _begin_commit(self, table, partition, staged=partition not in _now.chunk_staged)
        _now.chunk_staged = _now.chunk_staged - {partition}
        return originals["lock"](self, table, partition, wait_seconds, required, chunk)

    def lock_chunk(self, table, partitions):
        for partition in partitions:  # each is staged, and its lock asked for now
            _begin_commit(self, table, partition)
        _now.chunk_staged = frozenset(partitions)
        return originals["lock_chunk"](self, table, partitions)

    def switch(self, table, values, old, new, parameters, *more):
        switched = originals["switch"](self, table, values, old, new, parameters, *more)
        if switched:
            _step(Step.SWITCHED.value, f"{_now.label} {table} {old} {new}", _path(old))
        return switched

    cls.lock, cls.lock_chunk, cls.switch = lock, lock_chunk, switch
    return originals


_installed: list[tuple[type, dict]] = []


def install() -> None:
    """Wrap the storage and Metastore classes of the job (idempotent)."""
    if _installed:
        return
    from hive_compaction.storage.hadoop_fs import HadoopFS
    from hive_compaction.storage.metastore_client import JobMetastore

    _installed.extend([(HadoopFS, _wrap_storage(HadoopFS)), (JobMetastore, _wrap_metastore(JobMetastore))])


def uninstall() -> None:
    """Put the original methods back (a test that installed them in its own process)."""
    while _installed:
        cls, originals = _installed.pop()
        for name, f in originals.items():
            delattr(cls, name)  # the wrapper; an inherited original shows again
            if inspect.getattr_static(cls, name, None) is not f:
                setattr(cls, name, f)
    _now.__dict__.clear()
