"""The merge job's Metastore lock bookkeeping (``JobMetastore.lock``, ``storage.metastore_lock``),
with a scripted client: which thread asks first, what a refused request means, one client per
thread. The real lock API is exercised by ``test_metastore_lock.py``; this checks the decisions
around it, including one a fresh Metastore 2.3 forces (found in the scale benchmark): of several
first lock requests arriving together, all but one fail with "Internal error processing lock"."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from unittest import mock

import pytest

from hive_compaction.storage import metastore_lock
from hive_compaction.storage.metastore_client import JobMetastore
from hive_compaction.storage.metastore_lock import LockLost, LocksUnavailable, check_lock_held


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(metastore_lock, "RETRY_SECONDS", 0.01)


CONNECTION_RESET = "org.apache.thrift.transport.TTransportException: java.net.SocketException: Connection reset"


class ScriptedMetastore:
    """Lock calls as a Metastore answers them. ``refuse``: every request fails (no transaction
    tables). Otherwise a request fails while another is in flight until one has been served, as
    Metastore 2.3's transaction store does when it starts."""

    def __init__(
        self, refuse: bool = False, fail_first: int = 0, unlock_fail_first: int = 0, busy: frozenset[str] = frozenset()
    ):
        self.refuse = refuse
        self.busy = busy  # partitions a writer holds: a request naming one waits
        self.fail_first = fail_first  # this many requests fail first, as while a Metastore restarts
        self.unlock_fail_first = unlock_fail_first  # the same for unlocks
        self.unlock_calls = 0
        self.heartbeat_error: str | None = None  # every heartbeat fails with it
        self.heartbeats = 0
        self.served = False
        self.in_flight = 0
        self.lock_calls = 0
        self.clients = 0
        self.unlocked: list[int] = []
        self._mutex = threading.Lock()
        self._overlap = threading.Barrier(2, timeout=0.5)  # how long the first waits for a rival

    def client(self):
        with self._mutex:
            self.clients += 1
        return SimpleNamespace(lock=self.lock, unlock=self.unlock, heartbeat=self.heartbeat, close=lambda: None)

    def unlock(self, lock_id):
        self.unlock_calls += 1
        if self.unlock_calls <= self.unlock_fail_first:
            raise RuntimeError(CONNECTION_RESET)
        self.unlocked.append(lock_id)

    def heartbeat(self, txn, lock_id):
        self.heartbeats += 1
        if self.heartbeat_error:
            raise RuntimeError(self.heartbeat_error)

    def lock(self, request):
        with self._mutex:
            self.lock_calls += 1
            n = self.lock_calls
            self.in_flight += 1
            first_ever = not self.served
        try:
            if self.refuse:
                raise RuntimeError("An error occurred while calling o42.lock.")
            if n <= self.fail_first:
                raise RuntimeError(CONNECTION_RESET)
            if first_ever and n <= 2:
                # The first two requests meet inside the Metastore: the later one fails.
                try:
                    self._overlap.wait()
                except threading.BrokenBarrierError:
                    pass
                if n == 2:
                    raise RuntimeError("org.apache.thrift.TApplicationException: Internal error processing lock")
            with self._mutex:
                self.served = True
            waits = bool(self.busy & set(getattr(request, "partitions", ())))
            return SimpleNamespace(getLockid=lambda: n, getState=lambda: "WAITING" if waits else "ACQUIRED")
        finally:
            with self._mutex:
                self.in_flight -= 1


def job_metastore(hms: ScriptedMetastore) -> JobMetastore:
    spark = mock.MagicMock()  # only the lock request's Thrift objects are built through it
    jm = JobMetastore(spark, "thrift://127.0.0.1:9083")
    jm._clients._new = hms.client
    return jm


def take_locks(jm: JobMetastore, partitions: int, required: bool = True) -> dict[int, int | None]:
    got: dict[int, int | None] = {}
    start = threading.Barrier(partitions, timeout=10)

    def commit(i: int) -> None:
        start.wait()
        with jm.lock("db.t", f"dt=2026-01-{i + 1:02d}", 5, required) as held:
            got[i] = None if held is None else held.lock_id

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(partitions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return got


def test_concurrent_first_lock_requests_all_get_their_lock(caplog):
    """The first request is asked alone: every commit holds a lock, locking is never turned off.
    (Before, each thread asked at once and the ones refused turned locking off for the job.)"""
    hms = ScriptedMetastore()
    jm = job_metastore(hms)
    with caplog.at_level(logging.WARNING, logger="hive_compaction.storage.metastore_lock"):
        got = take_locks(jm, 4)
    assert sorted(got) == [0, 1, 2, 3]
    assert all(isinstance(lock_id, int) for lock_id in got.values()), got
    assert sorted(hms.unlocked) == sorted(got.values())
    assert "does not serve locks" not in caplog.text
    jm.close()


def test_a_metastore_without_locks_fails_each_commit_naming_require_locks(caplog):
    """require_locks (the default): a Metastore that refuses every request is asked three times
    per commit, then that commit fails before its block runs, naming the setting; locking is never
    turned off for the job."""
    hms = ScriptedMetastore(refuse=True)
    jm = job_metastore(hms)
    for day in (1, 2):
        with pytest.raises(LocksUnavailable, match="require_locks: false"):
            with jm.lock("db.t", f"dt=2026-01-0{day}", 5):
                pytest.fail("the block ran without the lock")
    assert hms.lock_calls == 2 * metastore_lock.REQUEST_ATTEMPTS
    assert "does not serve locks" not in caplog.text


def test_with_require_locks_false_a_metastore_without_locks_is_asked_once_then_never_again(caplog):
    hms = ScriptedMetastore(refuse=True)
    jm = job_metastore(hms)
    with caplog.at_level(logging.WARNING, logger="hive_compaction.storage.metastore_lock"):
        got = take_locks(jm, 4, required=False)
    assert got == {0: None, 1: None, 2: None, 3: None}
    assert hms.lock_calls == metastore_lock.REQUEST_ATTEMPTS
    assert caplog.text.count("does not serve locks") == 1 and "WITHOUT the Metastore's lock" in caplog.text
    with jm.lock("db.t", "dt=2026-02-01", 5, required=False) as held:
        assert held is None
    assert hms.lock_calls == metastore_lock.REQUEST_ATTEMPTS
    # A table that requires locks is still refused, not let through unlocked.
    with pytest.raises(LocksUnavailable):
        with jm.lock("db.t", "dt=2026-02-02", 5):
            pytest.fail("the block ran without the lock")


@pytest.mark.parametrize("required", [True, False])
def test_a_transient_error_on_the_first_request_is_asked_again_not_taken_for_no_locks(caplog, required):
    hms = ScriptedMetastore(fail_first=metastore_lock.REQUEST_ATTEMPTS - 1)
    jm = job_metastore(hms)
    with caplog.at_level(logging.WARNING, logger="hive_compaction.storage.metastore_lock"):
        with jm.lock("db.t", "dt=2026-01-01", 5, required) as held:
            assert held is not None and held.lock_id == metastore_lock.REQUEST_ATTEMPTS
        with jm.lock("db.t", "dt=2026-01-02", 5, required) as held:
            assert held is not None
    assert "does not serve locks" not in caplog.text
    jm.close()


def test_once_locks_were_served_a_failing_request_fails_the_commit_and_the_client_is_replaced():
    hms = ScriptedMetastore()
    jm = job_metastore(hms)
    with jm.lock("db.t", "dt=2026-01-01", 5) as held:
        assert held.lock_id == 1
    clients = hms.clients
    hms.refuse = True
    with pytest.raises(LocksUnavailable, match="o42.lock"):
        with jm.lock("db.t", "dt=2026-01-02", 5, required=False):
            pytest.fail("the block ran without the lock")
    hms.refuse = False
    with jm.lock("db.t", "dt=2026-01-03", 5) as held:
        assert isinstance(held.lock_id, int)
    # each failed call's client was closed, a new one opened
    assert hms.clients == clients + metastore_lock.REQUEST_ATTEMPTS


@pytest.fixture
def quick_heartbeats(monkeypatch):
    monkeypatch.setattr(metastore_lock, "HEARTBEAT_SECONDS", 0.05)
    monkeypatch.setattr(metastore_lock, "LOST_AFTER_SECONDS", 0.5)


def test_a_heartbeated_lock_stays_held(quick_heartbeats):
    hms = ScriptedMetastore()
    jm = job_metastore(hms)
    with jm.lock("db.t", "dt=2026-01-01", 5):
        time.sleep(1.0)
        check_lock_held()  # every heartbeat went through
    assert hms.heartbeats >= 5
    jm.close()


@pytest.mark.parametrize(
    "error, why",
    [
        ("org.apache.thrift.transport.TTransportException: Read timed out", "no heartbeat went through"),
        ("NoSuchLockException(message:No such lock lockid:1)", "no longer knows it"),
    ],
    ids=["heartbeats_failing", "lock_released_by_another"],
)
def test_a_lock_lost_while_held_stops_the_next_commit_step(quick_heartbeats, error, why):
    """Heartbeats failing for LOST_AFTER_SECONDS (long before another job may take the lock for
    a dead one's), or a lock the Metastore no longer knows: the holder's next commit step
    (``check_lock_held``, called by every step) raises LockLost; other threads are not affected."""
    hms = ScriptedMetastore()
    jm = job_metastore(hms)
    hms.heartbeat_error = error
    other: list[BaseException | None] = []
    with jm.lock("db.t", "dt=2026-01-01", 5) as held:
        check_lock_held()
        time.sleep(1.0)
        with pytest.raises(LockLost, match=why):
            check_lock_held()
        assert held.lost is not None
        thread = threading.Thread(target=lambda: other.append(_check_quietly()))
        thread.start()
        thread.join(5)
    assert other == [None]  # another thread runs no commit under that lock
    check_lock_held()  # outside the block: nothing held
    jm.close()


def _check_quietly():
    try:
        check_lock_held()
    except LockLost as e:
        return e
    return None


def test_one_client_per_thread_serves_every_call_of_that_thread():
    hms = ScriptedMetastore()
    jm = job_metastore(hms)
    for day in range(1, 6):
        with jm.lock("db.t", f"dt=2026-01-{day:02d}", 5):
            pass
    assert hms.clients == 1
    assert hms.unlocked == [1, 2, 3, 4, 5]


def test_an_unlock_is_asked_again_on_a_new_connection_while_the_metastore_restarts(caplog):
    """A release whose connection broke is asked again on a new client, with the same waits as
    every other call (a restart refuses connections for seconds: one immediate retry was not
    enough, and the lock then held other writers back until the Metastore's timeout)."""
    hms = ScriptedMetastore(unlock_fail_first=metastore_lock.REQUEST_ATTEMPTS - 1)
    jm = job_metastore(hms)
    with jm.lock("db.t", "dt=2026-01-01", 5) as held:
        clients = hms.clients
    assert hms.unlocked == [held.lock_id]
    assert hms.clients == clients + metastore_lock.REQUEST_ATTEMPTS - 1  # a new client for each try
    assert "could not release" not in caplog.text


def test_an_unlock_that_keeps_failing_is_reported_not_raised(caplog):
    hms = ScriptedMetastore(unlock_fail_first=metastore_lock.REQUEST_ATTEMPTS)
    jm = job_metastore(hms)
    with caplog.at_level(logging.WARNING), jm.lock("db.t", "dt=2026-01-01", 5) as held:
        pass
    assert hms.unlocked == [] and hms.unlock_calls == metastore_lock.REQUEST_ATTEMPTS
    assert f"db.t/dt=2026-01-01: could not release Metastore lock {held.lock_id}" in caplog.text


@pytest.fixture
def chunk_requests(monkeypatch):
    """Lock requests that name their partitions (the scripted Metastore reads them)."""
    monkeypatch.setattr(metastore_lock, "lock_component", lambda api, table, partition: partition)


def chunk_metastore(hms: ScriptedMetastore) -> JobMetastore:
    jm = job_metastore(hms)
    jm._locks._api = SimpleNamespace(
        LockRequest=lambda components, user, host: SimpleNamespace(
            partitions=list(components), setAgentInfo=lambda agent: None
        )
    )
    return jm


DAYS = [f"dt=2026-01-{d:02d}" for d in (1, 2, 3)]


def test_a_chunk_is_locked_by_one_request_and_each_partition_commits_under_it(chunk_requests):
    hms = ScriptedMetastore()
    jm = chunk_metastore(hms)
    with jm.lock_chunk("db.t", DAYS) as chunk:
        assert chunk is not None and chunk.partitions == set(DAYS)
        for day in DAYS:
            with jm.lock("db.t", day, 5, chunk=chunk) as held:
                assert held is chunk
                check_lock_held()
        assert hms.lock_calls == 1 and hms.unlocked == []
        with jm.lock("db.t", "dt=2026-01-09", 5, chunk=chunk) as other:  # not the chunk's: a lock of its own
            assert other.lock_id != chunk.lock_id
    assert hms.lock_calls == 2 and sorted(hms.unlocked) == sorted([chunk.lock_id, other.lock_id])
    jm.close()


def test_a_chunk_with_a_busy_partition_is_withdrawn_at_once_and_holds_nothing(chunk_requests, caplog):
    hms = ScriptedMetastore(busy=frozenset({DAYS[1]}))
    jm = chunk_metastore(hms)
    with caplog.at_level(logging.INFO), jm.lock_chunk("db.t", DAYS) as chunk:
        assert chunk is None
        assert hms.unlocked == [1]  # the waiting request, withdrawn before any commit
    assert "a partition is busy" in caplog.text
    with jm.lock("db.t", DAYS[0], 5) as alone:  # a free partition then locks on its own at once
        assert alone.lock_id == 2
    jm.close()


def test_a_chunk_whose_lock_is_lost_stops_each_partition_naming_it(chunk_requests, quick_heartbeats):
    hms = ScriptedMetastore()
    jm = chunk_metastore(hms)
    with jm.lock_chunk("db.t", DAYS) as chunk:
        with jm.lock("db.t", DAYS[0], 5, chunk=chunk):
            check_lock_held()
            hms.heartbeat_error = "NoSuchLockException(message:No such lock lockid:1)"
            time.sleep(0.5)
            with pytest.raises(LockLost, match=f"db.t/{DAYS[0]}: this job lost the Metastore's lock 1 on it"):
                check_lock_held()
        with pytest.raises(
            LockLost, match=f"db.t/{DAYS[1]}: .* before this partition's commit began; nothing was moved"
        ):
            with jm.lock("db.t", DAYS[1], 5, chunk=chunk):
                pytest.fail("a partition's commit began under a lost lock")
    jm.close()
