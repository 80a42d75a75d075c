"""A PostgreSQL server for the local stack, from Debian's ``postgresql`` package, on loopback.

Started by the tests' harness and by ``make stack-up`` (scripts/airflow_services.py), it backs
the Hive Metastore and Airflow's metadata database as in production (docker-compose.yaml
declares the same services). Trust authentication on 127.0.0.1 only; one role
``hive_compaction`` owns every database. Run as root, the server runs as the ``postgres`` system user (PostgreSQL
refuses root), with its data in a folder that user owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from suite_budget import started

ROLE = "hive_compaction"
JDBC_JAR_CANDIDATES = ("/usr/share/java/postgresql.jar",)
INSTALL_HINT = "apt-get install postgresql libpostgresql-jdbc-java"


def bin_dir() -> Path | None:
    """The newest installed PostgreSQL's programs (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def jdbc_jar() -> Path | None:
    return next((Path(p) for p in JDBC_JAR_CANDIDATES if Path(p).is_file()), None)


def missing() -> str | None:
    """Why PostgreSQL cannot back the stack here, or None when it can."""
    if bin_dir() is None:
        return f"PostgreSQL is not installed ({INSTALL_HINT})"
    if jdbc_jar() is None:
        return f"the PostgreSQL JDBC driver is not installed ({INSTALL_HINT})"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return None


def psql(port: int, sql: str, database: str = "postgres") -> str:
    """One statement on the loopback server at ``port``, as the stack's role; its output."""
    return subprocess.run(
        [
            str(bin_dir() / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            ROLE,
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-tAc",
            sql,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def database_exists(port: int, name: str) -> bool:
    return psql(port, f"SELECT 1 FROM pg_database WHERE datname = '{name}'").strip() == "1"


class Postgres:
    def __init__(self, data: Path | None = None, port: int = 5432):
        # Under root the server runs as 'postgres', which must reach its folder: pytest's
        # temporary folders are root-only, so the default is a fresh folder of its own.
        self.data = Path(data) if data else Path(tempfile.mkdtemp(prefix="hc-postgres-"))
        self.port = port
        self.log_file = self.data.parent / f"{self.data.name}.log"

    @property
    def as_postgres(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *cmd: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([*self.as_postgres, *cmd], check=True, capture_output=True, text=True, **kw)

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists() and subprocess.run(
            [str(bin_dir() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        ).returncode == 0

    def start(self, timeout: float = 60) -> None:
        why = missing()
        if why:
            raise RuntimeError(why)
        if self.running():
            print(f"PostgreSQL already running on 127.0.0.1:{self.port}")
            return
        bins = bin_dir()
        self.data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres", "postgres")
            self.log_file.touch()
            shutil.chown(self.log_file, "postgres", "postgres")
        if not (self.data / "PG_VERSION").exists():
            self._run(
                str(bins / "initdb"), "-D", str(self.data), "-U", ROLE, "--auth=trust", "--encoding=UTF8", "--locale=C"
            )
        with started("PostgreSQL"):
            self._run(
                str(bins / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                str(int(timeout)),
                "-o",
                f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} -c fsync=off",
                "start",
            )
        print(f"PostgreSQL listening on 127.0.0.1:{self.port} (data {self.data}, log {self.log_file})")

    def create_database(self, name: str) -> None:
        """Create the database unless it exists."""
        if not database_exists(self.port, name):
            psql(self.port, f'CREATE DATABASE "{name}"')

    def create_transaction_tables(self, database: str = "metastore") -> None:
        """The Metastore's transaction and lock tables (what Hive's schematool creates on a
        cluster; DataNucleus does not), unless they exist."""
        psql = [
            str(bin_dir() / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            ROLE,
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-qc",
        ]
        statements = [f"CREATE TABLE IF NOT EXISTS {name} ({columns})" for name, columns in TRANSACTION_TABLES.items()]
        statements += [f"INSERT INTO {t} SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM {t})" for t in SEQUENCE_TABLES]
        self._run(*psql, "; ".join(statements))

    def jdbc_url(self, database: str) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{database}"

    def metastore_args(self, database: str = "metastore") -> dict:
        """``local_stack.Metastore``'s arguments for a Metastore whose database is ``database`` here."""
        return {"db_url": self.jdbc_url(database), "jdbc_jar": jdbc_jar(), "db_user": ROLE}

    def sqlalchemy_url(self, database: str) -> str:
        return f"postgresql+psycopg2://{ROLE}@127.0.0.1:{self.port}/{database}"

    def stop(self, remove: bool = False) -> None:
        """Stop the server; ``remove`` deletes its data and log too."""
        if (self.data / "postmaster.pid").exists():
            self._run(str(bin_dir() / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
            print(f"PostgreSQL on 127.0.0.1:{self.port} stopped")
        if remove:
            shutil.rmtree(self.data, ignore_errors=True)
            self.log_file.unlink(missing_ok=True)


# The Metastore's transaction handler (Hive 2.3: TxnHandler) keeps locks and transactions in these
# tables, unquoted names as its SQL writes them. Columns as the handler reads and writes them.
_ID, _NAME, _PART, _FLAG = "bigint", "varchar(128)", "varchar(767)", "char(1)"
TRANSACTION_TABLES = {
    "TXNS": f"TXN_ID {_ID} PRIMARY KEY, TXN_STATE {_FLAG} NOT NULL, TXN_STARTED {_ID} NOT NULL, "
    f"TXN_LAST_HEARTBEAT {_ID} NOT NULL, TXN_USER {_NAME} NOT NULL, TXN_HOST {_NAME} NOT NULL, "
    f"TXN_AGENT_INFO {_NAME}, TXN_META_INFO {_NAME}, TXN_HEARTBEAT_COUNT integer",
    "TXN_COMPONENTS": f"TC_TXNID {_ID}, TC_DATABASE {_NAME} NOT NULL, TC_TABLE {_NAME}, TC_PARTITION {_PART}, "
    f"TC_OPERATION_TYPE {_FLAG} NOT NULL",
    "COMPLETED_TXN_COMPONENTS": f"CTC_TXNID {_ID}, CTC_DATABASE {_NAME} NOT NULL, CTC_TABLE varchar(256), "
    f"CTC_PARTITION {_PART}",
    "NEXT_TXN_ID": f"NTXN_NEXT {_ID} NOT NULL",
    "HIVE_LOCKS": f"HL_LOCK_EXT_ID {_ID} NOT NULL, HL_LOCK_INT_ID {_ID} NOT NULL, HL_TXNID {_ID}, "
    f"HL_DB {_NAME} NOT NULL, HL_TABLE {_NAME}, HL_PARTITION {_PART}, HL_LOCK_STATE {_FLAG} NOT NULL, "
    f"HL_LOCK_TYPE {_FLAG} NOT NULL, HL_LAST_HEARTBEAT {_ID} NOT NULL, HL_ACQUIRED_AT {_ID}, "
    f"HL_USER {_NAME} NOT NULL, HL_HOST {_NAME} NOT NULL, HL_HEARTBEAT_COUNT integer, "
    f"HL_AGENT_INFO {_NAME}, HL_BLOCKEDBY_EXT_ID {_ID}, HL_BLOCKEDBY_INT_ID {_ID}, "
    "PRIMARY KEY (HL_LOCK_EXT_ID, HL_LOCK_INT_ID)",
    "NEXT_LOCK_ID": f"NL_NEXT {_ID} NOT NULL",
    "COMPACTION_QUEUE": f"CQ_ID {_ID} PRIMARY KEY, CQ_DATABASE {_NAME} NOT NULL, CQ_TABLE {_NAME} NOT NULL, "
    f"CQ_PARTITION {_PART}, CQ_STATE {_FLAG} NOT NULL, CQ_TYPE {_FLAG} NOT NULL, "
    f"CQ_TBLPROPERTIES varchar(2048), CQ_WORKER_ID {_NAME}, CQ_START {_ID}, CQ_RUN_AS {_NAME}, "
    f"CQ_HIGHEST_TXN_ID {_ID}, CQ_META_INFO bytea, CQ_HADOOP_JOB_ID varchar(32)",
    "NEXT_COMPACTION_QUEUE_ID": f"NCQ_NEXT {_ID} NOT NULL",
    "COMPLETED_COMPACTIONS": f"CC_ID {_ID} PRIMARY KEY, CC_DATABASE {_NAME} NOT NULL, CC_TABLE {_NAME} NOT NULL, "
    f"CC_PARTITION {_PART}, CC_STATE {_FLAG} NOT NULL, CC_TYPE {_FLAG} NOT NULL, "
    f"CC_TBLPROPERTIES varchar(2048), CC_WORKER_ID {_NAME}, CC_START {_ID}, CC_END {_ID}, "
    f"CC_RUN_AS {_NAME}, CC_HIGHEST_TXN_ID {_ID}, CC_META_INFO bytea, "
    "CC_HADOOP_JOB_ID varchar(32)",
    "AUX_TABLE": f"MT_KEY1 {_NAME} NOT NULL, MT_KEY2 {_ID} NOT NULL, MT_COMMENT varchar(255), "
    "PRIMARY KEY (MT_KEY1, MT_KEY2)",
    "WRITE_SET": f"WS_DATABASE {_NAME} NOT NULL, WS_TABLE {_NAME} NOT NULL, WS_PARTITION {_PART}, "
    f"WS_TXNID {_ID} NOT NULL, WS_COMMIT_ID {_ID} NOT NULL, WS_OPERATION_TYPE {_FLAG} NOT NULL",
}
SEQUENCE_TABLES = ("NEXT_TXN_ID", "NEXT_LOCK_ID", "NEXT_COMPACTION_QUEUE_ID")  # each holds the next id, from 1
