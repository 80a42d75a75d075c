"""The Metastore client: host lists with failover, calls every Hive from 2.3 to 4 serves
(get_table_req), a clear error for a missing table, SASL, and the message for a Metastore that
wants SASL from a client without it.

Unit tests use loopback servers made here; the rest run against the real local Metastore (2.3).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ThriftHiveMetastore, ttypes
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

from hive_compaction.airflow.metastore_connection import MetastoreUnavailable, parse_hosts
from hive_compaction.airflow.metastore_hook import Metastore, TableNotFound
from hive_compaction.model.results import NUM_FILES
from local_stack import free_port

ROOT = Path(__file__).resolve().parents[1]


# --- host lists ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, port, expected",
    [
        ("hms1", 9083, [("hms1", 9083)]),
        ("hms1,hms2:9084", 9083, [("hms1", 9083), ("hms2", 9084)]),
        (" hms1:1 , hms2 ,", 7, [("hms1", 1), ("hms2", 7)]),
        ("thrift://hms1:9083,thrift://hms2:9093/", 1, [("hms1", 9083), ("hms2", 9093)]),  # hive.metastore.uris
        ("[::1]:9090,::1,[fe80::1]", 9083, [("::1", 9090), ("::1", 9083), ("fe80::1", 9083)]),
        ("10.0.0.1", "9085", [("10.0.0.1", 9085)]),
    ],
)
def test_parse_hosts(text, port, expected):
    assert parse_hosts(text, port) == expected


@pytest.mark.parametrize("text", ["", " , ", "hms1:http", "hms1:0", "hms1:70000", ":9083"])
def test_parse_hosts_refuses_bad_addresses(text):
    with pytest.raises(ValueError):
        parse_hosts(text, 9083)


def test_constructor_keeps_its_signature_and_takes_a_host_list():
    m = Metastore("127.0.0.1", 9083, 5, 10)
    assert (m.connection.addresses, m.address, m.batch_size, m.calls, m.connection.timeout_seconds) == (
        [("127.0.0.1", 9083)],
        "127.0.0.1:9083",
        10,
        0,
        5.0,
    )
    m = Metastore("hms1,hms2:9084", 9085)
    assert m.connection.addresses == [("hms1", 9085), ("hms2", 9084)] and m.address == "hms1:9085"
    assert m.uris == "thrift://hms1:9085,thrift://hms2:9084"
    assert (
        Metastore(
            "h", 1, auth_mechanism="plain", kerberos_service_name="hive/_HOST@EXAMPLE.COM"
        ).connection.kerberos_service_name
        == "hive"
    )
    with pytest.raises(ValueError, match="not both"):
        Metastore("h", 1, metastore_conn_id="hms")
    with pytest.raises(ValueError, match="auth_mechanism: an Airflow connection's settings come from its extra"):
        Metastore(metastore_conn_id="hms", auth_mechanism="PLAIN")
    with pytest.raises(ValueError, match="KERBEROS"):
        Metastore("h", 1, auth_mechanism="KERBEROS")


def test_gssapi_without_the_kerberos_module_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "kerberos", None)  # import kerberos -> ImportError
    with pytest.raises(ImportError, match=r"auth_mechanism GSSAPI needs the Python package\(s\) kerberos"):
        Metastore("h", 1, auth_mechanism="GSSAPI")


def test_from_airflow_connection_reads_the_host_list_and_the_sasl_extras(tmp_path):
    conn = {
        "conn_type": "generic",
        "host": "hms1,hms2:9084",
        "port": 9085,
        "login": "etl",
        "password": "secret",
        "extra": {"auth_mechanism": "plain", "timeout_seconds": 7, "batch_size": 3},
    }
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]);"
        "from airflow.sdk import BaseHook; from hive_compaction.airflow.metastore_hook import Metastore;"
        "m = Metastore(metastore_conn_id='hms_list'); c = m.connection; assert isinstance(m, BaseHook);"
        "print(json.dumps([c.addresses, c.auth_mechanism, c.username, c.password, c.timeout_seconds,"
        " m.batch_size, m.metastore_conn_id, m.conn_name_attr, m.default_conn_name, m.conn_type]))"
    )
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW_CONN_HMS_LIST": json.dumps(conn)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "plugins")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [
        [["hms1", 9085], ["hms2", 9084]],
        "PLAIN",
        "etl",
        "secret",
        7.0,
        3,
        "hms_list",
        "metastore_conn_id",
        "metastore_default",
        "hive_metastore",
    ]


def test_all_hosts_dead_names_each():
    dead1, dead2 = free_port(), free_port()
    with pytest.raises(MetastoreUnavailable) as e:
        with Metastore(f"127.0.0.1:{dead1},127.0.0.1", dead2, timeout_seconds=5):
            pass
    assert f"thrift://127.0.0.1:{dead1}" in str(e.value) and f"thrift://127.0.0.1:{dead2}" in str(e.value)
    assert "cannot reach the Hive Metastore at any of" in str(e.value)


# --- loopback servers ---------------------------------------------------------------------------
def _read_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class _Server:
    """A loopback TCP server that runs ``handle(conn)`` for each connection, in a thread."""

    def __init__(self, handle):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.handle, self.seen, self.errors = handle, [], []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    self.handle(self, conn)
                except Exception as e:  # noqa: BLE001 - reported by the test
                    self.errors.append(e)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() in the thread
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


def _a_table(db: str, name: str) -> ttypes.Table:
    sd = ttypes.StorageDescriptor(
        cols=[],
        location=f"file:///wh/{db}.db/{name}",
        numBuckets=-1,
        inputFormat="org.apache.hadoop.hive.ql.io.orc.OrcInputFormat",
    )
    return ttypes.Table(
        dbName=db, tableName=name, sd=sd, partitionKeys=[], parameters={"numFiles": "3"}, tableType="MANAGED_TABLE"
    )


class _Handler:
    """The two Metastore calls the fake servers answer: a table ``db.t`` exists, no other."""

    def __init__(self, calls: list):
        self.calls = calls

    def get_table_req(self, req):
        self.calls.append(("get_table_req", req.dbName, req.tblName))
        if (req.dbName, req.tblName) != ("db", "t"):
            raise ttypes.NoSuchObjectException(f"{req.dbName}.{req.tblName} table not found")
        return ttypes.GetTableResult(table=_a_table(req.dbName, req.tblName))

    def get_partition_names(self, db, tbl, max_parts):
        self.calls.append(("get_partition_names", db, tbl))
        return []


def _serve_thrift(protocol, calls: list, limit: int | None = None):
    processor = ThriftHiveMetastore.Processor(_Handler(calls))
    n = 0
    while limit is None or n < limit:
        try:
            processor.process(protocol, protocol)
        except TTransport.TTransportException:
            return
        n += 1


def _wrap(conn: socket.socket) -> TSocket.TSocket:
    s = TSocket.TSocket()
    s.handle = conn
    return s


# --- SASL wanted, none given: the message -------------------------------------------------------
def _drain_and_close(server, conn):
    """Read what the client sends and close without a word."""
    server.seen.append(conn.recv(65536))


def _hive_sasl_refusal(server, conn):
    """What Hive's TSaslServerTransport does with a binary call: it reads a 5-byte SASL header
    (status 0x80: the binary protocol's version byte), answers ERROR "Invalid status -128" and
    closes the connection with the rest of the call unread."""
    server.seen.append(_read_exact(conn, 5))
    message = b"Invalid status -128"
    conn.sendall(struct.pack(">BI", 4, len(message)) + message)


@pytest.mark.parametrize("behaviour", [_drain_and_close, _hive_sasl_refusal])
def test_a_metastore_that_wants_sasl_gives_a_message_that_says_so(behaviour):
    server = _Server(behaviour)
    try:
        hms = Metastore("127.0.0.1", server.port, timeout_seconds=10)
        with pytest.raises(MetastoreUnavailable) as e:
            with hms:
                hms.table("db", "t")
    finally:
        server.close()
    text = str(e.value)
    assert f"Hive Metastore at thrift://127.0.0.1:{server.port} closed the connection at the first call" in text
    assert "hive.metastore.sasl.enabled=true" in text and "client without SASL" in text
    assert '"auth_mechanism"' in text and '"GSSAPI" for Kerberos' in text
    assert server.seen and server.seen[0][:1] == b"\x80"  # a binary protocol call did arrive
    if behaviour is _hive_sasl_refusal:  # thrift reads the ERROR frame as a 64 MiB message name
        assert "after a SASL negotiation frame ERROR 'Invalid status -128'" in text


def test_a_connection_lost_after_an_answer_is_not_called_a_sasl_problem():
    calls = []

    def answer_once(server, conn):
        protocol = TBinaryProtocol.TBinaryProtocol(TTransport.TBufferedTransport(_wrap(conn)))
        _serve_thrift(protocol, calls, limit=1)

    server = _Server(answer_once)
    try:
        with Metastore("127.0.0.1", server.port, timeout_seconds=10) as hms:
            table = hms.table("db", "t")
            with pytest.raises(MetastoreUnavailable) as e:
                hms.partition_names(table)
    finally:
        server.close()
    assert "failed during get_partition_names" in str(e.value) and "SASL" not in str(e.value)
    assert calls == [("get_table_req", "db", "t")]


# --- SASL PLAIN through thrift_sasl + pure-sasl -------------------------------------------------
def _sasl_plain_server(server, conn):
    """Thrift's SASL negotiation (START with the mechanism, OK with the PLAIN response, COMPLETE),
    then framed Thrift calls, as Hive's TSaslServerTransport does with QOP auth."""
    status, n = struct.unpack(">BI", _read_exact(conn, 5))
    mechanism = _read_exact(conn, n)
    status2, n2 = struct.unpack(">BI", _read_exact(conn, 5))
    response = _read_exact(conn, n2)
    server.seen.append((status, mechanism, status2, response))
    conn.sendall(struct.pack(">BI", 5, 0))  # COMPLETE
    protocol = TBinaryProtocol.TBinaryProtocol(TTransport.TFramedTransport(_wrap(conn)))
    _serve_thrift(protocol, server.calls)


def test_sasl_plain_negotiates_then_calls_through_the_sasl_transport():
    server = _Server(_sasl_plain_server)
    server.calls = []
    try:
        with Metastore(
            "127.0.0.1", server.port, timeout_seconds=10, auth_mechanism="PLAIN", username="etl", password="secret"
        ) as hms:
            table = hms.table("db", "t")
            with pytest.raises(TableNotFound, match=r"db\.missing"):
                hms.table("db", "missing")
            assert hms.partition_names(table) == []
    finally:
        server.close()
    assert not server.errors, server.errors
    assert server.seen == [(1, b"PLAIN", 2, b"\x00etl\x00secret")]  # START, then OK with the PLAIN response
    assert (table.name, table.storage_format, table.parameters) == ("db.t", "orc", {"numFiles": "3"})
    assert [c[0] for c in server.calls] == ["get_table_req", "get_table_req", "get_partition_names"]


def test_missing_table_is_a_clear_value_error_without_a_live_metastore():
    calls = []

    def binary(server, conn):
        _serve_thrift(TBinaryProtocol.TBinaryProtocol(TTransport.TBufferedTransport(_wrap(conn))), calls)

    server = _Server(binary)
    try:
        with Metastore("127.0.0.1", server.port, timeout_seconds=10) as hms:
            with pytest.raises(ValueError) as e:
                hms.table("sales", "nope")
    finally:
        server.close()
    assert isinstance(e.value, TableNotFound) and e.value.name == "sales.nope"
    assert f"table sales.nope does not exist in the Hive Metastore at thrift://127.0.0.1:{server.port}" in str(e.value)


# --- against the real Metastore (Hive 2.3) ------------------------------------------------------
@pytest.fixture
def no_plain_get_table(monkeypatch):
    """Hive 4.0.1 has no get_table: make sure nothing here calls it."""

    def gone(self, *a, **k):
        raise AssertionError("get_table called: Hive 4.0.1 does not serve it; use get_table_req")

    monkeypatch.setattr(hmsclient.HMSClient, "get_table", gone)


@pytest.mark.integration
def test_table_partitions_and_statistics_through_calls_hive_4_serves(stack, no_plain_get_table):
    db, name = "hms_client", "events"
    stack.make_table(db, name, "ORC", ["2026-01-01", "2026-01-02"], files=2, rows=10)
    with Metastore("127.0.0.1", stack.port, timeout_seconds=30, batch_size=1) as hms:
        table = hms.table(db, name)
        assert hms.calls == 1
        assert (table.name, table.storage_format, table.partition_keys) == (f"{db}.{name}", "orc", (("dt", "string"),))
        assert sorted(hms.partition_names(table)) == ["dt=2026-01-01", "dt=2026-01-02"]
        parts = {p.name: p for p in hms.partitions(table)}
        assert set(parts) == {"dt=2026-01-01", "dt=2026-01-02"}
        assert [p.name for p in hms.partitions(table, filter_expr='dt = "2026-01-02"')] == ["dt=2026-01-02"]
        assert hms.update_statistics(table, {"dt=2026-01-01": {NUM_FILES: "1", "hms_client_test": "x"}}) == 1
        after = {p.name: p for p in hms.partitions(table, names=["dt=2026-01-01"])}
        assert after["dt=2026-01-01"].stat(NUM_FILES) == 1
        assert after["dt=2026-01-01"].parameters["hms_client_test"] == "x"

        # A table without partitions: its statistics live on the table (get_table_req + alter_table).
        stack.spark.sql(f"CREATE TABLE IF NOT EXISTS {db}.flat (a INT) STORED AS ORC")
        flat = hms.table(db, "flat")
        assert flat.partition_keys == () and [p.name for p in hms.partitions(flat)] == [""]
        assert hms.update_statistics(flat, {"": {NUM_FILES: "7", "hms_client_test": None}}) == 1
        assert hms.table(db, "flat").parameters[NUM_FILES] == "7"


@pytest.mark.integration
def test_the_results_table_through_the_hooks_public_methods(stack):
    """The Airflow side keeps its results table through the hook's public methods only: created
    once (a second ensure changes nothing), batches read by run, old batches pruned."""
    from hive_compaction.airflow import results_reader
    from hive_compaction.model.result_table import partition_name

    stack.make_table("hms_results", "anchor", "ORC", ["2026-01-01"], files=1, rows=1)  # the database
    name = "hms_results.compaction_results"
    with Metastore("127.0.0.1", stack.port, timeout_seconds=30, batch_size=2) as hms:
        results_reader.ensure(hms, name)
        results_reader.ensure(hms, name)
        assert hms.table_exists("hms_results", "compaction_results")
        assert hms.table("hms_results", "compaction_results").partition_keys == (("run", "string"), ("batch", "string"))
        template = (
            hms.get_conn()
            .get_table_req(ttypes.GetTableRequest(dbName="hms_results", tblName="compaction_results"))
            .table.sd
        )
        hms.get_conn().add_partitions(
            [  # as the merge jobs record them
                ttypes.Partition(
                    values=[run, str(batch)],
                    dbName="hms_results",
                    tableName="compaction_results",
                    sd=template,
                    parameters={"result.0": f"{run}/{batch}"},
                )
                for run, batch in (("r1", 0), ("r1", 1), ("r1", 2), ("r2", 0))
            ]
        )
        read = results_reader.read(hms, name, "r1", [0, 2, 7])  # 7 recorded nothing
        assert {b: params["result.0"] for b, params in read.items()} == {0: "r1/0", 2: "r1/2"}
        assert sorted(results_reader.read_run(hms, name, "r1")) == [0, 1, 2]
        assert results_reader.prune(hms, name, now=time.time()) == 0  # all recorded just now
        assert results_reader.prune(hms, name, now=time.time() + 31 * 86400) == 4
        assert hms.partition_names_of("hms_results", "compaction_results") == []
        assert hms.drop_partition("hms_results", "compaction_results", ["r1", "0"]) is False
        assert partition_name("r1", 0) == "run=r1/batch=0"


@pytest.mark.integration
def test_missing_table_and_database_give_table_not_found(stack):
    stack.make_table("hms_client", "present", "ORC", ["2026-01-01"], files=1, rows=1)
    with Metastore("127.0.0.1", stack.port, timeout_seconds=30) as hms:
        for db, name in (("hms_client", "no_such_table"), ("no_such_db", "events")):
            with pytest.raises(TableNotFound) as e:
                hms.table(db, name)
            assert isinstance(e.value, ValueError) and e.value.name == f"{db}.{name}"
            assert f"table {db}.{name} does not exist in the Hive Metastore at thrift://127.0.0.1:{stack.port}" in str(
                e.value
            )
        assert hms.table("hms_client", "present").name == "hms_client.present"  # the connection is still good


@pytest.mark.integration
def test_failover_from_a_dead_first_host_to_the_live_one(stack, caplog):
    dead = free_port()
    caplog.set_level(logging.WARNING, logger="hive_compaction.airflow.metastore_connection")
    stack.make_table("hms_client", "failover", "ORC", ["2026-01-01"], files=1, rows=1)
    with Metastore(f"127.0.0.1:{dead},127.0.0.1", stack.port, timeout_seconds=30) as hms:
        assert hms.address == f"127.0.0.1:{stack.port}"
        assert hms.table("hms_client", "failover").partition_keys == (("dt", "string"),)
    failed = [r.getMessage() for r in caplog.records if r.name == "hive_compaction.airflow.metastore_connection"]
    assert len(failed) == 1 and f"thrift://127.0.0.1:{dead} failed to connect" in failed[0], failed
    assert "trying the next" in failed[0]


@pytest.mark.integration
def test_sasl_client_against_a_metastore_without_sasl_says_so(stack):
    """The other mismatch: the plain Metastore waits for the rest of what it takes for a call."""
    with pytest.raises(MetastoreUnavailable) as e:
        with Metastore("127.0.0.1", stack.port, timeout_seconds=2, auth_mechanism="PLAIN"):
            pass
    assert "SASL PLAIN negotiation got no answer" in str(e.value)
    assert "set auth_mechanism to NOSASL" in str(e.value)


# --- a real Kerberos realm and a SASL (Kerberos) Hive Metastore 2.3 -----------------------------
@pytest.fixture(scope="module")
def kerberos_metastore(kerberos):
    """The session's Kerberos stack (conftest ``kerberos``), its realm and the user's ticket cache
    in this process's environment (the Python client's GSSAPI reads them) while the module runs."""
    saved = {k: os.environ.get(k) for k in kerberos.env}
    os.environ.update(kerberos.env)
    try:
        yield kerberos.port, kerberos.state
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.integration
def test_kerberos_metastore_refuses_a_client_without_sasl_with_the_message(kerberos_metastore):
    port, _ = kerberos_metastore
    with pytest.raises(MetastoreUnavailable) as e:
        with Metastore("localhost", port, timeout_seconds=10) as hms:
            hms.table("default", "anything")
    assert f"the Hive Metastore at thrift://localhost:{port} closed the connection at the first call" in str(e.value)
    assert "hive.metastore.sasl.enabled=true" in str(e.value) and '"GSSAPI" for Kerberos' in str(e.value)


@pytest.mark.integration
def test_kerberos_gssapi_client_is_answered(kerberos_metastore):
    port, _ = kerberos_metastore
    dead = free_port()
    with Metastore(f"127.0.0.1:{dead},localhost", port, timeout_seconds=10, auth_mechanism="GSSAPI") as hms:
        assert hms.address == f"localhost:{port}"
        assert "default" in hms.get_conn().get_all_databases()
        with pytest.raises(TableNotFound, match=r"default\.no_such_table"):
            hms.table("default", "no_such_table")


@pytest.mark.integration
def test_kerberos_without_a_ticket_or_with_the_wrong_service_says_so(kerberos_metastore, monkeypatch):
    port, d = kerberos_metastore
    with pytest.raises(MetastoreUnavailable) as e:
        with Metastore("localhost", port, timeout_seconds=10, auth_mechanism="GSSAPI", kerberos_service_name="hdfs"):
            pass
    assert "Kerberos (SASL GSSAPI) negotiation failed" in str(e.value) and "hdfs/localhost" in str(e.value)
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{d}/nobody.cc")
    with pytest.raises(MetastoreUnavailable) as e:
        with Metastore("localhost", port, timeout_seconds=10, auth_mechanism="GSSAPI"):
            pass
    assert "No Kerberos credentials available" in str(e.value) and "kinit" in str(e.value)


def test_the_default_connection_is_metastore_default_else_hive_metastore(tmp_path):
    """The config names no connection: metastore_default (the Hive provider's id) when it exists,
    else hive_metastore (the former default, said in the log), else an error naming both; a named
    connection is used as it is."""
    code = """
import json, logging, os, sys
sys.path.insert(0, sys.argv[1])
from hive_compaction.airflow import metastore_hook
records = []
logging.getLogger(metastore_hook.__name__).addHandler(
    type("H", (logging.Handler,), {"emit": lambda s, r: records.append(r.getMessage())})())
logging.getLogger(metastore_hook.__name__).setLevel(logging.INFO)
def conn(host):
    return json.dumps({"conn_type": "generic", "host": host, "port": 9083})
out = {}
os.environ["AIRFLOW_CONN_HIVE_METASTORE"] = conn("legacy")
out["legacy only"] = [metastore_hook.Metastore().address.split(":")[0], records[-1:]]
os.environ["AIRFLOW_CONN_METASTORE_DEFAULT"] = conn("provider")
records.clear()
out["both"] = [metastore_hook.Metastore(metastore_conn_id=None).address.split(":")[0], records]
os.environ["AIRFLOW_CONN_HMS_PROD"] = conn("named")
out["named"] = [metastore_hook.from_airflow_connection("hms_prod").address.split(":")[0], []]
del os.environ["AIRFLOW_CONN_HIVE_METASTORE"], os.environ["AIRFLOW_CONN_METASTORE_DEFAULT"]
try:
    metastore_hook.from_airflow_connection(None)
except Exception as e:
    out["neither"] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env["AIRFLOW_HOME"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "plugins")], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["legacy only"][0] == "legacy"
    assert "'hive_metastore'" in got["legacy only"][1][0] and "'metastore_default'" in got["legacy only"][1][0]
    assert got["both"] == ["provider", []]
    assert got["named"] == ["named", []]
    kind, message = got["neither"]
    assert kind == "AirflowNotFoundException", got["neither"]
    assert "'metastore_default'" in message and "'hive_metastore'" in message and "metastore_conn_id" in message
