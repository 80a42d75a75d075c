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
            [str(bin_dir() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode == 0

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
            self._run(str(bins / "initdb"), "-D", str(self.data), "-U", ROLE, "--auth=trust",
                      "--encoding=UTF8", "--locale=C")
        self._run(str(bins / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_file), "-w", "-t", str(int(timeout)),
                  "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} -c fsync=off", "start")
        print(f"PostgreSQL listening on 127.0.0.1:{self.port} (data {self.data}, log {self.log_file})")

    def create_database(self, name: str) -> None:
        """Create the database unless it exists."""
        psql = [str(bin_dir() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", ROLE, "-d", "postgres",
                "-tAc"]
        if self._run(*psql, f"SELECT 1 FROM pg_database WHERE datname = '{name}'").stdout.strip() != "1":
            self._run(*psql, f'CREATE DATABASE "{name}"')

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
