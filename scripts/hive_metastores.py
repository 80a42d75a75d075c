"""Real Hive Metastore 3.1 and 4.0 servers on PostgreSQL, from Maven Central, for the stack tests.

``make jars`` fetches each release's binary tarball (``scripts/maven/hive3``, ``hive4``) into
``.state/jars/<stack>/``; ``HiveMetastoreServer`` unpacks it once, loads the release's own
PostgreSQL schema script from it into a database of its own (as ``schematool -initSchema``
would), then runs the server's main class on a loopback port with a small heap. Hive 4.1 and
newer are not here: Maven Central holds no server artifact (``hive-standalone-metastore-server``)
for them, only 4.0.0 and 4.0.1.

Both run on Java 17 (OpenJDK 17.0.15). On the Temurin 25 JDK neither starts: Hadoop's
UserGroupInformation calls ``Subject.getSubject`` ("getSubject is not supported" since JDK 24).
"""

from __future__ import annotations

import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import postgres
from local_stack import CORE_SITE, VIEWFS_MOUNT, Metastore, StackError, answers
from suite_budget import record

ROOT = Path(__file__).resolve().parents[1]
JARS = ROOT / ".state" / "jars"


@dataclass(frozen=True)
class Release:
    version: str
    stack: str  # scripts/maven/<stack>/pom.xml, .state/jars/<stack>/
    tarball: str
    schema: str  # the PostgreSQL schema script in its scripts/metastore/upgrade/postgres/
    settings: tuple[tuple[str, str], ...] = ()  # what this release needs to start standalone

    @property
    def jars(self) -> Path:
        return JARS / self.stack

    @property
    def home(self) -> Path:
        """The unpacked distribution (its lib/ and scripts/)."""
        return self.jars / "dist"


TXN_TIMEOUT_SECONDS = 10
# The Metastore's own expiry of dead holders' locks, made short: hive.txn.timeout, and the
# housekeeper (AcidHouseKeeperService) every 2 s. 3.1 runs it only with the compactor initiator
# on (its Initiator comes from hive-exec, scripts/maven/hive3); 4.0 with housekeeping threads on.
HOUSEKEEPING = {
    "metastore.txn.timeout": f"{TXN_TIMEOUT_SECONDS}s",
    "metastore.compactor.initiator.on": "true",
    "metastore.timedout.txn.reaper.start": "1s",
    "metastore.timedout.txn.reaper.interval": "2s",
    "metastore.housekeeping.threads.on": "true",
    "metastore.acid.housekeeper.interval": "2s",
}
# Hive 4's default metadata transformer rewrites what a client without processor capabilities
# asks for (hmsclient 0.1.1 and Spark's 2.3 client send none): it refuses to create an ACID
# table, and makes managed tables external. Users' tables come from HiveServer2, which sends
# them; the tests and benchmarks that create tables turn it off.
NO_TRANSFORMER = {"metastore.metadata.transformer.class": " "}  # blank: an empty value reads as unset

RELEASES = {
    "3.1.3": Release(
        "3.1.3",
        "hive3",
        "hive-standalone-metastore-3.1.3-bin.tar.gz",
        "hive-schema-3.1.0.postgres.sql",
        (
            # The defaults name classes of hive-exec, which the standalone server does not ship.
            ("metastore.expression.proxy", "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy"),
            (
                "metastore.task.threads.always",
                "org.apache.hadoop.hive.metastore.events.EventCleanerTask,"
                "org.apache.hadoop.hive.metastore.RuntimeStatsCleanerTask",
            ),
        ),
    ),
    "4.0.1": Release(
        "4.0.1",
        "hive4",
        "hive-standalone-metastore-server-4.0.1-bin.tar.gz",
        "hive-schema-4.0.0.postgres.sql",
        (
            # The default list without HiveProtoEventsCleanerTask (Hive-on-Tez event logs; it needs
            # YARN's classes): one class failing to load stops the housekeeping tasks listed after it.
            (
                "metastore.task.threads.always",
                ",".join(
                    "org.apache.hadoop.hive.metastore." + c
                    for c in (
                        "events.EventCleanerTask",
                        "RuntimeStatsCleanerTask",
                        "metrics.AcidMetricService",
                        "metrics.AcidMetricLogger",
                        "ScheduledQueryExecutionsMaintTask",
                        "ReplicationMetricsMaintTask",
                    )
                ),
            ),
        ),
    ),
}


def unpacked(release: Release) -> Path:
    """The release's distribution folder, unpacked from its tarball on first use."""
    done = release.home / ".unpacked"
    if done.exists():
        return release.home
    tarball = release.jars / release.tarball
    if not tarball.is_file():
        raise StackError(f"{tarball} is missing: run `make jars` (it fetches scripts/maven/{release.stack}/pom.xml)")
    with tarfile.open(tarball) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
        tar.extractall(release.jars, filter="data")
    if release.home.exists():
        subprocess.run(["rm", "-rf", str(release.home)], check=True)
    (release.jars / top).rename(release.home)
    done.touch()
    return release.home


def site_xml(settings: dict[str, str]) -> str:
    props = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n" for k, v in settings.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{props}</configuration>\n'


class HiveMetastoreServer(Metastore):
    """One release's Metastore server; its database ``hms_<version>`` on ``pg`` (running), its
    warehouse and logs under ``state``. ``settings``: more metastore-site.xml properties (e.g.
    the lock housekeeping's). Same interface as ``local_stack.Metastore`` (uri, warehouse,
    start, stop), so ``harness.Stack`` can take it."""

    def __init__(
        self,
        version: str,
        state: Path,
        pg: postgres.Postgres,
        port: int | None = None,
        settings: dict[str, str] | None = None,
        heap: str = "256m",
    ):
        super().__init__(state, port)
        self.release = RELEASES[version]
        self.pg = pg
        self.database = "hms_" + version.replace(".", "_")
        self.settings = dict(settings or {})
        self.heap = heap
        self.started_in: float | None = None

    @property
    def version(self) -> str:
        return self.release.version

    def site(self) -> dict[str, str]:
        return {
            "javax.jdo.option.ConnectionURL": self.pg.jdbc_url(self.database),
            "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
            "javax.jdo.option.ConnectionUserName": postgres.ROLE,
            "javax.jdo.option.ConnectionPassword": "",
            # Hive 4 refuses an external table inside the managed root: the tests' tables (external,
            # under ``warehouse``) and managed ones get separate roots.
            "metastore.warehouse.dir": f"file://{self.state}/managed",
            "metastore.warehouse.external.dir": self.warehouse,
            "metastore.event.db.notification.api.auth": "false",
            **dict(self.release.settings),
            **self.settings,
        }

    def load_schema(self) -> None:
        """The release's schema script into a fresh database (the server verifies its version)."""
        self.pg.create_database(self.database)
        script = unpacked(self.release) / "scripts/metastore/upgrade/postgres" / self.release.schema
        psql = [
            str(postgres.bin_dir() / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.pg.port),
            "-U",
            postgres.ROLE,
            "-d",
            self.database,
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-f",
            "-",
        ]
        # Fed on stdin: the server's user (postgres, under root) need not read our folders.
        done = subprocess.run([*self.pg.as_postgres, *psql], input=script.read_text(), capture_output=True, text=True)
        if done.returncode:
            raise StackError(f"the schema script {script.name} failed: {done.stderr[-2000:]}")

    def schema_version(self) -> str:
        """What the database's VERSION table says (as schematool -info reads it)."""
        psql = [
            str(postgres.bin_dir() / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.pg.port),
            "-U",
            postgres.ROLE,
            "-d",
            self.database,
            "-tAc",
            'SELECT "SCHEMA_VERSION" FROM "VERSION"',
        ]
        return subprocess.run([*self.pg.as_postgres, *psql], capture_output=True, text=True, check=True).stdout.strip()

    def command(self, conf: Path) -> list[str]:
        home = unpacked(self.release)
        return [
            "java",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            # Names this server's state folder: a stray JVM is found (and only ours) by it.
            f"-Dhive_compaction.state={self.state}",
            "-cp",
            f"{conf}:{home}/lib/*:{self.release.jars}/*",
            "org.apache.hadoop.hive.metastore.HiveMetaStore",
            "-p",
            str(self.port),
        ]

    def start(self, timeout: float = 180) -> None:
        if self.pid() and answers(self.port):
            return
        self.claim_port()
        t0 = time.monotonic()
        self.load_schema()
        conf = self.state / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (self.state / "warehouse").mkdir(exist_ok=True)
        (self.state / "viewfs-data").mkdir(exist_ok=True)
        # hive-site.xml too: 3.1's compactor threads read a HiveConf, which knows only that name;
        # without it they open the transaction store on HiveConf's default (embedded Derby), and
        # the first to open it sets the pool every lock call of the server then uses.
        for name in ("metastore-site.xml", "hive-site.xml"):
            (conf / name).write_text(site_xml(self.site()))
        (conf / "core-site.xml").write_text(CORE_SITE.format(state=self.state, mount=VIEWFS_MOUNT, extra=""))
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                self.command(conf), stdout=log, stderr=subprocess.STDOUT, cwd=self.state, start_new_session=True
            )
        self.pid_file.write_text(str(proc.pid))
        while time.monotonic() < t0 + timeout:
            if proc.poll() is not None:
                raise StackError(
                    f"the Hive Metastore {self.version} exited with code {proc.returncode}; see {self.log_file}"
                )
            if answers(self.port):
                self.started_in = time.monotonic() - t0
                record(f"Hive Metastore {self.version} (Maven)", self.started_in)
                return
            time.sleep(0.5)
        self.stop()
        raise StackError(f"the Hive Metastore {self.version} did not answer within {timeout:.0f}s; see {self.log_file}")
