"""The Hive Metastore as the merge job sees it (Spark's JVM client): partition locations, location
switches, and the lock API that Hive's own writers and ``ALTER TABLE ... CONCATENATE`` respect.

The lock: an EXCLUSIVE lock on the partition (on the table for a table without partitions),
outside any transaction, as Hive takes it for a CONCATENATE; a Hive writer with ``DbTxnManager``
waits for it, and the commit waits for a writer's lock (up to the table's ``lock_wait_seconds``,
then the partition is skipped, unchanged). A Metastore that does not serve locks (no transaction
tables, e.g. one made without ``schematool``) is logged once; the commit then relies on its lease
and identity checks (``commit``).
"""
from __future__ import annotations

import contextlib
import getpass
import logging
import socket
import time

from .commit import CommitConflict

log = logging.getLogger(__name__)


class LockTimeout(CommitConflict):
    """Another holder (a Hive writer) kept the partition's Metastore lock past the wait."""


def same_location(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.rstrip("/") == b.rstrip("/")


class JobMetastore:
    """The Metastore as the merge job sees it: partition locations, location switches and the
    lock API, through the Metastore client in Spark's JVM (``result_table.jvm_client``), so it
    authenticates as Spark does."""

    def __init__(self, spark, uris: str | None):
        self._spark, self._uris = spark, uris
        self._locks_served: bool | None = None  # unknown until the first lock request

    def _client(self):
        from .result_table import jvm_client
        return jvm_client(self._spark, self._uris, "switch partition locations or take locks")

    def _get(self, client, table: str, values: list[str]):
        db, tbl = table.split(".", 1)
        try:
            return client.getPartition(db, tbl, list(values))
        except Exception as e:  # noqa: BLE001 - NoSuchObjectException through py4j
            if "NoSuchObject" in str(e):
                return None
            raise

    def location(self, table: str, values: list[str]) -> str | None:
        """The partition's location now; None when it does not exist."""
        client = self._client()
        try:
            p = self._get(client, table, values)
            return None if p is None else str(p.getSd().getLocation())
        finally:
            client.close()

    def switch(self, table: str, values: list[str], old: str, new: str, parameters: dict[str, str | None]) -> bool:
        """Point the partition at ``new`` with ``parameters`` merged in (None removes a key),
        only if it is at ``old`` now; True if it was switched. The Metastore is told not to
        compute statistics itself (the given ones are the new folder's)."""
        client = self._client()
        try:
            p = self._get(client, table, values)
            if p is None or not same_location(str(p.getSd().getLocation()), old):
                return False
            p.getSd().setLocation(new)
            params = p.getParameters()
            for k, v in parameters.items():
                if v is None:
                    params.remove(k)
                else:
                    params.put(k, v)
            api = self._spark._jvm.org.apache.hadoop.hive.metastore.api
            context = api.EnvironmentContext()
            context.putToProperties("DO_NOT_UPDATE_STATS", "true")
            db, tbl = table.split(".", 1)
            client.alter_partition(db, tbl, p, context)
            return True
        finally:
            client.close()

    @contextlib.contextmanager
    def lock(self, table: str, partition: str, wait_seconds: float):
        """Hold the Metastore's EXCLUSIVE lock on the partition while the block runs.
        CommitConflict if another holder keeps it longer than ``wait_seconds``."""
        if self._locks_served is False:
            yield None
            return
        api = self._spark._jvm.org.apache.hadoop.hive.metastore.api
        db, tbl = table.split(".", 1)
        component = api.LockComponent(api.LockType.EXCLUSIVE,
                                      api.LockLevel.PARTITION if partition else api.LockLevel.TABLE, db)
        component.setTablename(tbl)
        if partition:
            component.setPartitionname(partition)
        component.setOperationType(api.DataOperationType.NO_TXN)
        component.setIsAcid(False)
        request = api.LockRequest([component], getpass.getuser(), socket.gethostname())
        request.setAgentInfo("hive_compaction")
        client = self._client()
        lock_id = None
        try:
            try:
                response = client.lock(request)
            except Exception as e:  # noqa: BLE001 - a Metastore without its transaction tables
                self._locks_served = False
                log.warning("the Hive Metastore does not serve locks (%s): commits rely on their journal and "
                            "identity checks only", str(e).splitlines()[0][:300])
                yield None
                return
            self._locks_served = True
            lock_id = response.getLockid()
            deadline = time.monotonic() + wait_seconds
            while str(response.getState()) == "WAITING" and time.monotonic() < deadline:
                time.sleep(0.5)
                response = client.checkLock(lock_id)
            if str(response.getState()) != "ACQUIRED":
                raise LockTimeout(f"{table}/{partition}: another writer holds the Metastore's lock on it "
                                     f"(waited {wait_seconds:.0f}s, lock {response.getState()}); nothing was moved, "
                                     "the next run will look at it again")
            yield lock_id
        finally:
            if lock_id is not None:
                try:
                    client.unlock(lock_id)
                except Exception:  # noqa: BLE001 - gone already (timed out): nothing held
                    log.warning("%s/%s: could not release Metastore lock %s", table, partition, lock_id)
            client.close()
