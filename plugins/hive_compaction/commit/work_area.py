"""A table's work area: the one owner of its folder layout, its journals and its purge.

Beside the table, never inside a partition (Hive and ``MSCK REPAIR`` do not read it)::

    <root>/staging/<run>/<partition id>/<attempt>/  merged outputs before they are committed
    <root>/journal/<partition id>.json       a decided commit, until it is fully applied
    <root>/journal/<partition id>.replay     held by the one job replaying that journal
    <root>/trash/<run>/<partition id>/<attempt>/   replaced inputs, kept for rollback
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

import json
import logging
import re
import time
from dataclasses import dataclass

from hive_compaction.storage.capabilities import TEMP_SUFFIX, is_object_store, scheme
from hive_compaction.storage.paths import (VERSIONS_FOLDER, canonical, is_within, location_problem,
                                           partition_id)

log = logging.getLogger(__name__)

# The folders that hold per-run content, each ``<folder>/<run>``; purged together.
RUN_FOLDERS = ("trash", "manifests", "staging")


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

    def trash(self, run: str, pid: str, attempt: str = "") -> str:
        return f"{self.root}/trash/{run}/{pid}" + (f"/{attempt}" if attempt else "")

    def manifests(self, run: str) -> str:
        return f"{self.root}/manifests/{run}"

    def manifest(self, run: str, pid: str, attempt: str = "") -> str:
        return f"{self.partition_manifests(run, pid)}/{attempt}.json" if attempt else f"{self.manifests(run)}/{pid}.json"

    def partition_manifests(self, run: str, pid: str) -> str:
        """The folder of a partition's manifests, one per attempt that committed it."""
        return f"{self.manifests(run)}/{pid}"

    def trash_of(self, record: dict) -> str:
        return self.trash(record["run"], record["pid"], record.get("attempt", ""))

    def manifest_of(self, record: dict) -> str:
        return self.manifest(record["run"], record["pid"], record.get("attempt", ""))

    def manifests_of(self, fs, run: str, pid: str | None = None) -> list[str]:
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


class UnsafeRecord(RuntimeError):
    """A journal or manifest that would move files outside its partition or work area."""


# A file or run name: one path segment (no separator, not "." or "..").
_SEGMENT = re.compile(r"^(?!\.{1,2}$)[^/\\\x00]+$")


def check_record(record: dict, area: WorkArea, pid: str, location: str | None = None,
                 table_location: str | None = None) -> None:
    """Before a journal or manifest decides any move: its names are plain file names, its
    partition id is the one its file is named by and its table and partition hash to, its
    staged files lie in this work area's staging folder, and its folder is the partition's
    (``location``) or lies inside the table (``table_location``). Anyone who can write the work
    area could otherwise make the service account move table files out or foreign files in."""
    label = f"{record.get('table')}/{record.get('partition')}"
    problems = []
    if record.get("pid") != pid or partition_id(str(record.get("table")), str(record.get("partition"))) != pid:
        problems.append(f"partition id {record.get('pid')!r} does not match its file {pid!r} or its partition")
    if not _SEGMENT.match(str(record.get("run", ""))):
        problems.append(f"run {record.get('run')!r} is not a plain name")
    if "attempt" in record and not _SEGMENT.match(str(record["attempt"])):  # it names trash and manifest folders
        problems.append(f"attempt {record.get('attempt')!r} is not a plain name")
    names = [f.get("name", "") for f in record.get("inputs", [])] + [o.get("name", "") for o in record.get("outputs", [])]
    bad = [n for n in names if not _SEGMENT.match(str(n))]
    if bad:
        problems.append(f"file names {bad[:3]} are not plain names")
    staging = f"{area.root}/staging"
    outside = [o.get("staged") for o in record.get("outputs", []) if not is_within(str(o.get("staged")), staging)]
    if outside:
        problems.append(f"staged files {outside[:3]} lie outside {staging}")
    where = str(record.get("location", ""))
    if location is not None and canonical(where) != canonical(location):
        problems.append(f"folder {where} is not the partition's ({location})")
    elif location is None:
        why = location_problem(where, table_location or "", bool(record.get("partition"))) if table_location \
            else "no table location to check it against"
        if why:
            problems.append(f"folder: {why}")
    if record.get("mode") == "location_switch":  # its new folder lies in the table's VERSIONS_FOLDER
        names = [f.get("name", "") for f in record.get("files", [])] + list(record.get("copies", []))
        bad = [n for n in names if not _SEGMENT.match(str(n))]
        if bad:
            problems.append(f"file names {bad[:3]} are not plain names")
        new = str(record.get("new_location", ""))
        versions = f"{(table_location or '').rstrip('/')}/{VERSIONS_FOLDER}"
        if not table_location or not is_within(new, versions):
            problems.append(f"new folder {new} does not lie in {versions}")
    if is_within(where, area.root) or canonical(where) == canonical(area.root):
        problems.append(f"folder {where} lies in the work area")
    if problems:
        raise UnsafeRecord(f"{label}: the commit record in {area.root} is refused, nothing was moved: "
                           + "; ".join(problems))


def read_journal(fs, uri: str) -> dict | None:
    """A journal's record, or None for a torn one: a journal is closed before its commit moves
    a file, so an empty or cut-short one (a job killed while writing it) means nothing moved."""
    return _parse(fs.read_text(uri))


def read_journal_if_exists(fs, uri: str) -> dict | None:
    """A journal's (or manifest's) record; None when it does not exist or is torn (one round trip)."""
    text = fs.read_text_if_exists(uri)
    return None if text is None else _parse(text)


def _parse(text: str) -> dict | None:
    try:
        return json.loads(text)
    except ValueError:
        return None


def journaled(fs, area: WorkArea) -> list[tuple[object, dict | None]]:
    """(file entry, record or None if torn) of every journal in the work area; the partition id
    is the entry's name without ``.json``."""
    return [(e, read_journal(fs, e.path)) for e in fs.list(area.journals)
            if e.name.endswith(".json") and not e.name.startswith(".")]


def purge_expired(fs, area: WorkArea, retention_days: int, keep_runs: set[str], now: float | None = None,
                  retire=None) -> list[str]:
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
            changed = max([run_dir.modification_time] + [c.modification_time for c in fs.list(run_dir.path)]
                          if run_dir.is_dir else [run_dir.modification_time])
            newest[run_dir.name] = max(newest.get(run_dir.name, 0), changed)
    if _on_object_store(area):
        newest = {run: _record_age(fs, area, run) for run in newest}
    deleted = []
    for e in fs.list(area.journals):
        # A journal's hidden temporary name, left by a job killed while publishing it.
        if e.name.startswith(".") and e.name.endswith(TEMP_SUFFIX) and e.modification_time < cutoff_ms:
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
        log.info("%s: purged %d expired folder(s) of %d run(s) older than %d day(s)", area.root, len(deleted),
                 len({d.rsplit('/', 1)[-1] for d in deleted}), retention_days)
    return deleted


def _on_object_store(area: WorkArea) -> bool:
    """Whether the work area is on an object store, by its URI's scheme (a viewfs mount over one is
    refused before any journal is published: ``small_files``)."""
    return is_object_store(scheme(area.root))


def _record_age(fs, area: WorkArea, run: str) -> int:
    """When a run last changed (ms) on an object store, where folders have no time of their own
    (S3A reports the time of the call: a run would never expire) and a copied object takes a new
    one: its commit records' newest time (a manifest's committed_at or rolled_back_at); for a run
    without one (an attempt's staged outputs), its files' own times, three folders deep."""
    times = [max(float(m.get("committed_at") or 0), float(m.get("rolled_back_at") or 0))
             for m in map(lambda p: read_journal_if_exists(fs, p), area.manifests_of(fs, run)) if m]
    if times:
        return int(max(times) * 1000)
    files, folders = [], [f"{area.root}/{folder}/{run}" for folder in RUN_FOLDERS]
    for _ in range(3):
        entries = [e for f in folders for e in fs.list(f)]
        files += [e.modification_time for e in entries if not e.is_dir]
        folders = [e.path for e in entries if e.is_dir]
    return max(files, default=0)


def _partitions_of(fs, area: WorkArea, run: str) -> set[str]:
    """The partition ids a run's folders hold something of (hidden temporary files aside)."""
    return {e.name[:-len(".json")] if e.name.endswith(".json") else e.name
            for folder in RUN_FOLDERS for e in fs.list(f"{area.root}/{folder}/{run}") if not e.name.startswith(".")}


def _purge_partition(fs, area: WorkArea, run: str, pid: str, retire) -> bool:
    """Delete one partition's trash, manifest and staging of an expired run while holding its
    journal, as a commit does: a rollback holds it while it moves files out of this trash and
    back (deleting the trash then would lose the rows that were in it), a commit or replay while
    it moves files into it. So the rule is simply: whoever holds the journal has the partition's
    work-area files; a held journal (or an old folder not retired yet) keeps them, False. The
    hold costs a commit that starts in those milliseconds its partition for this run."""
    journal = area.journal(pid)
    if not fs.create_exclusive(journal, json.dumps({"purge": True, "run": run, "pid": pid, "at": time.time()})):
        log.info("%s: run %s is kept for now: its partition %s is held (%s)", area.root, run, pid, journal)
        return False
    try:
        for path in area.manifests_of(fs, run, pid):
            manifest = read_journal_if_exists(fs, path)
            if manifest and manifest.get("mode") == "location_switch" and (retire is None or not retire(manifest)):
                return False
        for path in (area.trash(run, pid), area.manifest(run, pid), area.partition_manifests(run, pid),
                     area.staging(run, pid)):
            fs.delete(path, recursive=True)
        return True
    finally:
        fs.delete(journal)
