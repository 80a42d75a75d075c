"""Reading partitions and writing statistics through the Hive Metastore Thrift API (hmsclient).

Calls are batched: partition names in one call, then partitions by name in batches, so the
cost of a scan grows linearly with the number of partitions.

Only calls that Hive 2.3, 3.1 and 4 all serve: ``get_table_req`` (Hive 4.0.1 removed the plain
table call, HIVE-26537), ``get_partition_names``, ``get_partitions_by_names``,
``get_partitions_by_filter``, ``alter_partitions_with_environment_context`` and
``alter_table_with_environment_context``. Several Metastores may be given, as in
``hive.metastore.uris`` (``hms1,hms2:9084``): they are tried in order when connecting. SASL
(``GSSAPI`` for Kerberos, ``PLAIN``) goes through ``thrift_sasl`` and ``pure-sasl``; GSSAPI also
needs the ``kerberos`` module and a ticket (``kinit``, or Airflow's ticket renewer).
"""
from __future__ import annotations

import errno
import getpass
import logging
import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes
from thrift.protocol import TBinaryProtocol, TProtocol
from thrift.transport import TSocket, TTransport

from hive_compaction.model.results import NUM_FILES, NUM_ROWS, SPARK_NUM_ROWS, SPARK_TOTAL_SIZE, TOTAL_SIZE  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

# Tells the Metastore to store our statistics as given instead of recomputing them itself.
DO_NOT_UPDATE_STATS = "DO_NOT_UPDATE_STATS"


DEFAULT_PORT = 9083
AUTH_MECHANISMS = ("NOSASL", "PLAIN", "GSSAPI")
# The Airflow connection used when the config names none: the Hive provider's default id, else
# this package's former default (existing deployments define that one).
DEFAULT_CONN_ID = "metastore_default"
LEGACY_CONN_ID = "hive_metastore"


class MetastoreUnavailable(RuntimeError):
    """The Metastore could not be reached; nothing was changed."""


class TableNotFound(ValueError):
    """The Metastore has no such table (or no such database)."""

    def __init__(self, name: str, address: str):
        super().__init__(f"table {name} does not exist in the Hive Metastore at thrift://{address} "
                         "(check the database and table names in the config)")
        self.name = name


@dataclass(frozen=True)
class TableInfo:
    database: str
    table: str
    location: str
    storage_format: str | None  # "orc", "parquet" or None when unsupported
    input_format: str
    partition_keys: tuple[tuple[str, str], ...]
    table_type: str
    parameters: dict[str, str] = field(default_factory=dict)
    num_buckets: int = 0
    sort_columns: tuple[tuple[str, int], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def transactional(self) -> bool:
        return self.parameters.get("transactional", "").lower() == "true"

    @property
    def bucketed(self) -> bool:
        return self.num_buckets > 0


@dataclass(frozen=True)
class PartitionInfo:
    name: str  # Hive's escaped name, "dt=2024-01-01/country=US"; "" for a non-partitioned table
    values: tuple[str, ...]
    location: str
    parameters: dict[str, str] = field(default_factory=dict)
    input_format: str = ""

    def stat(self, key: str) -> int | None:
        try:
            value = int(self.parameters[key])
        except (KeyError, ValueError):
            return None
        return value if value >= 0 else None


def _num_buckets(hive_buckets: int | None, parameters: dict[str, str]) -> int:
    """Hive keeps buckets in the storage descriptor, Spark's data source tables in a parameter."""
    if (hive_buckets or 0) > 0:
        return hive_buckets
    try:
        return max(0, int(parameters.get("spark.sql.sources.schema.numBuckets", 0)))
    except ValueError:
        return 0


def storage_format(input_format: str, parameters: dict[str, str]) -> str | None:
    provider = (parameters.get("spark.sql.sources.provider") or "").lower()
    if provider in ("orc", "parquet"):
        return provider
    # Another data source (delta, hudi, ...) or a Hudi input format: that format owns the file layout.
    if provider not in ("", "hive") or "hudi" in input_format.lower() or "hoodie" in input_format.lower():
        return None
    if "orc" in input_format.lower():
        return "orc"
    if "parquet" in input_format.lower():
        return "parquet"
    return None


def parse_hosts(hosts: str, default_port: int = DEFAULT_PORT) -> list[tuple[str, int]]:
    """``"hms1,hms2:9084"`` or ``"thrift://hms1:9083,thrift://hms2:9083"`` (the form of
    ``hive.metastore.uris``) -> [(host, port), ...] in the order given; a host without a port gets
    ``default_port``. IPv6 addresses with a port go in brackets: ``[::1]:9083``."""
    out = []
    for item in str(hosts).split(","):
        item = item.strip()
        if not item:
            continue
        item = item.split("://", 1)[-1].rstrip("/")
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, port = item.split(":")
        else:  # a bare name, or a bare IPv6 address
            host, port = item, ""
        try:
            number = int(port) if port else int(default_port)
        except (TypeError, ValueError):
            raise ValueError(f"bad port in Hive Metastore address {item!r}") from None
        if not host or not 0 < number < 65536:
            raise ValueError(f"bad Hive Metastore address {item!r}")
        out.append((host, number))
    if not out:
        raise ValueError(f"no Hive Metastore host in {hosts!r}")
    return out


def _format(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class PartitionRecord:
    """A partition as the package's own tables keep it: values, parameters, creation time (s)."""
    values: tuple[str, ...]
    parameters: dict[str, str]
    create_time: int


class _PureSaslClient:
    """The ``sasl.Client`` interface that thrift_sasl drives, on top of pure-sasl."""

    def __init__(self, host: str, service: str, mechanism: str, **props):
        from puresasl.client import SASLClient
        self._sasl = SASLClient(host, service=service, mechanism=mechanism, **props)
        self._error = ""

    def _run(self, fn, *args):
        try:
            return True, fn(*args)
        except Exception as e:  # noqa: BLE001 - reported through getError, as sasl.Client does
            self._error = f"{type(e).__name__}: {e}"
            return False, None

    def start(self, mechanism: str):
        ok, response = self._run(self._sasl.process)
        return ok, mechanism, response

    def step(self, challenge):
        return self._run(self._sasl.process, challenge)

    def encode(self, data):
        return self._run(self._sasl.wrap, data)

    def decode(self, data):
        return self._run(self._sasl.unwrap, data)

    def getError(self) -> str:  # noqa: N802 - the sasl.Client name
        return self._error


def _is_closed_by_peer(e: Exception) -> bool:
    """The other end closed the connection: end of file, or a reset (Linux reports a close with
    unread data in the peer's buffer as ECONNRESET)."""
    if isinstance(e, TTransport.TTransportException) and e.type == TTransport.TTransportException.END_OF_FILE:
        return True
    inner = getattr(e, "inner", None) if isinstance(e, TTransport.TTransportException) else e
    return isinstance(inner, OSError) and inner.errno in (errno.ECONNRESET, errno.EPIPE)


# Thrift's SASL negotiation frames start with a status byte: START, OK, BAD, ERROR, COMPLETE.
_SASL_STATUSES = {1: "START", 2: "OK", 3: "BAD", 4: "ERROR", 5: "COMPLETE"}


class _RecordingSocket(TSocket.TSocket):
    """A TSocket that keeps the first bytes it receives, to tell what answered the first call."""

    first_bytes = b""

    def read(self, sz):
        buff = super().read(sz)
        if len(self.first_bytes) < 256:
            self.first_bytes += buff[:256 - len(self.first_bytes)]
        return buff


def _sasl_frame(data: bytes) -> str | None:
    """``ERROR "Invalid status -128"`` when ``data`` starts with a SASL negotiation frame (what a
    SASL Metastore sends back to a binary call before it closes the connection), else None.
    A binary protocol reply starts with 0x80 instead."""
    if len(data) < 5 or data[0] not in _SASL_STATUSES:
        return None
    length = struct.unpack(">I", data[1:5])[0]
    return f"{_SASL_STATUSES[data[0]]} {data[5:5 + min(length, 200)].decode('utf-8', 'replace')!r}"


class Metastore:
    """``with Metastore(host, port) as hms: ...``; every error to reach it is MetastoreUnavailable.

    ``host`` may list several Metastores (``"hms1,hms2:9084"``): they are tried in order when
    connecting, each without a port of its own on ``port``. ``auth_mechanism`` is ``NOSASL`` (the
    plain binary protocol), ``GSSAPI`` (Kerberos: the service principal is
    ``<kerberos_service_name>/<host>``) or ``PLAIN`` (``username``/``password``)."""

    def __init__(self, host: str, port: int = DEFAULT_PORT, timeout_seconds: float = 60.0, batch_size: int = 500,
                 *, auth_mechanism: str = "NOSASL", kerberos_service_name: str = "hive",
                 username: str | None = None, password: str | None = None,
                 connect_timeout_seconds: float | None = None):
        self.addresses = parse_hosts(host, port)
        self.address = _format(self.addresses[0])  # the one connected to, once connected
        self.batch_size = batch_size
        self.calls = 0
        self.timeout_seconds = float(timeout_seconds)
        self.connect_timeout_seconds = float(min(timeout_seconds, 10.0) if connect_timeout_seconds is None
                                             else connect_timeout_seconds)
        self.auth_mechanism = (auth_mechanism or "NOSASL").upper()
        if self.auth_mechanism not in AUTH_MECHANISMS:
            raise ValueError(f"auth_mechanism {auth_mechanism!r} is not one of {', '.join(AUTH_MECHANISMS)}")
        # "hive", or a principal as hive.metastore.kerberos.principal gives it ("hive/_HOST@REALM"):
        # the host part is always the Metastore being connected to.
        self.kerberos_service_name = (kerberos_service_name or "hive").split("/", 1)[0].split("@", 1)[0]
        self.username, self.password = username, password
        if self.auth_mechanism != "NOSASL":
            _check_sasl_modules(self.auth_mechanism)
        self._transport = self._socket = None
        self._client = None
        self._answered = False  # a call on this connection has been answered

    # --- connecting -------------------------------------------------------------------------
    def _open(self, host: str, port: int):
        """An open transport to one Metastore (SASL negotiated when asked for), and its socket."""
        socket = _RecordingSocket(host, int(port))
        socket.setTimeout(int(self.connect_timeout_seconds * 1000))
        socket.open()
        socket.setTimeout(int(self.timeout_seconds * 1000))
        if self.auth_mechanism == "NOSASL":
            return TTransport.TBufferedTransport(socket), socket
        from thrift_sasl import TSaslClientTransport
        if self.auth_mechanism == "GSSAPI":
            props = {}
        else:
            props = {"username": self.username or getpass.getuser(),
                     "password": self.password if self.password is not None else "unused"}
        transport = TSaslClientTransport(
            lambda: _PureSaslClient(host, self.kerberos_service_name, self.auth_mechanism, **props),
            self.auth_mechanism, socket)
        try:
            transport.open()  # the socket is open: this negotiates SASL only
        except Exception as e:
            socket.close()
            if not isinstance(e, TTransport.TTransportException):
                raise
            if _is_closed_by_peer(e) or e.type == TTransport.TTransportException.TIMED_OUT:
                message = (f"SASL {self.auth_mechanism} negotiation got no answer ({e}): does this Metastore use "
                           "SASL (hive.metastore.sasl.enabled)? If it does not, set auth_mechanism to NOSASL in the "
                           "connection's extra")
            elif self.auth_mechanism == "GSSAPI":
                message = (f"Kerberos (SASL GSSAPI) negotiation failed: {e}. The worker needs a Kerberos ticket "
                           "(kinit, or Airflow's `airflow kerberos` ticket renewer) and the Metastore's service "
                           f"principal must be {self.kerberos_service_name}/{host} (kerberos_service_name in the "
                           "connection's extra)")
            else:
                message = (f"SASL {self.auth_mechanism} negotiation failed: {e} "
                           "(check the connection's login and password)")
            raise TTransport.TTransportException(type=e.type, message=message, inner=e) from e
        return transport, socket

    @property
    def uris(self) -> str:
        """The addresses as ``hive.metastore.uris`` writes them (for a Spark without hive-site.xml)."""
        return ",".join(f"thrift://{_format(a)}" for a in self.addresses)

    def __enter__(self) -> "Metastore":
        failures = []
        for i, address in enumerate(self.addresses):
            try:
                transport, socket = self._open(*address)
            except (TTransport.TTransportException, OSError) as e:
                failures.append(f"thrift://{_format(address)}: {e}")
                if len(self.addresses) > 1:
                    log.warning("Hive Metastore at thrift://%s failed to connect (%s)%s", _format(address), e,
                                "; trying the next" if i + 1 < len(self.addresses) else "")
                continue
            self._transport, self._socket, self.address = transport, socket, _format(address)
            self._answered = False
            self._client = hmsclient.HMSClient(iprot=TBinaryProtocol.TBinaryProtocol(transport))
            if failures:
                log.info("connected to the Hive Metastore at thrift://%s", self.address)
            return self
        where = failures[0] if len(failures) == 1 else "any of " + "; ".join(failures)
        raise MetastoreUnavailable(
            f"cannot reach the Hive Metastore at {where}. "
            "Check the Airflow connection's host and port (and auth_mechanism) and that the service is up.")

    def __exit__(self, *exc) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = self._socket = self._client = None

    def _call(self, method: str, *args):
        if self._client is None:
            raise MetastoreUnavailable("not connected to the Hive Metastore: use `with Metastore(...) as hms:`")
        self.calls += 1
        try:
            result = getattr(self._client, method)(*args)
        except (TTransport.TTransportException, TProtocol.TProtocolException, OSError) as e:
            sasl = _sasl_frame(getattr(self._socket, "first_bytes", b""))
            if not self._answered and self.auth_mechanism == "NOSASL" and (sasl or _is_closed_by_peer(e)):
                said = f", after a SASL negotiation frame {sasl}" if sasl else ""
                raise MetastoreUnavailable(
                    f"the Hive Metastore at thrift://{self.address} closed the connection at the first call "
                    f"({method}) without a Thrift answer ({e}{said}). That is what a Metastore with "
                    "hive.metastore.sasl.enabled=true does to a client without SASL: set \"auth_mechanism\" in "
                    "the Airflow connection's extra (\"GSSAPI\" for Kerberos, with \"kerberos_service_name\" when "
                    "the service principal is not hive/<host>).") from e
            if isinstance(e, TProtocol.TProtocolException):
                raise
            raise MetastoreUnavailable(f"Hive Metastore at thrift://{self.address} failed during {method}: {e}") from e
        self._answered = True
        return result

    def _get_table(self, database: str, table: str):
        """The Thrift Table, through get_table_req (served by Hive 2.3 to 4)."""
        try:
            return self._call("get_table_req", ttypes.GetTableRequest(dbName=database, tblName=table)).table
        except ttypes.NoSuchObjectException as e:
            raise TableNotFound(f"{database}.{table}", self.address) from e

    def table(self, database: str, table: str) -> TableInfo:
        t = self._get_table(database, table)
        params = dict(t.parameters or {})
        return TableInfo(
            database=t.dbName,
            table=t.tableName,
            location=t.sd.location or "",
            storage_format=storage_format(t.sd.inputFormat or "", params),
            input_format=t.sd.inputFormat or "",
            partition_keys=tuple((k.name, k.type) for k in (t.partitionKeys or [])),
            table_type=t.tableType or "",
            parameters=params,
            num_buckets=_num_buckets(t.sd.numBuckets, params),
            sort_columns=tuple((c.col, c.order) for c in (t.sd.sortCols or [])),
        )

    def partition_names(self, table: TableInfo) -> list[str]:
        return list(self._call("get_partition_names", table.database, table.table, -1))

    def partitions(self, table: TableInfo, names: Iterable[str] | None = None,
                   filter_expr: str | None = None) -> Iterator[PartitionInfo]:
        """All partitions (or those named, or those matching a Metastore filter), in batches."""
        if not table.partition_keys:
            yield PartitionInfo("", (), table.location, dict(table.parameters), table.input_format)
            return
        if filter_expr:
            found = self._call("get_partitions_by_filter", table.database, table.table, filter_expr, -1)
            yield from (self._partition(table, p) for p in found)
            return
        names = list(self.partition_names(table) if names is None else names)
        for i in range(0, len(names), self.batch_size):
            batch = names[i:i + self.batch_size]
            for p in self._call("get_partitions_by_names", table.database, table.table, batch):
                yield self._partition(table, p)

    @staticmethod
    def _partition(table: TableInfo, p) -> PartitionInfo:
        return PartitionInfo(
            name=partition_name(table.partition_keys, p.values),
            values=tuple(p.values),
            location=p.sd.location or "",
            parameters=dict(p.parameters or {}),
            input_format=p.sd.inputFormat or "",
        )

    # --- tables the package keeps for itself (the results table) --------------------------------
    def table_exists(self, database: str, table: str) -> bool:
        return table.lower() in [t.lower() for t in self._call("get_tables", database, table)]

    def create_external_table(self, database: str, table: str, columns: Iterable[str], partition_keys: Iterable[str],
                              storage: tuple[str, str, str], parameters: dict[str, str]) -> bool:
        """Create an external table of string columns (``storage``: input format, output format,
        serde); False when it exists already (another run created it meanwhile)."""
        input_format, output_format, serde = storage
        sd = ttypes.StorageDescriptor(
            cols=[ttypes.FieldSchema(c, "string", "") for c in columns], inputFormat=input_format,
            outputFormat=output_format, compressed=False, numBuckets=-1, bucketCols=[], sortCols=[], parameters={},
            serdeInfo=ttypes.SerDeInfo(serializationLib=serde, parameters={}))
        t = ttypes.Table(tableName=table, dbName=database, owner="hive_compaction", sd=sd,
                         partitionKeys=[ttypes.FieldSchema(k, "string", "") for k in partition_keys],
                         parameters={"EXTERNAL": "TRUE", **parameters}, tableType="EXTERNAL_TABLE")
        try:
            self._call("create_table", t)
            return True
        except ttypes.AlreadyExistsException:
            return False

    def partition_names_of(self, database: str, table: str) -> list[str]:
        return list(self._call("get_partition_names", database, table, -1))

    def partition_records(self, database: str, table: str, names: Iterable[str]) -> Iterator[PartitionRecord]:
        """The named partitions' values, parameters and creation time (absent names are left out), in batches."""
        names = list(names)
        for i in range(0, len(names), self.batch_size):
            for p in self._call("get_partitions_by_names", database, table, names[i:i + self.batch_size]):
                yield PartitionRecord(tuple(p.values), dict(p.parameters or {}), p.createTime or 0)

    def drop_partition(self, database: str, table: str, values: Iterable[str]) -> bool:
        """Drop a partition and its data; False when it was gone already."""
        try:
            self._call("drop_partition", database, table, list(values), True)
            return True
        except ttypes.NoSuchObjectException:
            return False

    def update_statistics(self, table: TableInfo, stats: dict[str, dict[str, str]]) -> int:
        """Write parameters (statistics) to partitions, keyed by partition name; batched.
        A value of None removes the key."""
        if not stats:
            return 0
        ctx = ttypes.EnvironmentContext(properties={DO_NOT_UPDATE_STATS: "true"})
        if not table.partition_keys:
            t = self._get_table(table.database, table.table)
            t.parameters = _merged(t.parameters, stats[""])
            self._call("alter_table_with_environment_context", table.database, table.table, t, ctx)
            return 1
        names = list(stats)
        done = 0
        for i in range(0, len(names), self.batch_size):
            batch = self._call("get_partitions_by_names", table.database, table.table, names[i:i + self.batch_size])
            for p in batch:
                p.parameters = _merged(p.parameters, stats[partition_name(table.partition_keys, p.values)])
            self._call("alter_partitions_with_environment_context", table.database, table.table, batch, ctx)
            done += len(batch)
        return done


def _check_sasl_modules(mechanism: str) -> None:
    missing = []
    for module, package in (("thrift_sasl", "thrift_sasl"), ("puresasl", "pure-sasl")) + (
            (("kerberos", "kerberos (it builds against libkrb5-dev)"),) if mechanism == "GSSAPI" else ()):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise ImportError(f"auth_mechanism {mechanism} needs the Python package(s) {', '.join(missing)}: "
                          "pip install them where the Airflow tasks run")


def _connection(conn_id: str | None):
    """The Airflow connection ``conn_id``; when None, ``metastore_default`` if it exists, else
    ``hive_metastore`` (said in the log), else an error naming both."""
    from airflow.sdk import BaseHook
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
            f"AIRFLOW_CONN_{DEFAULT_CONN_ID.upper()}='{{\"conn_type\":\"generic\",\"host\":\"hms.example\","
            f"\"port\":9083}}'), or {LEGACY_CONN_ID!r}, or name yours with metastore_conn_id in the config") from None
    log.info("Hive Metastore connection: %r (the config names none and there is no %r connection; "
             "%r is still read, the Hive provider's %r is preferred)", LEGACY_CONN_ID, DEFAULT_CONN_ID,
             LEGACY_CONN_ID, DEFAULT_CONN_ID)
    return conn


def from_airflow_connection(conn_id: str | None = None) -> Metastore:
    """The Metastore of an Airflow connection: host (``hms1,hms2:9084`` lists several, tried in
    order), port (for hosts without one), login/password (PLAIN); extras ``timeout_seconds``,
    ``connect_timeout_seconds``, ``batch_size``, ``auth_mechanism`` (NOSASL, GSSAPI, PLAIN) and
    ``kerberos_service_name`` (default ``hive``), as the Airflow Hive provider names them.

    ``conn_id`` None (the config's ``metastore_conn_id`` not set): ``metastore_default``, the Hive
    provider's default id, when that connection exists, else ``hive_metastore``."""
    conn = _connection(conn_id)
    conn_id = conn.conn_id or conn_id
    if not conn.host:
        raise ValueError(f"Airflow connection {conn_id!r} has no host for the Hive Metastore")
    extra = conn.extra_dejson
    connect_timeout = extra.get("connect_timeout_seconds")
    return Metastore(conn.host, conn.port or DEFAULT_PORT,
                     timeout_seconds=float(extra.get("timeout_seconds", 60)),
                     batch_size=int(extra.get("batch_size", 500)),
                     auth_mechanism=str(extra.get("auth_mechanism") or "NOSASL"),
                     kerberos_service_name=str(extra.get("kerberos_service_name") or "hive"),
                     username=conn.login or None, password=conn.password or None,
                     connect_timeout_seconds=None if connect_timeout is None else float(connect_timeout))


def _merged(parameters: dict | None, updates: dict[str, str | None]) -> dict[str, str]:
    out = {**(parameters or {}), **updates}
    return {k: v for k, v in out.items() if v is not None}


_ESCAPE = set('"#%\'*/:=?\\\x7f{[]^')


def escape_path_name(value: str) -> str:
    """Hive's FileUtils.escapePathName: how a partition value appears in names and paths."""
    return "".join(f"%{ord(c):02X}" if (c in _ESCAPE or ord(c) < 0x20) else c for c in value)


def unescape_path_name(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and i + 2 < len(text) + 0 and _is_hex(text[i + 1:i + 3]):
            out.append(chr(int(text[i + 1:i + 3], 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _is_hex(s: str) -> bool:
    return len(s) == 2 and all(c in "0123456789abcdefABCDEF" for c in s)


def partition_name(keys: tuple[tuple[str, str], ...], values: Iterable[str]) -> str:
    return "/".join(f"{escape_path_name(k)}={escape_path_name(v)}" for (k, _), v in zip(keys, values))
