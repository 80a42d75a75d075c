"""A harness over the real local stack (Metastore service, Spark, Airflow) for tests, the
reliability script and the benchmarks: one Metastore on a free loopback port with its state in
a folder, one Airflow home, helpers to make tables, read them back and run the DAG or the job.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))
import wheel_sweeps

# The package under test: the checkout's plugins/, or the built wheel installed unmodified when
# HIVE_COMPACTION_INSTALLED names it (make test-exhaustive: scripts/wheel_sweeps.py).
if wheel_sweeps.installed() is None and str(ROOT / "plugins") not in sys.path:
    sys.path.insert(0, str(ROOT / "plugins"))

import postgres
from airflow_services import migrate
from hive_compaction.jobs import ENGINE_JAR_NAME
from local_stack import VIEWFS_MOUNT, Metastore, free_port
from suite_budget import record, started

_dates = itertools.count()
QUICK_JVM_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# A job that loads what the merge jobs' drivers load (Spark SQL, ORC, Parquet), for the archive of
# classes the tests' spark-submits share (Java's class data sharing).
CDS_JOB = """
import sys
from pyspark.sql import SparkSession
s = SparkSession.builder.getOrCreate()
df = s.range(100).selectExpr("id", "cast(id AS string) AS name")
for fmt in ("orc", "parquet"):
    df.write.format(fmt).mode("overwrite").save(f"file://{sys.argv[1]}/{fmt}")
    s.read.format(fmt).load(f"file://{sys.argv[1]}/{fmt}").count()
df.selectExpr("sum(cast(xxhash64(id, name) AS DECIMAL(38,0)))", "max(sha2(name, 256))").collect()
try:  # the jobs' Metastore client in the JVM (its Thrift classes, HiveConf's XML)
    conf = s._jvm.org.apache.hadoop.hive.conf.HiveConf()
    conf.set("hive.metastore.uris", sys.argv[2])
    client = s._jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)
    client.getAllDatabases()
    client.close()
except Exception as e:
    print("no Metastore client in the archive:", e)
s.stop()
"""


def data_files(folder: Path) -> list[Path]:
    """A local folder's data files, sorted: what Hive and Spark read (names starting with '.' or
    '_' are hidden)."""
    return sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith((".", "_")))


SECOND_INSTANCE_DAG_FILE = """from hive_compaction.airflow import config
from hive_compaction.airflow.dag_factory import compaction_dags

dag, rollback = compaction_dags(config.dag_config_path(__file__, "{config_name}"))
"""


def two_instance_dags(folder: Path, config_name: str = "team_b.yaml") -> Path:
    """A dags folder as a user with two instances has it: the shipped DAG file (its YAML is
    ``hive_compaction.yaml`` beside it, or ``$HIVE_COMPACTION_CONFIG``) and a second DAG file
    reading ``config_name`` beside it. The YAMLs are the caller's to write."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dags" / "hive_compaction_dag.py", folder)
    (folder / "team_b_dag.py").write_text(SECOND_INSTANCE_DAG_FILE.format(config_name=config_name))
    return folder


def shared_class_archive() -> Path:
    """Where this machine's driver class archive is: keyed by the Java, the Spark jars (their
    folder's change time: a reinstalled venv makes a new one), the JVM flags it was made with,
    since a JVM rejects an archive made by another (it then starts as if there were none), and
    the job that makes it."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    java = os.path.realpath(shutil.which("java") or "java")
    key = "|".join(
        (
            java,
            os.environ.get("JAVA_HOME", ""),
            str(jars),
            str(jars.stat().st_ctime_ns),
            pyspark.__version__,
            QUICK_JVM_START,
            CDS_JOB,
        )
    )
    return ROOT / ".state" / "class-archive" / f"driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def quick_submit_opts() -> str:
    """SPARK_SUBMIT_OPTS for a short JVM of the tests: C1 and one GC thread, and the class archive
    once it is there (a JVM told to map an archive that is missing maps none, the JDK's own
    included, so it is named only when it exists)."""
    archive = shared_class_archive()
    shared = f" -XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off" if archive.exists() else ""
    return QUICK_JVM_START + shared


@dataclass
class DagRun:
    returncode: int
    log: str
    run_id: str
    # Asked of Airflow (a CLI call, ~2.5 s) only when a test reads ``states``.
    read_states: Callable[[], dict[str, list[str]]] = field(repr=False, default=dict)

    @cached_property
    def states(self) -> dict[str, list[str]]:
        """task_id -> states (one per map index)."""
        return self.read_states()

    @property
    def state(self) -> str:
        m = re.search(r"DagRun Finished: .*?state=(\w+)", self.log)
        return m.group(1) if m else "unknown"


class Stack:
    """``use_postgres``: PostgreSQL (Debian's package, on loopback) backs the Metastore and
    Airflow's metadata database, as in production; else embedded Derby and SQLite."""

    def __init__(
        self,
        state: Path,
        use_postgres: bool = False,
        quick_jvm_start: bool = False,
        object_store: bool = False,
        persistent_airflow: bool = False,
        metastore: Callable[[postgres.Postgres | None], Metastore] | None = None,
    ):
        """``quick_jvm_start``: the merge jobs' JVMs compile with C1 only and collect garbage on one
        thread: a short job starts ~15% sooner on an idle 2-core machine and up to twice as fast
        while other work holds the cores (the tests' jobs are all short; the benchmarks leave it
        off, it would slow real work). ``object_store``: the tests' s3like file system (no atomic
        rename, no exclusive create; ``scripts/s3like.py``) mounted at viewfs://hcstack/objects,
        in the Metastore too. ``persistent_airflow``: ``run_dag`` sends its runs to one long-lived
        Airflow process (``dag_runner``: the same command, without importing Airflow each time).
        ``metastore``: makes the stack's Metastore from its PostgreSQL (e.g. a Hive 3.1 or 4.0
        server, ``hive_metastores.HiveMetastoreServer``) instead of the pyspark wheel's 2.3."""
        self.state = state
        self.persistent_airflow = persistent_airflow
        self._dag_runner = None
        self.class_archive = shared_class_archive()  # made by start() when quick_jvm_start, once per machine
        self.quick_jvm_start = quick_jvm_start
        self.object_store = object_store
        self.s3like_jar: Path | None = None
        self.object_store_error: str | None = None if object_store else "not requested (Stack(object_store=True))"
        self.postgres = postgres.Postgres(port=free_port()) if use_postgres else None
        db = self.postgres.metastore_args() if self.postgres else {}
        self.own_metastore = metastore is None  # the wheel's 2.3, its database set up by start()
        self.metastore = Metastore(state / "hms", None, **db) if metastore is None else metastore(self.postgres)
        self.airflow_home = state / "airflow"
        self.airflow_db_env: dict[str, str] = {}  # the session Airflow's database, set by start()
        self._spark = None

    def airflow_database(self, name: str) -> dict[str, str]:
        """The environment giving Airflow a metadata database of its own (on PostgreSQL when the
        stack has it, else SQLite in its AIRFLOW_HOME)."""
        if self.postgres is None:
            return {}
        self.postgres.create_database(name)
        return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.postgres.sqlalchemy_url(name)}

    @property
    def port(self) -> int:
        return self.metastore.port

    def env(self, config_path: Path | None = None, **extra) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
                "AIRFLOW_HOME": str(self.airflow_home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(wheel_sweeps.plugins_folder()),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "AIRFLOW_CONN_HIVE_METASTORE": json.dumps(
                    {"conn_type": "generic", "host": "127.0.0.1", "port": self.port}
                ),
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable,
                **self.airflow_db_env,
            }
        )
        if self.quick_jvm_start:  # read by spark-submit for the driver's JVM (the Airflow-run jobs' too)
            env.setdefault("SPARK_SUBMIT_OPTS", quick_submit_opts())  # another classpath's JVM ignores the archive
        if config_path:
            env["HIVE_COMPACTION_CONFIG"] = str(config_path)
        env.update(extra)
        if any(k.startswith("HIVE_COMPACTION_TEST_") for k in extra):
            # The job's storage and Metastore calls are wrapped from outside (scripts/fault_hooks.py,
            # loaded by scripts/fault_injection/sitecustomize.py) only when a test asks for a fault.
            injection = str(ROOT / "scripts" / "fault_injection")
            env["PYTHONPATH"] = os.pathsep.join(p for p in (injection, env.get("PYTHONPATH")) if p)
        return env

    def start(self) -> None:
        if self.postgres:
            self.postgres.start()
            if self.own_metastore:
                self.postgres.create_database("metastore")
                self.postgres.create_transaction_tables("metastore")
            self.airflow_db_env = self.airflow_database("airflow")
        if self.object_store:
            self._add_object_store()
        self.metastore.start()
        if self.quick_jvm_start:
            self._archive_driver_classes()
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        migrate(self.env())

    def _archive_driver_classes(self) -> None:
        """In the background, one small spark-submit dumps the classes its driver loaded into an
        archive that the later spark-submits map instead of loading and verifying each class
        again: about a third less CPU per job start here (each job of the suite starts a JVM).
        One archive serves every stack of the machine (its name is keyed by what it was made
        from), so only the first stack of a fresh checkout makes it, once its Metastore is up (the
        job opens the Metastore client the merge jobs use); a stack that finds another process
        making it starts without it, and its jobs use it once it is there."""
        import threading

        if self.class_archive.exists():
            return
        work = self.class_archive.with_suffix(".work")
        work.mkdir(parents=True, exist_ok=True)
        claim = work / "making"
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if time.time() - claim.stat().st_mtime < 900:  # another stack is making it
                return
            claim.unlink(missing_ok=True)  # left by a run that was stopped
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.close(fd)
        (work / "job.py").write_text(CDS_JOB)
        dump = work / f"classes-{os.getpid()}.jsa"
        env = self.env()
        env["SPARK_SUBMIT_OPTS"] = f"{QUICK_JVM_START} -XX:ArchiveClassesAtExit={dump}"
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [
                "spark-submit",
                "--master",
                "local[2]",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.driver.host=127.0.0.1",
                str(work / "job.py"),
                str(work),
                self.metastore.uri,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def publish():
            try:
                if proc.wait() == 0 and dump.exists():
                    dump.rename(self.class_archive)  # whole: a job never maps half an archive
                    record("Spark driver class archive (class data sharing, background)", time.monotonic() - t0)
            finally:
                claim.unlink(missing_ok=True)

        threading.Thread(target=publish, daemon=True, name="class-archive").start()

    def _add_object_store(self) -> None:
        """Build the s3like jar and give it, with its mount, to the Metastore. If it cannot be built
        the stack starts without it (only the tests of that storage fail, saying why)."""
        import s3like

        try:
            self.s3like_jar = s3like.build_jar(self.state / "s3like")
        except Exception as e:  # noqa: BLE001 - reported by the tests that need it
            self.object_store_error = f"the s3like file system could not be built: {type(e).__name__}: {e}"
            print(f"\nnote: {self.object_store_error}")
            return
        (self.s3like_root / s3like.MOUNT_LINK.strip("/")).mkdir(parents=True, exist_ok=True)
        self.metastore.extra_classpath.append(self.s3like_jar)
        self.metastore.hadoop_conf.update(s3like.hadoop_conf(self.s3like_root, VIEWFS_MOUNT))

    @property
    def s3like_root(self) -> Path:
        """The local folder behind s3like:///."""
        return self.state / "s3like" / "root"

    @property
    def object_store_root(self) -> str:
        """``viewfs://hcstack/objects``, a mount of ``s3like:///objects``."""
        import s3like

        return f"viewfs://{VIEWFS_MOUNT}{s3like.MOUNT_LINK}"

    @property
    def object_store_spark_conf(self) -> dict[str, str]:
        """The Spark settings a merge job needs to reach it: the jar on the driver's classpath (in
        local mode the executors run in the driver's JVM), the scheme and both viewfs links."""
        import s3like

        if self.s3like_jar is None:
            raise RuntimeError(self.object_store_error)
        return {
            "spark.driver.extraClassPath": str(self.s3like_jar),
            **self.metastore.viewfs_conf,
            **{f"spark.hadoop.{k}": v for k, v in s3like.hadoop_conf(self.s3like_root, VIEWFS_MOUNT).items()},
        }

    @property
    def spark(self):
        if self._spark is None:
            os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
            from demo_tables import spark_session

            with started("Spark session with Hive support (in the test process)"):
                self._spark = spark_session(self.metastore.uri, self.metastore.warehouse, app="hive-compaction-tests")
            self._spark.sparkContext.setLogLevel("ERROR")
            for key, value in self.metastore.viewfs_conf.items():  # tables on viewfs:// too
                self._spark._jsc.hadoopConfiguration().set(key[len("spark.hadoop.") :], value)
        return self._spark

    def stop(self) -> None:
        if self._dag_runner is not None:
            self._dag_runner.stop()
        if self._spark is not None:
            self._spark.stop()
        self.metastore.stop()
        if self.postgres:
            self.postgres.stop(remove=True)

    # --- data -------------------------------------------------------------------------------
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
        from demo_tables import create_table, fill

        create_table(self.spark, db, table, storage)
        fill(self.spark, db, table, dates, files, rows, single_file_dates)

    def msck_repair(self, db: str, table: str) -> None:
        self.spark.sql(f"MSCK REPAIR TABLE {db}.{table}")

    def partition_location(self, db: str, table: str, partition: str) -> Path:
        from hmsclient import hmsclient

        with hmsclient.HMSClient(host="127.0.0.1", port=self.port) as c:
            return Path(urlsplit(c.get_partition_by_name(db, table, partition).sd.location).path)

    def work_area(self, db: str, table: str) -> Path:
        """The table's work area (journal, staging, trash, manifests) in the warehouse's folder."""
        return Path(str(self.metastore.state)) / "warehouse" / f"{db}.db" / ".hive_compaction" / table

    def rows(self, db: str, table: str) -> dict[str, list[str]]:
        """Per partition: every row (all columns, partition columns included) as text, sorted.

        Read through the Metastore as users read the table."""
        self.spark.sql(f"REFRESH TABLE {db}.{table}")
        keys = [f.name for f in self.spark.table(f"{db}.{table}").schema.fields][-1:]
        out: dict[str, list[str]] = {}
        for r in self.spark.table(f"{db}.{table}").collect():
            out.setdefault("/".join(f"{k}={r[k]}" for k in keys), []).append(repr(tuple(r)))
        return {k: sorted(v) for k, v in out.items()}

    def content(self, db: str, table: str) -> dict[str, tuple[int, str]]:
        """Per partition: (rows, digest of the sorted rows). An exact multiset comparison: a lost,
        changed or duplicated row changes the digest."""
        return {k: (len(v), hashlib.sha256("\n".join(v).encode()).hexdigest()) for k, v in self.rows(db, table).items()}

    def snapshot(self, db: str, table: str) -> dict[str, dict]:
        from demo import partition_snapshot

        return partition_snapshot(self.port, db, table)

    # --- Airflow ----------------------------------------------------------------------------
    def write_config(self, path: Path, tables: list, **top) -> Path:
        raw = {
            "metastore_conn_id": "hive_metastore",
            "spark_conn_id": "spark_default",
            "retries": 0,
            "spark_conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
            "tables": tables,
            **top,
        }
        raw.setdefault("defaults", {}).setdefault("quiet_period_minutes", 0)  # tables are written just before
        path.write_text(yaml.safe_dump(raw))
        return path

    def run_dag(self, config_path: Path, conf: dict | None = None, dag_id: str = "hive_compaction", **env) -> DagRun:
        """``airflow dags test`` of the merge DAG (or ``dag_id``: another DAG of the dags folder)."""
        logical = (datetime(2030, 1, 1) + timedelta(hours=next(_dates))).isoformat()
        args = [dag_id, logical] + (["--conf", json.dumps(conf)] if conf else [])
        run_env = self.env(config_path, **env)
        runner = self.dag_runner()
        if runner is not None and runner.serves(run_env):
            with started("airflow dags test (in the long-lived Airflow process)"):
                returncode, log = runner.run(run_env, args, self.state / f"dags-test-{logical}.log")
        else:
            with started("airflow dags test (a command of its own)"):
                p = subprocess.run(
                    ["airflow", "dags", "test", *args], env=run_env, capture_output=True, text=True, timeout=900
                )
            returncode, log = p.returncode, p.stdout + p.stderr
        m = re.search(r"DagRun Finished: .*?run_id=([^,]+),", log)
        run_id = m.group(1) if m else ""
        return DagRun(
            returncode, log, run_id, (lambda: self.task_states(run_id, config_path, dag_id)) if run_id else dict
        )

    def dag_runner(self):
        """The long-lived Airflow process for ``run_dag`` (started on first use), or None."""
        if not self.persistent_airflow:
            return None
        if self._dag_runner is None or self._dag_runner.proc is None:
            from dag_runner import Client

            self._dag_runner = Client(self.env(), self.state)
            record("Airflow imported by the long-lived dags-test process", self._dag_runner.start())
        return self._dag_runner

    def task_states(self, run_id: str, config_path: Path, dag_id: str = "hive_compaction") -> dict[str, list[str]]:
        p = subprocess.run(
            ["airflow", "tasks", "states-for-dag-run", dag_id, run_id, "-o", "json"],
            env=self.env(config_path),
            capture_output=True,
            text=True,
            check=True,
        )
        out: dict[str, list[str]] = {}
        for row in json.loads(p.stdout[p.stdout.index("[") :]):
            out.setdefault(row["task_id"], []).append(row["state"])
        return out

    # --- the merge job alone ----------------------------------------------------------------
    def plan_batches(self, config_path: Path, run_id: str, dry_run: bool = False) -> dict:
        """What the DAG's plan task would hand to the mapped merge tasks, computed in-process
        (a manual run without dates: every partition the statistics or the audit point at)."""
        from hive_compaction.airflow import config, tasks as dag_tasks
        from hive_compaction.airflow.metastore_hook import Metastore as HMS
        from hive_compaction.airflow.run_params import select

        settings = config.load(config_path)
        with HMS("127.0.0.1", self.port) as hms:
            return dag_tasks.plan(settings, hms, run_id, select(settings, {"dry_run": dry_run}, "manual", None))

    def results(self, config_path: Path, run: str) -> list[dict]:
        """What the merge jobs of a run (its id or path tag) recorded in the results table."""
        from hive_compaction.airflow import config, results_reader
        from hive_compaction.airflow.metastore_hook import Metastore as HMS
        from hive_compaction.model.results import decode_results
        from hive_compaction.storage.paths import run_tag

        settings = config.load(config_path)
        with HMS("127.0.0.1", self.port) as hms:
            recorded = results_reader.read_run(hms, settings.results_table, run_tag(run))
        return [r.to_dict() for _, params in sorted(recorded.items()) for r in decode_results(params)]

    @staticmethod
    def spark_submit_cmd(batch_arg: str, conf: dict | None = None) -> list[str]:
        """The merge job's command for one encoded batch (``conf``: more Spark settings)."""
        return [
            "spark-submit",
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            *[a for k, v in (conf or {}).items() for a in ("--conf", f"{k}={v}")],
            *(["--jars", str(jar)] if (jar := wheel_sweeps.package_dir() / "jobs" / ENGINE_JAR_NAME).exists() else []),
            str(wheel_sweeps.package_dir() / "jobs" / "compact_partitions.py"),
            "--batch",
            batch_arg,
        ]

    def rollback_cmd(
        self, table: str, run_id: str, config_path: Path, conf: dict | None = None, py_files: Path | None = None
    ) -> list[str]:
        """The rollback job's command for a table's run (``conf``: more Spark settings; ``py_files``:
        the package's zip, for a driver without it); the table's work_dir, if ``config_path`` sets
        one, is passed as an argument (the job reads no config)."""
        from hive_compaction.airflow import config

        work_dir = config.load(config_path).table(table.lower()).policy.work_dir
        return [
            "spark-submit",
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            *[a for k, v in (conf or {}).items() for a in ("--conf", f"{k}={v}")],
            *(["--py-files", str(py_files)] if py_files else []),
            str(wheel_sweeps.package_dir() / "jobs" / "rollback.py"),
            "--table",
            table,
            "--run",
            run_id,
            "--metastore",
            f"thrift://127.0.0.1:{self.port}",
            *(["--work-dir", work_dir] if work_dir else []),
        ]

    def spark_submit(
        self, batch_arg: str, config_path: Path | None = None, conf: dict | None = None, **env
    ) -> subprocess.CompletedProcess:
        """Run the merge job on one encoded batch, as the mapped task would (``conf``: more Spark
        settings)."""
        with started("spark-submit of the merge job (alone)"):
            return subprocess.run(
                self.spark_submit_cmd(batch_arg, conf),
                env=self.env(config_path, **env),
                capture_output=True,
                text=True,
                timeout=600,
            )
