"""A real YARN for the tests: Hadoop's MiniYARNCluster (one ResourceManager, one NodeManager) in a
JVM of its own, over a tests' HDFS (hdfs_stack.Hdfs), from the Maven Central jars `make jars` puts
in .state/jars/yarn/ (scripts/maven/yarn/pom.xml). The main class, scripts/java/MiniYarn.java, is
compiled here with javac. Everything binds to 127.0.0.1. ``conf_dir`` is a HADOOP_CONF_DIR for
spark-submit: the cluster's own yarn-site.xml and a core-site.xml naming the HDFS.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from local_stack import await_start, site_properties, stop_group
from suite_budget import record

ROOT = Path(__file__).resolve().parents[1]
JARS = ROOT / ".state" / "jars" / "yarn"
SOURCE = ROOT / "scripts" / "java" / "MiniYarn.java"
FIFO = "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler"


class YarnError(RuntimeError):
    pass


class Yarn:
    def __init__(self, state: Path, default_fs: str):
        self.state = Path(state).resolve()
        self.default_fs = default_fs
        self.conf_dir = self.state / "conf"
        self.proc: subprocess.Popen | None = None
        self.conf: dict[str, str] = {}

    @property
    def webapp(self) -> str:
        """The ResourceManager's REST API (the Spark provider's yarn_resourcemanager_webapp_address)."""
        return "http://" + self.conf["yarn.resourcemanager.webapp.address"].replace("localhost", "127.0.0.1")

    def _compile(self) -> Path:
        classes = self.state / "classes"
        classes.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(
            ["javac", "-cp", f"{JARS}/*", "-d", str(classes), str(SOURCE)], capture_output=True, text=True
        )
        if p.returncode:
            raise YarnError(f"javac {SOURCE.name} failed: {p.stderr[-2000:]}")
        return classes

    def start(self, timeout: float = 180) -> None:
        if not list(JARS.glob("*.jar")):
            raise YarnError(
                f"no jars in {JARS}: run `make jars` (it fetches scripts/maven/yarn/pom.xml's from Maven Central)"
            )
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        site = self.conf_dir / "yarn-site.xml"
        site.unlink(missing_ok=True)
        t0 = time.monotonic()
        classes = self._compile()
        settings = {
            "fs.defaultFS": self.default_fs,
            "yarn.resourcemanager.scheduler.class": FIFO,
            "yarn.nodemanager.resource.memory-mb": "4096",
            "yarn.scheduler.minimum-allocation-mb": "128",
            # the containers' memory is Spark's to size; the disk check would stop a full test disk
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99.9",
        }
        cmd = [
            "java",
            "-Xmx512m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Djava.io.tmpdir={self.state}",
            "-cp",
            f"{classes}:{JARS}/*",
            "MiniYarn",
            str(site),
            *(f"{k}={v}" for k, v in settings.items()),
        ]
        with open(self.state / "yarn.log", "ab") as log:  # (its work folders go in the current folder)
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.state, start_new_session=True
            )
        await_start(
            self.proc, site.exists, t0, timeout, "MiniYARNCluster", self.state / "yarn.log", YarnError, self.stop
        )
        self.conf = site_properties(site)
        (self.conf_dir / "core-site.xml").write_text(
            f'<?xml version="1.0"?>\n<configuration><property><name>fs.defaultFS</name><value>{self.default_fs}'
            "</value></property></configuration>\n"
        )
        self.started_seconds = time.monotonic() - t0
        record("YARN MiniYARNCluster (Maven)", self.started_seconds)

    def stop(self) -> None:
        stop_group(self.proc)
