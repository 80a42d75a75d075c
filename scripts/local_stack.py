"""The embedded local stack: a real Hive Metastore Thrift service from the pyspark wheel's jars.

    python scripts/local_stack.py start|stop|status [--state DIR] [--port 9083]

Embedded Derby holds the metadata, the warehouse is on the local file system, both under the
state folder (``.state/`` by default, ignored by git). Starting twice is harmless; ``stop``
ends the service cleanly. Tests use ``Metastore`` directly, with a state folder of their own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from xml.sax.saxutils import escape

from suite_budget import record

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STATE = ROOT / ".state"

HIVE_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>javax.jdo.option.ConnectionURL</name><value>{db_url}</value></property>
  <property><name>javax.jdo.option.ConnectionDriverName</name><value>{db_driver}</value></property>
  <property><name>javax.jdo.option.ConnectionUserName</name><value>{db_user}</value></property>
  <property><name>hive.metastore.warehouse.dir</name><value>file://{state}/warehouse</value></property>
{schema_creation}  <property><name>hive.metastore.schema.verification</name><value>false</value></property>
  <property><name>hive.metastore.event.db.notification.api.auth</name><value>false</value></property>
  <!-- The Metastore's lock API (lock, check_lock, unlock) as a cluster's Metastore serves it: its
       transaction handler pools with HikariCP (in the pyspark wheel; BoneCP, the default, is not).
       Its tables (a cluster's schematool makes them): postgres.TRANSACTION_TABLES on PostgreSQL,
       on Derby the handler's own test set-up (hive.in.test). -->
  <property><name>datanucleus.connectionPoolingType</name><value>HikariCP</value></property>
{derby_lock_tables}</configuration>
"""


# The schema is created on first use. On PostgreSQL that happens inside the caller's transaction
# and the foreign keys DataNucleus adds from a second connection would wait on it forever: there,
# tables and columns only (autoCreateAll would imply the constraints).
SCHEMA_CREATION = {
    "derby": "  <property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>\n",
    "postgresql": "".join(
        f"  <property><name>datanucleus.schema.{k}</name><value>{v}</value></property>\n"
        for k, v in (("autoCreateTables", "true"), ("autoCreateColumns", "true"), ("autoCreateConstraints", "false"))
    ),
}


def hive_site(state: Path, db_url: str | None = None, db_user: str = "") -> str:
    """The Metastore's hive-site.xml: warehouse under ``state``, its database embedded Derby
    there, or the one ``db_url`` names (``jdbc:postgresql://...``)."""
    db_url = db_url or f"jdbc:derby:;databaseName={state}/metastore_db;create=true"
    postgresql = db_url.startswith("jdbc:postgresql:")
    return HIVE_SITE.format(
        state=state,
        db_url=db_url,
        db_user=db_user,
        db_driver="org.postgresql.Driver" if postgresql else "org.apache.derby.jdbc.EmbeddedDriver",
        schema_creation=SCHEMA_CREATION["postgresql" if postgresql else "derby"],
        derby_lock_tables="" if postgresql else "  <property><name>hive.in.test</name><value>true</value></property>\n",
    )


# A Hadoop viewfs mount over a local folder: a file system scheme Airflow knows nothing about
# (as hdfs:// or viewfs:// on a cluster), for tables and work areas in the tests. Spark needs the
# same mount table (VIEWFS_CONF).
VIEWFS_MOUNT = "hcstack"
CORE_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>fs.viewfs.mounttable.{mount}.link./data</name><value>file://{state}/viewfs-data</value></property>
{extra}</configuration>
"""


def await_start(proc: subprocess.Popen, ready, since: float, timeout: float, what: str, log: Path, error, stop) -> None:
    """Poll ``ready()`` until it holds; ``error`` if the server ``proc`` exits first, or once
    ``timeout`` seconds have passed ``since`` (the server is then ``stop()``-ped)."""
    while not ready():
        if proc.poll() is not None:
            raise error(f"the {what} exited with code {proc.returncode}; see {log}")
        if time.monotonic() - since > timeout:
            stop()
            raise error(f"the {what} did not start within {timeout:.0f}s; see {log}")
        time.sleep(0.3)


def stop_group(proc: subprocess.Popen | None) -> None:
    """Stop a server started in a session of its own (``start_new_session``): SIGTERM to its
    process group, SIGKILL if it is still there 20 s later."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _properties(values: dict[str, str]) -> str:
    """``values`` as the property lines of a Hadoop configuration file."""
    return "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n" for k, v in values.items()
    )


def site_properties(path: Path) -> dict[str, str]:
    """The properties of a Hadoop configuration file (``*-site.xml``)."""
    import xml.etree.ElementTree as ET

    return {p.findtext("name"): p.findtext("value") for p in ET.parse(path).getroot().iter("property")}


class StackError(RuntimeError):
    pass


def spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    """True when a Hive Metastore answers a Thrift call on the port."""
    import logging

    from hmsclient import hmsclient

    logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)
    try:
        with hmsclient.HMSClient(host="127.0.0.1", port=port) as c:
            c.get_all_databases()
        return True
    except Exception:  # noqa: BLE001 - anything but an answer means "not ready"
        return False


class Metastore:
    """The Metastore service; its backing database is embedded Derby, or PostgreSQL given a JDBC
    URL of it (``jdbc:postgresql://...``, schema created on first start) and its driver's jar."""

    def __init__(
        self,
        state: Path,
        port: int | None = 9083,
        db_url: str | None = None,
        jdbc_jar: Path | None = None,
        db_user: str = "",
    ):
        """``port=None``: a free loopback port, chosen again at start if another program took it
        meanwhile (a test run starts several services, each on a port the kernel handed out)."""
        self.state = Path(state).resolve()
        # More jars and Hadoop settings for the service (the tests' s3like file system).
        self.extra_classpath: list[Path] = []
        self.hadoop_conf: dict[str, str] = {}
        # More hive-site.xml settings and JVM options (the Kerberos Metastore's SASL, krb5.conf).
        self.hive_conf: dict[str, str] = {}
        self.jvm_options: list[str] = []
        self.describe = "Hive Metastore 2.3 (pyspark wheel)"
        # More environment for the service (HADOOP_USER_NAME: who it is on HDFS).
        self.env: dict[str, str] = {}
        self.chosen_port = port is None
        self.port = free_port() if port is None else port
        self.db_url = db_url
        self.db_user = db_user
        self.jdbc_jar = jdbc_jar
        self.pid_file = self.state / "metastore.pid"
        self.log_file = self.state / "metastore.log"

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> str:
        return f"file://{self.state}/warehouse"

    @property
    def viewfs_root(self) -> str:
        """``viewfs://<mount>/data``, a mount of ``<state>/viewfs-data``."""
        return f"viewfs://{VIEWFS_MOUNT}/data"

    @property
    def viewfs_conf(self) -> dict[str, str]:
        """The Spark settings that mount it (the Metastore has them in its core-site.xml)."""
        return {f"spark.hadoop.fs.viewfs.mounttable.{VIEWFS_MOUNT}.link./data": f"file://{self.state}/viewfs-data"}

    def claim_port(self) -> None:
        """Before the service starts: a port of our choosing that is taken is chosen again; one the
        caller fixed is an error."""
        for _ in range(5):
            if not port_in_use(self.port):
                return
            if not self.chosen_port:
                raise StackError(
                    f"port {self.port} is in use by another program: stop it or choose another port (--port)"
                )
            self.port = free_port()
        raise StackError(f"no free loopback port found for {self.describe} (last tried {self.port})")

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def start(self, timeout: float = 120) -> None:
        if self.pid() and self.ready():
            print(f"Hive Metastore already running at {self.uri} (pid {self.pid()})")
            return
        if shutil.which("java") is None:
            raise StackError("java not found: install a Java 17 runtime (e.g. apt-get install openjdk-17-jre-headless)")
        self.claim_port()
        conf = self.state / "metastore-conf"
        conf.mkdir(parents=True, exist_ok=True)
        (self.state / "warehouse").mkdir(exist_ok=True)
        (conf / "hive-site.xml").write_text(
            hive_site(self.state, self.db_url, self.db_user).replace(
                "</configuration>", _properties(self.hive_conf) + "</configuration>"
            )
        )
        extra = _properties(self.hadoop_conf)
        (conf / "core-site.xml").write_text(CORE_SITE.format(state=self.state, mount=VIEWFS_MOUNT, extra=extra))
        (self.state / "viewfs-data").mkdir(exist_ok=True)
        cmd = [
            "java",
            "-Xmx1g",
            *self.jvm_options,
            "-Dlog4j2.contextSelector=org.apache.logging.log4j.core.selector.BasicContextSelector",
            f"-Dderby.system.home={self.state}",
            "-cp",
            ":".join(
                [
                    str(conf),
                    f"{spark_jars()}/*",
                    *([str(self.jdbc_jar)] if self.jdbc_jar else []),
                    *map(str, self.extra_classpath),
                ]
            ),
            "org.apache.hadoop.hive.metastore.HiveMetaStore",
            "-p",
            str(self.port),
        ]
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state,
                start_new_session=True,
                env={**os.environ, **self.env},
            )
        self.pid_file.write_text(str(proc.pid))
        t0 = time.monotonic()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise StackError(f"the Hive Metastore exited with code {proc.returncode}; see {self.log_file}")
            if self.ready():
                print(f"Hive Metastore listening at {self.uri} (pid {proc.pid}, log {self.log_file})")
                record(self.describe, time.monotonic() - t0)
                return
            time.sleep(1)
        self.stop()
        raise StackError(f"the Hive Metastore did not answer within {timeout:.0f}s; see {self.log_file}")

    def ready(self) -> bool:
        """Whether the started service serves (a Thrift call answered)."""
        return answers(self.port)

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        os.killpg(pid, signal.SIGTERM)
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.2)
        else:
            os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        print(f"Hive Metastore (pid {pid}) stopped")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--state", default=os.environ.get("HIVE_COMPACTION_STATE", str(DEFAULT_STATE)))
    p.add_argument("--port", type=int, default=int(os.environ.get("HIVE_METASTORE_PORT", "9083")))
    args = p.parse_args()
    ms = Metastore(Path(args.state), args.port)
    try:
        if args.action == "start":
            ms.start()
        elif args.action == "stop":
            ms.stop()
        else:
            up = ms.pid() is not None and answers(args.port)
            print(f"Hive Metastore at {ms.uri}: {'up' if up else 'down'}")
            return 0 if up else 1
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
