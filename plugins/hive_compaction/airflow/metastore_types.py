"""What the Metastore hook (``metastore_hook.Metastore``) hands out: tables, partitions, the
package's own partition records, and Hive's partition names. Pure Python (no Airflow, no
Thrift import), so planning and the backlog rules can use them without either."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


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

    @classmethod
    def from_thrift(cls, t) -> TableInfo:
        """From the Metastore's Thrift ``Table``."""
        params = dict(t.parameters or {})
        return cls(
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

    @classmethod
    def from_thrift(cls, table: TableInfo, p) -> PartitionInfo:
        """From the Metastore's Thrift ``Partition`` of ``table``."""
        return cls(
            name=partition_name(table.partition_keys, p.values),
            values=tuple(p.values),
            location=p.sd.location or "",
            parameters=dict(p.parameters or {}),
            input_format=p.sd.inputFormat or "",
        )

    @classmethod
    def of_table(cls, table: TableInfo) -> PartitionInfo:
        """A non-partitioned table as its one partition (name "")."""
        return cls("", (), table.location, dict(table.parameters), table.input_format)

    def stat(self, key: str) -> int | None:
        try:
            value = int(self.parameters[key])
        except (KeyError, ValueError):
            return None
        return value if value >= 0 else None


@dataclass(frozen=True)
class PartitionRecord:
    """A partition as the package's own tables keep it: values, parameters, creation time (s)."""

    values: tuple[str, ...]
    parameters: dict[str, str]
    create_time: int


def _num_buckets(hive_buckets: int | None, parameters: dict[str, str]) -> int:
    """Hive keeps buckets in the storage descriptor, Spark's data source tables in a parameter."""
    if hive_buckets is not None and hive_buckets > 0:
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


_ESCAPE = set("\"#%'*/:=?\\\x7f{[]^")


def escape_path_name(value: str) -> str:
    """Hive's FileUtils.escapePathName: how a partition value appears in names and paths."""
    return "".join(f"%{ord(c):02X}" if (c in _ESCAPE or ord(c) < 0x20) else c for c in value)


def unescape_path_name(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and i + 2 < len(text) + 0 and _is_hex(text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _is_hex(s: str) -> bool:
    return len(s) == 2 and all(c in "0123456789abcdefABCDEF" for c in s)


def partition_name(keys: tuple[tuple[str, str], ...], values: Iterable[str]) -> str:
    return "/".join(f"{escape_path_name(k)}={escape_path_name(v)}" for (k, _), v in zip(keys, values))
