"""Undo committed compactions from their manifests: outputs out, original files back, statistics back
(a location switch: the partition pointed back at its old folder, ``location_switch.rollback_switch``).

The reverse of the commit, with the same rules: only the files named in the manifest move; the
merged outputs leave the partition before the originals return (never both visible at once);
every step is idempotent, so an interrupted rollback is finished by running it again.
"""
from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable

from hive_compaction.commit import location_switch
from hive_compaction.commit.in_place import recent, recover
from hive_compaction.commit.record import CommitRecord, UnsafeRecord
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
from hive_compaction.model.results import NUM_FILES, SPARK_TOTAL_SIZE, TOTAL_SIZE
from hive_compaction.storage.hadoop_fs import FolderGone, HadoopFS
from hive_compaction.storage.listing import data_files
from hive_compaction.storage.metastore_client import JobMetastore
from hive_compaction.storage.metastore_lock import check_lock_held

log = logging.getLogger(__name__)


LOCK_WAIT_SECONDS = 60


class RollbackError(RuntimeError):
    pass


class RollbackUnfinished(RollbackError):
    """A rollback that stopped after it began moving: it keeps holding the partition (its journal)
    until it is run again, which goes on from where it stopped."""


def manifests(fs: HadoopFS, area: WorkArea, run: str) -> list[CommitRecord]:
    """The run's manifests, partition by partition (in the order of their ids), a partition's
    latest commit first: one merged twice by the run's attempts is rolled back the second time
    first, then the first (which restores the originals and the statistics from before both)."""
    found = []
    for path in area.manifests_of(fs, run):
        try:
            manifest = read_manifest(fs, path)
        except UnsafeRecord as e:
            raise RollbackError(f"{path}: {e}") from None
        if manifest is None:
            raise RollbackError(f"the manifest {path} is gone or torn; nothing was changed")
        found.append(manifest)
    return sorted(found, key=lambda m: (m.pid, -(m.committed_at or 0)))


def rollback_partition(fs: HadoopFS, area: WorkArea, manifest: CommitRecord, table_location: str,
                       owner: str = "rollback", partitions: JobMetastore | None = None,
                       locked: bool = False) -> CommitRecord:
    """Undo one committed merge. Everything is checked before anything moves: the manifest's
    names and folders, that no commit, replay, purge or other rollback holds the partition (its
    journal is taken), that every file to move is where the manifest says and that no name it
    moves to is taken; else nothing changes. ``locked``: this job holds the partition's
    Metastore lock, which every rollback holds, so a rollback journal found is a dead job's."""
    if manifest.rolled_back_at:
        return manifest
    label = f"{manifest.table} {manifest.partition}"
    pid = manifest.pid
    try:
        check_record(manifest, area, pid, table_location=table_location)
    except UnsafeRecord as e:
        raise RollbackError(str(e)) from None
    switched = manifest.switched
    if switched and partitions is None:
        raise RollbackError(f"{label}: a location switch is rolled back through the Metastore; nothing was changed")
    location = manifest.location.rstrip("/")
    trash = manifest.trash
    if not switched and trash.rstrip("/") != area.trash_of(manifest):
        raise RollbackError(f"{label}: the manifest's trash {trash} is not this work area's; nothing was changed")
    # Hold the partition as a commit would: no merge or replay can start while files move back.
    hold = manifest.but(owner=owner, rollback=True)
    resuming = _hold(fs, area, hold, label, locked, lambda: _finish_left(fs, area, manifest, table_location, owner,
                                                                         partitions))
    unfinished = False
    try:
        if switched:  # one alter_partition back to the old folder, then its files back
            try:
                location_switch.rollback_switch(fs, partitions, manifest, resuming)  # type: ignore[arg-type]  # set: see switched above
            except location_switch.SwitchedBack as e:
                raise RollbackUnfinished(f"{e}; run the rollback again to finish it") from None
            except RuntimeError as e:
                raise RollbackError(f"{e}; nothing was changed") from None
        else:
            _check_and_move(fs, manifest, label, location, trash, lambda: _check_owner(fs, area, pid, owner, label))
        done = manifest.but(rolled_back_at=time.time())
        # Before the journal goes: a purge (which holds it too) never deletes a manifest being written.
        fs.write_text_atomic(area.manifest_of(manifest), done.to_json())
    except RollbackUnfinished:
        unfinished = True
        raise
    finally:
        if not unfinished:
            release_journal(fs, area, hold)
    if switched:
        log.info("rolled back %s: the partition reads %s again", label, location)
    else:
        log.info("rolled back %s: %d file(s) restored, %d merged file(s) moved to %s/rolled-back",
                 label, len(manifest.inputs), len(manifest.outputs), trash)
    return done


def _hold(fs: HadoopFS, area: WorkArea, record: CommitRecord, label: str, locked: bool,
          finish_left: Callable[[], None] | None = None) -> bool:
    """Take the partition's journal, or refuse; True when it finishes an interrupted rollback.
    A rollback journal left by a rollback that is gone is taken over (the rollback is finished:
    each step is idempotent), one of a live rollback never: two would move the same files and the
    first to finish would delete the other's journal. Gone means: this job holds the Metastore
    lock every rollback holds, or (a Metastore that serves no locks) the journal is older than a
    rollback runs. A commit's journal found under that lock is a dead job's: ``finish_left``
    finishes it before this rollback looks again (released unfinished, the lock would let a
    writer into a partition whose inputs are in the trash, and a replay after that writer would
    bring them back)."""
    if publish_journal(fs, area, record):
        return False
    journal = area.journal(record.pid)
    current, st = read_journal(fs, journal), fs.status(journal)
    if not getattr(current, "rollback", False):
        if not locked or finish_left is None:
            raise RollbackError(f"{label}: a commit, replay or purge of this partition is under way or unfinished "
                                f"({journal}); let it finish (run the DAG) and roll back then; nothing was changed")
        finish_left()
        return _hold(fs, area, record, label, locked)
    if not locked and recent(st):
        raise RollbackError(f"{label}: another rollback ({current.owner}) holds it ({journal}); nothing was changed")  # type: ignore[union-attr]  # a rollback's record
    log.warning("%s: finishing the interrupted rollback of %s (%s)", label, current.owner, journal)  # type: ignore[union-attr]  # a rollback's record
    replace_journal(fs, area, record)  # replaced in one step: no gap for a rival
    return True


def _finish_left(fs: HadoopFS, area: WorkArea, manifest: CommitRecord, table_location: str, owner: str,
                 partitions: JobMetastore | None) -> None:
    """A dead job's commit of the partition, found under this rollback's lock, finished as a
    merge job's replay would (``recover``); what it cannot finish is refused with its reason."""
    label = f"{manifest.table} {manifest.partition}"
    check_lock_held()
    switch = (lambda r: location_switch.recover_switch(fs, area, partitions, r, table_location, owner)) \
        if partitions is not None else None
    log.warning("%s: finishing the interrupted commit found under this rollback's lock (%s) before rolling back",
                label, area.journal(manifest.pid))
    try:
        recover(fs, area, manifest.pid, owner, table_location=table_location, switch=switch)
    except Exception as e:
        raise RollbackError(f"{label}: an interrupted commit of this partition ({area.journal(manifest.pid)}) "
                            f"could not be finished ({type(e).__name__}: {e}); run the DAG to finish it and "
                            "roll back then; nothing of the rollback was changed") from e


def _check_owner(fs: HadoopFS, area: WorkArea, pid: str, owner: str, label: str) -> None:
    check_lock_held()
    if journal_holder(fs, area, pid) != owner:
        raise RollbackError(f"{label}: this rollback no longer holds {area.journal(pid)}; it stopped")


def _check_and_move(fs: HadoopFS, manifest: CommitRecord, label: str, location: str, trash: str,
                    check_owner: Callable[[], None]) -> None:
    inputs, outputs = manifest.inputs, manifest.outputs
    paths = ([f"{trash}/{f.name}" for f in inputs] + [f"{location}/{f.name}" for f in inputs]
             + [f"{location}/{o.name}" for o in outputs] + [f"{trash}/rolled-back/{o.name}" for o in outputs])
    found = fs.statuses(paths)
    n, m = len(inputs), len(outputs)
    in_trash, in_place = found[:n], found[n:2 * n]
    published, retired = found[2 * n:2 * n + m], found[2 * n + m:]
    gone = [f.name for f, t, p in zip(inputs, in_trash, in_place) if t is None and p is None]
    if gone:
        raise RollbackError(f"{label}: original file(s) {gone[:3]} are no longer in the trash (purged after the "
                            "retention?); nothing was changed")
    clash = [f.name for f, t, p in zip(inputs, in_trash, in_place) if t is not None and p is not None]
    clash += [o.name for o, p, r in zip(outputs, published, retired) if p is not None and r is not None]
    if clash:
        raise RollbackError(f"{label}: file name(s) {clash[:3]} exist both in the partition and where rollback "
                            "would move them (a writer reused the names?); nothing was changed")
    replaced = [o.name for o, p, r in zip(outputs, published, retired) if p is None and r is None]
    if replaced:
        raise RollbackError(f"{label}: merged file(s) {replaced[:3]} are gone from the partition (a later "
                            "compaction replaced them? roll that run back first); nothing was changed")
    # Outputs leave before the originals return: never both visible at once.
    check_owner()
    fs.move_all([(f"{location}/{o.name}", f"{trash}/rolled-back/{o.name}") for o in outputs])
    try:
        check_owner()
        restored = fs.move_all([(f"{trash}/{f.name}", f"{location}/{f.name}") for f in inputs],
                               create_folders=False)
    except FolderGone:
        raise RollbackError(f"{label}: the partition's folder {location} is gone (dropped meanwhile?): it was not "
                            f"re-created, the original files stay in {trash}") from None
    except Exception as e:  # the merged files are out, the originals not all back: hold on, run it again
        raise RollbackUnfinished(f"{label}: the rollback stopped after the merged files left the partition "
                                 f"({type(e).__name__}: {e}); run it again to move the originals back from "
                                 f"{trash}") from e
    back_before = sum(1 for t, p in zip(in_trash, in_place) if t is None and p is not None)  # an earlier try's
    if restored + back_before != n:
        raise RollbackError(f"{label}: {n - restored - back_before} original file(s) left {trash} while the rollback "
                            f"ran (a purge?); {restored + back_before} of {n} are back in the partition")


def statistics_after(fs: HadoopFS, manifest: CommitRecord) -> dict[str, str | None]:
    """What a rolled-back partition's statistics become: every key the refresh may change back
    to its value just before the commit (None: the key is removed), except the file counts and
    sizes, which are taken from the partition's folder as it is now (they equal the values
    before unless those were stale or a writer added files since: statistics = disk)."""
    stats = {k: None if v is None else str(v) for k, v in manifest.stats_before.items()}
    files, _ = data_files(fs.list(manifest.location))
    stats[NUM_FILES], stats[TOTAL_SIZE] = str(len(files)), str(sum(f.size for f in files))
    if stats.get(SPARK_TOTAL_SIZE) is not None:
        stats[SPARK_TOTAL_SIZE] = stats[TOTAL_SIZE]
    return stats


def rollback_run(fs: HadoopFS, area: WorkArea, run: str, table_location: str,
                 partitions: list[str] | None = None, metastore: JobMetastore | None = None,
                 restored: Callable[[CommitRecord], None] | None = None,
                 dry_run: bool = False) -> list[CommitRecord]:
    """``metastore``: a ``JobMetastore``, for tables committed by location switch.
    ``restored(manifest)`` is called as soon as each partition is rolled back (its statistics:
    a later partition that fails must not leave this one's files with the merge's statistics).
    ``dry_run``: return the manifests that would be rolled back; nothing is locked or moved."""
    found = manifests(fs, area, run)
    if partitions:
        missing = set(partitions) - {m.partition for m in found}
        if missing:
            raise RollbackError(f"run {run} committed no compaction of {sorted(missing)} in {area.root}")
        found = [m for m in found if m.partition in partitions]
    if not found:
        raise RollbackError(f"run {run} has no committed compaction in {area.root}")
    if dry_run:
        return found
    done = []
    for m in found:
        # Held like a commit's: a Hive writer waits while files move back (unlocked only where the
        # commit was: require_locks false).
        lock = metastore.lock(m.table, m.partition, LOCK_WAIT_SECONDS, not m.unlocked) if metastore \
            else contextlib.nullcontext()
        with lock as held:
            done.append(rollback_partition(fs, area, m, table_location, owner=f"rollback/{uuid.uuid4().hex[:12]}",
                                           partitions=metastore, locked=held is not None))
        if restored:
            restored(done[-1])
    return done
