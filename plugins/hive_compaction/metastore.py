"""Reading partitions and writing statistics through the Hive Metastore Thrift API (hmsclient).

Calls are batched: partition names in one call, then partitions by name in batches, so the
cost of a scan grows linearly with the number of partitions.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

log = logging.getLogger(__name__)

# Hive's basic statistics keys (StatsSetupConst) and Spark's own copies of them.
NUM_FILES, TOTAL_SIZE, NUM_ROWS = "numFiles", "totalSize", "numRows"
SPARK_TOTAL_SIZE, SPARK_NUM_ROWS = "spark.sql.statistics.totalSize", "spark.sql.statistics.numRows"
# Tells the Metastore to store our statistics as given instead of recomputing them itself.
DO_NOT_UPDATE_STATS = "DO_NOT_UPDATE_STATS"


class MetastoreUnavailable(RuntimeError):
    """The Metastore could not be reached; nothing was changed."""


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


class Metastore:
    """``with Metastore(host, port) as hms: ...``; every error to reach it is MetastoreUnavailable."""

    def __init__(self, host: str, port: int, timeout_seconds: float = 60.0, batch_size: int = 500):
        self.address = f"{host}:{port}"
        self.batch_size = batch_size
        self.calls = 0
        socket = TSocket.TSocket(host, int(port))
        socket.setTimeout(int(timeout_seconds * 1000))
        protocol = TBinaryProtocol.TBinaryProtocol(TTransport.TBufferedTransport(socket))
        self._client = hmsclient.HMSClient(iprot=protocol)

    def __enter__(self) -> "Metastore":
        try:
            self._client.open()
        except TTransport.TTransportException as e:
            raise MetastoreUnavailable(
                f"cannot reach the Hive Metastore at thrift://{self.address}: {e}. "
                "Check the Airflow connection's host and port and that the service is up."
            ) from e
        return self

    def __exit__(self, *exc) -> None:
        self._client.close()

    def _call(self, method: str, *args):
        self.calls += 1
        try:
            return getattr(self._client, method)(*args)
        except (TTransport.TTransportException, OSError) as e:
            raise MetastoreUnavailable(f"Hive Metastore at thrift://{self.address} failed during {method}: {e}") from e

    def table(self, database: str, table: str) -> TableInfo:
        t = self._call("get_table", database, table)
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

    def update_statistics(self, table: TableInfo, stats: dict[str, dict[str, str]]) -> int:
        """Write parameters (statistics) to partitions, keyed by partition name; batched.
        A value of None removes the key."""
        if not stats:
            return 0
        ctx = ttypes.EnvironmentContext(properties={DO_NOT_UPDATE_STATS: "true"})
        if not table.partition_keys:
            t = self._call("get_table", table.database, table.table)
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
