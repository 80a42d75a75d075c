"""The Hive Metastore hook of the Airflow side: tables, partitions and statistics through the
Metastore's Thrift API (hmsclient), and the package's own results table.

Shaped like the Hive provider's ``HiveMetastoreHook``: an Airflow hook built from a connection
(``metastore_default``, else this package's former ``hive_metastore``), with public methods for
what the package needs; every Airflow-side module goes through them. The Thrift connection
(addresses, SASL, fail-over) is ``metastore_connection``; what the methods return is
``metastore_types``.

Calls are batched: partition names in one call, then partitions by name in batches, so the
cost of a scan grows linearly with the number of partitions. Only calls that Hive 2.3, 3.1 and
4 all serve: ``get_table_req`` (Hive 4.0.1 removed the plain table call, HIVE-26537),
``get_partition_names``, ``get_partitions_by_names``, ``get_partitions_by_filter``, ``get_all_databases``,
``get_tables``, ``get_table_objects_by_name_req``,
``alter_partitions_with_environment_context`` and ``alter_table_with_environment_context``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping

from airflow.sdk import BaseHook
from hmsclient.genthrift.hive_metastore import ttypes

from hive_compaction.airflow.metastore_connection import DEFAULT_PORT, MetastoreConnection, MetastoreUnavailable
from hive_compaction.airflow.metastore_types import PartitionInfo, PartitionRecord, TableInfo, partition_name

log = logging.getLogger(__name__)

# Tells the Metastore to store our statistics as given instead of recomputing them itself.
DO_NOT_UPDATE_STATS = "DO_NOT_UPDATE_STATS"

# The Airflow connection used when the config names none: the Hive provider's default id, else
# this package's former default (existing deployments define that one).
DEFAULT_CONN_ID = "metastore_default"
LEGACY_CONN_ID = "hive_metastore"


class TableNotFound(ValueError):
    """The Metastore has no such table (or no such database)."""

    def __init__(self, name: str, address: str):
        super().__init__(
            f"table {name} does not exist in the Hive Metastore at thrift://{address} "
            "(check the database and table names in the config)"
        )
        self.name = name


class Metastore(BaseHook):
    """``with Metastore(metastore_conn_id=...) as hms: ...``, or ``Metastore(host, port)`` for a
    Metastore named directly (tests, tools); a connection is open inside the ``with`` only.

    From an Airflow connection (``metastore_conn_id``, None: ``metastore_default`` if defined,
    else ``hive_metastore``): host (``hms1,hms2:9084`` lists several, tried in order), port (for
    hosts without one), login/password (PLAIN); extras ``timeout_seconds``,
    ``connect_timeout_seconds``, ``batch_size``, ``auth_mechanism`` (NOSASL, GSSAPI, PLAIN) and
    ``kerberos_service_name`` (default ``hive``), as the Hive provider names them. Named directly,
    the same settings are arguments (see ``metastore_connection.MetastoreConnection``)."""

    conn_name_attr = "metastore_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "hive_metastore"
    hook_name = "Hive Metastore Thrift (hive_compaction)"

    def __init__(
        self,
        host: str | None = None,
        port: int = DEFAULT_PORT,
        timeout_seconds: float = 60.0,
        batch_size: int = 500,
        *,
        metastore_conn_id: str | None = None,
        **options,
    ):
        super().__init__()
        if host is None:
            if options:
                raise ValueError(f"{', '.join(options)}: an Airflow connection's settings come from its extra")
            conn = _airflow_connection(metastore_conn_id)
            self.metastore_conn_id = conn.conn_id or metastore_conn_id
            host, port, timeout_seconds, batch_size, options = _settings(conn, self.metastore_conn_id)
        elif metastore_conn_id is not None:
            raise ValueError("give a Metastore's host or an Airflow connection id, not both")
        else:
            self.metastore_conn_id = None
        self.connection = MetastoreConnection(host, port, timeout_seconds, **options)
        self.batch_size = batch_size

    # --- the connection -----------------------------------------------------------------------
    @property
    def address(self) -> str:
        """The Metastore connected to (the first of the list before connecting)."""
        return self.connection.address

    @property
    def uris(self) -> str:
        """The addresses as ``hive.metastore.uris`` writes them (for a Spark without hive-site.xml)."""
        return self.connection.uris

    @property
    def calls(self) -> int:
        """Thrift calls made so far (each batch is one)."""
        return self.connection.calls

    def get_conn(self):
        """The hmsclient of the open connection (inside ``with``), for calls this hook has no method for."""
        if self.connection.client is None:
            raise MetastoreUnavailable("not connected to the Hive Metastore: use `with Metastore(...) as hms:`")
        return self.connection.client

    def __enter__(self) -> Metastore:
        self.connection.open()
        return self

    def __exit__(self, *exc) -> None:
        self.connection.close()

    # --- tables and partitions ----------------------------------------------------------------
    def _get_table(self, database: str, table: str):
        """The Thrift Table, through get_table_req (served by Hive 2.3 to 4)."""
        try:
            return self.connection.call("get_table_req", ttypes.GetTableRequest(dbName=database, tblName=table)).table
        except ttypes.NoSuchObjectException as e:
            raise TableNotFound(f"{database}.{table}", self.address) from e

    def table(self, database: str, table: str) -> TableInfo:
        return TableInfo.from_thrift(self._get_table(database, table))

    def databases(self) -> list[str]:
        """Every database's name (one call)."""
        return list(self.connection.call("get_all_databases"))

    def table_names(self, database: str) -> list[str]:
        """Every table's name in ``database`` (one call; ``*``: the one pattern every Hive reads alike)."""
        try:
            return list(self.connection.call("get_tables", database, "*"))
        except ttypes.NoSuchObjectException:  # a database named by a pattern that does not exist (yet)
            return []

    def tables(self, database: str, names: Iterable[str]) -> Iterator[TableInfo]:
        """The named tables of ``database`` (absent ones left out), ``batch_size`` names a call."""
        names = list(names)
        for i in range(0, len(names), self.batch_size):
            request = ttypes.GetTablesRequest(dbName=database, tblNames=names[i : i + self.batch_size])
            yield from (
                TableInfo.from_thrift(t) for t in self.connection.call("get_table_objects_by_name_req", request).tables
            )

    def partition_names(self, table: TableInfo) -> list[str]:
        return self.partition_names_of(table.database, table.table)

    def partitions(
        self, table: TableInfo, names: Iterable[str] | None = None, filter_expr: str | None = None
    ) -> Iterator[PartitionInfo]:
        """All partitions (or those named, or those matching a Metastore filter), in batches."""
        if not table.partition_keys:
            yield PartitionInfo.of_table(table)
            return
        if filter_expr:
            found = self.connection.call("get_partitions_by_filter", table.database, table.table, filter_expr, -1)
            yield from (PartitionInfo.from_thrift(table, p) for p in found)
            return
        names = list(self.partition_names(table) if names is None else names)
        for batch in self._by_names(table.database, table.table, names):
            yield from (PartitionInfo.from_thrift(table, p) for p in batch)

    def _by_names(self, database: str, table: str, names: list[str]) -> Iterator[list]:
        """The named partitions (Thrift objects; absent names left out), one list per batch."""
        for i in range(0, len(names), self.batch_size):
            yield self.connection.call("get_partitions_by_names", database, table, names[i : i + self.batch_size])

    def update_statistics(self, table: TableInfo, stats: dict[str, dict[str, str | None]]) -> int:
        """Write parameters (statistics) to partitions, keyed by partition name; batched.
        A value of None removes the key."""
        if not stats:
            return 0
        ctx = ttypes.EnvironmentContext(properties={DO_NOT_UPDATE_STATS: "true"})
        if not table.partition_keys:
            t = self._get_table(table.database, table.table)
            t.parameters = _merged(t.parameters, stats[""])
            self.connection.call("alter_table_with_environment_context", table.database, table.table, t, ctx)
            return 1
        done = 0
        for batch in self._by_names(table.database, table.table, list(stats)):
            for p in batch:
                p.parameters = _merged(p.parameters, stats[partition_name(table.partition_keys, p.values)])
            self.connection.call("alter_partitions_with_environment_context", table.database, table.table, batch, ctx)
            done += len(batch)
        return done

    # --- tables the package keeps for itself (the results table) --------------------------------
    def table_exists(self, database: str, table: str) -> bool:
        return table.lower() in [t.lower() for t in self.connection.call("get_tables", database, table)]

    def create_external_table(
        self,
        database: str,
        table: str,
        columns: Iterable[str],
        partition_keys: Iterable[str],
        storage: tuple[str, str, str],
        parameters: dict[str, str],
    ) -> bool:
        """Create an external table of string columns (``storage``: input format, output format,
        serde); False when it exists already (another run created it meanwhile)."""
        input_format, output_format, serde = storage
        sd = ttypes.StorageDescriptor(
            cols=[ttypes.FieldSchema(c, "string", "") for c in columns],
            inputFormat=input_format,
            outputFormat=output_format,
            compressed=False,
            numBuckets=-1,
            bucketCols=[],
            sortCols=[],
            parameters={},
            serdeInfo=ttypes.SerDeInfo(serializationLib=serde, parameters={}),
        )
        t = ttypes.Table(
            tableName=table,
            dbName=database,
            owner="hive_compaction",
            sd=sd,
            partitionKeys=[ttypes.FieldSchema(k, "string", "") for k in partition_keys],
            parameters={"EXTERNAL": "TRUE", **parameters},
            tableType="EXTERNAL_TABLE",
        )
        try:
            self.connection.call("create_table", t)
            return True
        except ttypes.AlreadyExistsException:
            return False

    def partition_names_of(self, database: str, table: str) -> list[str]:
        return list(self.connection.call("get_partition_names", database, table, -1))

    def partition_records(self, database: str, table: str, names: Iterable[str]) -> Iterator[PartitionRecord]:
        """The named partitions' values, parameters and creation time (absent names are left out), in batches."""
        for batch in self._by_names(database, table, list(names)):
            yield from (PartitionRecord(tuple(p.values), dict(p.parameters or {}), p.createTime or 0) for p in batch)

    def drop_partition(self, database: str, table: str, values: Iterable[str]) -> bool:
        """Drop a partition and its data; False when it was gone already."""
        try:
            self.connection.call("drop_partition", database, table, list(values), True)
            return True
        except ttypes.NoSuchObjectException:
            return False


def from_airflow_connection(conn_id: str | None = None) -> Metastore:
    """``Metastore(metastore_conn_id=conn_id)``: the hook of an Airflow connection (see Metastore)."""
    return Metastore(metastore_conn_id=conn_id)


def _airflow_connection(conn_id: str | None):
    """The Airflow connection ``conn_id``; when None, ``metastore_default`` if it exists, else
    ``hive_metastore`` (said in the log), else an error naming both."""
    if conn_id:
        return BaseHook.get_connection(conn_id)
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(DEFAULT_CONN_ID)
    except AirflowNotFoundException:
        pass
    try:
        conn = BaseHook.get_connection(LEGACY_CONN_ID)
    except AirflowNotFoundException:
        raise AirflowNotFoundException(
            f"no Airflow connection for the Hive Metastore: define {DEFAULT_CONN_ID!r} (e.g. "
            f'AIRFLOW_CONN_{DEFAULT_CONN_ID.upper()}=\'{{"conn_type":"generic","host":"hms.example",'
            f'"port":9083}}\'), or {LEGACY_CONN_ID!r}, or name yours with metastore_conn_id in the config'
        ) from None
    log.info(
        "Hive Metastore connection: %r (the config names none and there is no %r connection; "
        "%r is still read, the Hive provider's %r is preferred)",
        LEGACY_CONN_ID,
        DEFAULT_CONN_ID,
        LEGACY_CONN_ID,
        DEFAULT_CONN_ID,
    )
    return conn


def _settings(conn, conn_id: str | None) -> tuple[str, int, float, int, dict]:
    """host, port, timeout_seconds, batch_size and the other MetastoreConnection options of an
    Airflow connection."""
    if not conn.host:
        raise ValueError(f"Airflow connection {conn_id!r} has no host for the Hive Metastore")
    extra = conn.extra_dejson
    connect_timeout = extra.get("connect_timeout_seconds")
    options = {
        "auth_mechanism": str(extra.get("auth_mechanism") or "NOSASL"),
        "kerberos_service_name": str(extra.get("kerberos_service_name") or "hive"),
        "username": conn.login or None,
        "password": conn.password or None,
        "connect_timeout_seconds": None if connect_timeout is None else float(connect_timeout),
    }
    return (
        conn.host,
        conn.port or DEFAULT_PORT,
        float(extra.get("timeout_seconds", 60)),
        int(extra.get("batch_size", 500)),
        options,
    )


def _merged(parameters: dict | None, updates: Mapping[str, str | None]) -> dict[str, str]:
    out = {**(parameters or {}), **updates}
    return {k: v for k, v in out.items() if v is not None}
