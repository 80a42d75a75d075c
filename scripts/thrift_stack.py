"""A ``harness.Stack`` whose tables are made, read and repaired through Thrift and their files,
never through Spark's Hive catalog: for a Hive Metastore 4, which no longer serves the calls
Spark's built-in Hive 2.3 client sends (``get_table``). ``scripts/reliability.py --metastore
4.0.1`` runs its matrices on it; the jobs and the DAG under test are the same as on any stack."""

from __future__ import annotations

import itertools
from pathlib import Path
from urllib.parse import urlsplit

from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes

import thrift_tables
from harness import Stack


class ThriftStack(Stack):
    _seeds = itertools.count(1)  # each table its own event ids, as demo tables have

    def client(self) -> hmsclient.HMSClient:
        return hmsclient.HMSClient(host="127.0.0.1", port=self.port)

    def make_table(
        self,
        db: str,
        table: str,
        storage: str,
        dates: list[str],
        files: int = 5,
        rows: int = 400,
        single_file_dates: tuple[str, ...] = (),
    ) -> None:
        if single_file_dates:
            raise ValueError("single_file_dates: not offered on a Thrift stack")
        thrift_tables.make_table(
            self.client,
            self.metastore.warehouse,
            self.spark,
            db,
            table,
            storage,
            dates,
            files,
            rows,
            seed=next(self._seeds),
        )

    def _table(self, db: str, table: str):
        with self.client() as c:
            return (
                c.get_table_req(ttypes.GetTableRequest(dbName=db, tblName=table)).table,
                c.get_partitions(db, table, -1),
            )

    def partition_location(self, db: str, table: str, partition: str) -> Path:
        t, partitions = self._table(db, table)
        key = t.partitionKeys[0].name
        return Path(urlsplit(next(p for p in partitions if f"{key}={p.values[0]}" == partition).sd.location).path)

    def rows(self, db: str, table: str) -> dict[str, list[str]]:
        """As ``Stack.rows``: per partition with rows, every row (the partition column last) as
        text, sorted; read from the visible files of the folder the Metastore names."""
        from pyspark.sql.functions import lit

        t, partitions = self._table(db, table)
        fmt, key = _format(t), t.partitionKeys[0].name
        out = {}
        for p in partitions:
            folder = Path(urlsplit(p.sd.location).path)
            files = (
                sorted(f"file://{f}" for f in folder.iterdir() if f.is_file() and not f.name.startswith((".", "_")))
                if folder.is_dir()
                else []
            )
            found = self.spark.read.format(fmt).load(files).withColumn(key, lit(p.values[0])).collect() if files else []
            if found:
                out[f"{key}={p.values[0]}"] = sorted(repr(tuple(r)) for r in found)
        return out

    def msck_repair(self, db: str, table: str) -> None:
        """What ``MSCK REPAIR TABLE`` does to a table partitioned by one column: each folder
        ``<column>=<value>`` in the table's folder that no partition names is registered."""
        t, partitions = self._table(db, table)
        key, known = t.partitionKeys[0].name, {p.values[0] for p in partitions}
        root = Path(urlsplit(t.sd.location).path)
        new = [
            d.name.split("=", 1)[1]
            for d in root.iterdir()
            if d.is_dir() and d.name.startswith(f"{key}=") and d.name.split("=", 1)[1] not in known
        ]
        if new:
            with self.client() as c:
                c.add_partitions(
                    [
                        ttypes.Partition(
                            values=[v],
                            dbName=db,
                            tableName=table,
                            parameters={},
                            sd=thrift_tables.storage_descriptor(
                                f"{t.sd.location.rstrip('/')}/{key}={v}", _format(t).upper()
                            ),
                        )
                        for v in new
                    ]
                )


def _format(t) -> str:
    return "orc" if "orc" in t.sd.inputFormat.lower() else "parquet"
