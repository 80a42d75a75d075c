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
6. Files a writer added to the old folder since step 4 (one that looked the location up before
   the switch, and wrote by path) are moved into the new folder, where they are read (named in
   the log and the manifest's ``adopted``); the manifest is written, the journal removed. The
   old folder is deleted when the run's trash expires (``trash_retention_days``, at least a day:
   longer than queries and listing caches), file by file as the manifest names them, and only
   while no partition points at it; a file added there since is moved into the partition's
   folder then, and one that replaced a known file is kept and reported.

Recovery of a journal asks the Metastore which location is current: the new folder, the switch
happened (finish step 6); the old one, it did not (the new folder is deleted, once the journal is
older than a live commit can be); a later switch's folder (the journal was published late by a
job that hung while its retry merged and switched), the journal and its never-named new folder are
removed; neither (the partition was dropped or moved by someone else), the journal is removed and
both folders are left.
Rollback (``rollback_switch``) is one ``alter_partition`` back to the old folder while it is whole.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from hive_compaction.commit.in_place import InputsChanged, check_owner, recent, unpublish
from hive_compaction.commit.record import CommitRecord
from hive_compaction.commit.work_area import WorkArea, check_record
from hive_compaction.storage.capabilities import LOCATION_SWITCH, is_object_store
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.listing import data_files
from hive_compaction.storage.metastore_client import DescriptorChanged, JobMetastore, same_location
from hive_compaction.storage.metastore_lock import CommitConflict, check_lock_held, holding_lock
from hive_compaction.storage.paths import is_within, versions_folder

log = logging.getLogger(__name__)

MODE = LOCATION_SWITCH
PREVIOUS_LOCATION = "hive_compaction.previousLocation"
# While files are copied into the new folder, its journal's time is renewed this often, so that no
# job that commits without the lock (require_locks: false) takes a long copy for a dead job's.
RENEW_SECONDS = 60
def new_folder(table_location: str, partition: str, run: str, attempt: str) -> str:
    return f"{versions_folder(table_location, partition)}/{run}-{attempt}"


def build_and_switch(fs: HadoopFS, area: WorkArea, hms: JobMetastore, record: CommitRecord,
                     rows_of: Callable[[list], int]) -> CommitRecord:
    """Steps 2-6 for a held journal; returns the manifest. ``rows_of(files)``: the rows in the
    footers of data files. Raises CommitConflict (another job or writer: nothing changed, the
    partition is left for the next run), SwitchAborted (undone, nothing changed) or another error
    (the journal is kept: the next run asks the Metastore and finishes or undoes it)."""
    try:
        _build(fs, area, record, rows_of)
        switched = hms.switch(record.table, record.values, record.location, record.new_location, {
            "numFiles": str(len(record.outputs) + len(record.copies)),
            "totalSize": str(sum(o["size"] for o in record.outputs)
                             + sum(f["size"] for f in record.files if f["name"] in set(record.copies))),
            "numRows": str(record.rows), PREVIOUS_LOCATION: record.location}, record.descriptor)
    except DescriptorChanged as e:
        _abort(fs, area, record, str(e), conflict=True)
    except (SwitchAborted, CommitConflict):
        raise
    except Exception as e:  # the Metastore or the file system failed before the switch: undo the new folder
        if not same_location(hms.location(record.table, record.values), record.new_location):
            _abort(fs, area, record, f"{type(e).__name__}: {e}".splitlines()[0][:300])
        raise
    if not switched:
        _abort(fs, area, record, "the Metastore's partition is no longer at the folder that was merged "
                                 "(dropped or moved meanwhile)", conflict=True)
    return _finish(fs, area, record)


def _build(fs: HadoopFS, area: WorkArea, record: CommitRecord, rows_of: Callable[[list], int]) -> None:
    old, new = record.location.rstrip("/"), record.new_location
    label = record.label
    if fs.exists(new):  # not this job's: left alone
        fs.delete(area.journal(record.pid))
        raise SwitchAborted(f"{label}: the new folder {new} exists already; nothing was switched")
    moved = fs.move_all([(o["staged"], f"{new}/{o['name']}") for o in record.outputs])
    if moved != len(record.outputs):
        _abort(fs, area, record, f"{len(record.outputs) - moved} staged output(s) vanished")
    renewed = time.monotonic()
    for name in record.copies:
        check_lock_held()  # a copy that outlives the lease stops here, before another file
        if time.monotonic() - renewed > RENEW_SECONDS:  # a long copy's journal stays young
            fs.touch(area.journal(record.pid))
            renewed = time.monotonic()
        fs.copy(f"{old}/{name}", f"{new}/{name}")
    expected = {f["name"]: f["size"] for f in new_folder_files(record)}
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


def changed_files(files: list, recorded: list[dict]) -> list[str]:
    """Names of files that are not as recorded (``Entry.identity()``), added or gone, sorted."""
    then = {f["name"]: f for f in recorded}
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


def _undo(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> None:
    """Staged outputs back to staging (the run's purge removes them), the new folder deleted,
    the journal removed."""
    new = record.new_location
    unpublish(fs, record, new)
    fs.delete(new, recursive=True)
    fs.delete(area.journal(record.pid))


def _finish(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> CommitRecord:
    """After the switch: late files adopted, the manifest, the journal and staging removed (a
    replay does it all again: each step is idempotent)."""
    label = record.label
    adopted = adopt_late_files(fs, record.location, record.new_location, record.files, label)
    manifest = record.but(committed_at=time.time(), adopted=adopted)
    fs.write_text_atomic(area.manifest_of(record), manifest.to_json())
    fs.delete(area.journal(record.pid))
    fs.delete(record.staging, recursive=True)
    return manifest


def recover_switch(fs: HadoopFS, area: WorkArea, hms: JobMetastore, record: CommitRecord,
                   table_location: str) -> CommitRecord | None:
    """A switch a crashed job left: the Metastore says whether it happened. The record is
    checked first (``work_area.check_record``) against the table's location as planned."""
    check_record(record, area, record.pid, table_location=table_location)
    label = record.label
    current = hms.location(record.table, record.values)
    if same_location(current, record.new_location):
        log.warning("%s: the location switch of run %s happened; finishing it", label, record.run)
        return _finish(fs, area, record)
    if same_location(current, record.location):
        st = fs.status(area.journal(record.pid))
        if recent(st) and not holding_lock():  # under the lock, its job is gone or stops at its next step
            raise CommitConflict(f"{label}: run {record.run} is switching its location now (journal written "
                                 f"{time.time() - st.modification_time / 1000:.0f}s ago); left to it")
        log.warning("%s: the location switch of run %s did not happen; removing its new folder", label, record.run)
        _undo(fs, area, record)
        return None
    if _switched_since(current, record, table_location):
        # A job that hung before publishing its journal, whose lock a retry took over: the retry
        # merged and switched. This switch can no longer happen (it needs the old folder current).
        log.warning("%s: the journal of run %s names the folder %s, but a later location switch moved the "
                    "partition to %s; removing that journal and its never-used new folder", label, record.run,
                    record.location, current)
        _undo(fs, area, record)
        return None
    fs.delete(area.journal(record.pid))
    raise InputsChanged(f"{label}: the Metastore's partition is at {current or 'nothing (dropped)'}, neither the folder "
                        f"run {record.run} merged nor the one it built; both were left as they are")


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
        log.warning("%s: the partition points at %s again (rolled back?): the folder is kept", label, old)
        return True
    if same_location(current, manifest.new_location):
        adopt_late_files(fs, old, manifest.new_location, manifest.files, label)
    if _delete_known(fs, old, manifest.files, label, manifest.run):
        log.info("%s: retired %s (the partition reads %s)", label, old, manifest.new_location)
    return True


def new_folder_files(manifest: CommitRecord) -> list[dict]:
    """What the switch put in its new folder: the outputs and the copied files (name, size)."""
    copies = set(manifest.copies)
    return [{"name": o["name"], "size": o["size"]} for o in manifest.outputs] + \
        [{"name": f["name"], "size": f["size"]} for f in manifest.files if f["name"] in copies]


def adopt_late_files(fs: HadoopFS, old: str, new: str, known: list[dict], label: str) -> list[str]:
    """Move the data files of ``old`` (a folder no partition reads any more) under a name it did
    not hold before (``known``) into ``new``, the partition's folder, where readers see their
    rows: a writer that looked the location up before the switch appended them. A name that
    is taken in ``new`` gets a ``_copy_<n>`` suffix, as Hive names a second file. The new names."""
    then = {f["name"] for f in known}
    files, _ = data_files(fs.list(old.rstrip("/")))
    late = [f for f in files if f.name not in then]
    if not late:
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


def _delete_known(fs: HadoopFS, folder: str, known: list[dict], label: str, run: str) -> bool:
    """Delete the files of a folder no partition reads that are as ``known`` says (name, size,
    and time or version where recorded), then the folder if that emptied it. A file that is not
    (a writer that wrote by path, after the switch or its rollback) is kept, and so is the
    folder: False, with a warning naming them."""
    then = {f["name"]: f for f in known}
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


def rollback_switch(fs: HadoopFS, hms: JobMetastore, manifest: CommitRecord) -> str:
    """Point the partition back at its old folder, if it is still whole and the partition is
    still at the new one; the statistics as they were before."""
    old, new = manifest.location.rstrip("/"), manifest.new_location
    label = manifest.label
    files, _ = data_files(fs.list(old))
    if changed_files(files, manifest.files):
        raise RuntimeError(f"{label}: the old folder {old} is no longer whole (retired?): cannot switch back")
    written, folders = data_files(fs.list(new))
    added = changed_files(written, new_folder_files(manifest))
    if added or folders:
        # Switching back would hide what a writer added since the switch (and retire would delete it).
        raise RuntimeError(f"{label}: the partition's folder {new} holds {(added or folders)[:3]} written since the "
                           "switch (a writer after the merge): switching back to the old folder would hide their rows; "
                           "not switched back")
    stats = {**manifest.stats_before, PREVIOUS_LOCATION: None}
    if not hms.switch(manifest.table, manifest.values, new, old, stats):
        raise RuntimeError(f"{manifest.label}: the partition is no longer at {new}: "
                           "not switched back")
    return old
