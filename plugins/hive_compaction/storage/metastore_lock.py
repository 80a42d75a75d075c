"""The Metastore's lock around a commit, for ``JobMetastore.lock``: an EXCLUSIVE lock on the
partition (on the table for a table without partitions), outside any transaction, as Hive takes
it for ``ALTER TABLE ... CONCATENATE``; a Hive writer with ``DbTxnManager`` waits for it, and the
commit waits for a writer's lock (up to the table's ``lock_wait_seconds``, then the partition is
skipped, unchanged). The lock is heartbeated while held; the lock of a job killed mid-commit is
released by the next job that waits for it, once its last heartbeat is ``DEAD_AFTER_SECONDS``
old on the Metastore's clock (only this package's locks). A Metastore that does not serve locks
(no transaction tables, e.g. one made without ``schematool``) is logged once; the commit then
relies on its lease and identity checks (``commit``).
"""
from __future__ import annotations

import contextlib
import getpass
import logging
import socket
import threading
import time

log = logging.getLogger(__name__)


# Well inside any Metastore's hive.txn.timeout (300 s by default).
HEARTBEAT_SECONDS = 2.0
# A lock of this package whose heartbeat has not moved for this long belongs to a dead job.
DEAD_AFTER_SECONDS = 5 * HEARTBEAT_SECONDS
AGENT = "hive_compaction"  # the agent info of this package's locks


class CommitConflict(RuntimeError):
    """Another job holds this partition's journal or replay claim, or another writer changed the
    partition before this commit moved anything: this job moved nothing more, and none of the
    commit's moves is visible. (Defined here, below the commit protocol, because the Metastore
    lock's ``LockTimeout`` is one too.)"""


class LockTimeout(CommitConflict):
    """Another holder (a Hive writer) kept the partition's Metastore lock past the wait."""


class MetastoreLocks:
    """The lock API of the Metastore, through ``client`` (a context manager giving the calling
    thread's Metastore client, see ``JobMetastore``) and ``api`` (the Thrift API's Java
    package). Whether the Metastore serves locks is learnt from the first request. One heartbeat
    thread keeps every held lock alive."""

    def __init__(self, api, client):
        self._api, self._client = api, client
        self._locks_served: bool | None = None  # unknown until the first lock request answers
        self._probe = threading.Lock()  # one thread asks first whether locks are served
        self._held: set[int] = set()  # lock ids the heartbeat thread keeps alive
        self._held_changed = threading.Condition()
        self._beating: threading.Thread | None = None

    @contextlib.contextmanager
    def hold(self, table: str, partition: str, wait_seconds: float):
        """Hold the Metastore's EXCLUSIVE lock on the partition while the block runs, heartbeating
        it; LockTimeout if another holder keeps it longer than ``wait_seconds``."""
        lock_id = self._acquire(table, partition, wait_seconds) if self._locks_served is not False else None
        if lock_id is None:
            yield None
            return
        self._hold(lock_id)
        try:
            yield lock_id
        finally:
            self._let_go(lock_id)
            self._release(lock_id, table, partition)

    def _acquire(self, table: str, partition: str, wait_seconds: float) -> int | None:
        """The lock's id once acquired; None where the Metastore serves no locks."""
        api = self._api
        db, tbl = table.split(".", 1)
        component = api.LockComponent(api.LockType.EXCLUSIVE,
                                      api.LockLevel.PARTITION if partition else api.LockLevel.TABLE, db)
        component.setTablename(tbl)
        if partition:
            component.setPartitionname(partition)
        component.setOperationType(api.DataOperationType.NO_TXN)
        component.setIsAcid(False)
        request = api.LockRequest([component], getpass.getuser(), socket.gethostname())
        request.setAgentInfo(AGENT)
        response = None if self._locks_served else self._first_request(request)
        if self._locks_served is False:
            return None
        with self._client() as client:
            if response is None:
                response = client.lock(request)
            lock_id = response.getLockid()
            deadline = time.monotonic() + wait_seconds
            seen: dict[int, tuple[int, float]] = {}
            while str(response.getState()) == "WAITING" and time.monotonic() < deadline:
                time.sleep(1.0)
                self._release_dead(client, api, db, tbl, partition, lock_id, seen)
                response = client.checkLock(lock_id)  # also heartbeats the waiting request
            if str(response.getState()) != "ACQUIRED":
                try:
                    client.unlock(lock_id)  # withdraw the request
                except Exception:  # noqa: BLE001 - timed out already
                    pass
                raise LockTimeout(f"{table}/{partition}: another writer holds the Metastore's lock on it "
                                  f"(waited {wait_seconds:.0f}s, lock {response.getState()}); nothing was moved, "
                                  "the next run will look at it again")
            return lock_id

    def _first_request(self, request):
        """The job's first lock request, one thread at a time until one is answered; None when
        another thread's answered first (or the Metastore serves no locks). A Metastore without
        its transaction tables refuses every request: locks are then not asked for again. A
        fresh Metastore 2.3 also fails requests that arrive together before its first one has
        been served ("Internal error processing lock"), so a refusal is asked once more first;
        once locks were served, a failing request fails its partition's commit (nothing moved)."""
        with self._probe:
            if self._locks_served is not None:
                return None
            for attempt in range(2):
                try:
                    with self._client() as client:
                        response = client.lock(request)
                    self._locks_served = True
                    return response
                except Exception as e:  # noqa: BLE001 - a Metastore without its transaction tables
                    if attempt:
                        self._locks_served = False
                        log.warning("the Hive Metastore does not serve locks (%s): commits rely on their journal "
                                    "and identity checks only", str(e).splitlines()[0][:300])
                    else:
                        time.sleep(1.0)
            return None

    @staticmethod
    def _release_dead(client, api, db: str, tbl: str, partition: str, ours: int,
                      seen: dict[int, tuple[int, float]]) -> None:
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
        locks = list(client.showLocks(request).getLocks())
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
                log.warning("%s.%s/%s: releasing Metastore lock %s of a merge job that stopped heartbeating it "
                            "%.0fs ago (killed?)", db, tbl, partition, lock_id, silent)
                try:
                    client.unlock(lock_id)
                except Exception:  # noqa: BLE001 - released meanwhile
                    pass

    def _hold(self, lock_id: int) -> None:
        with self._held_changed:
            self._held.add(lock_id)
            if self._beating is None:
                self._beating = threading.Thread(target=self._heartbeats, daemon=True,
                                                 name="metastore-lock-heartbeats")
                self._beating.start()

    def _let_go(self, lock_id: int) -> None:
        with self._held_changed:  # waits for a heartbeat round under way: none hits a released lock
            self._held.discard(lock_id)

    def let_go_all(self) -> None:
        """Stop heartbeating every lock (the job's clients are closing)."""
        with self._held_changed:
            self._held.clear()
            self._held_changed.notify_all()

    def _heartbeats(self) -> None:
        """Keep every held lock alive, each heartbeated every HEARTBEAT_SECONDS: the Metastore
        drops a lock not heartbeated for hive.txn.timeout (default 300 s), which is also how a
        killed job's lock goes by itself. One thread for all, with its own client."""
        with self._held_changed:
            while True:
                self._held_changed.wait(HEARTBEAT_SECONDS)
                for lock_id in sorted(self._held):
                    try:
                        with self._client() as client:
                            client.heartbeat(0, lock_id)
                    except Exception as e:  # noqa: BLE001
                        log.warning("could not heartbeat Metastore lock %s: %s", lock_id,
                                    str(e).splitlines()[0][:300])
                        self._held.discard(lock_id)

    def _release(self, lock_id: int, table: str, partition: str) -> None:
        try:
            with self._client() as client:
                client.unlock(lock_id)
        except Exception:  # noqa: BLE001 - gone already (timed out): nothing held
            log.warning("%s/%s: could not release Metastore lock %s", table, partition, lock_id)
