"""The schedule explorer's world: a virtual clock, a file system and a Metastore held in memory,
with the semantics the commit code relies on from the real ones, and a scheduling point before
every call (``Scheduler.point``: the actor calling it may be paused, killed or overtaken there).

``MemoryFS`` answers the calls of ``storage.hadoop_fs.HadoopFS`` that the commit code makes, as
the JVM helper does on HDFS and the local disk: a rename keeps a file's identity (size, time,
inode), a move never overwrites and (``create_folders=False``) never creates its folder, a
batch of moves is one call per move and stops at the first failure, an exclusive create is
whole and atomic. Its data files carry the rows they hold (ids), so every schedule's rows are
checked exactly. ``MemoryMetastore`` answers ``storage.metastore_client.JobMetastore``'s calls:
partitions with a location, parameters and a storage descriptor, the EXCLUSIVE lock as a lease
renewed while its holder runs (its heartbeats stop while it is paused) and taken over once it is
``DEAD_AFTER_SECONDS`` old, and a location switch that reads, compares and then writes, as the
client does (a call may be held in flight between the two)."""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

from hive_compaction.storage import metastore_lock
from hive_compaction.storage.hadoop_fs import Entry, FolderGone, HadoopFS
from hive_compaction.storage.metastore_client import MISSING, DescriptorChanged, PartitionState, same_location
from hive_compaction.storage.metastore_lock import DEAD_AFTER_SECONDS, HeldLock, LockTimeout

# When the Metastore's housekeeping releases a lock whose heartbeats stopped (hive.txn.timeout):
# a writer that waits for a lock gets it then; this package's jobs take their own dead jobs' locks
# after DEAD_AFTER_SECONDS.
TXN_TIMEOUT_SECONDS = 300.0


class Killed(BaseException):
    """Thrown into a killed actor: its process is gone, no ``except Exception`` catches it, and
    every call it still makes while unwinding does nothing."""


class Clock:
    """Virtual time: each step takes ``STEP`` seconds; a paused actor makes it jump."""

    STEP = 0.01

    def __init__(self, start: float = 1_800_000_000.0):
        self.now = start
        self.sleeper = None  # Scheduler.sleep: a sleeping actor is a scheduling point

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeper(seconds)


@dataclass
class FileNode:
    size: int
    mtime: int  # ms
    inode: int
    rows: tuple[str, ...] = ()
    text: str | None = None  # a journal's or manifest's


def _norm(uri: str) -> str:
    return uri.rstrip("/")


def rows_in(children: list) -> list[str]:
    """The rows of the data files among a folder's ``children`` ((path, node) pairs): Hive's and
    Spark's readers skip hidden names and folders."""
    rows: list[str] = []
    for path, node in children:
        if node is not None and node.text is None and not path.rsplit("/", 1)[1].startswith(("_", ".")):
            rows += node.rows
    return rows


def short(uri: str) -> str:
    """Paths in a trace line as it prints them: without the scheme and the common folders."""
    return uri.replace("file:///w/", "").replace("work/db.t/", "work/").replace("db.db/t/", "t/")


def _parent(uri: str) -> str:
    return _norm(uri).rsplit("/", 1)[0]


class MemoryFS:
    """The calls of ``HadoopFS`` the commit code makes, in memory (see the module's text)."""

    def __init__(self, sched, clock: Clock):
        self.sched, self.clock = sched, clock
        self.files: dict[str, FileNode] = {}
        self.dirs: set[str] = set()
        self.kids: dict[str, set[str]] = {}  # folder -> the paths directly in it
        self._inodes = itertools.count(1)

    def _link(self, path: str, node: FileNode | None = None) -> None:
        """Add a file (``node``) or a folder at ``path``, whose folder exists."""
        if node is None:
            self.dirs.add(path)
        else:
            self.files[path] = node
        self.kids.setdefault(_parent(path), set()).add(path)

    def _unlink(self, path: str) -> FileNode | None:
        self.kids.get(_parent(path), set()).discard(path)
        if path in self.dirs:
            self.dirs.discard(path)
            self.kids.pop(path, None)
            return None
        return self.files.pop(path)

    # -- world-level helpers (no scheduling point: the caller's step took one) --
    def mkdirs(self, uri: str) -> None:
        uri = _norm(uri)
        missing = []
        while uri and uri not in self.dirs and "/" in uri.split("://", 1)[-1]:
            missing.append(uri)
            uri = _parent(uri)
        for d in reversed(missing):
            self._link(d)

    def put(self, uri: str, rows: tuple[str, ...] = (), text: str | None = None, size: int | None = None) -> FileNode:
        uri = _norm(uri)
        self.mkdirs(_parent(uri))
        node = FileNode(
            size if size is not None else (len(text) if text is not None else 100 + 10 * len(rows)),
            int(self.clock.now * 1000),
            next(self._inodes),
            tuple(rows),
            text,
        )
        if uri in self.files:
            self._unlink(uri)
        self._link(uri, node)
        return node

    def remove_tree(self, uri: str) -> None:
        uri = _norm(uri)
        for p in list(self.kids.get(uri, ())):
            self.remove_tree(p)
        if uri in self.files or uri in self.dirs:
            self._unlink(uri)

    def children(self, uri: str) -> list[tuple[str, FileNode | None]]:
        return sorted((p, self.files.get(p)) for p in self.kids.get(_norm(uri), ()))

    def entry(self, uri: str) -> Entry | None:
        uri = _norm(uri)
        node = self.files.get(uri)
        name = uri.rsplit("/", 1)[1]
        if node is not None:
            return Entry(uri, name, node.size, node.mtime, False, f"ino:{node.inode}")
        if uri in self.dirs:
            return Entry(uri, name, 0, 0, True)
        return None

    def rows_under(self, uri: str) -> list[str]:
        """The rows of the data files directly in a folder."""
        return rows_in(self.children(uri))

    # -- HadoopFS's calls --
    def list(self, uri: str) -> list[Entry]:
        self.sched.point("list {}", uri)
        return [self.entry(p) for p, _ in self.children(uri)]

    def statuses(self, uris: list[str]) -> list[Entry | None]:
        if not uris:
            return []
        self.sched.point("statuses of {}", len(uris))
        return [self.entry(u) for u in uris]

    status, exists, rename, read_text = HadoopFS.status, HadoopFS.exists, HadoopFS.rename, HadoopFS.read_text

    def move_all(self, pairs: list[tuple], create_folders: bool = True) -> int:
        moved = 0
        for pair in pairs:
            src, dst = _norm(pair[0]), _norm(pair[1])
            self.sched.point("move {} -> {}", src, dst)
            node = self.files.get(src)
            if node is None:
                continue
            if len(pair) > 3 and (node.size != pair[2] or node.mtime != pair[3]):
                continue
            if len(pair) > 4 and pair[4] is not None and pair[4] != f"ino:{node.inode}":
                continue
            if dst in self.files or dst in self.dirs:
                raise OSError(f"will not overwrite {dst} (moving {src})")
            if _parent(dst) not in self.dirs:
                if not create_folders:
                    raise FolderGone(f"no such folder to move into: {_parent(dst)}")
                self.mkdirs(_parent(dst))
            self._link(dst, self._unlink(src))
            self.sched.note("moved {} -> {}", src, dst)
            moved += 1
        return moved

    def rename_folder(self, src: str, dst: str) -> bool:
        """Rename a folder and what it holds in one step; False if src is missing or dst exists."""
        src, dst = _norm(src), _norm(dst)
        self.sched.point("rename folder {} -> {}", src, dst)
        if src not in self.dirs or dst in self.dirs or dst in self.files or _parent(dst) not in self.dirs:
            return False
        self._move_tree(src, dst)
        self.sched.note("renamed folder {} -> {}", src, dst)
        return True

    def make_folders(self, uri: str) -> None:
        self.sched.point("mkdirs {}", uri)
        self.mkdirs(uri)

    def _move_tree(self, src: str, dst: str) -> None:
        children = sorted(self.kids.get(src, ()))
        self._unlink(src)
        self._link(dst)
        for p in children:
            if p in self.files:
                node = self._unlink(p)
                self._link(dst + p[len(src) :], node)
            else:
                self._move_tree(p, dst + p[len(src) :])

    def drop_file(self, uri: str) -> None:
        """A writer deleting a file (part of its one step)."""
        self._unlink(_norm(uri))

    def copy(self, src: str, dst: str) -> None:
        src, dst = _norm(src), _norm(dst)
        self.sched.point("copy {} -> {}", src, dst)
        node = self.files.get(src)
        if node is None or dst in self.files:
            raise OSError(f"copy {src} -> {dst} failed")
        self.put(dst, node.rows, node.text, node.size)
        self.sched.note("copied {} -> {}", src, dst)

    def touch(self, uri: str) -> None:
        self.sched.point("touch {}", uri)
        node = self.files.get(_norm(uri))
        if node is None:
            raise FileNotFoundError(uri)
        node.mtime = int(self.clock.now * 1000)

    def delete(self, uri: str, recursive: bool = False) -> bool:
        uri = _norm(uri)
        self.sched.point("delete {}", uri)
        if uri in self.files:
            self._unlink(uri)
            self.sched.note("deleted {}", uri)
            return True
        if uri in self.dirs:
            if not recursive and any(True for _ in self.children(uri)):
                raise OSError(f"{uri} is not empty")
            self.remove_tree(uri)
            self.sched.note("deleted folder {}", uri)
            return True
        return False

    def read_text_if_exists(self, uri: str) -> str | None:
        self.sched.point("read {}", uri)
        node = self.files.get(_norm(uri))
        return None if node is None else (node.text or "")

    def create_exclusive(self, uri: str, text: str) -> bool:
        self.sched.point("create exclusive {}", uri)
        if _norm(uri) in self.files:
            return False
        self.put(uri, text=text)
        self.sched.note("published {}", uri)
        return True

    def write_text_atomic(self, uri: str, text: str) -> None:
        self.sched.point("write {}", uri)
        self.put(uri, text=text)
        self.sched.note("wrote {}", uri)

    def write_data(self, uri: str, rows: tuple[str, ...]) -> None:
        """A merge job writing a staged output (one step)."""
        self.sched.point("stage {}", uri)
        self.put(uri, rows)

    def resolved_scheme(self, uri: str) -> str:
        return "file"

    def make_private_folder(self, uri: str) -> bool:
        self.sched.point("mkdirs {}", uri)
        if _norm(uri) in self.dirs:
            return False
        self.mkdirs(uri)
        return True

    def permission(self, uri: str) -> int:
        return 0o700


@dataclass
class Partition:
    location: str
    parameters: dict[str, str] = field(default_factory=dict)
    descriptor: str = "sd:orc"
    created: int = 0  # epoch seconds


@dataclass
class LockEntry:
    holder: object  # the actor
    held: HeldLock


class MemoryMetastore:
    """The calls of ``JobMetastore`` the commit code makes, in memory (see the module's text).
    One table, ``table``, whose partitions are keyed by their values."""

    def __init__(self, sched, clock: Clock, table: str, table_location: str):
        self.sched, self.clock = sched, clock
        self.table, self._table_location = table, table_location
        self.partitions: dict[tuple[str, ...], Partition] = {}
        self.locks: dict[str, LockEntry] = {}
        self._ids = itertools.count(1)
        # What no lease can fence, seen in this schedule: a writer taking the lock of a paused
        # merge job, a Metastore write landing after its job's lock was taken.
        self.beyond_lease: list[str] = []

    def _part(self, values) -> Partition | None:
        return self.partitions.get(tuple(values))

    def heartbeat(self, actor) -> None:
        """The holder's heartbeats while it runs: renewed if the Metastore still has its lock, else lost."""
        if not actor.locks:
            return
        for entry in self.locks.values():
            if entry.holder is actor:
                entry.held.last_beat = self.clock.now
        for held in getattr(actor, "locks", ()):
            if not any(e.held is held for e in self.locks.values()) and held.lost is None:
                held.lost = "the Metastore released it (taken over by another job)"

    @contextlib.contextmanager
    def lock(
        self, table: str, partition: str, wait_seconds: float, required: bool = True, chunk=None, writer: bool = False
    ):
        me = self.sched.current
        label = f"{table}/{partition}" if partition else table
        self.sched.point("lock {}", label)
        waited = 0.0
        while True:
            entry = self.locks.get(partition)
            if entry is None or entry.holder is me:
                break
            if self.clock.now - entry.held.last_beat > (TXN_TIMEOUT_SECONDS if writer else DEAD_AFTER_SECONDS):
                entry.held.lost = "its heartbeats stopped: released by the next job that waited"
                del self.locks[partition]
                if writer:  # hive.txn.timeout passed with no replay: the holder was killed or paused that long
                    self.beyond_lease.append(
                        f"{me.name} got the lock of {entry.holder.name} from the Metastore's "
                        f"housekeeping ({'killed' if entry.holder.killed else 'paused'})"
                    )
                self.sched.note("took over the lock of {}", entry.holder.name)
                break
            if waited >= wait_seconds:
                raise LockTimeout(f"{label}: another holder kept the Metastore's lock past {wait_seconds} s")
            step = 10.0 if writer else 2.0  # a writer's long wait in fewer steps
            if entry.holder.wake_at > self.clock.now + step:  # a paused holder: nothing changes before it wakes,
                # its lease ends, or the wait does (unless another takes it, seen on waking)
                expiry = entry.held.last_beat + (TXN_TIMEOUT_SECONDS if writer else DEAD_AFTER_SECONDS)
                step = max(
                    step,
                    min(entry.holder.wake_at, expiry + 0.01, self.clock.now + wait_seconds - waited) - self.clock.now,
                )
            self.clock.sleep(step)
            waited += step
        if writer:
            for other in self.sched.actors:
                if other is not me and not other.done and any(h.lost for h in other.locks):
                    self.beyond_lease.append(
                        f"{me.name} wrote under the lock while {other.name}, whose lock was taken, still ran"
                    )
        held = HeldLock(next(self._ids), label)
        held.last_beat = self.clock.now
        self.locks[partition] = LockEntry(me, held)
        me.locks.append(held)
        token = metastore_lock._held_here.set((held, label))
        try:
            yield held
        finally:
            metastore_lock._held_here.reset(token)
            if not me.killed:
                entry = self.locks.get(partition)
                if entry is not None and entry.held is held:
                    del self.locks[partition]
                me.locks.remove(held)

    @contextlib.contextmanager
    def lock_chunk(self, table: str, partitions: list[str]):
        yield None  # each partition locks on its own

    def location(self, table: str, values) -> str | None:
        self.sched.point("get_partition (location)")
        p = self._part(values)
        return None if p is None else p.location

    def state(self, table: str, values) -> PartitionState:
        self.sched.point("get_partition (state)")
        p = self._part(values)
        return MISSING if p is None else PartitionState(dict(p.parameters), p.descriptor, p.location, p.created)

    def states(self, table: str, partitions: list[str]) -> dict:
        self.sched.point("get_partitions_by_names")
        return {
            k: PartitionState(dict(p.parameters), p.descriptor, p.location, p.created)
            for k, p in self.partitions.items()
            if "/".join(f"dt={v}" for v in k) in partitions
        }

    def table_location(self, table: str) -> str | None:
        return self._table_location

    def switch(self, table: str, values, old: str, new: str, parameters: dict, descriptor: str | None = None) -> bool:
        """Read, compare, write: the write carries the partition as it was read (a call held in
        flight between the two lands over whatever happened meanwhile)."""
        self.sched.point("get_partition (switch)")
        p = self._part(values)
        if p is None or not same_location(p.location, old):
            return False
        if descriptor is not None and p.descriptor != descriptor:
            raise DescriptorChanged("the partition's storage descriptor changed since the commit read it")
        written = Partition(new, _merged(p.parameters, parameters), p.descriptor, p.created)
        self.sched.point("alter_partition (location {})", new)
        self._alter(values, written)
        self.sched.note("alter_partition: the partition reads {}", new)
        return True

    def _alter(self, values, written: Partition) -> None:
        """alter_partition: the whole partition as the caller read it (a missing one is refused)."""
        me = self.sched.current
        if me is not None and me.locks and not any(e.holder is me for e in self.locks.values()):
            self.beyond_lease.append(f"{me.name}'s alter_partition landed after its lock was taken")
        if tuple(values) not in self.partitions:
            raise RuntimeError("InvalidOperationException(message:alter is not possible: the partition does not exist)")
        self.partitions[tuple(values)] = written

    def update_parameters(self, table: str, partition: str, parameters: dict) -> bool:
        values = tuple(kv.split("=", 1)[1] for kv in partition.split("/"))
        self.sched.point("get_partition (statistics)")
        p = self._part(values)
        if p is None:
            return False
        written = Partition(p.location, _merged(p.parameters, parameters), p.descriptor, p.created)
        self.sched.point("alter_partition (statistics)")
        self._alter(values, written)
        return True

    def update_parameters_all(self, table: str, updates: list) -> set[str]:
        return {name for name, _, params in updates if self.update_parameters(table, name, params)}


def _merged(params: dict, changes: dict) -> dict:
    out = dict(params)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out
