"""The Hive Metastore as the merge job sees it (Spark's JVM client): partition locations, location
switches, and the lock API that Hive's own writers and ``ALTER TABLE ... CONCATENATE`` respect.

The lock: an EXCLUSIVE lock on the partition (on the table for a table without partitions),
outside any transaction, as Hive takes it for a CONCATENATE; a Hive writer with ``DbTxnManager``
waits for it, and the commit waits for a writer's lock (up to the table's ``lock_wait_seconds``,
then the partition is skipped, unchanged). The lock is heartbeated while held; the lock of a
job killed mid-commit is released by the next job that waits for it, once its last heartbeat is
``DEAD_AFTER_SECONDS`` old on the Metastore's clock (only this package's locks). A Metastore that does not serve locks (no transaction
tables, e.g. one made without ``schematool``) is logged once; the commit then relies on its lease
and identity checks (``commit``).
"""
from __future__ import annotations

import contextlib
import getpass
import json
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


def same_location(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.rstrip("/") == b.rstrip("/")


def jvm_hive_conf(spark, uris: str | None, purpose: str):
    """The Hive configuration a Metastore client in Spark's JVM uses: Spark's own Metastore
    (``hive-site.xml``, ``spark.hadoop.hive.metastore.uris``), else ``uris`` (the Airflow
    connection's address). Worth keeping: making one costs tens of milliseconds."""
    hive_conf = spark._jvm.org.apache.hadoop.hive.conf.HiveConf
    conf = hive_conf(spark._jsc.hadoopConfiguration(), hive_conf._java_lang_class)
    if not (conf.get("hive.metastore.uris") or "").strip():
        if not uris:
            raise RuntimeError(f"this Spark application knows no Hive Metastore (hive.metastore.uris) to {purpose}")
        conf.set("hive.metastore.uris", uris)
    return conf


def jvm_client(spark, uris: str | None, purpose: str, conf=None):
    """A Metastore client in Spark's JVM (``conf``: one ``jvm_hive_conf`` made, else a new one).
    The caller closes it."""
    conf = conf if conf is not None else jvm_hive_conf(spark, uris, purpose)
    return spark._jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)


def _unless_missing(call, *args):
    """``call(*args)``, or None where the Metastore answers NoSuchObjectException (through py4j)."""
    try:
        return call(*args)
    except Exception as e:  # noqa: BLE001 - py4j wraps the Metastore's exceptions
        if "NoSuchObject" in str(e):
            return None
        raise


class JobMetastore:
    """The Metastore as the merge job sees it: partition locations, location switches and the
    lock API, through the Metastore client in Spark's JVM (``jvm_client``), so it
    authenticates as Spark does.

    Each driver thread keeps one client (a client is not thread-safe; opening one is a connection
    and a configuration copy, tens of milliseconds): a commit's lock, statistics read and release
    share it. A client whose call failed is closed and replaced on next use (the connection may be
    what broke). One heartbeat thread keeps every held lock alive."""

    def __init__(self, spark, uris: str | None):
        self._spark, self._uris = spark, uris
        self._locks_served: bool | None = None  # unknown until the first lock request answers
        self._probe = threading.Lock()  # one thread asks first whether locks are served
        self._conf = None  # the Hive configuration, made once (each client copies it)
        self._conf_lock = threading.Lock()
        self._local = threading.local()  # .client: this thread's Metastore client
        self._clients: list = []  # every client opened, closed by close()
        self._held: set[int] = set()  # lock ids the heartbeat thread keeps alive
        self._held_changed = threading.Condition()
        self._beating: threading.Thread | None = None
        self._api = spark._jvm.org.apache.hadoop.hive.metastore.api
        self._json = None  # Jackson's ObjectMapper in the JVM: a parameter map in one round trip

    def _new_client(self):
        with self._conf_lock:
            if self._conf is None:
                self._conf = jvm_hive_conf(self._spark, self._uris, "switch partition locations or take locks")
        client = jvm_client(self._spark, self._uris, "", self._conf)
        with self._conf_lock:
            self._clients.append(client)
        return client

    @contextlib.contextmanager
    def _client(self):
        """This thread's client for the block; replaced after a call in it fails."""
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._new_client()
        try:
            yield client
        except Exception:
            self._local.client = None
            self._close(client)
            raise

    def _close(self, client) -> None:
        with self._conf_lock:
            if client in self._clients:
                self._clients.remove(client)
        try:
            client.close()
        except Exception:  # noqa: BLE001 - the connection is what broke
            pass

    def close(self) -> None:
        """Close every client this object opened (at the end of the job)."""
        with self._held_changed:
            self._held.clear()
            self._held_changed.notify_all()
        with self._conf_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass

    def _get(self, client, table: str, values: list[str]):
        db, tbl = table.split(".", 1)
        return _unless_missing(client.getPartition, db, tbl, list(values))

    def _as_dict(self, params) -> dict[str, str]:
        """A Java map of strings as a dict, in one round trip (iterated, it is two per key)."""
        if self._json is None:
            self._json = self._spark._jvm.com.fasterxml.jackson.databind.ObjectMapper()
        return {str(k): str(v) for k, v in json.loads(self._json.writeValueAsString(params)).items()}

    def location(self, table: str, values: list[str]) -> str | None:
        """The partition's location now; None when it does not exist."""
        with self._client() as client:
            p = self._get(client, table, values)
            return None if p is None else str(p.getSd().getLocation())

    def parameters(self, table: str, values: list[str]) -> dict[str, str] | None:
        """The partition's parameters now (the table's, for a table without partitions); None
        when the partition does not exist."""
        with self._client() as client:
            if values:
                p = self._get(client, table, values)
                params = None if p is None else p.getParameters()
            else:
                params = client.getTable(*table.split(".", 1)).getParameters()
            return None if params is None else self._as_dict(params)

    def switch(self, table: str, values: list[str], old: str, new: str, parameters: dict[str, str | None]) -> bool:
        """Point the partition at ``new`` with ``parameters`` merged in (None removes a key),
        only if it is at ``old`` now; True if it was switched. The Metastore is told not to
        compute statistics itself (the given ones are the new folder's)."""
        with self._client() as client:
            p = self._get(client, table, values)
            if p is None or not same_location(str(p.getSd().getLocation()), old):
                return False
            p.getSd().setLocation(new)
            self._merge_parameters(p, parameters)
            db, tbl = table.split(".", 1)
            client.alter_partition(db, tbl, p, self._keep_statistics())
            return True

    def table_location(self, table: str) -> str | None:
        """The table's location; None when the table does not exist."""
        with self._client() as client:
            t = _unless_missing(client.getTable, *table.split(".", 1))
            return None if t is None else str(t.getSd().getLocation())

    def update_parameters(self, table: str, partition: str, parameters: dict[str, str | None]) -> bool:
        """Merge ``parameters`` (statistics; None removes a key) into the partition named
        ``partition`` (``k=v/...``, as the Metastore names it; "" for a table without partitions),
        the Metastore told not to compute statistics itself. False when it does not exist."""
        db, tbl = table.split(".", 1)
        with self._client() as client:
            target = (_unless_missing(client.getPartition, db, tbl, partition) if partition
                      else _unless_missing(client.getTable, db, tbl))
            if target is None:
                return False
            self._merge_parameters(target, parameters)
            if partition:
                client.alter_partition(db, tbl, target, self._keep_statistics())
            else:
                client.alter_table_with_environmentContext(db, tbl, target, self._keep_statistics())
            return True

    def _merge_parameters(self, target, parameters: dict[str, str | None]) -> None:
        """Merge ``parameters`` into a Java Partition's or Table's (None removes a key)."""
        params = target.getParameters()
        if params is None:
            params = self._spark._jvm.java.util.HashMap()
            target.setParameters(params)
        for k, v in parameters.items():
            if v is None:
                params.remove(k)
            else:
                params.put(k, v)

    def _keep_statistics(self):
        context = self._api.EnvironmentContext()
        context.putToProperties("DO_NOT_UPDATE_STATS", "true")
        return context

    @contextlib.contextmanager
    def lock(self, table: str, partition: str, wait_seconds: float):
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
