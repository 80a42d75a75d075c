"""The Metastore's lock around a commit, for ``JobMetastore.lock``: an EXCLUSIVE lock on the
partition (on the table for a table without partitions), outside any transaction, as Hive takes
it for ``ALTER TABLE ... CONCATENATE``; a Hive writer with ``DbTxnManager`` waits for it, and the
commit waits for a writer's lock (up to the table's ``lock_wait_seconds``, then the partition is
skipped, unchanged).

The lock is the commit's lease: its owner is the job (user, host, this package's agent info), it
is renewed by heartbeats, and it expires when they stop. The lock of a job killed mid-commit is
released by the next job that waits for it, once its last heartbeat is ``DEAD_AFTER_SECONDS`` old
on the Metastore's clock (only this package's locks); the Metastore's own housekeeping drops it
after ``hive.txn.timeout``. A holder whose heartbeats have not gone through for
``LOST_AFTER_SECONDS`` (half of that), or whose lock the Metastore no longer knows, has lost it:
every step of its commit checks ``check_lock_held`` and stops (``LockLost``) before moving more,
so by the time another job may take the lock over, this one has stopped.

Partitions of one table may commit under one lock (a commit chunk, ``hold_all``): one request
naming them all, granted at once or withdrawn at once, so that a busy partition never holds the
others back (each then asks alone).

A commit that cannot get the lock fails, naming ``require_locks``: a lock request is retried on
any error (a transient one is never read as "this Metastore serves no locks"). Only a table
configured with ``require_locks: false`` commits without a lock when the Metastore refuses to
serve them; its results say so (``unlocked``).
"""

from __future__ import annotations

import contextlib
import contextvars
import getpass
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from hive_compaction.model.batch import LOCK_LEASE_SECONDS
from hive_compaction.storage.jvm_helper import java_list

log = logging.getLogger(__name__)
T = TypeVar("T")


# Well inside any Metastore's hive.txn.timeout (300 s by default).
HEARTBEAT_SECONDS = 2.0
# A lock of this package whose heartbeat has not moved for this long belongs to a dead job.
DEAD_AFTER_SECONDS = LOCK_LEASE_SECONDS  # five heartbeats
# A holder that could not heartbeat for this long stops its commit: well before any other job
# may take the lock for a dead one's.
LOST_AFTER_SECONDS = DEAD_AFTER_SECONDS / 2
# A lock request failing this many times in a row (RETRY_SECONDS, then twice that, apart) is not
# transient.
REQUEST_ATTEMPTS = 3
RETRY_SECONDS = 1.0
AGENT = "hive_compaction"  # the agent info of this package's locks


class CommitConflict(RuntimeError):
    """Another job holds this partition's journal or replay claim, or another writer changed the
    partition before this commit moved anything: this job moved nothing more, and none of the
    commit's moves is visible. (Defined here, below the commit protocol, because the Metastore
    lock's ``LockTimeout`` is one too.)"""


class LockTimeout(CommitConflict):
    """Another holder (a Hive writer) kept the partition's Metastore lock past the wait."""


class LockLost(CommitConflict):
    """The commit's Metastore lock was lost while it ran (heartbeats failing, the lock released by
    someone else): the commit stopped before its next step, leaving its journal for the job that
    next holds the lock (the task's retry, the next run), which finishes it. Not a success."""


class LocksUnavailable(RuntimeError):
    """The Metastore did not grant the commit a lock (no lock service, or errors on every try):
    nothing was moved."""


# The lock's own failures, where a commit could not finish or undo: the partition is left mid-commit.
LOCK_FAILURES = (LockTimeout, LockLost, LocksUnavailable)


class HeldLock:
    """One granted lock, renewed by the heartbeat thread (``last_beat``); ``lost`` says why it is
    no longer held, once it is not. A commit chunk's lock (``MetastoreLocks.hold_all``) covers
    ``partitions``."""

    def __init__(self, lock_id: int, label: str, partitions: frozenset[str] = frozenset()) -> None:
        self.lock_id, self.label, self.partitions = lock_id, label, partitions
        self.last_beat = time.monotonic()
        self.lost: str | None = None

    def check(self, label: str | None = None) -> None:
        """LockLost unless the lock is still this job's (``label``: the partition whose commit
        asks, under a chunk's lock)."""
        silent = time.monotonic() - self.last_beat
        if self.lost is None and silent > LOST_AFTER_SECONDS:
            self.lost = f"no heartbeat went through for {silent:.0f} s"
        if self.lost is not None:
            raise LockLost(
                f"{label or self.label}: this job lost the Metastore's lock {self.lock_id} on it "
                f"({self.lost}); its commit stopped before the next step. Its journal stays: the task's "
                "retry or the next run finishes the commit under the lock"
            )


# The lock held by this thread's commit (a commit runs in one thread, inside ``hold``), with the
# partition it commits: every step of the commit protocol checks it, wherever it is
# (``commit.in_place.check_owner``).
_held_here: contextvars.ContextVar[tuple[HeldLock, str] | None] = contextvars.ContextVar(
    "held_metastore_lock", default=None
)


def holding_lock() -> bool:
    """Whether this thread's commit runs under a Metastore lock it holds: then no other job's
    journal or replay claim on the partition can belong to a live job that still may move files
    (it would hold the lock, or stop at its next step, having lost it)."""
    return _held_here.get() is not None


def check_lock_held() -> None:
    """LockLost if the Metastore lock this thread's commit runs under was lost (nothing to check
    for a commit without one)."""
    here = _held_here.get()
    if here is not None:
        held, label = here
        held.check(label)


class MetastoreLocks:
    """The lock API of the Metastore, through ``client`` (a context manager giving the calling
    thread's Metastore client, see ``JobMetastore``) and ``api`` (the Thrift API's Java
    package). Whether the Metastore serves locks is learnt from the first request. One heartbeat
    thread keeps every held lock alive (``Heartbeats``)."""

    def __init__(self, api: Any, client: Any) -> None:
        self._api, self._client = api, client
        self._locks_served: bool | None = None  # unknown until the first lock request answers
        self._probe = threading.Lock()  # one thread asks first whether locks are served
        self._beats = Heartbeats(client)

    def let_go_all(self) -> None:
        """Stop heartbeating every lock (the job's clients are closing)."""
        self._beats.let_go_all()

    @contextlib.contextmanager
    def hold(
        self, table: str, partition: str, wait_seconds: float, required: bool = True, chunk: HeldLock | None = None
    ) -> Iterator[HeldLock | None]:
        """Hold the Metastore's EXCLUSIVE lock on the partition while the block runs, heartbeating
        it; yields the ``HeldLock``, or None when not ``required`` and the Metastore serves no
        locks. LockTimeout if another holder keeps it longer than ``wait_seconds``;
        LocksUnavailable if it is required and not granted. Under a ``chunk``'s lock that covers
        the partition (``hold_all``), no request: the block runs under that lock (LockLost
        before it starts if that was lost)."""
        label = f"{table}/{partition}" if partition else table
        if chunk is not None and partition in chunk.partitions:
            try:
                chunk.check(label)
            except LockLost:
                raise LockLost(
                    f"{label}: this job lost the Metastore's lock {chunk.lock_id} of its commit chunk "
                    f"({chunk.lost}) before this partition's commit began; nothing was moved, the next "
                    "run will look at it again"
                ) from None
            token = _held_here.set((chunk, label))
            try:
                yield chunk
            finally:
                _held_here.reset(token)
            return
        if self._locks_served is False and not required:
            yield None
            return
        lock_id = self._acquire(table, partition, label, wait_seconds, required)
        if lock_id is None:
            yield None
            return
        held = HeldLock(lock_id, label)
        self._beats.hold(held)
        token = _held_here.set((held, label))
        try:
            yield held
        finally:
            _held_here.reset(token)
            self._beats.let_go(held)
            self._release(lock_id, label)

    @contextlib.contextmanager
    def hold_all(self, table: str, partitions: list[str]) -> Iterator[HeldLock | None]:
        """One EXCLUSIVE lock on several partitions of ``table`` (a commit chunk), in one request,
        if the Metastore grants it at once: yields its ``HeldLock`` (heartbeated, released after
        the block; each partition's commit then runs under it through ``hold(..., chunk=)``).
        Yields None, holding nothing, if any partition is busy (the request is withdrawn at once:
        a Hive request is granted whole or not at all), the Metastore serves no locks, or the
        request failed: the caller then locks each partition on its own (``hold``), so a busy
        partition waits alone and never holds the others back."""
        label = f"{table} ({len(partitions)} partitions)"
        lock_id = None if self._locks_served is False else self._acquire_at_once(table, partitions, label)
        if lock_id is None:
            yield None
            return
        held = HeldLock(lock_id, label, frozenset(partitions))
        self._beats.hold(held)
        try:
            yield held
        finally:
            self._beats.let_go(held)
            self._release(lock_id, label)

    def _lock_request(self, table: str, partitions: list[str]) -> Any:
        """A request for this package's lock (its agent info) on the ``partitions`` of ``table``."""
        api = self._api
        request = api.LockRequest(
            [lock_component(api, table, p) for p in partitions], getpass.getuser(), socket.gethostname()
        )
        request.setAgentInfo(AGENT)
        return request

    def _acquire_at_once(self, table: str, partitions: list[str], label: str) -> int | None:
        """The id of one lock on every partition, if granted at once; else None (withdrawn)."""
        request = self._lock_request(table, partitions)
        try:
            response = None if self._locks_served else self._first_request(request, label, True)
            if response is None:
                response = self._request(request, label)
        except LocksUnavailable as e:
            log.info(
                "%s: no lock for the chunk (%s): each partition is locked on its own", label, summary(e.__cause__ or e)
            )
            return None
        lock_id: int = response.getLockid()
        if str(response.getState()) == "ACQUIRED":
            return lock_id
        log.info("%s: a partition is busy (lock %s): each partition is locked on its own", label, response.getState())
        self._release(lock_id, label)  # withdraw the request
        return None

    def _acquire(self, table: str, partition: str, label: str, wait_seconds: float, required: bool) -> int | None:
        """The lock's id once acquired; None where the Metastore serves no locks and none is
        ``required``."""
        api = self._api
        request = self._lock_request(table, [partition])
        response = None if self._locks_served else self._first_request(request, label, required)
        if response is None and self._locks_served is False:
            return None
        if response is None:
            response = self._request(request, label)
        with self._client() as client:
            lock_id: int = response.getLockid()
            deadline = time.monotonic() + wait_seconds
            seen: dict[int, tuple[int, float]] = {}
            while str(response.getState()) == "WAITING" and time.monotonic() < deadline:
                time.sleep(1.0)
                _release_dead(client, api, *table.split(".", 1), partition, lock_id, seen)  # type: ignore[call-arg, arg-type]  # database.table
                response = client.checkLock(lock_id)  # also heartbeats the waiting request
            if str(response.getState()) != "ACQUIRED":
                try:
                    client.unlock(lock_id)  # withdraw the request
                except Exception:  # noqa: BLE001 - timed out already
                    pass
                raise LockTimeout(
                    f"{table}/{partition}: another writer holds the Metastore's lock on it "
                    f"(waited {wait_seconds:.0f}s, lock {response.getState()}); nothing was moved, "
                    "the next run will look at it again"
                )
            return lock_id

    def _first_request(self, request: Any, label: str, required: bool) -> Any:
        """The job's first lock request, one thread at a time until one is answered; None when
        another thread's answered first (or the Metastore serves no locks and none is required).
        A fresh Metastore 2.3 fails requests that arrive together before its first one has been
        served ("Internal error processing lock"), hence one at a time."""
        with self._probe:
            if self._locks_served or (self._locks_served is False and not required):
                return None  # answered by another thread meanwhile
            try:
                response = self._request(request, label)
            except LocksUnavailable as e:
                if required:
                    raise
                if self._locks_served is None:
                    log.warning(
                        "the Hive Metastore does not serve locks (%s): require_locks is false, so commits "
                        "run WITHOUT the Metastore's lock and rely on their journal and identity checks "
                        "only",
                        summary(e.__cause__ or e),
                    )
                self._locks_served = False
                return None
            self._locks_served = True
            return response

    def _request(self, request: Any, label: str) -> Any:
        """``lock(request)``, asked again after an error (REQUEST_ATTEMPTS in all): a Metastore
        restarting or a dropped connection is not a refusal. LocksUnavailable after the last."""
        for attempt in range(REQUEST_ATTEMPTS):
            try:
                with self._client() as client:
                    return client.lock(request)
            except Exception as e:  # noqa: BLE001 - any failure: asked again, then reported
                error = e
                if attempt + 1 < REQUEST_ATTEMPTS:
                    time.sleep(RETRY_SECONDS * (attempt + 1))
        raise LocksUnavailable(
            f"{label}: the Hive Metastore did not grant the commit its lock after {REQUEST_ATTEMPTS} tries "
            f"({summary(error)}); nothing was moved. "
            "Commits take the Metastore's lock (require_locks: true). Only if this Metastore serves no locks "
            "(no transaction tables), set require_locks: false for the table: its commits then run unlocked, "
            "and every report says so"
        ) from error

    def _release(self, lock_id: int, label: str) -> None:
        """Unlock, asked again on a new connection if the one it used broke (else the lock would
        wait for the Metastore's timeout, holding other writers back)."""
        try:
            reconnecting(self._client, lambda client: client.unlock(lock_id))
        except Exception as e:  # noqa: BLE001 - gone already (timed out): nothing held
            log.warning("%s: could not release Metastore lock %s: %s", label, lock_id, summary(e))


class Heartbeats:
    """One thread, started with the first held lock, that heartbeats every held lock through
    ``client`` (as ``MetastoreLocks``'s) every HEARTBEAT_SECONDS."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._held: dict[int, HeldLock] = {}  # the locks kept alive
        self._held_changed = threading.Condition()
        self._beating: threading.Thread | None = None

    def hold(self, held: HeldLock) -> None:
        with self._held_changed:
            self._held[held.lock_id] = held
            if self._beating is None:
                self._beating = threading.Thread(target=self._heartbeats, daemon=True, name="metastore-lock-heartbeats")
                self._beating.start()

    def let_go(self, held: HeldLock) -> None:
        with self._held_changed:
            self._held.pop(held.lock_id, None)

    def let_go_all(self) -> None:
        with self._held_changed:
            self._held.clear()
            self._held_changed.notify_all()

    def _heartbeats(self) -> None:
        """Keep every held lock alive, each heartbeated every HEARTBEAT_SECONDS: the Metastore
        drops a lock not heartbeated for hive.txn.timeout (default 300 s), which is also how a
        killed job's lock goes by itself. One thread for all, with its own client; it calls the
        Metastore outside the lock on the held set, so a hung call holds up no commit (their
        locks age, and their commits stop: ``HeldLock.check``). A failed heartbeat is tried again
        next round; a lock the Metastore no longer knows is lost at once."""
        while True:
            with self._held_changed:
                self._held_changed.wait(HEARTBEAT_SECONDS)
                held = list(self._held.values())
            for h in held:
                try:
                    with self._client() as client:
                        client.heartbeat(0, h.lock_id)
                    h.last_beat = time.monotonic()
                except Exception as e:  # noqa: BLE001 - a lock the Metastore forgot is marked lost, the rest logged
                    error = summary(e)
                    if h.lock_id not in self._held:
                        continue  # released meanwhile
                    if "NoSuchLock" in error or "TxnAborted" in error:
                        h.lost = f"the Metastore no longer knows it: {error}"
                    log.warning("could not heartbeat Metastore lock %s (%s): %s", h.lock_id, h.label, error)


def lock_component(api: Any, table: str, partition: str) -> Any:
    """The exclusive, non-transactional lock component of one partition (or, with no partition,
    the whole table) of ``table`` (``db.table``)."""
    db, tbl = table.split(".", 1)
    component = api.LockComponent(
        api.LockType.EXCLUSIVE, api.LockLevel.PARTITION if partition else api.LockLevel.TABLE, db
    )
    component.setTablename(tbl)
    if partition:
        component.setPartitionname(partition)
    component.setOperationType(api.DataOperationType.NO_TXN)
    component.setIsAcid(False)
    return component


def _release_dead(
    client: Any, api: Any, db: str, tbl: str, partition: str, ours: int, seen: dict[int, tuple[int, float]]
) -> None:
    """Release locks on the partition held by merge jobs of this package that stopped
    heartbeating (killed mid-commit): their last heartbeat DEAD_AFTER_SECONDS older than our
    own waiting request's, which ``checkLock`` stamps with the Metastore's clock (so a lock
    dead for long is released at the first look, and no two clocks are compared); where the
    Metastore reports no heartbeat time for our request, once their heartbeat time has not
    changed for DEAD_AFTER_SECONDS of watching. A cluster's Metastore drops such locks only if
    it runs its housekeeper (the compactor initiator), and only after hive.txn.timeout. Other
    writers' locks are never touched."""
    request = api.ShowLocksRequest()
    request.setDbname(db)
    request.setTablename(tbl)
    if partition:
        request.setPartname(partition)
    locks = java_list(client.showLocks(request).getLocks())
    now_ms = max((lock.getLastheartbeat() for lock in locks if lock.getLockid() == ours), default=0)
    for lock in locks:
        lock_id = lock.getLockid()
        if lock_id == ours or not str(lock.getAgentInfo() or "").startswith(AGENT):
            continue
        beat = lock.getLastheartbeat()
        first = seen.setdefault(lock_id, (beat, time.monotonic()))
        if first[0] != beat:
            seen[lock_id] = first = (beat, time.monotonic())
        silent = (now_ms - beat) / 1000 if now_ms > 0 and beat > 0 else time.monotonic() - first[1]
        if silent >= DEAD_AFTER_SECONDS:
            log.warning(
                "%s.%s/%s: releasing Metastore lock %s of a merge job that stopped heartbeating it %.0fs ago (killed?)",
                db,
                tbl,
                partition,
                lock_id,
                silent,
            )
            try:
                client.unlock(lock_id)
            except Exception:  # noqa: BLE001 - released meanwhile
                pass


# What a broken connection to the Metastore says through py4j (a Metastore restarting, a
# connection dropped): the request may not have reached it, or its answer was lost.
_CONNECTION_LOST = (
    "TTransportException",
    "SocketException",
    "Broken pipe",
    "Connection reset",
    "Connection refused",
    "SocketTimeoutException",
)


def connection_lost(e: BaseException) -> bool:
    return any(sign in str(e) for sign in _CONNECTION_LOST)


def reconnecting(client: Any, call: Callable[[Any], T]) -> T:  # type: ignore[return]  # the last attempt returns or raises
    """``call(c)`` with the calling thread's Metastore client ``c`` from ``client`` (a context
    manager that replaces a client whose call failed), made again on a new client when the
    connection broke (a Metastore restarting, a dropped connection; REQUEST_ATTEMPTS in all,
    RETRY_SECONDS then twice that apart): for calls that may run twice (reads, an unlock, and
    writes whose second run finds the first's work)."""
    for attempt in range(REQUEST_ATTEMPTS):
        try:
            with client() as c:
                return call(c)
        except Exception as e:
            if not connection_lost(e) or attempt + 1 == REQUEST_ATTEMPTS:
                raise
            log.warning("the Hive Metastore's connection broke (%s): asking again on a new one", summary(e))
            time.sleep(RETRY_SECONDS * (attempt + 1))


def summary(e: BaseException) -> str:
    """The line of an error that says what happened: for a Java exception through py4j, the
    exception's own line (py4j's first line only names the call)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    java = [line.lstrip(": ") for line in lines[1:] if line.startswith(":")]
    return (java or lines or [type(e).__name__])[0][:300]
