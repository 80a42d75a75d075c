"""The Hive Metastore as the merge job sees it (Spark's JVM client): partition locations, location
switches, statistics, and the lock API that Hive's own writers and ``ALTER TABLE ... CONCATENATE``
respect (``metastore_lock``).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hive_compaction.storage.jvm_helper import java_list
from hive_compaction.storage.metastore_lock import CommitConflict, MetastoreLocks, reconnecting


class DescriptorChanged(CommitConflict):
    """The partition's storage descriptor (columns, formats, SerDe) is not the one the commit read
    under its lock: someone altered the partition meanwhile; nothing was switched."""


@dataclass(frozen=True)
class PartitionState:
    """A partition (or a table without partitions) as one read returns it: its parameters, its
    storage descriptor but the location (``descriptor_text``; None for a table), its location and
    when it was created (epoch seconds, as the Metastore keeps it)."""

    parameters: dict[str, str] | None
    descriptor: str | None
    location: str | None
    created: int | None = None


MISSING = PartitionState(None, None, None)


def same_location(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.rstrip("/") == b.rstrip("/")


def jvm_hive_conf(spark: Any, uris: str | None, purpose: str) -> Any:
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


def jvm_client(spark: Any, uris: str | None, purpose: str, conf: Any = None) -> Any:
    """A Metastore client in Spark's JVM (``conf``: one ``jvm_hive_conf`` made, else a new one).
    The caller closes it."""
    conf = conf if conf is not None else jvm_hive_conf(spark, uris, purpose)
    return spark._jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)


def get_table(client: Any, api: Any, db: str, table: str) -> Any:
    """The Thrift Table through ``client`` (a ``jvm_client``; ``api``: the Thrift API's Java
    package), by get_table_req. Spark's Hive 2.3 client's ``getTable`` sends get_table, which
    Hive 4 removed (HIVE-26537: "Invalid method name: 'get_table'"); get_table_req is served by
    2.3, 3.1 and 4.x. The client keeps its Thrift stub in a package-private field (``client``),
    read on each call: a reconnect replaces it."""
    field = client.getClass().getDeclaredField("client")
    field.setAccessible(True)
    return field.get(client).get_table_req(api.GetTableRequest(db, table)).getTable()


def descriptor_text(sd: Any) -> str:
    """A storage descriptor but its location, as the Thrift object prints itself: compared with
    another, never parsed."""
    copy = sd.deepCopy()
    copy.setLocation("")
    return str(copy.toString())


def _first_difference(a: str, b: str) -> str:
    at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, at - 40)
    return f"...{a[start : at + 60]}... is now ...{b[start : at + 60]}..."


def values_of(partition: Any) -> tuple[str, ...]:
    """A Java Partition's values."""
    return tuple(str(v) for v in java_list(partition.getValues()))


def _unless_missing(call: Any, *args: Any) -> Any:
    """``call(*args)``, or None where the Metastore answers NoSuchObjectException (through py4j)."""
    try:
        return call(*args)
    except Exception as e:
        if "NoSuchObject" in str(e):
            return None
        raise


class ThreadClients:
    """One Metastore client per driver thread (``jvm_client``; a client is not thread-safe, and
    opening one is a connection and a configuration copy, tens of milliseconds): ``client`` gives
    the calling thread's for a block, closed and replaced on next use after a call in it failed
    (the connection may be what broke); ``close`` closes every one opened."""

    def __init__(self, spark: Any, uris: str | None) -> None:
        self._spark, self._uris = spark, uris
        self._conf = None  # the Hive configuration, made once (each client copies it)
        self._lock = threading.Lock()
        self._local = threading.local()  # .client: this thread's Metastore client
        self._open: list[Any] = []  # every client opened and not closed yet

    def _new(self) -> Any:
        with self._lock:
            if self._conf is None:
                self._conf = jvm_hive_conf(self._spark, self._uris, "switch partition locations or take locks")
        client = jvm_client(self._spark, self._uris, "", self._conf)
        with self._lock:
            self._open.append(client)
        return client

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        """This thread's client for the block; replaced after a call in it fails."""
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._new()
        try:
            yield client
        except Exception:
            self._local.client = None
            with self._lock:
                if client in self._open:
                    self._open.remove(client)
            _close_quietly(client)
            raise

    def close(self) -> None:
        with self._lock:
            clients, self._open = self._open, []
        for client in clients:
            _close_quietly(client)


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001 - the connection may be what broke
        pass


class JobMetastore:
    """The Metastore as the merge job sees it: partition locations, location switches and the
    lock API, through the Metastore client in Spark's JVM (``jvm_client``), so it
    authenticates as Spark does.

    Each driver thread keeps one client (``ThreadClients``): a commit's lock, statistics read and
    release share it. The lock protocol (waiting, heartbeats, dead jobs' locks) is
    ``MetastoreLocks``."""

    def __init__(self, spark: Any, uris: str | None) -> None:
        self._spark = spark
        self._clients = ThreadClients(spark, uris)
        self._client = self._clients.client
        self._api = spark._jvm.org.apache.hadoop.hive.metastore.api
        self._json: Any = None  # Jackson's ObjectMapper in the JVM: a parameter map in one round trip
        self._locks = MetastoreLocks(self._api, self._client)

    def close(self) -> None:
        """Close every client this object opened (at the end of the job)."""
        self._locks.let_go_all()
        self._clients.close()

    def _get(self, client: Any, table: str, values: list[str]) -> Any:
        db, tbl = table.split(".", 1)
        return _unless_missing(client.getPartition, db, tbl, list(values))

    def _as_dict(self, params: Any) -> dict[str, str]:
        """A Java map of strings as a dict, in one round trip (iterated, it is two per key)."""
        if self._json is None:
            self._json = self._spark._jvm.com.fasterxml.jackson.databind.ObjectMapper()
        return {str(k): str(v) for k, v in json.loads(self._json.writeValueAsString(params)).items()}

    def location(self, table: str, values: list[str]) -> str | None:
        """The partition's location now; None when it does not exist."""
        p = reconnecting(self._client, lambda client: self._get(client, table, values))
        return None if p is None else str(p.getSd().getLocation())

    def parameters(self, table: str, values: list[str]) -> dict[str, str] | None:
        """The partition's parameters now (the table's, for a table without partitions); None
        when the partition does not exist."""
        return self.state(table, values).parameters

    def state(self, table: str, values: list[str]) -> PartitionState:
        """The partition's parameters, storage descriptor and location in one read (``MISSING``
        when it does not exist). A table without partitions: its parameters and location."""

        def read(client: Any) -> Any:
            if values:
                return self._get(client, table, values)
            return get_table(client, self._api, *table.split(".", 1))

        target = reconnecting(self._client, read)
        return MISSING if target is None else self._state_of(target, bool(values))

    def _state_of(self, target: Any, partition: bool = True) -> PartitionState:
        """A Java Partition's (or, not ``partition``, Table's) state."""
        params = target.getParameters()
        return PartitionState(
            None if params is None else self._as_dict(params),
            descriptor_text(target.getSd()) if partition else None,
            str(target.getSd().getLocation()),
            int(target.getCreateTime()),
        )

    def states(self, table: str, partitions: list[str]) -> dict[tuple[str, ...], PartitionState]:
        """As ``state``, for the ``partitions`` (names, ``k=v/...``) of ``table`` in one read,
        keyed by their values; a partition that does not exist is left out."""
        db, tbl = table.split(".", 1)
        found = reconnecting(self._client, lambda client: client.getPartitionsByNames(db, tbl, list(partitions)))
        return {values_of(p): self._state_of(p) for p in java_list(found)}

    def switch(
        self,
        table: str,
        values: list[str],
        old: str,
        new: str,
        parameters: dict[str, str | None],
        descriptor: str | None = None,
    ) -> bool:
        """Point the partition at ``new`` with ``parameters`` merged in (None removes a key),
        only if it is at ``old`` now, and (``descriptor``) its storage descriptor is still the
        one read before (DescriptorChanged if not); True if it was switched. The Metastore is told
        not to compute statistics itself (the given ones are the new folder's). Asked again on
        a new connection if the connection broke: the partition at ``new`` then means the first
        request went through."""
        tried: list[bool] = []

        def attempt(client: Any) -> bool:
            p = self._get(client, table, values)
            location = None if p is None else str(p.getSd().getLocation())
            if tried and same_location(location, new):
                return True  # switched by the first request, whose answer the broken connection lost
            tried.append(True)
            if not same_location(location, old):
                return False
            if descriptor is not None and descriptor_text(p.getSd()) != descriptor:
                raise DescriptorChanged(  # the caller names the partition
                    "the partition's storage descriptor changed since the commit read it "
                    f"under its lock ({_first_difference(descriptor, descriptor_text(p.getSd()))}): an ALTER of its "
                    "columns, format or SerDe meanwhile; the merged files were written for the old one"
                )
            p.getSd().setLocation(new)
            self._merge_parameters(p, parameters)
            db, tbl = table.split(".", 1)
            client.alter_partition(db, tbl, p, self._keep_statistics())
            return True

        return reconnecting(self._client, attempt)

    def table_location(self, table: str) -> str | None:
        """The table's location; None when the table does not exist."""
        t = reconnecting(
            self._client, lambda client: _unless_missing(get_table, client, self._api, *table.split(".", 1))
        )
        return None if t is None else str(t.getSd().getLocation())

    def update_parameters(self, table: str, partition: str, parameters: dict[str, str | None]) -> bool:
        """Merge ``parameters`` (statistics; None removes a key) into the partition named
        ``partition`` (``k=v/...``, as the Metastore names it; "" for a table without partitions),
        the Metastore told not to compute statistics itself. False when it does not exist."""
        db, tbl = table.split(".", 1)

        def update(client: Any) -> bool:
            target = (
                _unless_missing(client.getPartition, db, tbl, partition)
                if partition
                else _unless_missing(get_table, client, self._api, db, tbl)
            )
            if target is None:
                return False
            self._merge_parameters(target, parameters)
            if partition:
                client.alter_partition(db, tbl, target, self._keep_statistics())
            else:
                client.alter_table_with_environmentContext(db, tbl, target, self._keep_statistics())
            return True

        return reconnecting(self._client, update)

    def update_parameters_all(
        self, table: str, updates: list[tuple[str, list[str], dict[str, str | None]]]
    ) -> set[str]:
        """``update_parameters`` for several partitions of ``table`` (name, values, parameters),
        each read again, in one read and one alter for all; the names of those written (a
        partition that does not exist is left out)."""
        db, tbl = table.split(".", 1)
        by_values = {tuple(values): (name, parameters) for name, values, parameters in updates}

        def update(client: Any) -> set[str]:
            found = client.getPartitionsByNames(db, tbl, [name for name, _, _ in updates])
            written, targets = set(), []
            for p in java_list(found):
                name, parameters = by_values.get(values_of(p), (None, None))
                if name is not None:
                    self._merge_parameters(p, parameters)  # type: ignore[arg-type]  # found with its name
                    targets.append(p)
                    written.add(name)
            if targets:
                client.alter_partitions(db, tbl, targets, self._keep_statistics())
            return written

        return reconnecting(self._client, update)

    def _merge_parameters(self, target: Any, parameters: dict[str, str | None]) -> None:
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

    def _keep_statistics(self) -> Any:
        context = self._api.EnvironmentContext()
        context.putToProperties("DO_NOT_UPDATE_STATS", "true")
        return context

    def lock(self, table: str, partition: str, wait_seconds: float, required: bool = True, chunk: Any = None) -> Any:
        """Hold the Metastore's EXCLUSIVE lock on the partition while the block runs, heartbeating
        it (``MetastoreLocks.hold``; a context manager: ``with metastore.lock(...) as held``; held
        None only where locks are not ``required`` and the Metastore serves none), or run the
        block under ``chunk``, a ``lock_chunk``'s lock that covers it."""
        return self._locks.hold(table, partition, wait_seconds, required, chunk)

    def lock_chunk(self, table: str, partitions: list[str]) -> Any:
        """One lock on several partitions of ``table`` if every one is free now, else None
        (``MetastoreLocks.hold_all``; a context manager)."""
        return self._locks.hold_all(table, partitions)
