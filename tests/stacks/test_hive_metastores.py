"""The product against real Hive Metastore 3.1 and 4.0 servers (issue 28): each release's server
from Maven Central (``make jars``), its schema from its own PostgreSQL script, started once for
this module (``scripts/hive_metastores.py``); Airflow on the same PostgreSQL. On each: the
Airflow side's Thrift calls, the merge job's JVM client (Spark's Hive 2.3 client), the lock API
(granted, waiting, timed out, a dead holder's lock expiring by the Metastore's housekeeping),
one DAG run (plan, merge in both commit modes, refresh) and the rollback job.

Tables are made through Thrift and their files written by Spark without Hive support: Spark's
Hive catalog speaks Hive 2.3's get_table, which Hive 4 no longer serves.
"""

from __future__ import annotations

import functools
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes
from stack_sampling import require_jars, sampled
from thrift.Thrift import TApplicationException

import thrift_tables
from harness import Stack, two_instance_dags
from hive_metastores import HOUSEKEEPING, NO_TRANSFORMER, TXN_TIMEOUT_SECONDS, HiveMetastoreServer
from thrift_tables import COLUMNS, FORMATS

pytestmark = pytest.mark.integration

# release, its schema version (the server checks it at start), what its getVersion answers (3.1:
# its Thrift API version; 4.0: the release)
STACKS = {"hms3": ("3.1.3", "3.1.0", "3.0"), "hms4": ("4.0.1", "4.0.0", "4.0.1")}
# With Hive 4's default metadata transformer, a client that sends no processor capabilities cannot
# create an ACID table ("Processor has no capabilities, cannot create an ACID table."): the
# transformer is off (NO_TRANSFORMER) so that the test can make one.


@pytest.fixture(scope="module", params=sampled("Hive Metastore releases", list(STACKS)))
def hms(request, tmp_path_factory):
    """The stack on one release's Metastore (one server per release for the module)."""
    require_jars("hive3" if request.param == "hms3" else "hive4")
    version = STACKS[request.param][0]
    state = tmp_path_factory.mktemp(request.param)
    stack = Stack(
        state,
        use_postgres=True,
        metastore=lambda pg: HiveMetastoreServer(
            version, state / "hms", pg, settings={**HOUSEKEEPING, **NO_TRANSFORMER}
        ),
    )
    try:
        stack.start()
        print(f"\nHive Metastore {version} listening in {stack.metastore.started_in:.1f}s")
        yield stack
    finally:
        stack.stop()


@pytest.fixture(autouse=True)
def jvm_clients_reach_this_metastore(hms, spark):
    """In ``make test`` the module's Spark session is the suite's stack's, whose Hadoop
    configuration names that stack's Metastore, which the job's JVM client prefers to the address
    it is given (``jvm_hive_conf``): the setting is taken out while a test of this module runs,
    once that session's own Hive client is made (it keeps the address it was made with)."""
    spark.catalog.listDatabases()
    conf = spark._jsc.hadoopConfiguration()
    before = conf.get("hive.metastore.uris")
    conf.unset("hive.metastore.uris")
    try:
        yield
    finally:
        if before is not None:
            conf.set("hive.metastore.uris", before)


def client(stack) -> hmsclient.HMSClient:
    return hmsclient.HMSClient(host="127.0.0.1", port=stack.port)


def make_table(
    stack, spark, db: str, table: str, storage: str, dates: list[str] | None, files: int = 4, rows: int = 200
) -> None:
    """An external table made through Thrift, each partition's ``files`` files written by Spark
    (``dates`` None: a table without partitions)."""
    thrift_tables.make_table(
        lambda: client(stack), stack.metastore.warehouse, spark, db, table, storage, dates, files, rows
    )


def table_of(c, db: str, table: str):
    return c.get_table_req(ttypes.GetTableRequest(dbName=db, tblName=table)).table


def partitions(stack, db: str, table: str) -> dict[str, tuple[str, dict]]:
    """Partition name -> (location, parameters); "" for a table without partitions."""
    with client(stack) as c:
        t = table_of(c, db, table)
        if not t.partitionKeys:
            return {"": (t.sd.location, dict(t.parameters))}
        return {f"dt={p.values[0]}": (p.sd.location, dict(p.parameters or {})) for p in c.get_partitions(db, table, -1)}


def file_sizes(location: str) -> dict[str, int]:
    folder = Path(urlsplit(location).path)
    return {f.name: f.stat().st_size for f in folder.iterdir() if f.is_file() and not f.name.startswith((".", "_"))}


def content(stack, spark, db: str, table: str, storage: str) -> dict[str, list]:
    """Per partition: every row, sorted, read from the folder the Metastore names."""
    return {
        name: sorted(map(tuple, spark.read.format(storage.lower()).load(location).collect()))
        for name, (location, _) in partitions(stack, db, table).items()
    }


def lock_request(db: str, table: str, partition: str) -> ttypes.LockRequest:
    """A Hive writer's lock (DbTxnManager, a non-ACID table) on a partition."""
    component = ttypes.LockComponent(
        type=ttypes.LockType.EXCLUSIVE,
        level=ttypes.LockLevel.PARTITION,
        dbname=db,
        tablename=table,
        partitionname=partition,
        operationType=ttypes.DataOperationType.NO_TXN,
        isAcid=False,
    )
    return ttypes.LockRequest(component=[component], user="hive-writer", hostname="localhost")


def unlock(stack, lock_id: int) -> None:
    with client(stack) as c:
        c.unlock(ttypes.UnlockRequest(lockid=lock_id))


def locks_on(c, db: str, table: str) -> list:
    return list(c.show_locks(ttypes.ShowLocksRequest(dbname=db, tablename=table)).locks or [])


def test_the_server_is_the_release_on_its_schema(hms):
    version, schema, api = next(v for v in STACKS.values() if v[0] == hms.metastore.version)
    assert hms.metastore.schema_version() == schema
    with client(hms) as c:
        assert c.getVersion() == api
        if version.startswith("4."):  # what Spark's Hive 2.3 client's getTable sends
            with pytest.raises(TApplicationException, match="Invalid method name: 'get_table'"):
                c.get_table("default", "nothing")
        else:
            with pytest.raises(ttypes.NoSuchObjectException):
                c.get_table("default", "nothing")


def test_airflow_side_calls(hms, spark):
    """The plan's reads, the refresh's statistics write and the results table, through the hook."""
    from hive_compaction.airflow import results_reader
    from hive_compaction.airflow.metastore_hook import Metastore
    from hive_compaction.merge import results_writer

    make_table(hms, spark, "airflow_side", "events", "ORC", ["2026-01-01", "2026-01-02"], files=3, rows=30)
    with Metastore("127.0.0.1", hms.port) as hook:
        t = hook.table("airflow_side", "events")
        assert t.partition_keys and t.input_format == FORMATS["ORC"][0]
        assert hook.partition_names(t) == ["dt=2026-01-01", "dt=2026-01-02"]
        got = {p.name: p for p in hook.partitions(t, ["dt=2026-01-02", "dt=2026-12-31"])}
        assert list(got) == ["dt=2026-01-02"] and got["dt=2026-01-02"].location.endswith("/events/dt=2026-01-02")
        assert (
            hook.update_statistics(
                t, {"dt=2026-01-02": {"numFiles": "1", "totalSize": "123", "hive_compaction.test": "x"}}
            )
            == 1
        )
        p = next(hook.partitions(t, ["dt=2026-01-02"]))
        # The Metastore kept the values given (DO_NOT_UPDATE_STATS), not a listing of its own.
        assert (p.parameters["numFiles"], p.parameters["totalSize"], p.parameters["hive_compaction.test"]) == (
            "1",
            "123",
            "x",
        )
        hook.update_statistics(t, {"dt=2026-01-02": {"hive_compaction.test": None}})
        assert "hive_compaction.test" not in next(hook.partitions(t, ["dt=2026-01-02"])).parameters

        results_reader.ensure(hook, "default.hc_results")
        assert hook.table_exists("default", "hc_results")
    # The merge job records through the JVM client; the refresh reads, the cleanup drops.
    results_writer.publish(spark, "default.hc_results", "run1", 0, {"r": "1"}, hms.metastore.uri)
    results_writer.publish(spark, "default.hc_results", "run1", 0, {"r": "2"}, hms.metastore.uri)  # a retry
    with Metastore("127.0.0.1", hms.port) as hook:
        recorded = results_reader.read_run(hook, "default.hc_results", "run1")
        assert {b: p["r"] for b, p in recorded.items()} == {0: "2"}
        assert results_reader.prune(hook, "default.hc_results", time.time() + 86400, keep_days=0) == 1
        assert results_reader.read_run(hook, "default.hc_results", "run1") == {}


def test_the_jobs_jvm_client(hms, spark, monkeypatch):
    """JobMetastore (Spark's Hive 2.3 client) reads and writes a table without partitions, the
    path every commit of such a table takes, and switches a partition's location. A commit
    chunk's reads and writes raise no Java exception on the way (reading a Java list by its
    iterator ends in one, which PySpark converts at ~25 ms each once a SparkSession exists)."""
    from pyspark.errors.exceptions import captured

    from hive_compaction.storage.metastore_client import JobMetastore, jvm_client

    make_table(hms, spark, "jvm_side", "flat", "ORC", None, files=2, rows=10)
    make_table(hms, spark, "jvm_side", "events", "PARQUET", ["2026-02-01"], files=2, rows=10)
    plain = jvm_client(spark, hms.metastore.uri, "test")
    try:
        if hms.metastore.version.startswith("4."):  # the call the fix avoids
            with pytest.raises(Exception, match="Invalid method name: 'get_table'"):
                plain.getTable("jvm_side", "flat")
        else:
            assert plain.getTable("jvm_side", "flat").getTableName() == "flat"
    finally:
        plain.close()
    jm = JobMetastore(spark, hms.metastore.uri)
    try:
        assert jm.table_location("jvm_side.flat").endswith("/jvm_side.db/flat")
        assert jm.table_location("jvm_side.missing") is None
        assert jm.update_parameters("jvm_side.flat", "", {"numFiles": "1", "hive_compaction.test": "y"})
        params = jm.parameters("jvm_side.flat", [])
        assert params["numFiles"] == "1" and params["hive_compaction.test"] == "y"
        assert not jm.update_parameters("jvm_side.missing", "", {"numFiles": "1"})

        old = jm.location("jvm_side.events", ["2026-02-01"])
        new = old + "-switched"
        assert jm.switch("jvm_side.events", ["2026-02-01"], old, new, {"numFiles": "2"})
        assert not jm.switch("jvm_side.events", ["2026-02-01"], old, new, {})  # not at old any more
        assert jm.location("jvm_side.events", ["2026-02-01"]) == new
        assert jm.parameters("jvm_side.events", ["2026-02-01"])["numFiles"] == "2"
        assert jm.location("jvm_side.events", ["2030-01-01"]) is None

        # A commit chunk's reads and writes: several partitions in one call each.
        converted = []
        monkeypatch.setattr(
            captured,
            "convert_exception",
            functools.partial(lambda real, e: converted.append(e) or real(e), captured.convert_exception),
        )
        states = jm.states("jvm_side.events", ["dt=2026-02-01", "dt=2030-01-01"])
        assert list(states) == [("2026-02-01",)]
        assert states[("2026-02-01",)] == jm.state("jvm_side.events", ["2026-02-01"])
        assert jm.update_parameters_all(
            "jvm_side.events",
            [
                ("dt=2026-02-01", ["2026-02-01"], {"numFiles": "3", "hive_compaction.test": None}),
                ("dt=2030-01-01", ["2030-01-01"], {"numFiles": "1"}),
            ],
        ) == {"dt=2026-02-01"}
        params = jm.parameters("jvm_side.events", ["2026-02-01"])
        assert params["numFiles"] == "3" and "hive_compaction.test" not in params
        assert converted == []
    finally:
        jm.close()


def test_locks_granted_waiting_and_timed_out(hms, spark):
    from hive_compaction.storage.metastore_client import JobMetastore
    from hive_compaction.storage.metastore_lock import LockTimeout

    db, table, part = "locks", "events", "dt=2026-03-01"
    make_table(hms, spark, db, table, "ORC", ["2026-03-01"], files=1, rows=5)
    jm = JobMetastore(spark, hms.metastore.uri)
    try:
        with client(hms) as c:
            # Granted: the commit holds it; a writer asking meanwhile waits, then gets it.
            with jm.lock(f"{db}.{table}", part, 5) as held:
                ours = [lk for lk in locks_on(c, db, table) if lk.lockid == held.lock_id]
                assert [(lk.state, lk.agentInfo) for lk in ours] == [(ttypes.LockState.ACQUIRED, "hive_compaction")]
                writer = c.lock(lock_request(db, table, part))
                assert writer.state == ttypes.LockState.WAITING
            assert c.check_lock(ttypes.CheckLockRequest(lockid=writer.lockid)).state == ttypes.LockState.ACQUIRED

            # Timed out: the writer keeps it past the commit's wait; the request is withdrawn.
            t0 = time.monotonic()
            with pytest.raises(LockTimeout, match="waited 3s"):
                with jm.lock(f"{db}.{table}", part, 3):
                    pytest.fail("the commit ran under a writer's lock")
            assert 3 <= time.monotonic() - t0 < 8
            assert [lk.lockid for lk in locks_on(c, db, table)] == [writer.lockid]

            # Waiting: the writer finishes 2 s later; the commit gets the lock then.
            threading.Timer(2, unlock, (hms, writer.lockid)).start()
            t0 = time.monotonic()
            with jm.lock(f"{db}.{table}", part, 20) as held:
                waited = time.monotonic() - t0
                assert isinstance(held.lock_id, int)
            assert 1.5 <= waited < 10, waited
            assert locks_on(c, db, table) == []
    finally:
        jm.close()


def test_a_dead_writers_lock_expires_by_the_metastores_housekeeping(hms, spark):
    """A Hive writer that died holding its lock: the Metastore times it out after
    hive.txn.timeout (its housekeeper), and the waiting commit gets the lock. The merge job
    releases only its own package's dead locks: this one goes by the Metastore's rules alone."""
    from hive_compaction.storage.metastore_client import JobMetastore

    db, table, part = "dead_writer", "events", "dt=2026-04-01"
    make_table(hms, spark, db, table, "ORC", ["2026-04-01"], files=1, rows=5)
    with client(hms) as c:
        dead = c.lock(lock_request(db, table, part))  # never heartbeated again
        assert dead.state == ttypes.LockState.ACQUIRED
    t0 = time.monotonic()
    jm = JobMetastore(spark, hms.metastore.uri)
    try:
        with jm.lock(f"{db}.{table}", part, 60) as held:
            expired_after = time.monotonic() - t0
            with client(hms) as c:
                assert [lk.lockid for lk in locks_on(c, db, table)] == [held.lock_id]
    finally:
        jm.close()
    print(
        f"\nHive Metastore {hms.metastore.version}: a dead writer's lock expired after {expired_after:.1f}s "
        f"(hive.txn.timeout {TXN_TIMEOUT_SECONDS}s, housekeeper every 2s)"
    )
    assert TXN_TIMEOUT_SECONDS - 1 <= expired_after < TXN_TIMEOUT_SECONDS + 15


def test_a_killed_merge_jobs_lock_is_taken_over(hms, spark, caplog):
    """A merge job killed holding its lock (this package's agent, no heartbeat since): the next
    commit gets the lock within DEAD_AFTER_SECONDS plus the housekeeper's delay, by whichever
    comes first: the job's own release of a silent lock of this package (``metastore_lock``,
    reading show_locks' heartbeat times as 3.1 / 4.0 report them) or the Metastore's expiry."""
    import logging

    from hive_compaction.storage.metastore_client import JobMetastore
    from hive_compaction.storage.metastore_lock import AGENT, DEAD_AFTER_SECONDS

    db, table, part = "killed_job", "events", "dt=2026-04-02"
    make_table(hms, spark, db, table, "ORC", ["2026-04-02"], files=1, rows=5)
    request = lock_request(db, table, part)
    request.agentInfo = AGENT
    with client(hms) as c:
        assert c.lock(request).state == ttypes.LockState.ACQUIRED
    t0 = time.monotonic()
    jm = JobMetastore(spark, hms.metastore.uri)
    try:
        with caplog.at_level(logging.WARNING, logger="hive_compaction.storage.metastore_lock"):
            with jm.lock(f"{db}.{table}", part, 40) as held:
                took = time.monotonic() - t0
                assert isinstance(held.lock_id, int)
    finally:
        jm.close()
    by = "the job" if "of a merge job that stopped heartbeating it" in caplog.text else "the Metastore's housekeeping"
    print(
        f"\nHive Metastore {hms.metastore.version}: a killed merge job's lock taken over after {took:.1f}s, "
        f"released by {by}"
    )
    assert took < max(DEAD_AFTER_SECONDS, TXN_TIMEOUT_SECONDS) + 10


def test_dag_run_and_rollback(hms, spark, tmp_path):
    """One DAG run: plan, merge jobs (ORC in place, Parquet by location switch, a table without
    partitions), refresh; rows exact, statistics the disk's; then the rollback job puts one
    table back."""
    db = "dag"
    tables = {
        "events_orc": ("ORC", "in_place", ["2026-05-01", "2026-05-02"]),
        "events_parquet": ("PARQUET", "location_switch", ["2026-05-01"]),
        "flat_orc": ("ORC", "in_place", None),
    }
    before = {}
    for table, (storage, _, dates) in tables.items():
        make_table(hms, spark, db, table, storage, dates, files=4, rows=200)
        before[table] = (
            content(hms, spark, db, table, storage),
            {n: file_sizes(loc) for n, (loc, _) in partitions(hms, db, table).items()},
        )
        assert all(len(files) == 4 for files in before[table][1].values())
    cfg = hms.write_config(
        tmp_path / "c.yaml", [{"name": f"{db}.{t}", "commit_mode": mode} for t, (_, mode, _) in tables.items()]
    )
    run = hms.run_dag(cfg)
    assert run.state == "success", run.log[-6000:]
    for table, (storage, mode, _) in tables.items():
        assert content(hms, spark, db, table, storage) == before[table][0], table
        for name, (location, params) in partitions(hms, db, table).items():
            files = file_sizes(location)
            assert len(files) == 1, (table, name, files)
            assert (params.get("numFiles"), params.get("totalSize")) == ("1", str(sum(files.values()))), (table, name)
            at_first = Path(urlsplit(hms.metastore.warehouse).path) / f"{db}.db" / table / name
            assert (mode == "location_switch") == (Path(urlsplit(location).path) != at_first), location

    for table in ("events_orc", "events_parquet"):
        storage = tables[table][0]
        p = subprocess.run(
            hms.rollback_cmd(f"{db}.{table}", run.run_id, cfg),
            env=hms.env(cfg),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert {n: file_sizes(loc) for n, (loc, _) in partitions(hms, db, table).items()} == before[table][1], table
        assert content(hms, spark, db, table, storage) == before[table][0], table
        for name, (_location, params) in partitions(hms, db, table).items():
            assert params.get("numFiles") == "4", (table, name, params)


def test_an_acid_table_is_refused_with_the_reason(hms, spark, tmp_path):
    """A transactional table as the release makes it (managed, ORC, ``transactional=true``):
    the plan leaves it to Hive's compactor and says so; no merge job is planned for it."""
    db, table = "acid", "events"
    make_table(hms, spark, db, "anchor", "ORC", ["2026-06-01"], files=1, rows=1)  # the database
    input_format, output_format, serde = FORMATS["ORC"]
    with client(hms) as c:
        c.create_table(
            ttypes.Table(
                tableName=table,
                dbName=db,
                owner="tests",
                tableType="MANAGED_TABLE",
                parameters={"transactional": "true"},
                partitionKeys=[ttypes.FieldSchema("dt", "string", "")],
                sd=ttypes.StorageDescriptor(
                    cols=[ttypes.FieldSchema(n, t, "") for n, t in COLUMNS],
                    inputFormat=input_format,
                    outputFormat=output_format,
                    compressed=False,
                    numBuckets=-1,
                    bucketCols=[],
                    sortCols=[],
                    parameters={},
                    serdeInfo=ttypes.SerDeInfo(serializationLib=serde, parameters={}),
                ),
            )
        )
        # The Metastore kept it transactional (3.1 and 4.0 validate such tables on creation).
        assert table_of(c, db, table).parameters.get("transactional") == "true"
    cfg = hms.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    planned = hms.plan_batches(cfg, run_id="acid")
    assert planned["spark_args"] == []
    assert "is a transactional (ACID) table: Hive's own compactor owns its files" in str(planned["plan"])


def test_two_instances_on_two_metastores_keep_their_tables_pools_and_assets_apart(hms, stack, spark, tmp_path):
    """Two instances in one Airflow (this release's Metastore, and the suite's Hive 2.3 one): two
    DAG files in one dags folder, each with its YAML (its own dag_id, Metastore connection, pool and
    asset namespace), one table of the same name in each Metastore. Each run merges its own
    Metastore's table only, rows exact; its merge tasks ran in its own pool; each table's asset
    event went to its own asset, named the way OpenLineage names a Hive table."""
    import sqlalchemy

    db, table, dates = "twins", "events", ["2026-05-01"]
    metastores = {
        "hive_compaction": (hms, "hive_metastore", "pool_a"),
        "team_b_compaction": (stack, "metastore_b", "pool_b"),
    }
    before = {}
    for dag_id, (where, _, _) in metastores.items():
        make_table(where, spark, db, table, "ORC", dates, files=4, rows=200)
        before[dag_id] = content(where, spark, db, table, "ORC")
    dags = two_instance_dags(tmp_path / "dags")
    configs = {}
    for dag_id, (where, conn, pool) in metastores.items():
        path = tmp_path / "a.yaml" if dag_id == "hive_compaction" else dags / "team_b.yaml"
        configs[dag_id] = hms.write_config(
            path,
            [f"{db}.{table}"],
            metastore_conn_id=conn,
            pool=pool,
            results_table=f"default.results_{pool}",
            dag={"dag_id": dag_id, "asset_namespace": f"hive://127.0.0.1:{where.port}"},
        )
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW_CONN_METASTORE_B": f'{{"conn_type": "generic", "host": "127.0.0.1", "port": {stack.port}}}',
    }
    for pool in ("pool_a", "pool_b"):
        subprocess.run(
            ["airflow", "pools", "set", pool, "4", "a compaction instance's merges"],
            env=hms.env(configs["hive_compaction"], **env),
            check=True,
            capture_output=True,
        )

    run_b = hms.run_dag(configs["hive_compaction"], dag_id="team_b_compaction", **env)
    assert run_b.state == "success", run_b.log[-6000:]
    assert [len(file_sizes(loc)) for loc, _ in partitions(stack, db, table).values()] == [1]
    assert [len(file_sizes(loc)) for loc, _ in partitions(hms, db, table).values()] == [4]  # not B's
    run_a = hms.run_dag(configs["hive_compaction"], **env)
    assert run_a.state == "success", run_a.log[-6000:]
    for dag_id, (where, _, _) in metastores.items():
        assert content(where, spark, db, table, "ORC") == before[dag_id], dag_id
        assert [len(file_sizes(loc)) for loc, _ in partitions(where, db, table).values()] == [1], dag_id

    engine = sqlalchemy.create_engine(hms.postgres.sqlalchemy_url("airflow"))
    with engine.connect() as c:
        pools = set(
            c.execute(
                sqlalchemy.text(
                    "select dag_id, pool from task_instance where task_id = 'merge' and run_id in (:a, :b)"
                ),
                {"a": run_a.run_id, "b": run_b.run_id},
            ).all()
        )
        events = set(
            c.execute(
                sqlalchemy.text(
                    "select e.source_dag_id, a.uri from asset_event e join asset a on a.id = e.asset_id "
                    "where e.source_run_id in (:a, :b)"
                ),
                {"a": run_a.run_id, "b": run_b.run_id},
            ).all()
        )
    assert pools == {("hive_compaction", "pool_a"), ("team_b_compaction", "pool_b")}, pools
    assert events == {
        ("hive_compaction", f"hive://127.0.0.1:{hms.port}/{db}.{table}"),
        ("team_b_compaction", f"hive://127.0.0.1:{stack.port}/{db}.{table}"),
    }, events
