"""The merge job's Metastore lock bookkeeping (``JobMetastore.lock``, ``storage.metastore_lock``),
with a scripted client: which thread asks first, what a refused request means, one client per
thread. The real lock API is exercised by ``test_metastore_lock.py``; this checks the decisions
around it, including one a fresh Metastore 2.3 forces (found in the scale benchmark): of several
first lock requests arriving together, all but one fail with "Internal error processing lock"."""
from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from unittest import mock

import pytest

from hive_compaction.storage.metastore_client import JobMetastore


class ScriptedMetastore:
    """Lock calls as a Metastore answers them. ``refuse``: every request fails (no transaction
    tables). Otherwise a request fails while another is in flight until one has been served, as
    Metastore 2.3's transaction store does when it starts."""

    def __init__(self, refuse: bool = False):
        self.refuse = refuse
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
        return SimpleNamespace(lock=self.lock, unlock=self.unlocked.append, heartbeat=lambda txn, lock_id: None,
                               close=lambda: None)

    def lock(self, request):
        with self._mutex:
            self.lock_calls += 1
            n = self.lock_calls
            self.in_flight += 1
            first_ever = not self.served
        try:
            if self.refuse:
                raise RuntimeError("An error occurred while calling o42.lock.")
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
            return SimpleNamespace(getLockid=lambda: n, getState=lambda: "ACQUIRED")
        finally:
            with self._mutex:
                self.in_flight -= 1


def job_metastore(hms: ScriptedMetastore) -> JobMetastore:
    spark = mock.MagicMock()  # only the lock request's Thrift objects are built through it
    jm = JobMetastore(spark, "thrift://127.0.0.1:9083")
    jm._new_client = hms.client
    return jm


def take_locks(jm: JobMetastore, partitions: int) -> dict[int, int | None]:
    got: dict[int, int | None] = {}
    start = threading.Barrier(partitions, timeout=10)

    def commit(i: int) -> None:
        start.wait()
        with jm.lock("db.t", f"dt=2026-01-{i + 1:02d}", 5) as lock_id:
            got[i] = lock_id

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


def test_a_metastore_without_locks_is_asked_twice_then_never_again(caplog):
    hms = ScriptedMetastore(refuse=True)
    jm = job_metastore(hms)
    with caplog.at_level(logging.WARNING, logger="hive_compaction.storage.metastore_lock"):
        got = take_locks(jm, 4)
    assert got == {0: None, 1: None, 2: None, 3: None}
    assert hms.lock_calls == 2
    assert caplog.text.count("does not serve locks") == 1
    with jm.lock("db.t", "dt=2026-02-01", 5) as lock_id:
        assert lock_id is None
    assert hms.lock_calls == 2


def test_once_locks_were_served_a_failing_request_fails_the_commit_and_the_client_is_replaced():
    hms = ScriptedMetastore()
    jm = job_metastore(hms)
    with jm.lock("db.t", "dt=2026-01-01", 5) as lock_id:
        assert lock_id == 1
    clients = hms.clients
    hms.refuse = True
    with pytest.raises(RuntimeError, match="o42.lock"):
        with jm.lock("db.t", "dt=2026-01-02", 5):
            pytest.fail("the block ran without the lock")
    hms.refuse = False
    with jm.lock("db.t", "dt=2026-01-03", 5) as lock_id:
        assert isinstance(lock_id, int)
    assert hms.clients == clients + 1  # the failed call's client was closed, a new one opened


def test_one_client_per_thread_serves_every_call_of_that_thread():
    hms = ScriptedMetastore()
    jm = job_metastore(hms)
    for day in range(1, 6):
        with jm.lock("db.t", f"dt=2026-01-{day:02d}", 5):
            pass
    assert hms.clients == 1
    assert hms.unlocked == [1, 2, 3, 4, 5]
