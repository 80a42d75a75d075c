"""What the commit's Metastore lock costs, on a real Hive Metastore: per partition, as the merge
job takes it today, and as one request for many partitions would.

    .venv/bin/python benchmarks/lock_cost.py [--metastore 2.3|3.1.3|4.0.1] [--partitions 40] [--rounds 2]
                                             [--uris thrift://HOST:PORT] [--json PATH]

Starts PostgreSQL and the named Metastore release (``make jars`` fetches 3.1.3 and 4.0.1; 2.3 is
the pyspark wheel's), or uses a running one (``--uris``), makes a table of ``--partitions``
partitions through Thrift, and times, from a Spark driver's JVM client as the merge job's:

  per_partition   the job's own lock (``JobMetastore.lock``: EXCLUSIVE on the partition,
                  heartbeated, released), one partition after the other, one driver thread;
  two_threads     the same, two driver threads side by side (the merge job's default on 2 cores);
  one_request     one ``LockRequest`` naming every partition, then one unlock (what a commit
                  chunk's lock costs, ``JobMetastore.lock_chunk``, for chunks that large; the
                  job's chunks hold at most ``runner.COMMIT_CHUNK`` partitions).

It prints the milliseconds per partition of each and the ratio to ``per_partition``; the last
round counts (the first warms the JVM and the Metastore). Exit code 1 if a lock was not granted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "scripts", ROOT / "plugins"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

DB, TABLE = "lock_cost", "events"


@contextlib.contextmanager
def metastore(version: str, state: Path):
    """A running Metastore of ``version`` on PostgreSQL: its thrift URI."""
    import postgres
    from hive_metastores import HiveMetastoreServer
    from local_stack import Metastore, free_port

    pg = postgres.Postgres(port=free_port())
    pg.start()
    server = None
    try:
        if version == "2.3":  # as harness.Stack sets up the wheel's Metastore on PostgreSQL
            pg.create_database("metastore")
            pg.create_transaction_tables("metastore")
        server = (
            Metastore(state / "hms", free_port(), **pg.metastore_args())
            if version == "2.3"
            else HiveMetastoreServer(version, state / "hms", pg)
        )
        server.start()
        yield server.uri
    finally:
        if server is not None:
            server.stop()
        pg.stop(remove=True)


def make_table(uri: str, partitions: int, folder: Path) -> list[str]:
    """The table's partition names (``dt=<n>``), registered through Thrift without files, its
    locations in ``folder``."""
    from hmsclient import hmsclient
    from hmsclient.genthrift.hive_metastore import ttypes

    from thrift_tables import storage_descriptor

    host, port = uri.removeprefix("thrift://").split(":")
    folder.mkdir(parents=True, exist_ok=True)
    root = f"file://{folder}"
    with hmsclient.HMSClient(host=host, port=int(port)) as c:
        with contextlib.suppress(ttypes.AlreadyExistsException):
            c.create_database(ttypes.Database(name=DB, locationUri=root, parameters={}))
        with contextlib.suppress(ttypes.NoSuchObjectException):
            c.drop_table(DB, TABLE, True)
        c.create_table(
            ttypes.Table(
                tableName=TABLE,
                dbName=DB,
                owner="bench",
                sd=storage_descriptor(f"{root}/t", "ORC"),
                parameters={"EXTERNAL": "TRUE"},
                tableType="EXTERNAL_TABLE",
                partitionKeys=[ttypes.FieldSchema("dt", "string", "")],
            )
        )
        names = [f"dt={n:05d}" for n in range(partitions)]
        c.add_partitions(
            [
                ttypes.Partition(
                    values=[n[3:]],
                    dbName=DB,
                    tableName=TABLE,
                    parameters={},
                    sd=storage_descriptor(f"{root}/t/{n}", "ORC"),
                )
                for n in names
            ]
        )
    return names


def per_partition(metastore, names: list[str], threads: int) -> float:
    def one(name: str) -> None:
        with metastore.lock(f"{DB}.{TABLE}", name, wait_seconds=30):
            pass

    began = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, names))
    return time.monotonic() - began


def one_request(metastore, names: list[str]) -> float:
    """One LockRequest naming every partition, then its unlock, through the same JVM client."""
    import getpass
    import socket

    from hive_compaction.storage.metastore_lock import lock_component

    api = metastore._api
    began = time.monotonic()
    components = [lock_component(api, f"{DB}.{TABLE}", name) for name in names]
    request = api.LockRequest(components, getpass.getuser(), socket.gethostname())
    with metastore._client() as client:
        response = client.lock(request)
        if str(response.getState()) != "ACQUIRED":
            raise RuntimeError(f"one request for {len(names)} partitions: {response.getState()}")
        client.unlock(response.getLockid())
    return time.monotonic() - began


def measure(uri: str, partitions: int, rounds: int, folder: Path) -> dict:
    from pyspark import SparkConf, SparkContext

    from hive_compaction.merge.job_spark import JobSpark
    from hive_compaction.storage.metastore_client import JobMetastore

    names = make_table(uri, partitions, folder)
    conf = (
        SparkConf()
        .setMaster("local[1]")
        .setAppName("lock-cost")
        .set("spark.ui.enabled", "false")
        .set("spark.driver.host", "127.0.0.1")
        .set("spark.hadoop.hive.metastore.uris", uri)
    )
    sc = SparkContext(conf=conf)
    sc.setLogLevel("WARN")
    metastore = JobMetastore(JobSpark(sc), uri)
    try:
        for _ in range(rounds):  # the last round counts
            seconds = {
                "per_partition": per_partition(metastore, names, 1),
                "two_threads": per_partition(metastore, names, 2),
                "one_request": one_request(metastore, names),
            }
    finally:
        metastore.close()
        sc.stop()
    out = {"partitions": partitions, "rounds": rounds}
    for k, v in seconds.items():
        out[f"{k}_ms_per_partition"] = round(1000 * v / partitions, 2)
        out[f"{k}_vs_per_partition"] = round(seconds["per_partition"] / v, 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from hive_metastores import RELEASES

    ap.add_argument("--metastore", choices=["2.3", *RELEASES], default="3.1.3")
    ap.add_argument("--uris", help="a running Metastore's thrift://host:port (instead of starting one)")
    ap.add_argument("--partitions", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lock-cost-") as tmp:
        with contextlib.nullcontext(args.uris) if args.uris else metastore(args.metastore, Path(tmp)) as uri:
            try:
                out = {
                    "metastore": "given" if args.uris else args.metastore,
                    **measure(uri, args.partitions, args.rounds, Path(tmp) / "tables"),
                }
            except Exception as e:  # noqa: BLE001 - the benchmark's answer: it failed, and why
                print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
                return 1
    for k, v in out.items():
        print(f"{k:>36}: {v}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
