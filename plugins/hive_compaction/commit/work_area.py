"""A table's work area: the one owner of its folder layout, its journals and its purge.

Beside the table, never inside a partition (Hive and ``MSCK REPAIR`` do not read it)::

    <root>/staging/<run>/<partition id>/<attempt>/  merged outputs before they are committed
    <root>/journal/<partition id>.json       a decided commit, until it is fully applied
    <root>/journal/<partition id>.replay     held by the one job replaying that journal
    <root>/journal/<partition id>.stopped    its commit stopped: what is where, until a person decides
    <root>/trash/<run>/<partition id>/<attempt>/   replaced inputs, kept for rollback
    <root>/trash/<run>/<partition id>/<attempt>.moving[~<n>]/  the same while the commit runs
    <root>/manifests/<run>/<partition id>/<attempt>.json  what a committed merge replaced (rollback, purge)

Trash and manifests are per attempt of the merge job: a retry of the same run that merges the
partition again never meets its earlier attempt's names, nor overwrites that attempt's manifest.
(Journals written before attempts were recorded use ``trash/<run>/<partition id>/`` and
``manifests/<run>/<partition id>.json``; both are still read.)

Every operation goes through the Spark job's Hadoop FileSystem (``fs``: ``hadoop_fs.HadoopFS``
or anything with its ``list``, ``read_text``, ``read_text_if_exists``, ``exists``,
``create_exclusive`` and ``delete``), so the Airflow workers never touch it.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hive_compaction.commit.record import CommitRecord, PurgeHold, UnsafeRecord, parse
from hive_compaction.storage.capabilities import TEMP_SUFFIX, is_object_store, scheme
from hive_compaction.storage.paths import canonical, is_within, location_problem, partition_id, versions_folder

if TYPE_CHECKING:  # the job side's file system (the schedule explorer passes a double of it)
    from hive_compaction.storage.hadoop_fs import HadoopFS

log = logging.getLogger(__name__)

# The folders that hold per-run content, each ``<folder>/<run>``; purged together.
RUN_FOLDERS = ("trash", "manifests", "staging")
# The end of the hidden name a released journal has for a moment (``release_journal``).
RELEASED = ".released"


@dataclass(frozen=True)
class WorkArea:
    root: str

    def staging(self, run: str, pid: str) -> str:
        return f"{self.root}/staging/{run}/{pid}"

    @property
    def journals(self) -> str:
        return f"{self.root}/journal"

    def journal(self, pid: str) -> str:
        return f"{self.journals}/{pid}.json"

    def replay_claim(self, pid: str) -> str:
        return f"{self.journals}/{pid}.replay"

    def stopped_mark(self, pid: str) -> str:
        """Beside a journal whose commit stopped with files it cannot account for: what is where."""
        return f"{self.journals}/{pid}.stopped"

    def trash(self, run: str, pid: str, attempt: str = "") -> str:
        return f"{self.root}/trash/{run}/{pid}" + (f"/{attempt}" if attempt else "")

    def manifests(self, run: str) -> str:
        return f"{self.root}/manifests/{run}"

    def manifest(self, run: str, pid: str, attempt: str = "") -> str:
        return (
            f"{self.partition_manifests(run, pid)}/{attempt}.json" if attempt else f"{self.manifests(run)}/{pid}.json"
        )

    def partition_manifests(self, run: str, pid: str) -> str:
        """The folder of a partition's manifests, one per attempt that committed it."""
        return f"{self.manifests(run)}/{pid}"

    def trash_of(self, record: CommitRecord) -> str:
        return self.trash(record.run, record.pid, record.attempt)

    def manifest_of(self, record: CommitRecord) -> str:
        return self.manifest(record.run, record.pid, record.attempt)

    def manifests_of(self, fs: HadoopFS, run: str, pid: str | None = None) -> list[str]:
        """The manifests a run wrote (of one partition), old layout and per attempt."""
        found = []
        for e in fs.list(self.manifests(run)):
            if e.name.startswith(".") or (pid and e.name not in (pid, f"{pid}.json")):
                continue
            if e.is_dir:
                found += [c.path for c in fs.list(e.path) if c.name.endswith(".json") and not c.name.startswith(".")]
            elif e.name.endswith(".json"):
                found.append(e.path)
        return found


# A file or run name: one path segment (no separator, not "." or "..").
_SEGMENT = re.compile(r"^(?!\.{1,2}$)[^/\\\x00]+$")


def check_record(
    record: CommitRecord, area: WorkArea, pid: str, location: str | None = None, table_location: str | None = None
) -> None:
    """Before a journal or manifest decides any move: its names are plain file names, its
    partition id is the one its file is named by and its table and partition hash to, its
    staged files lie in this work area's staging folder, and its folder is the partition's
    (``location``) or lies inside the table (``table_location``). Anyone who can write the work
    area could otherwise make the service account move table files out or foreign files in."""
    problems = []
    if record.pid != pid or partition_id(record.table, record.partition) != pid:
        problems.append(f"partition id {record.pid!r} does not match its file {pid!r} or its partition")
    if not _SEGMENT.match(record.run):
        problems.append(f"run {record.run!r} is not a plain name")
    if record.attempt and not _SEGMENT.match(record.attempt):  # it names trash and manifest folders
        problems.append(f"attempt {record.attempt!r} is not a plain name")
    names = [f.name for f in record.inputs] + [o.name for o in record.outputs]
    bad = [n for n in names if not _SEGMENT.match(str(n))]
    if bad:
        problems.append(f"file names {bad[:3]} are not plain names")
    staging = f"{area.root}/staging"
    outside = [o.staged for o in record.outputs if not is_within(o.staged, staging)]
    if record.moving_trash and not is_within(record.moving_trash, f"{area.root}/trash"):
        outside.append(record.moving_trash)
    if outside:
        problems.append(f"staged files {outside[:3]} lie outside {staging}")
    where = record.location
    if location is not None and canonical(where) != canonical(location):
        problems.append(f"folder {where} is not the partition's ({location})")
    elif location is None:
        why = (
            location_problem(where, table_location or "", bool(record.partition))
            if table_location
            else "no table location to check it against"
        )
        if why:
            problems.append(f"folder: {why}")
    if record.switched:  # its new folder lies in the table's VERSIONS_FOLDER
        names = [f.name for f in record.files] + list(record.copies)
        bad = [n for n in names if not _SEGMENT.match(str(n))]
        if bad:
            problems.append(f"file names {bad[:3]} are not plain names")
        versions = versions_folder(table_location or "")
        if not table_location or not is_within(record.new_location, versions):
            problems.append(f"new folder {record.new_location} does not lie in {versions}")
    if is_within(where, area.root) or canonical(where) == canonical(area.root):
        problems.append(f"folder {where} lies in the work area")
    if problems:
        raise UnsafeRecord(
            f"{record.label}: the commit record in {area.root} is refused, nothing was moved: " + "; ".join(problems),
            record.table,
            record.partition,
        )


def read_journal(fs: HadoopFS, uri: str) -> CommitRecord | PurgeHold | None:
    """A journal's record, or None for a torn one: a journal is closed before its commit moves
    a file, so an empty or cut-short one (a job killed while writing it) means nothing moved."""
    return parse(fs.read_text(uri))


def read_journal_if_exists(fs: HadoopFS, uri: str) -> CommitRecord | PurgeHold | None:
    """A journal's (or manifest's) record; None when it does not exist or is torn (one round trip)."""
    text = fs.read_text_if_exists(uri)
    return None if text is None else parse(text)


def read_manifest(fs: HadoopFS, uri: str) -> CommitRecord | None:
    """A manifest's record (None when it does not exist or is torn)."""
    record = read_journal_if_exists(fs, uri)
    if isinstance(record, PurgeHold):
        raise UnsafeRecord(f"the manifest {uri} is a purge's hold")
    return record


def journal_files(fs: HadoopFS, area: WorkArea) -> list[Any]:
    """The file entries of every journal in the work area; the partition id is the entry's name
    without ``.json``."""
    return [e for e in fs.list(area.journals) if e.name.endswith(".json") and not e.name.startswith(".")]


# The partition's journal is its lease: whoever holds it has the partition's work-area files and
# may move its files (a commit, a replay, a location switch, a rollback, a purge). It is taken by
# publishing it exclusively, taken over by replacing it in one step, and checked before each step
# by reading who it names.
def publish_journal(fs: HadoopFS, area: WorkArea, record: CommitRecord | PurgeHold) -> bool:
    """Take the partition's journal: False when another holds it."""
    return fs.create_exclusive(area.journal(record.pid), record.to_json())


def replace_journal(fs: HadoopFS, area: WorkArea, record: CommitRecord) -> None:
    """Take over a journal whose holder is gone, in one step (no gap for a rival)."""
    fs.write_text_atomic(area.journal(record.pid), record.to_json())


def release_journal(fs: HadoopFS, area: WorkArea, record: CommitRecord | PurgeHold) -> bool:
    """Remove the partition's journal only while it is the one ``record``'s holder published:
    its status is read, then whom it names, then it is moved aside only if it still has that
    status (a journal another job took over or published since is another file: it stays), and
    deleted there. False, removing nothing, when it is not (or no longer) this holder's. A holder
    that paused past its lease can so never remove a later holder's journal."""
    journal = area.journal(record.pid)
    st = fs.status(journal)
    if st is None or not _held_by(fs, journal, record):
        return False
    aside = f"{area.journals}/.{record.pid}.{uuid.uuid4().hex[:12]}{RELEASED}"
    if not fs.move_all([(journal, aside, st.size, st.modification_time, st.version)]):
        return False
    fs.delete(aside)
    return True


def _held_by(fs: HadoopFS, journal: str, record: CommitRecord | PurgeHold) -> bool:
    try:
        now = read_journal_if_exists(fs, journal)
    except UnsafeRecord:
        return False
    if isinstance(record, PurgeHold):
        return isinstance(now, PurgeHold) and (now.run, now.at) == (record.run, record.at)
    return isinstance(now, CommitRecord) and now.owner == record.owner


def journal_holder(fs: HadoopFS, area: WorkArea, pid: str) -> str | None:
    """Who holds the partition's journal now: the owner its record names (None: nobody, a torn
    journal, a purge's hold; a journal that is no record is nobody's this job knows)."""
    try:
        return getattr(read_journal_if_exists(fs, area.journal(pid)), "owner", None)
    except UnsafeRecord:
        return None


def purge_expired(
    fs: HadoopFS,
    area: WorkArea,
    retention_days: int,
    keep_runs: set[str],
    now: float | None = None,
    retire: Callable[[CommitRecord], bool] | None = None,
) -> list[str]:
    """Delete the per-run folders (trash, manifests, staging) of runs older than the retention.

    A run's age is the newest change in any of its folders (on an object store, the time in its
    commit records: ``_record_age``); runs in ``keep_runs`` (the current
    one, any with an interrupted commit) are never purged. An expired run is deleted partition
    by partition, each while holding that partition's journal (``_purge_partition``), so never
    beside a commit, replay or rollback of it. A run whose manifests include location switches
    is purged only once ``retire(manifest)`` (``location_switch.retire``) has looked after each
    old folder. Returns the run folders deleted."""
    now = time.time() if now is None else now
    cutoff_ms = (now - retention_days * 86400) * 1000
    newest: dict[str, int] = {}
    for folder in RUN_FOLDERS:
        for run_dir in fs.list(f"{area.root}/{folder}"):
            changed = max(
                [run_dir.modification_time] + [c.modification_time for c in fs.list(run_dir.path)]
                if run_dir.is_dir
                else [run_dir.modification_time]
            )
            newest[run_dir.name] = max(newest.get(run_dir.name, 0), changed)
    if _on_object_store(area):
        newest = {run: _record_age(fs, area, run) for run in newest}
    deleted = []
    for e in fs.list(area.journals):
        # A journal's hidden temporary name, left by a job killed while publishing it, or a
        # released journal whose deletion a kill interrupted.
        if e.name.startswith(".") and e.name.endswith((TEMP_SUFFIX, RELEASED)) and e.modification_time < cutoff_ms:
            fs.delete(e.path)
    for run, changed in sorted(newest.items()):
        if changed >= cutoff_ms or run in keep_runs:
            continue
        pids = _partitions_of(fs, area, run)
        if not all([_purge_partition(fs, area, run, pid, retire) for pid in sorted(pids)]):
            continue  # the rest of the run waits for a later purge
        if _partitions_of(fs, area, run) - pids:
            continue  # a partition arrived meanwhile: not held, so not deleted
        for folder in RUN_FOLDERS:
            target = f"{area.root}/{folder}/{run}"
            if fs.delete(target, recursive=True):
                deleted.append(target)
    if deleted:
        log.info(
            "%s: purged %d expired folder(s) of %d run(s) older than %d day(s)",
            area.root,
            len(deleted),
            len({d.rsplit("/", 1)[-1] for d in deleted}),
            retention_days,
        )
    return deleted


def _on_object_store(area: WorkArea) -> bool:
    """Whether the work area is on an object store, by its URI's scheme (a viewfs mount over one is
    refused before any journal is published: ``small_files``)."""
    return is_object_store(scheme(area.root))


def _record_age(fs: HadoopFS, area: WorkArea, run: str) -> int:
    """When a run last changed (ms) on an object store, where folders have no time of their own
    (S3A reports the time of the call: a run would never expire) and a copied object takes a new
    one: its commit records' newest time (a manifest's committed_at or rolled_back_at); for a run
    without one (an attempt's staged outputs), its files' own times, three folders deep."""
    times = [
        max(m.committed_at or 0, m.rolled_back_at or 0)
        for m in map(lambda p: read_manifest(fs, p), area.manifests_of(fs, run))
        if m
    ]
    if times:
        return int(max(times) * 1000)
    files, folders = [], [f"{area.root}/{folder}/{run}" for folder in RUN_FOLDERS]
    for _ in range(3):
        entries = [e for f in folders for e in fs.list(f)]
        files += [e.modification_time for e in entries if not e.is_dir]
        folders = [e.path for e in entries if e.is_dir]
    return max(files, default=0)


def _partitions_of(fs: HadoopFS, area: WorkArea, run: str) -> set[str]:
    """The partition ids a run's folders hold something of (hidden temporary files aside)."""
    return {
        e.name[: -len(".json")] if e.name.endswith(".json") else e.name
        for folder in RUN_FOLDERS
        for e in fs.list(f"{area.root}/{folder}/{run}")
        if not e.name.startswith(".")
    }


def _purge_partition(
    fs: HadoopFS, area: WorkArea, run: str, pid: str, retire: Callable[[CommitRecord], bool] | None
) -> bool:
    """Delete one partition's trash, manifest and staging of an expired run while holding its
    journal, as a commit does: a rollback holds it while it moves files out of this trash and
    back (deleting the trash then would lose the rows that were in it), a commit or replay while
    it moves files into it. So the rule is simply: whoever holds the journal has the partition's
    work-area files; a held journal (or an old folder not retired yet) keeps them, False. The
    hold costs a commit that starts in those milliseconds its partition for this run."""
    journal = area.journal(pid)
    hold = PurgeHold(run, pid, time.time())
    if not publish_journal(fs, area, hold):
        log.info("%s: run %s is kept for now: its partition %s is held (%s)", area.root, run, pid, journal)
        return False
    try:
        for path in area.manifests_of(fs, run, pid):
            manifest = read_manifest(fs, path)
            if manifest and manifest.switched and (retire is None or not retire(manifest)):
                return False
        for path in (
            area.trash(run, pid),
            area.manifest(run, pid),
            area.partition_manifests(run, pid),
            area.staging(run, pid),
        ):
            fs.delete(path, recursive=True)
        return True
    finally:
        release_journal(fs, area, hold)
