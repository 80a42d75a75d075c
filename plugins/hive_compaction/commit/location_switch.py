"""``commit_mode: location_switch``: a partition is rebuilt in a fresh folder and one
``alter_partition`` (location and statistics) is the commit point.

For tables whose writers all go through the Metastore (a writer that appends by path to
``table/col=value/`` would write where nobody reads after the switch). Readers see the rows
before or the rows after, never a mix: a query that listed the old folder reads it whole (it
stays as it was until the run's trash expires), a query planned after the switch reads the new
one. Per partition, after its outputs are staged and verified as in place:

1. The journal (``in_place.commit``'s exclusive create) records the old folder's every data file
   (name, size, time), the staged outputs and the new folder.
2. The new folder ``<table>/_compacted/<partition>/<run>-<attempt>`` is built: the staged outputs
   moved in, the files the merge leaves alone copied in byte for byte (HDFS has no links, and
   moving them would take them from readers of the old folder). ``_compacted`` starts with ``_``:
   Hive's and Spark's ``MSCK REPAIR`` skip it, while both read a partition located under it (a
   location's own path is not filtered, only the names in it).
3. The new folder is checked: every expected file with its size, and the rows in its footers
   equal to the old folder's.
4. The old folder is listed again: exactly the journal's files (a writer that added, replaced or
   removed one, or left a staging folder, aborts the switch: the new folder is deleted).
5. The Metastore's partition must still be at the old folder, with the storage descriptor
   (columns, formats, SerDe) read under the lock when the commit began; then ``alter_partition``
   sets the new location and statistics, with ``hive_compaction.previousLocation`` naming the old
   folder.
6. The old folder is looked at again (a writer that looked the location up before the switch
   writes there by path): files it added beside the journal's (an append) are moved into the new
   folder, where they are read (named in the log and the manifest's ``adopted``); a journal's file
   it replaced or deleted (an overwrite) undoes the switch, the partition pointed back at the old
   folder as that writer left it (``SwitchUndone``). The old folder's files the journal names move to the
   run's trash (through the switch's moving trash, as an in-place commit's inputs do; outside the
   table, kept for ``trash_retention_days``, purged with the run): the
   old folder is usually the partition's default path, and a partition dropped and written again
   there, or re-added by ``MSCK REPAIR``, must not read them again beside the new rows. (A query
   that listed the old folder before the switch and opens its files afterwards fails, and is
   retried, as it would after any rewrite of the folder.) Files that arrive once they left are
   never read beside the merged copy: the finish fails saying so, and when the run expires the old
   folder is kept with them, named in the log; an empty old folder is removed (``retire``).

Recovery of a journal asks the Metastore which location is current: the new folder, the switch
happened (finish step 6); the old one, it did not, or its ``alter_partition`` is still in flight
(a job that lost its connection or paused may still have one on the way): a new folder that was
built is left as it is until the journal is ``IN_FLIGHT_SECONDS`` old, then deleted (one whose
outputs were still staged is deleted at once: after the takeover its job cannot build it); a later switch's folder
(the journal was published late by a job that hung while its retry merged and switched), the
journal and its never-named new folder are removed; neither (the partition was dropped or moved by
someone else), the journal is removed and both folders are left. A job taking a journal over
renames its staging folder and its moving trash (``in_place.take_over``; the run's trash, when a
finish had renamed the moving trash to it already), so the earlier holder's moves fail.
Rollback (``rollback_switch``) moves the old files back from the trash, then one
``alter_partition`` points the partition at the old folder again.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from hive_compaction.commit.in_place import (
    InputsChanged,
    check_owner,
    identity_moves,
    take_over,
    to_run_trash,
    unpublish,
)
from hive_compaction.commit.record import CommitRecord
from hive_compaction.commit.steps import Step, reached
from hive_compaction.commit.work_area import WorkArea, check_record, journal_holder, release_journal
from hive_compaction.model.results import NUM_FILES, STATISTICS_KEYS, TOTAL_SIZE
from hive_compaction.storage.capabilities import LOCATION_SWITCH, is_object_store
from hive_compaction.storage.hadoop_fs import Entry, FolderGone, HadoopFS
from hive_compaction.storage.listing import DataFile, RecordedFile, data_files
from hive_compaction.storage.metastore_client import DescriptorChanged, JobMetastore, PartitionState, same_location
from hive_compaction.storage.metastore_lock import CommitConflict, LockLost, check_lock_held
from hive_compaction.storage.paths import is_within, versions_folder

log = logging.getLogger(__name__)

MODE = LOCATION_SWITCH
PREVIOUS_LOCATION = "hive_compaction.previousLocation"
# While files are copied into the new folder, its journal's time is renewed this often, so that no
# job that commits without the lock (require_locks: false) takes a long copy for a dead job's.
RENEW_SECONDS = 60
# How long after its journal last changed a switch's alter_partition may still land: a call the
# client sent is answered or dropped within the Metastore client's socket timeout
# (hive.metastore.client.socket.timeout, 600 s by default), and the journal is renewed until the
# call is sent. Until then recovery leaves the new folder as it is.
IN_FLIGHT_SECONDS = 1800


class SwitchedBack(RuntimeError):
    """A rollback switched the partition back, and its old files are not all back yet."""


class SwitchInFlight(CommitConflict):
    """The partition is still at its old folder, but the switch that a journal records may still
    land (its job may only be slow): nothing was changed; a run after ``IN_FLIGHT_SECONDS`` undoes it."""


def new_folder(table_location: str, partition: str, run: str, attempt: str) -> str:
    return f"{versions_folder(table_location, partition)}/{run}-{attempt}"


def build_and_switch(fs: HadoopFS, area: WorkArea, hms: JobMetastore, record: CommitRecord,
                     rows_of: Callable[[list[Any]], int]) -> CommitRecord:
    """Steps 2-6 for a held journal; returns the manifest. ``rows_of(files)``: the rows in the
    footers of data files. Raises CommitConflict (another job or writer: nothing changed, the
    partition is left for the next run), SwitchAborted (undone, nothing changed) or another error
    (the journal is kept: the next run asks the Metastore and finishes or undoes it)."""
    try:
        _build(fs, area, record, rows_of)
    except LockLost:
        _give_up_unsent(fs, area, record)
        raise
    except (SwitchAborted, CommitConflict):
        raise
    except Exception as e:  # noqa: BLE001 - the file system failed before the switch: undo the new folder
        _abort(fs, area, record, f"{type(e).__name__}: {e}".splitlines()[0][:300])
    try:
        switched = hms.switch(record.table, record.values, record.location, record.new_location, {
            "numFiles": str(len(record.outputs) + len(record.copies)),
            "totalSize": str(sum(o.size for o in record.outputs)
                             + sum(f.size for f in record.files if f.name in set(record.copies))),
            "numRows": str(record.rows), PREVIOUS_LOCATION: record.location}, record.descriptor)
    except DescriptorChanged as e:
        _abort(fs, area, record, str(e), conflict=True)
    except Exception:
        # The call may have gone through, or may still land: the journal and the new folder stay
        # for the next run, which asks the Metastore (recover_switch).
        if same_location(hms.location(record.table, record.values), record.new_location):
            reached(Step.SWITCHED, record.label)
            return _finish(fs, area, hms, record)
        raise
    if not switched:
        _abort(fs, area, record, "the Metastore's partition is no longer at the folder that was merged "
                                 "(dropped or moved meanwhile)", conflict=True)
    reached(Step.SWITCHED, record.label)
    return _finish(fs, area, hms, record)


def _build(fs: HadoopFS, area: WorkArea, record: CommitRecord, rows_of: Callable[[list[Any]], int]) -> None:
    old, new = record.location.rstrip("/"), record.new_location
    label = record.label
    if fs.exists(new):  # not this job's: left alone
        release_journal(fs, area, record)
        raise SwitchAborted(f"{label}: the new folder {new} exists already; nothing was switched")
    moved = fs.move_all([(o.staged, f"{new}/{o.name}") for o in record.outputs])
    if moved != len(record.outputs):
        _abort(fs, area, record, f"{len(record.outputs) - moved} staged output(s) vanished")
    renewed = time.monotonic()
    for name in record.copies:
        check_lock_held()  # a copy that outlives the lease stops here, before another file
        if time.monotonic() - renewed > RENEW_SECONDS:  # a long copy's journal stays young
            fs.touch(area.journal(record.pid))
            renewed = time.monotonic()
        fs.copy(f"{old}/{name}", f"{new}/{name}")
    reached(Step.FOLDER_BUILT, label)
    expected = {f.name: f.size for f in new_folder_files(record)}
    built, folders = data_files(fs.list(new))
    found = {f.name: f.size for f in built}
    if found != expected or folders:
        _abort(fs, area, record, f"the new folder {new} does not hold what was written: {sorted(found)} "
                                 f"!= {sorted(expected)}")
    rows = rows_of(built)
    if rows != record.rows:
        _abort(fs, area, record, f"the new folder {new} holds {rows} rows, the old one {record.rows}")
    _check_old_folder(fs, area, record)
    check_owner(fs, area, record)


def _check_old_folder(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> None:
    """The old folder holds exactly the journal's files, as they were, and no writer's staging."""
    listed = fs.list(record.location)
    files, folders = data_files(listed)
    changed = changed_files(files, record.files)
    why = f"a writer left folder(s) {folders[:3]} in it" if folders else None
    if changed or why:
        _abort(fs, area, record, why or f"the partition's files changed while it was being merged "
                                        f"({changed[:3]})", conflict=True)


def changed_files(files: list[Any], recorded: list[RecordedFile]) -> list[str]:
    """Names of files that are not as recorded (``Entry.identity()``), added or gone, sorted."""
    then = {f.name: f for f in recorded}
    now = {f.name: f for f in files}
    return sorted(n for n in set(now) | set(then) if n not in now or not now[n].matches(then.get(n)))


class SwitchAborted(RuntimeError):
    """The switch was undone before the commit point: the partition is as it was."""


def _abort(fs: HadoopFS, area: WorkArea, record: CommitRecord, why: str, conflict: bool = False) -> None:
    """Undo a switch that did not happen: staged outputs back, the new folder deleted. Not by a
    job that lost its lock or journal meanwhile: the job that took them over decides."""
    check_owner(fs, area, record)
    _undo(fs, area, record)
    raise (CommitConflict if conflict else SwitchAborted)(
        f"{record.label}: {why}; the location was not switched, the partition is as it was")


def _give_up_unsent(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> None:
    """The lock was lost before the switch's alter_partition was sent: none of it can land, so
    its own new folder (no partition ever read it) and journal go now, rather than wait out
    ``IN_FLIGHT_SECONDS`` for the next run. Only while the journal is still its own: a job that
    took it over decides then (its takeover renamed staging, so the outputs' way back fails)."""
    if journal_holder(fs, area, record.pid) != record.owner:
        return
    try:
        _undo(fs, area, record)
    except CommitConflict:
        log.warning("%s: the journal was taken over while this job gave its switch up", record.label)


def _undo(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> None:
    """Staged outputs back to staging (the run's purge removes them; a staging folder a takeover
    renamed is never re-created: this job stops first), the new folder deleted, the journal
    released."""
    new = record.new_location
    unpublish(fs, record, new)
    fs.delete(new, recursive=True)
    release_journal(fs, area, record)


class SwitchUndone(RuntimeError):
    """A writer replaced the old folder's files by path after the switch: the partition points at
    the old folder again, as that writer left it; the merged copy is no longer read."""


class CannotTell(RuntimeError):
    """Files arrived in the old folder after its files had all left for the trash: an append or an
    overwrite by path, which cannot be told apart. The switch stands; they are left there, unread."""


@dataclass(frozen=True)
class OldFolderSeen:
    """The old folder after the switch, against the journal's listing of it."""
    late: list[DataFile]  # data files the journal does not know, or under a name its file left for the trash
    kept: list[str]  # the journal's files still there, as recorded
    moved: list[str]  # the journal's files in this switch's trash: its finish moved them
    replaced: list[str]  # the journal's names holding another file now, their own file not in the trash
    removed: list[str]  # the journal's files neither there nor in the trash: someone deleted them

    @property
    def overwritten(self) -> bool:
        """A writer by path changed or deleted files the switch replaced (an overwrite, or part of one)."""
        return bool(self.replaced or self.removed)


def look_at_old_folder(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> OldFolderSeen:
    files, _ = data_files(fs.list(record.location.rstrip("/")))
    now = {f.name: f for f in files}
    known = {f.name: f for f in record.files}
    changed = [n for n, f in now.items() if n in known and not f.matches(known[n])]
    missing = [n for n in known if n not in now]
    # A name whose file this finish moved to the trash is free: an append may take it as well as an
    # overwrite (Hive's INSERT INTO and INSERT OVERWRITE both write 000000_0 in an empty folder).
    asked = missing + changed
    trashes = [area.trash_of(record)] + ([record.moving_trash] if record.moving_trash else [])
    found = fs.statuses([f"{t}/{n}" for n in asked for t in trashes])
    moved = {n for k, n in enumerate(n for n in asked for _ in trashes) if found[k] is not None}
    return OldFolderSeen(
        late=[f for f in files if f.name not in known or f.name in moved],
        kept=sorted(n for n, f in now.items() if n in known and f.matches(known[n])),
        moved=sorted(moved),
        replaced=sorted(set(changed) - moved),
        removed=sorted(set(missing) - moved))


def _finish(fs: HadoopFS, area: WorkArea, hms: JobMetastore, record: CommitRecord) -> CommitRecord:
    """After the switch: late files adopted, the old folder's files moved to the run's trash (each
    only while it is the file the journal names, through the moving trash: ``old_files_to_trash``),
    the manifest, the journal released and staging removed (a replay does it all again: each step
    is idempotent). Each step only while this job holds the journal: a paused holder that a replay
    took over must not move what a later rollback put back, nor write over its manifest.

    The old folder is looked at before and after the moves. A file of the journal's that a writer
    replaced or deleted there (an overwrite by path, by a writer that looked the location up before
    the switch) undoes the switch (``_back_to_the_writer``). A file under a new name beside the
    journal's files, none of them touched, is an append: moved into the new folder. One that
    arrived once they had all left cannot be told from an overwrite's: CannotTell."""
    label = record.label
    check_owner(fs, area, record)
    seen = look_at_old_folder(fs, area, record)
    if seen.overwritten:
        _back_to_the_writer(fs, area, hms, record, seen, record.moving_trash or area.trash_of(record))
    adopted = []
    if seen.late and seen.kept:
        adopted = adopt_late_files(fs, record.location, record.new_location, record.files, label,
                                   moved_out=set(seen.moved))
    moving = old_files_to_moving_trash(fs, area, record)
    # Looked at again while the old files are in this holder's own generation of the moving trash: an
    # earlier holder resuming its takeover may still rename the run's trash away, never that folder.
    after = look_at_old_folder(fs, area, record)
    if after.overwritten:
        _back_to_the_writer(fs, area, hms, record, after, moving)
    trash = to_run_trash(fs, area, record, moving)
    check_owner(fs, area, record)
    manifest = record.but(committed_at=time.time(), adopted=adopted, trash=trash)
    fs.write_text_atomic(area.manifest_of(record), manifest.to_json())
    reached(Step.MANIFEST_WRITTEN, label)
    release_journal(fs, area, record)
    fs.delete(record.staging, recursive=True)
    # The last look, once all is done: whatever is in the old folder now came after its files left.
    arrived, _ = data_files(fs.list(record.location.rstrip("/")))
    if arrived:
        names = [f.name for f in arrived]
        raise CannotTell(f"{label}: {len(names)} file(s) {names[:5]} arrived in the old folder {record.location} by "
                         f"path after the location switch, once its files had left for the trash {trash}: an append "
                         "or an overwrite by a writer that looked the location up before the switch, the tool cannot "
                         f"tell. They were left there, unread; the partition reads the merged copy in "
                         f"{record.new_location}. A person decides: move them into {record.new_location} if they "
                         f"were appended, or point the partition at {record.location} if they replaced its rows")
    return manifest


def _back_to_the_writer(fs: HadoopFS, area: WorkArea, hms: JobMetastore, record: CommitRecord,
                        seen: OldFolderSeen, trash: str) -> NoReturn:
    """A writer by path overwrote (or deleted part of) the old folder after the switch: had the
    switch not happened, the partition would read the folder as that writer left it, so it is
    pointed there again (its statistics: the files and bytes there, the rows unknown). Nothing is
    moved back into it (the old files this finish moved before the writer came stay in the trash,
    named). Only while the new folder holds just what the switch put there: one a writer added to
    through the Metastore since is not switched away from, and the journal stays for a person."""
    old, new, label = record.location.rstrip("/"), record.new_location, record.label
    changed = seen.replaced + seen.removed
    what = (f"a writer replaced or removed {changed[:5]} in the old folder {old} by path after the location switch "
            "(one that looked the location up before it)")
    check_owner(fs, area, record)
    written, folders = data_files(fs.list(new))
    if changed_files(written, new_folder_files(record)) or folders:
        raise InputsChanged(f"{label}: {what}, and {new}, which the partition reads, holds files the switch did not "
                            f"put there ({changed_files(written, new_folder_files(record))[:3] or folders[:3]}): "
                            "nothing was moved, a person decides which rows belong")
    there, _ = data_files(fs.list(old))
    stats: dict[str, str | None] = {**dict.fromkeys(STATISTICS_KEYS), PREVIOUS_LOCATION: None,
                                    NUM_FILES: str(len(there)), TOTAL_SIZE: str(sum(f.size for f in there))}
    if not hms.switch(record.table, record.values, new, old, stats):
        raise InputsChanged(f"{label}: {what}; the partition is no longer at {new} either: nothing was switched back, "
                            "the next run looks again")
    trash = to_run_trash(fs, area, record, trash)  # (``trash``: where this finish moves the old files)
    check_owner(fs, area, record)
    fs.write_text_atomic(area.manifest_of(record), record.but(
        committed_at=time.time(), rolled_back_at=time.time(), trash=trash).to_json())
    release_journal(fs, area, record)
    fs.delete(record.staging, recursive=True)
    put_aside = f"; the old file(s) {seen.moved[:5]} its finish had moved before are in the trash {trash}" \
        if seen.moved else ""
    raise SwitchUndone(f"{label}: {what}: switched back, the partition reads {old} as that writer left it "
                       f"({len(there)} file(s)); the merged copy in {new} is no longer read (removed with the run's "
                       f"purge){put_aside}")


def old_files_to_trash(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> str:
    """Move the old folder's files the journal names into the run's trash; returns that folder."""
    return to_run_trash(fs, area, record, old_files_to_moving_trash(fs, area, record))


def old_files_to_moving_trash(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> str:
    """Move the old folder's files the journal names into the holder's moving trash (``moving_trash``:
    the switch's own, made before its journal, or a takeover's generation of it); returns it. It is
    renamed to the run's trash then (``to_run_trash``). A replay that takes the switch over renames
    the moving trash, or takes back the run's trash a finish had renamed it to (``in_place.take_over``),
    so from then on every move of an earlier holder into it fails. A journal older than the moving
    trash moves them into the run's trash directly."""
    old, final = record.location.rstrip("/"), area.trash_of(record)
    trash = record.moving_trash or final
    try:
        fs.move_all(identity_moves(old, trash, record.files), create_folders=trash == final)
    except FolderGone:
        raise CommitConflict(f"{record.label}: this job's trash {trash} is gone (a replay took the switch over); "
                             "it stopped before moving more") from None
    return trash


def recover_switch(fs: HadoopFS, area: WorkArea, hms: JobMetastore, record: CommitRecord,
                   table_location: str, owner: str = "") -> CommitRecord | None:
    """A switch a crashed job left: the Metastore says whether it happened. The record is
    checked first (``work_area.check_record``) against the table's location as planned; a
    journal this job finishes or undoes is taken over first (``owner``: this job)."""
    check_record(record, area, record.pid, table_location=table_location)
    label = record.label
    state = hms.state(record.table, record.values)
    current = state.location
    if same_location(current, record.new_location):
        log.warning("%s: the location switch of run %s happened; finishing it", label, record.run)
        return _finish(fs, area, hms, take_over(fs, area, record, owner or record.owner))
    if _finish_began(fs, area, record) or (same_location(current, record.location) and _recreated(fs, record, state)):
        return _superseded(fs, area, take_over(fs, area, record, owner or record.owner), current)
    if same_location(current, record.location):
        st = fs.status(area.journal(record.pid))
        young = st is not None and st.modification_time > (time.time() - IN_FLIGHT_SECONDS) * 1000
        if young and not _unbuilt(fs, record):
            raise _in_flight(record, st)
        taken = take_over(fs, area, record, owner or record.owner)
        if young and not _unbuilt(fs, taken):  # its job moved its last output meanwhile: it may switch yet
            raise _in_flight(taken, st)
        log.warning("%s: the location switch of run %s did not happen; removing its new folder", label, record.run)
        _undo(fs, area, taken)
        return None
    if _switched_since(current, record, table_location):
        # A job that hung before publishing its journal, whose lock a retry took over: the retry
        # merged and switched. This switch can no longer happen (it needs the old folder current).
        log.warning("%s: the journal of run %s names the folder %s, but a later location switch moved the "
                    "partition to %s; removing that journal and its never-used new folder", label, record.run,
                    record.location, current)
        _undo(fs, area, take_over(fs, area, record, owner or record.owner))
        return None
    old = record.location.rstrip("/")
    if current is None and not fs.exists(record.new_location) and fs.exists(old):
        # Dropped with its folder after the switch (a managed table's DROP deletes the folder it
        # reads; had it still read the old one, that would be gone): the old files are the
        # switch's superseded copies, and must not come back with MSCK REPAIR or a re-created partition.
        record = take_over(fs, area, record, owner or record.owner)
        old_files_to_trash(fs, area, record)
        release_journal(fs, area, record)
        raise CommitConflict(f"{label}: dropped after the location switch of run {record.run}, before that switch was "
                             f"finished: the old folder's files it replaced went to the trash {area.trash_of(record)}")
    release_journal(fs, area, record)
    raise InputsChanged(f"{label}: the Metastore's partition is at {current or 'nothing (dropped)'}, neither the "
                        f"folder run {record.run} merged nor the one it built; both were left as they are")


def _unbuilt(fs: HadoopFS, record: CommitRecord) -> bool:
    """Whether a staged output is still in staging: the switch's job had not built its new folder,
    and once a takeover renamed the staging folder it never will (that move fails and the job
    stops), so no alter_partition of it can be on the way: it may be undone at once."""
    return any(st is not None for st in fs.statuses([o.staged for o in record.outputs]))


def _in_flight(record: CommitRecord, journal: Entry | None) -> SwitchInFlight:
    return SwitchInFlight(f"{record.label}: the location switch of run {record.run} has not happened, but its "
                          f"alter_partition may still land (its new folder was built; journal written "
                          f"{time.time() - journal.modification_time / 1000:.0f} s ago): the new folder "  # type: ignore[union-attr]  # young: it exists
                          f"{record.new_location} is left as it is, the partition reads its old folder; a run "
                          f"{IN_FLIGHT_SECONDS} s after the journal removes it")


def _finish_began(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> bool:
    """Whether any of the old folder's files is in the moving trash or the run's trash: only a
    finish, after the switch, moves them there."""
    folders = [area.trash_of(record)] + ([record.moving_trash] if record.moving_trash else [])
    return any(st is not None for st in fs.statuses([f"{t}/{f.name}" for t in folders for f in record.files]))


def _recreated(fs: HadoopFS, record: CommitRecord, state: PartitionState) -> bool:
    """Whether the partition, at its old folder now, was created after the switch was decided while
    the new folder, which was built, is gone: dropped with the folder it read (the new one: had it
    read the old one, that would be gone) and written again at the old one. The switch had happened."""
    if record.decided_at is None or state.created is None or state.created <= record.decided_at:
        return False
    # Built (its staged outputs had left staging for it), and gone since.
    built = all(st is None for st in fs.statuses([o.staged for o in record.outputs]))
    return built and not fs.exists(record.new_location)


def _superseded(fs: HadoopFS, area: WorkArea, record: CommitRecord, current: str | None) -> NoReturn:
    """The switch happened (its finish had begun, or the partition was dropped with the new
    folder and written again at the old one), and the partition no longer reads the new folder:
    it reads its old folder again (re-created there, or pointed back by hand), another one, or
    none (dropped). The switch's superseded files still in the old folder go to the trash, as the
    finish would have moved them (a partition there again must not read them beside its new
    rows); a manifest lets the purge look after the new folder."""
    old = record.location.rstrip("/")
    trash = old_files_to_trash(fs, area, record)
    fs.write_text_atomic(area.manifest_of(record), record.but(committed_at=time.time(), trash=trash).to_json())
    release_journal(fs, area, record)
    fs.delete(record.staging, recursive=True)
    raise CommitConflict(f"{record.label}: its location switch by run {record.run} happened, and the partition reads "
                         f"{current or 'nothing (dropped)'} now: the files that switch replaced went from {old} to the "
                         f"trash {trash}; what else is there is its writers'")


def _switched_since(current: str | None, record: CommitRecord, table_location: str) -> bool:
    """The partition is at another new folder of this package for the same partition (a later
    switch), not at the record's."""
    if not current:
        return False
    return (is_within(current, versions_folder(table_location, record.partition))
            and not same_location(current, record.new_location))


def retire(fs: HadoopFS, hms: JobMetastore, manifest: CommitRecord) -> bool:
    """Delete the old folder of an expired switch: the files the manifest names (with their size
    and time), then the folder if empty. Nothing while a partition points at it; True when
    nothing of it is left to look after. Called by the purge while it holds the partition's
    journal (``work_area._purge_partition``): never beside a rollback, which needs the folder whole."""
    old = manifest.location.rstrip("/")
    label = manifest.label
    current = hms.location(manifest.table, manifest.values)
    if manifest.rolled_back_at:  # the new folder is the one no partition reads
        if not same_location(current, manifest.new_location):
            _delete_known(fs, manifest.new_location, new_folder_files(manifest), label, manifest.run)
        return True
    if same_location(current, old):
        # Written again at its old folder (dropped and re-created, or re-added): what is there is
        # its writers'. The merged copy no partition reads goes.
        log.warning("%s: the partition reads %s again (re-created there since the switch): left as it is", label, old)
        _delete_known(fs, manifest.new_location, new_folder_files(manifest), label, manifest.run)
        return True
    if manifest.trash:  # the old files left the folder at the switch: it is removed if nothing came since
        left, _ = data_files(fs.list(old))
        if left:
            # Arrived once the old files had left: an append or an overwrite by path, which cannot be
            # told apart, so they are not moved beside the merged copy of the rows they may replace.
            log.warning("%s: %s is no longer read since run %s, but %s arrived there after its files left for the "
                        "trash (a writer by path that looked the location up before the switch; an append or an "
                        "overwrite, which cannot be told apart): kept, with the folder; no partition reads them",
                        label, old, manifest.run, [f.name for f in left][:5])
        elif fs.exists(old):
            fs.delete(old, recursive=True)
            log.info("%s: retired %s (the partition reads %s)", label, old, manifest.new_location)
        return True
    if same_location(current, manifest.new_location):  # a switch that left them there: beside them, an append
        adopt_late_files(fs, old, manifest.new_location, manifest.files, label)
    if _delete_known(fs, old, manifest.files, label, manifest.run):
        log.info("%s: retired %s (the partition reads %s)", label, old, manifest.new_location)
    return True


def new_folder_files(manifest: CommitRecord) -> list[RecordedFile]:
    """What the switch put in its new folder: the outputs and the copied files (name, size)."""
    copies = set(manifest.copies)
    return [RecordedFile(o.name, o.size) for o in manifest.outputs] + \
        [RecordedFile(f.name, f.size) for f in manifest.files if f.name in copies]


def adopt_late_files(fs: HadoopFS, old: str, new: str, known: list[RecordedFile], label: str,
                     moved_out: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Move the data files of ``old`` (a folder no partition reads any more) under a name it did
    not hold before (``known``) into ``new``, the partition's folder, where readers see their
    rows: a writer that looked the location up before the switch appended them. A name that
    is taken in ``new`` gets a ``_copy_<n>`` suffix, as Hive names a second file. The new names.
    Only an append is adopted: when a ``known`` file changed or went (other than those
    ``moved_out`` to the trash by the switch's finish), nothing moves and the error says what is where."""
    then = {f.name for f in known}
    files, _ = data_files(fs.list(old.rstrip("/")))
    late = [f for f in files if f.name not in then]
    if not late:
        return []
    replaced = changed_files([f for f in files if f.name in then],
                             [f for f in known if f.name in {g.name for g in files}])
    gone = then - {f.name for f in files} - set(moved_out)
    if replaced or gone:
        # Not an append: a writer replaced or removed files the switch had copied (an overwrite by
        # path); its new files beside the merged copy of the rows they replaced could double them.
        log.error("%s: %d file(s) %s arrived in the old folder %s after its location switch while known file(s) "
                  "%s changed or went: not an append, so they were not moved into %s; decide from their rows",
                  label, len(late), [f.name for f in late][:5], old, sorted(set(replaced) | gone)[:5], new)
        return []
    taken = {f.name: f.size for f in fs.list(new.rstrip("/"))}
    # On an object store a move is a copy then a delete: one that stopped in between left the file
    # in both folders (elsewhere a rename is whole, and a same-named file is another writer's).
    copied = is_object_store(fs.resolved_scheme(new.rstrip("/")))
    adopted = []
    for f in late:
        if copied and taken.get(f.name) == f.size:  # the copy is in: the original goes
            fs.delete(f.path)
            adopted.append(f.name)
            continue
        name, n = f.name, 0
        while name in taken:
            n += 1
            name = f"{f.name}_copy_{n}"
        fs.rename(f.path, f"{new.rstrip('/')}/{name}", create_folders=False)
        taken[name] = f.size
        adopted.append(name)
    log.warning("%s: %d file(s) %s were written to the old folder %s after its location switch (a writer that "
                "looked the location up before it): moved into %s, where they are read", label, len(adopted),
                adopted[:5], old, new)
    return adopted


def _delete_known(fs: HadoopFS, folder: str, known: list[RecordedFile], label: str, run: str) -> bool:
    """Delete the files of a folder no partition reads that are as ``known`` says (name, size,
    and time or version where recorded), then the folder if that emptied it. A file that is not
    (a writer that wrote by path, after the switch or its rollback) is kept, and so is the
    folder: False, with a warning naming them."""
    then = {f.name: f for f in known}
    extra = []
    for f in fs.list(folder):
        if not f.is_dir and f.matches(then.get(f.name)):
            fs.delete(f.path)
        elif not (f.name.startswith(".") and f.name.endswith(".crc")):
            extra.append(f.name)
    if extra:
        log.warning("%s: %s is no longer read since run %s, but %s arrived there since (a writer that writes by "
                    "path?): kept, with the folder; no partition reads them", label, folder, run, extra[:5])
        return False
    fs.delete(folder, recursive=True)  # only checksum files are left
    return True


def rollback_switch(fs: HadoopFS, hms: JobMetastore, manifest: CommitRecord, resuming: bool = False) -> str:
    """Point the partition back at its old folder, if it is still at the new one and that holds
    only what the switch put there, then move the old folder's files back from the trash (the
    statistics as they were before). Readers of the partition miss its rows between the two
    steps, as in an in-place commit; a rollback interrupted there holds the partition (its
    journal) until it is run again (``resuming``), which finds the partition at the old folder
    and goes on. A partition found at its old folder otherwise was written there again since:
    nothing is moved into it."""
    old, new = manifest.location.rstrip("/"), manifest.new_location
    label = manifest.label
    current = hms.location(manifest.table, manifest.values)
    if same_location(current, new):
        written, folders = data_files(fs.list(new))
        added = changed_files(written, new_folder_files(manifest))
        if added or folders:
            # Switching back would hide what a writer added since the switch (and retire would delete it).
            raise RuntimeError(f"{label}: the partition's folder {new} holds {(added or folders)[:3]} written since "
                               "the switch (a writer after the merge): switching back to the old folder would hide "
                               "their rows; not switched back")
        _check_restorable(fs, manifest, old, label)
        stats = {**manifest.stats_before, PREVIOUS_LOCATION: None}
        if not hms.switch(manifest.table, manifest.values, new, old, stats):
            raise RuntimeError(f"{manifest.label}: the partition is no longer at {new}: not switched back")
    elif not (resuming and same_location(current, old)):
        raise RuntimeError(f"{label}: the partition is no longer at {new} (it reads {current or 'nothing'}): "
                           "not switched back")
    if manifest.trash:  # the old files went to the trash at the switch
        names = [f.name for f in manifest.files]
        fs.move_all([(f"{manifest.trash.rstrip('/')}/{n}", f"{old}/{n}") for n in names], create_folders=False)
    files, _ = data_files(fs.list(old))
    missing = changed_files(files, manifest.files)
    missing = [n for n in missing if n in {f.name for f in manifest.files}]
    if missing:
        raise SwitchedBack(f"{label}: the partition reads its old folder {old} again, which misses {missing[:3]} "
                           f"(not in the trash {manifest.trash} either?)")
    return old


def _check_restorable(fs: HadoopFS, manifest: CommitRecord, old: str, label: str) -> None:
    """Before switching back: the old folder exists and every file it had is in the trash (or
    still in the folder, for a switch that left them there), with none of their names taken."""
    if fs.status(old) is None:
        raise RuntimeError(f"{label}: the old folder {old} is gone (dropped?): cannot switch back")
    names = [f.name for f in manifest.files]
    trash = (manifest.trash or old).rstrip("/")
    found = fs.statuses([f"{trash}/{n}" for n in names] + [f"{old}/{n}" for n in names])
    gone = [n for n, t, o in zip(names, found, found[len(names):]) if t is None and o is None]
    if gone:
        raise RuntimeError(f"{label}: the old file(s) {gone[:3]} are no longer in the trash {trash} (purged?): "
                           "cannot switch back")
    if manifest.trash:
        clash = [n for n, t, o in zip(names, found, found[len(names):]) if t is not None and o is not None]
        if clash:
            raise RuntimeError(f"{label}: the old folder {old} holds {clash[:3]} again (a writer?): cannot switch back")
