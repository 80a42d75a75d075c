"""The commit protocol on the file system: every crash point has exactly one correct outcome.

Per partition, after the merged outputs are staged outside the partition and verified:

1. ``journal/<partition-id>.json`` is written (atomically) with the planned inputs and the
   staged outputs. From here on the commit is decided: it will be rolled forward.
2. Each input is moved from the partition into ``trash/<run>/<partition-id>/``.
3. Each staged output is moved into the partition under a visible name.
4. A manifest (the record used by rollback and trash cleanup) is written, the journal and the
   staging folder are removed.

A crash before 1 leaves only staging garbage outside the partition. A crash after 1 is finished
by ``recover`` at the start of the next attempt on that partition, which replays steps 2-4 (each
step is idempotent). Only the files named in the journal are ever moved, so files that arrive
while a merge runs stay where they are. Readers listing the partition between steps 2 and 3 see
neither the old nor the new files of the merged groups (never both: no row is ever visible twice);
the window lasts as long as a handful of renames.
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import time

from .hadoop_fs import HadoopFS
from .work_area import WorkArea, read_journal

log = logging.getLogger(__name__)

# The protocol's steps, where a test may inject a fault (kill the job, change the files). The
# shipped code only calls the callable that HIVE_COMPACTION_FAULT_HOOK names ("module:function",
# called with the point, the partition's label and its location); tests set it
# (scripts/fault_hooks.py). Unset, as in production, nothing happens.
FAULT_HOOK_ENV = "HIVE_COMPACTION_FAULT_HOOK"
KILL_POINTS = ("staged", "journaled", "input_moved", "inputs_moved", "output_moved", "outputs_moved",
               "manifest_written")


def fault_point(point: str, label: str = "", location: str = "") -> None:
    spec = os.environ.get(FAULT_HOOK_ENV)
    if spec:
        module, _, name = spec.partition(":")
        getattr(importlib.import_module(module), name)(point, label, location)


class CommitConflict(RuntimeError):
    """Another attempt holds this partition's journal, or the inputs changed: nothing was moved."""


def commit(fs: HadoopFS, area: WorkArea, record: dict, check_inputs) -> dict:
    """Publish staged outputs and retire the inputs of one partition. ``record`` keys:
    run, pid, table, partition, location, inputs [{name,size}], outputs [{staged,name,size}].

    The journal is created exclusively, so two runs can never commit one partition at once, and
    ``check_inputs()`` runs again while it is held: inputs that another run already replaced
    make this commit stop before moving anything (else its outputs would duplicate rows)."""
    journal = area.journal(record["pid"])
    if not fs.create_exclusive(journal, json.dumps(record, indent=1)):
        raise CommitConflict(f"another run is committing {_label(record)} (journal {journal}); "
                             "nothing was moved, the next run will look at it again")
    try:
        check_inputs()
    except Exception:
        fs.delete(journal)
        raise
    fault_point("journaled", _label(record), record["location"])
    return _apply(fs, area, record, first=True)


def check_unchanged(fs: HadoopFS, label: str, inputs: list) -> None:
    """The inputs (DataFile) are still there with the size and modification time they were
    listed with; else nothing may be committed (a writer or another run changed them)."""
    for f, st in zip(inputs, fs.statuses([f.path for f in inputs])):
        if st is None or st.size != f.size or st.modification_time != f.modification_time:
            raise RuntimeError(f"input {f.name} of {label} changed while it was being merged; "
                               "nothing was committed, the next run will plan it again")


def recover(fs: HadoopFS, area: WorkArea, pid: str) -> dict | None:
    """Finish a commit a crashed attempt left behind for this partition; None if there was none."""
    journal = area.journal(pid)
    if not fs.exists(journal):
        return None
    record = read_journal(fs, journal)
    if record is None:
        log.warning("removing the incomplete journal %s (its commit never started)", journal)
        fs.delete(journal)
        return None
    log.warning("recovering the interrupted commit of %s (run %s) from %s",
                record["partition"] or record["table"], record["run"], journal)
    return _apply(fs, area, record)


def _apply(fs: HadoopFS, area: WorkArea, record: dict, first: bool = False) -> dict:
    """Move inputs to the trash and outputs in. On the ``first`` pass every move must happen:
    a file gone meanwhile (another attempt, a purge) puts everything back and fails, never
    leaving the inputs in the trash with an output missing. Replays skip what already moved."""
    run, pid, location = record["run"], record["pid"], record["location"].rstrip("/")
    trash = area.trash(run, pid)
    # Roll forward only if every output still exists, staged or already published.
    outputs = record["outputs"]
    found = fs.statuses([o["staged"] for o in outputs] + [f"{location}/{o['name']}" for o in outputs])
    missing = [o["name"] for o, staged, published in zip(outputs, found, found[len(outputs):])
               if staged is None and published is None]
    if missing:
        _abandon(fs, area, record, trash, location, f"staged outputs {missing} are gone")
    if fs.status(location) is None:  # dropped meanwhile: never re-create a partition's folder
        if first:
            fs.delete(area.journal(pid))
        raise RuntimeError(f"the folder of {_label(record)} is gone ({location}): dropped while it was being "
                           "merged? nothing was moved into it")
    # Files already moved by an interrupted attempt are skipped: every step can be replayed.
    moves = [(f"{location}/{f['name']}", f"{trash}/{f['name']}") for f in record["inputs"]]
    moved = _move(fs, moves, record, "input_moved", "inputs_moved")
    if first and moved != len(moves):
        _abandon(fs, area, record, trash, location, f"{len(moves) - moved} input(s) vanished before they moved")
    moves = [(o["staged"], f"{location}/{o['name']}") for o in outputs]
    moved = _move(fs, moves, record, "output_moved", "outputs_moved")
    if first and moved != len(moves):
        _abandon(fs, area, record, trash, location, f"{len(moves) - moved} staged output(s) vanished before "
                                                    "they moved")
    manifest = {**record, "committed_at": time.time(), "trash": trash}
    fs.write_text_atomic(area.manifest(run, pid), json.dumps(manifest, indent=1))
    fault_point("manifest_written", _label(record), location)
    fs.delete(area.journal(pid))
    fs.delete(record.get("staging") or area.staging(run, pid), recursive=True)
    return manifest


def _label(record: dict) -> str:
    return f"{record['table']}/{record['partition']}"


def _move(fs: HadoopFS, moves: list[tuple[str, str]], record: dict, after_first: str, after_all: str) -> int:
    """Move files in order (a missing source is skipped); the fault points after the first move
    and after all of them. Returns how many moved."""
    moved = fs.move_all(moves[:1])
    if moved:
        fault_point(after_first, _label(record), record["location"])
    moved += fs.move_all(moves[1:])
    fault_point(after_all, _label(record), record["location"])
    return moved


def _abandon(fs: HadoopFS, area: WorkArea, record: dict, trash: str, location: str, why: str) -> None:
    _roll_back(fs, record, trash, location)
    fs.delete(area.journal(record["pid"]))
    raise RuntimeError(f"{_label(record)}: {why}; every file was put back, nothing was committed")


def _roll_back(fs: HadoopFS, record: dict, trash: str, location: str) -> None:
    for o in record["outputs"]:
        published = f"{location}/{o['name']}"
        if fs.exists(published) and not fs.exists(o["staged"]):
            fs.rename(published, o["staged"])
    for f in record["inputs"]:
        moved = f"{trash}/{f['name']}"
        if fs.exists(moved) and not fs.exists(f"{location}/{f['name']}"):
            fs.rename(moved, f"{location}/{f['name']}")
