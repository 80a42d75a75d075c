"""The commit protocol on the file system: every crash point has exactly one correct outcome.

Per partition, after the merged outputs are staged outside the partition and verified:

1. ``journal/<partition-id>.json`` is written (atomically) with the planned inputs and the
   staged outputs. From here on the commit is decided: it will be rolled forward.
2. Each input is moved from the partition into the moving trash
   (``trash/<run>/<partition-id>/<attempt>.moving``, made before 1).
3. Each staged output is moved into the partition under a visible name.
4. That folder becomes the run's trash (``.../<attempt>``), a manifest (the record
   used by rollback and trash cleanup) is written, the journal is released and the staging
   folder removed.

The journal is published whole and exclusively (``HadoopFS.create_exclusive``: only on storage
whose primitives make that atomic, see ``storage``), so of two committers exactly one holds a
partition. Its record names its owner (the job's attempt); before each step the committer reads
the journal again and stops if another job took it over (one that holds the partition's lock
writes its record back instead: the other wrote late, having lost the lock, ``check_owner``). A job
that takes a journal over renames the staging folder and the moving trash (``take_over``), so a
paused earlier holder's next move fails whatever it had checked; a journal is released only while
it is the file its holder published (``work_area.release_journal``).

A crash before 1 leaves only staging garbage outside the partition. A crash after 1 is finished
by ``recover`` at the start of the next attempt on that partition, which replays steps 2-4 (each
step is idempotent) only after checking the record (``work_area.check_record``: names, folders)
and every input's identity (size, modification time and, where the storage has one, its etag
or file id: ``Entry.version``; in the partition or in the trash): a
partition another writer changed since is not touched further: nothing is moved into it, the
outputs go back to staging, and a mark beside the journal (``<partition-id>.stopped``) says what
is where until a person decides. A replay is claimed exclusively too (``<partition-id>.replay``),
so two jobs never replay one journal.

Only the files named in the journal are ever moved, and each only while it has the size and
time the journal names, so files that arrive while a merge runs stay where they are. Readers
listing the partition between steps 2 and 3 see
neither the old nor the new files of the merged groups (never both: no row is ever visible twice);
the window lasts as long as a handful of renames.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hive_compaction.commit.record import CommitRecord, PurgeHold
from hive_compaction.commit.steps import Step, reached
from hive_compaction.commit.work_area import (
    WorkArea,
    check_record,
    journal_holder,
    publish_journal,
    read_journal,
    read_manifest,
    release_journal,
    replace_journal,
)
from hive_compaction.storage.hadoop_fs import Entry, FolderGone, HadoopFS
from hive_compaction.storage.listing import MERGED_PREFIX, RecordedFile, is_hidden
from hive_compaction.storage.metastore_lock import CommitConflict, check_lock_held, holding_lock

log = logging.getLogger(__name__)

# A journal or replay claim this old belongs to a job that is gone: a commit holds it for seconds.
ORPHAN_AGE_SECONDS = 600
if TYPE_CHECKING:  # What finishes the interrupted commit of a location switch (``recover``'s ``switch``).
    FinishSwitch = Callable[[CommitRecord], CommitRecord | None]


def recent(status: Entry | None) -> bool:
    """Whether a journal or claim (its file status, or None) changed within ORPHAN_AGE_SECONDS:
    its job may still be alive."""
    return status is not None and status.modification_time > (time.time() - ORPHAN_AGE_SECONDS) * 1000


class CommitHeld(CommitConflict):
    """The partition is left mid-commit (a journal, with another job's replay claim or a
    rollback's hold) and this job may not finish it: readers may miss rows until that job, or the
    replay after the orphan age, finishes it. Not a success: the partition is FAILED."""


class JournalHeld(CommitConflict):
    """The partition's journal was there when this commit went to publish its own: another job's
    commit, running or interrupted; nothing was moved."""


class CommitStopped(RuntimeError):
    """A first pass that stopped on its own and said why: every file it had moved is back (or the
    partition was dropped meanwhile), its journal is gone, nothing is left to undo or replay."""


class InputsChanged(RuntimeError):
    """A decided commit whose moves had begun met files it cannot account for (an input changed,
    a file that is neither an input, an output nor in the journal's listing): it stopped without
    moving anything more, and says what is where. The partition is FAILED: without a lock the tool
    cannot tell an append from an overwrite, so a person decides."""


def commit(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> CommitRecord:
    """Publish staged outputs and retire the inputs of one partition; returns its manifest.

    The journal is published exclusively, so two jobs can never commit one partition at once;
    the inputs' identity is checked again once it is held, just before the first move (a writer
    or another run that replaced them makes this commit stop before moving anything).

    The journal also records the partition's whole listing as it is now (``listing``: every
    visible file's ``identity()``): before any output is published, on the first pass and on a
    replay, a file in the partition that is neither an input, nor an output, nor that listing's
    (a new name, or a known name with another identity) stops the commit (``_check_partition``).

    The inputs move into a trash folder of their own (``moving_trash``), made before the journal
    is published: a replay that takes the commit over renames it and the staging folder
    (``take_over``), and from then on every move of the first holder from or into them fails."""
    if record.listing is None:
        record = record.but(listing=[e.identity() for e in _visible(fs, record.location)])
    record = record.but(moving_trash=f"{area.trash_of(record)}{MOVING_TRASH}")
    fs.make_folders(record.moving_trash)
    hold(fs, area, record)
    return _apply(fs, area, record, first=True)


# Beside the run's trash folder of the attempt: the folder its inputs move into while it commits.
MOVING_TRASH = ".moving"


def hold(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> None:
    """Publish the partition's journal exclusively (CommitConflict if another job holds it)."""
    check_record(record, area, record.pid, location=record.location, table_location=record.table_location)
    if not publish_journal(fs, area, record):
        raise JournalHeld(f"another run is committing {record.label} (journal {area.journal(record.pid)}); "
                          "nothing was moved, the next run will look at it again")
    reached(Step.JOURNALED, record.label)


def recover(fs: HadoopFS, area: WorkArea, pid: str, owner: str, location: str | None = None,
            table_location: str | None = None, switch: FinishSwitch | None = None) -> CommitRecord | None:
    """Finish a commit a crashed attempt left behind for this partition; None if there was none.
    ``location``: the partition's folder as planned (the record must name the same); else the
    record's folder must lie inside ``table_location``. ``switch(record)`` finishes a location
    switch's journal (``location_switch``); without it such a journal is left for a job that has
    one. A stopped commit (``WorkArea.stopped_mark``) is never replayed: CommitHeld says why."""
    journal = area.journal(pid)
    if not fs.exists(journal):
        return None
    record = read_journal(fs, journal)
    if record is None:
        log.warning("removing the incomplete journal %s (its commit never started)", journal)
        fs.delete(journal)
        return None
    if isinstance(record, PurgeHold):  # work_area.purge_expired holds it for a moment while it deletes a run
        st = fs.status(journal)
        if st is None or recent(st):
            raise CommitConflict(f"the purge of run {record.run} holds {journal}; nothing was moved")
        log.warning("removing the journal %s of a purge that is gone (its deletes are idempotent)", journal)
        release_journal(fs, area, record)
        return None
    if record.rollback:
        raise CommitHeld(f"a rollback of {record.label} holds it ({journal}): run that rollback again to "
                         "finish it; nothing was moved")
    stopped = _stopped(fs, area, record)
    if stopped:
        raise CommitHeld(f"{record.label}: nothing is merged until a person decides (once the files are where the "
                         f"partition's rows belong, delete {journal} and {area.stopped_mark(pid)}); its commit by run "
                         f"{record.run} stopped: {stopped}")
    if record.switched:
        if switch is None:
            raise CommitHeld(f"the location switch of {record.label} by run {record.run} is unfinished "
                             f"({journal}); a merge job of the table finishes it")
        return switch(record)
    check_record(record, area, pid, location=location, table_location=table_location)
    claim = area.replay_claim(pid)
    if not fs.create_exclusive(claim, json.dumps({"owner": owner, "at": time.time()})):
        st = fs.status(claim)
        if (st is None or recent(st)) and not holding_lock():
            since = "" if st is None else f", claimed {time.time() - st.modification_time / 1000:.0f} s ago"
            raise CommitHeld(f"{record.label} is left mid-commit by run {record.run} and another job is "
                             f"finishing that interrupted commit ({claim}{since}); nothing was moved by this one. "
                             "Until that job finishes it, or a replay takes over once the claim is "
                             f"{ORPHAN_AGE_SECONDS} s old, readers may miss the merged files' rows")
        log.warning("taking over the replay claim %s of a job that is gone (%s)", claim,
                    "this job holds the partition's Metastore lock" if holding_lock() else
                    f"older than {ORPHAN_AGE_SECONDS} s")
        fs.delete(claim)
        return recover(fs, area, pid, owner, location, table_location, switch)
    try:
        log.warning("recovering the interrupted commit of %s (run %s) from %s",
                    record.partition or record.table, record.run, journal)
        # The journal names this job from now on, and the staging folder is renamed: its first
        # committer, if only paused, sees that before its next step and stops, and any move it
        # had already decided fails.
        record = take_over(fs, area, record, owner)
        return _apply(fs, area, record)
    finally:
        fs.delete(claim)


def take_over(fs: HadoopFS, area: WorkArea, record: CommitRecord, owner: str) -> CommitRecord:
    """Make the journal this job's: replaced in one step, naming the next generation
    (``<folder>~<n>``) of the staging folder and of the moving trash, then both folders renamed
    to it (from the newest generation that exists: a takeover killed between its steps left an
    older one). From the replace on, the earlier holder can no longer release the journal; from
    the renames on, none of its moves from or into those folders happen, and this job reads what
    they did after it."""
    n = record.generation
    check_lock_held()  # a job whose lock was taken meanwhile takes nothing over

    def moved(path: str, folder: str) -> str:
        return _generation(folder, n, n + 1) + path[len(folder):] if folder and path.startswith(folder) else path

    taken = record.but(owner=owner, generation=n + 1, staging=_generation(record.staging, n, n + 1),
                       moving_trash=_generation(record.moving_trash, n, n + 1) if record.moving_trash else "",
                       outputs=[replace(o, staged=moved(o.staged, record.staging)) for o in record.outputs])
    replace_journal(fs, area, taken)
    if record.staging:
        _rename_newest(fs, record.staging, n)
    if record.moving_trash:
        # A switch's finish may have renamed its moving trash to the run's trash already (a job
        # killed before releasing its journal): the takeover takes that back as its own moving
        # trash, so that its finish, too, moves into a folder the next takeover renames.
        _rename_newest(fs, record.moving_trash, n, oldest=area.trash_of(record) if record.switched else None)
    return taken


def _rename_newest(fs: HadoopFS, folder: str, n: int, oldest: str | None = None) -> None:
    """Rename the newest generation of ``folder`` (of generation ``n``; ``oldest``, where given,
    counts as the one before its first) that exists to ``n + 1``. A rename that finds its source
    gone (an earlier holder renamed it meanwhile) looks again."""
    for _ in range(n + 3):
        check_lock_held()
        names = [_generation(folder, n, k) for k in range(n, -1, -1)] + ([oldest] if oldest else [])
        found = fs.statuses(names)
        newest = next((name for name, st in zip(names, found) if st is not None), None)
        if newest is None or fs.rename_folder(newest, _generation(folder, n, n + 1)):
            return
    raise CommitConflict(f"{folder} kept being renamed while this job took its commit over; it stopped")


def _generation(folder: str, current: int, wanted: int) -> str:
    """``folder`` (of generation ``current``: ``<base>~<current>``, or the base for 0) at generation ``wanted``."""
    base = folder[:-len(f"~{current}")] if current else folder
    return base if wanted == 0 else f"{base}~{wanted}"


def _visible(fs: HadoopFS, location: str) -> list[Any]:
    """The partition's files that readers see (Hive and Spark skip names starting with '_' or '.')."""
    return [e for e in fs.list(location.rstrip("/")) if not e.is_dir and not is_hidden(e.name)]


def _committed(fs: HadoopFS, record: CommitRecord, trash: str) -> bool:
    """Whether the commit point is passed: every input in the trash (its size and version) and
    every output published. From there a replay only finishes (manifest, journal removed): a
    file a writer added since, under whatever name, is that writer's, and stays."""
    location, inputs, outputs = record.location.rstrip("/"), record.inputs, record.outputs
    found = fs.statuses([f"{trash}/{f.name}" for f in inputs] + [f"{location}/{o.name}" for o in outputs])
    return (all(st is not None and st.matches(f, mtime=False) for f, st in zip(inputs, found))
            and all(st is not None and st.size == o.size for o, st in zip(outputs, found[len(inputs):])))


@dataclass
class Accounting:
    """The partition against the journal: what of the commit moved, and what no move of it explains."""
    in_trash: list[str]
    published: list[str]
    here: int
    problem: str  # "" when every file is accounted for


def _account(fs: HadoopFS, record: CommitRecord, trash: str, moved: bool, outputs_known: bool = True,
             merged_elsewhere: bool = False) -> Accounting:
    """Every file in the partition accounted for: an input must be there unchanged (size, time,
    version) or, once moves may have happened (``moved``), in this commit's trash (size,
    version); any other visible file must be an output or a file of the journal's ``listing``
    with its recorded identity, and no listed file that is not an input may be gone (an INSERT
    OVERWRITE deletes every file and writes new names). ``outputs_known`` False: an output is
    neither staged nor published (a writer may have deleted it after it moved in), which counts
    as unexplained once anything moved. ``merged_elsewhere``: inputs that vanished before they
    moved are explained by another merge's output here (``MERGED_PREFIX``: another table's run over
    the same folder took them), as ``_stop_if_rewritten`` allows. A journal without a listing
    (written before it was recorded) is checked on its inputs only."""
    location, inputs, outputs = record.location.rstrip("/"), record.inputs, record.outputs
    here = {e.name: e for e in _visible(fs, location)}
    trashed = fs.statuses([f"{trash}/{f.name}" for f in inputs]) if moved else [None] * len(inputs)
    in_trash = [f.name for f, st in zip(inputs, trashed) if st is not None and st.matches(f, mtime=False)]
    changed = [f.name for f in inputs
               if (f.name in here and not here[f.name].matches(f)) or (f.name not in here and f.name not in in_trash)]
    strangers, vanished = _unlisted(record, here)
    ours = {o.name for o in outputs}
    if merged_elsewhere and any(n.startswith(MERGED_PREFIX) and n not in ours for n in here):
        changed = [n for n in changed if n in here]
        strangers = [n for n in strangers if not n.startswith(MERGED_PREFIX)]
    published = [o.name for o in outputs if o.name in here]
    lost = [] if outputs_known or not (in_trash or published) else [o.name for o in outputs if o.name not in here]
    problem = " and ".join(x for x in (f"input(s) {changed[:3]}" if changed else "",
                                       f"file(s) {strangers[:3]} it did not list" if strangers else "",
                                       f"listed file(s) {vanished[:3]} now gone" if vanished else "",
                                       f"output(s) {lost[:3]} gone from staging and partition" if lost else "") if x)
    return Accounting(in_trash, published, len(here), problem)


def _check_partition(fs: HadoopFS, area: WorkArea, record: CommitRecord, trash: str, first: bool, moved: bool) -> None:
    """Before any output is published: every file in the partition is accounted for (``_account``).

    Otherwise another writer changed the partition after the commit was decided, and the commit
    stops: nothing more moves. If none of its moves happened yet (no input in the trash, no
    output published), the partition is exactly as that writer left it: the journal goes,
    ``CommitConflict``. Else ``InputsChanged`` says what is where and the journal stays, marked
    stopped: without a lock an append cannot be told from an overwrite, so the merged output is
    not published beside the writer's files, nor are the old inputs moved back over them, and no
    run merges the partition until a person decided."""
    seen = _account(fs, record, trash, moved)
    if not seen.problem:
        return
    label, what = record.label, seen.problem
    if not seen.in_trash and not seen.published:
        _release(fs, area, record)
        if first:
            raise CommitConflict(f"{what} of {label} changed while it was being merged; nothing was committed, the "
                                 "next run will plan it again")
        raise CommitConflict(
            f"{label}: the interrupted commit of run {record.run} was not finished: {what} changed or vanished "
            "since it was decided (another writer rewrote the partition); none of its moves had happened, so the "
            "partition is exactly as that writer left it")
    staged = [o.name for o in record.outputs if o.name not in seen.published]
    _stop(fs, area, record, InputsChanged(
        f"{label}: {what} changed since the commit of run {record.run} was decided (another writer, after "
        f"{len(seen.in_trash)} of {len(record.inputs)} input(s) had moved): stopped before publishing anything more, "
        f"since without a lock an append cannot be told from an overwrite. What is where: {len(seen.in_trash)} "
        f"input(s) in the trash {trash}; {len(staged)} output(s) {staged[:3]} in staging {record.staging}; "
        f"{len(seen.published)} output(s) published {seen.published[:3]}; the partition holds {seen.here} file(s). "
        "Check the partition's rows: if the writer appended, move the staged outputs in"))


def _stop(fs: HadoopFS, area: WorkArea, record: CommitRecord, error: Exception) -> None:
    """Stop with files this commit cannot account for: the merged outputs go back to staging
    (the partition keeps only what its writers and the inputs not moved make of it), the journal
    stays and a mark beside it says what is where (``recover`` refuses such a journal until a
    person decides); ``error`` is raised. The mark names this holder: one a paused earlier holder
    leaves beside a later holder's journal is not that journal's."""
    check_owner(fs, area, record)
    unpublish(fs, record, record.location)
    text = f"{error}; the merged output(s) are in staging {record.staging}"
    mark, body = area.stopped_mark(record.pid), json.dumps(
        {"owner": record.owner, "generation": record.generation, "what": text})
    check_owner(fs, area, record)  # again: unpublishing may have outlasted the lease
    if not fs.create_exclusive(mark, body) and _stopped(fs, area, record) is None:
        # A mark an earlier holder that lost its lock left late: not this journal's, and the replay
        # would ignore it. This holder's replaces it.
        check_owner(fs, area, record)
        fs.write_text_atomic(mark, body)
    raise type(error)(text)


def _stopped(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> str | None:
    """What is where, if the journal's holder stopped its commit (its mark, naming it)."""
    text = fs.read_text_if_exists(area.stopped_mark(record.pid))
    try:
        mark = json.loads(text) if text else None
    except ValueError:
        return None
    if isinstance(mark, dict) and (mark.get("owner"), mark.get("generation")) == (record.owner, record.generation):
        return str(mark.get("what", ""))
    return None


def _release(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> None:
    if not release_journal(fs, area, record):
        raise CommitConflict(f"{record.label}: this job no longer holds the partition's journal; it stopped")


def _unlisted(record: CommitRecord, here: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The partition's files (``here``, by name) that are neither an input, an output nor listed
    by the journal as they were, and the listed files that are not inputs and are gone: another
    writer's work (none for a journal written before the listing was recorded)."""
    if record.listing is None:
        return [], []
    named = {f.name for f in record.inputs} | {o.name for o in record.outputs}
    listed = {f.name: f for f in record.listing}
    return (sorted(n for n, e in here.items() if n not in named and not e.matches(listed.get(n))),
            sorted(n for n in listed if n not in named and n not in here))


def _stop_if_dropped(fs: HadoopFS, area: WorkArea, record: CommitRecord, first: bool) -> None:
    """A partition dropped meanwhile stays dropped: its folder is never re-created (a later
    ``MSCK REPAIR`` would register it again), nothing is moved into it."""
    if fs.status(record.location.rstrip("/")) is None:
        _dropped(fs, area, record, first)


def _dropped(fs: HadoopFS, area: WorkArea, record: CommitRecord, first: bool) -> None:
    location = record.location.rstrip("/")
    _release(fs, area, record)
    raise (CommitStopped if first else InputsChanged)(
        f"the folder of {record.label} is gone ({location}): dropped while it was being merged? nothing was "
        f"moved into it; replaced file(s) stay in {_trash(record, area)} until the trash "
        "retention ends")


def _stop_if_rewritten(fs: HadoopFS, area: WorkArea, record: CommitRecord, trash: str, all_moved: bool = True) -> None:
    """On the first pass, once the outputs are in (or once an input turned out gone): another
    writer's files in the partition, written between the last check and the moves. Hive's INSERT
    OVERWRITE deletes everything and reuses 000000_0, Spark's writes ``part-<uuid>`` names, and an
    append adds one. Publishing the merged output could bring back rows such a writer replaced;
    putting the inputs back could too, or clash with its files. Without a Metastore lock the
    writers cannot be told apart, so nothing more moves: the merged output goes back to staging
    (this commit's own moves, not yet finished: its manifest is not written), the inputs stay in
    the trash, the journal stays, marked stopped, and the error says what is where.
    ``all_moved``: every input is in the trash, so a file under an input's name is the writer's
    whatever its identity; else another merge's output (``MERGED_PREFIX``: another table's run
    over the same folder, which merged the inputs this one had not moved yet) is no writer's, and
    what moved goes back. A replay past the commit point stops the same way when anything else is
    in the partition (``_apply``)."""
    location = record.location.rstrip("/")
    here = {e.name: e for e in _visible(fs, location)}
    reused = [f.name for f in record.inputs if f.name in here and (all_moved or not here[f.name].matches(f))]
    strangers, vanished = _unlisted(record, here)
    if not all_moved:  # another table's merge over the same folder took the inputs still here: rows kept
        strangers = [n for n in strangers if not n.startswith(MERGED_PREFIX)]
    if not (reused or strangers or vanished):
        return
    what = " and ".join(x for x in (f"wrote {reused[:3]} (an input's name)" if reused else "",
                                    f"wrote {strangers[:3]}" if strangers else "",
                                    f"removed {vanished[:3]}" if vanished else "") if x)
    _stop(fs, area, record, InputsChanged(
        f"{record.label}: a writer {what} in the partition while its commit ran (an INSERT OVERWRITE or an "
        f"append?); the merged output(s) {[o.name for o in record.outputs][:3]} were taken out again into "
        f"staging {record.staging} and the input(s) moved so far stay in the trash {trash}: check the "
        "partition's rows"))


def _trash(record: CommitRecord, area: WorkArea) -> str:
    """Where the commit's inputs move: its moving trash (the run's trash, for an older journal)."""
    return record.moving_trash or area.trash_of(record)


def _apply(fs: HadoopFS, area: WorkArea, record: CommitRecord, first: bool = False) -> CommitRecord:
    """Move inputs to the trash and outputs in. On the ``first`` pass every move must happen:
    a file gone meanwhile (another attempt, a purge) puts everything back and fails, never
    leaving the inputs in the trash with an output missing. Replays skip what already moved,
    and one that finds the commit point passed only finishes."""
    run, location = record.run, record.location.rstrip("/")
    trash = _trash(record, area)
    if not first and record.moving_trash and not fs.exists(trash) and fs.exists(area.trash_of(record)):
        trash = area.trash_of(record)  # its finish had moved the trash to the run's before it was killed
    # Roll forward only if every output still exists, staged or already published.
    outputs = record.outputs
    found = fs.statuses([o.staged for o in outputs] + [f"{location}/{o.name}" for o in outputs])
    missing = [o.name for o, staged, published in zip(outputs, found, found[len(outputs):])
               if staged is None and published is None]
    if missing:
        _abandon(fs, area, record, trash, location, f"staged outputs {missing} are gone", outputs_known=False)
    _stop_if_dropped(fs, area, record, first)
    # Files already moved by an interrupted attempt are skipped: every step can be replayed.
    check_owner(fs, area, record)
    if not first:
        done = read_manifest(fs, area.manifest_of(record))
        if done is not None and done.committed_at and not done.rolled_back_at:
            # Its manifest is written: the first pass (or a replay) had found the partition as its
            # moves made it, outputs in, so whatever arrived since is a writer's that came after.
            log.warning("%s: the interrupted commit of run %s had written its manifest: finishing it",
                        record.label, run)
            release_journal(fs, area, record)
            fs.delete(record.staging or area.staging(record.run, record.pid), recursive=True)
            return done
    if not first and _committed(fs, record, trash):
        # Finished only if nothing else arrived meanwhile: a file under an input's name or a new
        # one may be an overwrite's, and the merged rows beside it would be the rows it replaced.
        seen = _account(fs, record, trash, moved=True)
        if seen.problem:
            _stop(fs, area, record, InputsChanged(
                f"{record.label}: the interrupted commit of run {record.run} had published its outputs, but "
                f"{seen.problem} changed since it was decided (another writer: an append, or an overwrite whose "
                f"rows the merged outputs {seen.published[:3]} would double): not finished. What is where: "
                f"{len(seen.in_trash)} input(s) in the trash {trash}; the partition holds {seen.here} file(s)"))
        log.warning("%s: the interrupted commit of run %s had passed its commit point (every input in the trash, "
                    "every output published): finishing it", record.label, run)
        return _finish(fs, area, record, trash, None)
    _check_partition(fs, area, record, trash, first, moved=not first)
    try:
        window_ms = _swap(fs, area, record, trash, first)
    except (CommitConflict, CommitStopped, InputsChanged):
        raise
    except Exception as e:
        if not first:
            raise  # the journal stays: the next replay goes on from where this one stopped
        # A storage or Metastore error between two moves: everything moved goes back, as for a
        # file that vanished, rather than leave readers without the inputs' rows until a replay.
        _abandon(fs, area, record, trash, location, f"{type(e).__name__} while its files moved "
                                                    f"({str(e).splitlines()[0][:300] if str(e) else ''})")
    check_owner(fs, area, record)
    return _finish(fs, area, record, trash, window_ms if first else None)


def _swap(fs: HadoopFS, area: WorkArea, record: CommitRecord, trash: str, first: bool) -> float:
    """Inputs to the trash, the last checks, outputs in; returns how long readers missed rows (ms)."""
    location, outputs = record.location.rstrip("/"), record.outputs
    moves = identity_moves(location, trash, record.inputs)
    window_start = time.monotonic()  # readers listing from here to the last output's arrival miss the groups' rows
    # Into the moving trash, which exists: one renamed by a takeover is never re-created.
    moved = fs.move_all(moves, create_folders=not record.moving_trash)
    reached(Step.INPUTS_MOVED, record.label)
    if first and moved != len(moves):
        # Gone, or changed: only if no writer's file arrived beside them do the moved ones go back.
        _stop_if_rewritten(fs, area, record, trash, all_moved=False)
        _abandon(fs, area, record, trash, location, f"{len(moves) - moved} input(s) vanished or changed before "
                                                    "they moved", merged_elsewhere=True)
    moves = [(o.staged, f"{location}/{o.name}") for o in outputs]
    check_owner(fs, area, record)
    _stop_if_dropped(fs, area, record, first)
    # The last look before publishing: a writer that changed the partition since the journal
    # (an INSERT OVERWRITE under new names, an append) stops the commit here.
    _check_partition(fs, area, record, trash, first, moved=True)
    reached(Step.OUTPUTS_MOVING, record.label)
    try:
        moved = fs.move_all(moves, create_folders=False)
    except FolderGone:  # dropped since the check above: it stays dropped
        _dropped(fs, area, record, first)
    if first and moved != len(moves):
        _abandon(fs, area, record, trash, location, f"{len(moves) - moved} staged output(s) vanished before "
                                                    "they moved")
    window_ms = round((time.monotonic() - window_start) * 1000, 1)
    reached(Step.OUTPUTS_MOVED, record.label)
    if first:
        # Again once they are in: a writer that replaced the partition after the check above (an
        # INSERT OVERWRITE, whatever names it writes) must not get the merged rows back beside its own.
        _stop_if_rewritten(fs, area, record, trash)
    return window_ms


def identity_moves(src: str, dst: str, files: list[RecordedFile]) -> list[tuple[Any, ...]]:
    """``HadoopFS.move_all`` pairs moving recorded files from folder ``src``
    to ``dst``, each only while it is the file recorded (size, time and version, where recorded)."""
    return [(f"{src}/{f.name}", f"{dst}/{f.name}") +
            ((f.size, f.mtime, f.version) if f.mtime is not None else ()) for f in files]


def _finish(fs: HadoopFS, area: WorkArea, record: CommitRecord, trash: str, window_ms: float | None) -> CommitRecord:
    """After the commit point: the moving trash becomes the run's trash (a rename: it fails for a
    holder whose moving trash a replay renamed), the manifest (what rollback and purge read),
    then the journal and the staging folder go."""
    final = to_run_trash(fs, area, record, trash)
    manifest = record.but(committed_at=time.time(), trash=final, reader_window_ms=window_ms)
    fs.write_text_atomic(area.manifest_of(record), manifest.to_json())
    reached(Step.MANIFEST_WRITTEN, record.label)
    release_journal(fs, area, record)
    fs.delete(record.staging or area.staging(record.run, record.pid), recursive=True)
    return manifest


def to_run_trash(fs: HadoopFS, area: WorkArea, record: CommitRecord, trash: str) -> str:
    """The commit's moving trash ``trash`` renamed to the run's trash (a rename: it fails for a
    holder whose moving trash a replay renamed: CommitConflict); returns the run's trash."""
    final = area.trash_of(record)
    if trash != final:
        fs.make_folders(final.rsplit("/", 1)[0])
        if not fs.rename_folder(trash, final):
            raise CommitConflict(f"{record.label}: this job's trash {trash} is gone (a replay took the commit "
                                 "over?); it stopped before writing its manifest")
    return final


def check_owner(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> None:
    """Before each step: the Metastore lock the commit runs under is still held (LockLost), and
    the journal still exists and still names this job (a job that paused longer than
    ``ORPHAN_AGE_SECONDS`` may have been taken over by a replay)."""
    check_lock_held()
    holder = journal_holder(fs, area, record.pid)
    if holder is not None and holder != record.owner and holding_lock():
        # This job holds the partition's lock, so no live job took the journal over: a job that
        # lost its lock wrote it with a step it had decided before a pause. Stopping here would
        # release the lock with the commit unfinished (a TRUNCATE would then leave no trace for
        # the replay); the journal is this job's again and it goes on.
        log.warning("%s: the journal names %s, which no longer holds the lock (a write that landed late); this job "
                    "holds it and writes its own record back", record.label, holder)
        check_lock_held()  # again: the journal's read may have come after a pause
        replace_journal(fs, area, record)
        holder = journal_holder(fs, area, record.pid)
    if holder != record.owner:
        raise CommitConflict(f"{record.label}: this job no longer holds the partition's journal (taken over by "
                             f"{holder or 'nobody'}); it stopped before moving more")


def _abandon(fs: HadoopFS, area: WorkArea, record: CommitRecord, trash: str, location: str, why: str,
             outputs_known: bool = True, merged_elsewhere: bool = False) -> None:
    """Put back what this commit moved and give the partition up, only if the partition holds
    exactly what its journal and its own moves explain; else nothing moves (a writer replaced or
    changed it since: the old inputs must not come back beside its rows) and the journal stays,
    stopped, saying what is where."""
    # A job that lost the journal to a replay (it paused too long) must not undo that replay's moves.
    check_owner(fs, area, record)
    if fs.status(location) is not None:
        seen = _account(fs, record, trash, moved=True, outputs_known=outputs_known, merged_elsewhere=merged_elsewhere)
        if seen.problem:
            _stop(fs, area, record, InputsChanged(
                f"{record.label}: {why}, and {seen.problem} changed since the commit of run {record.run} was decided "
                f"(another writer): nothing was put back, since the writer's rows could be doubled or old rows "
                f"brought back. What is where: {len(seen.in_trash)} input(s) in the trash {trash}; "
                f"{len(seen.published)} output(s) published; the partition holds {seen.here} file(s)"))
        _roll_back(fs, record, trash, location)
    _release(fs, area, record)
    raise CommitStopped(f"{record.label}: {why}; every file was put back, nothing was committed")


def unpublish(fs: HadoopFS, record: CommitRecord, folder: str) -> None:
    """The one way a commit puts its outputs back: each output published in ``folder`` returns to
    its staging name (one already back, or never moved, stays where it is). Never into a staging
    folder that is gone (a replay renamed it: this job was taken over): CommitConflict."""
    for o in record.outputs:
        published = f"{folder.rstrip('/')}/{o.name}"
        if fs.exists(published) and not fs.exists(o.staged):
            try:
                fs.rename(published, o.staged, create_folders=False)
            except FolderGone:
                raise CommitConflict(f"{record.label}: its staging folder is gone (a replay took the commit "
                                     "over?); it stopped before taking any output out") from None


def _roll_back(fs: HadoopFS, record: CommitRecord, trash: str, location: str) -> None:
    if fs.status(location) is None:  # dropped meanwhile: nothing goes back into a re-created folder
        return
    unpublish(fs, record, location)
    for f in record.inputs:
        moved = f"{trash}/{f.name}"
        if fs.exists(moved) and not fs.exists(f"{location}/{f.name}"):
            try:
                fs.rename(moved, f"{location}/{f.name}", create_folders=False)
            except FolderGone:  # dropped meanwhile: the rest stays in the trash too
                return
