"""A real HDFS for the tests: Hadoop's MiniDFSCluster (one NameNode, one DataNode) in a JVM of its
own, from the Maven Central jars `make jars` puts in .state/jars/hdfs/ (scripts/maven/hdfs/pom.xml).

Started by Hadoop's own main class, ``MiniHadoopClusterManager -nomr`` (in hadoop-client-minicluster):
it binds the NameNode and DataNode to 127.0.0.1 on ports it picks, writes the cluster's
configuration and NameNode port to files, and runs until it is killed. Permissions are checked;
the HDFS superuser is the user that starts the JVM (as on a cluster, the ``hdfs`` user). Users the
tests act as get their groups from ``groups`` (Hadoop's static mapping: they need no Unix account).
The files are read and set up over WebHDFS (plain HTTP on loopback), so a check never goes
through the code it checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from local_stack import await_start, site_properties, stop_group
from suite_budget import record

ROOT = Path(__file__).resolve().parents[1]
JARS = ROOT / ".state" / "jars" / "hdfs"
MAIN = "org.apache.hadoop.mapreduce.MiniHadoopClusterManager"


class HdfsError(RuntimeError):
    pass


class Hdfs:
    def __init__(self, state: Path, groups: dict[str, str] | None = None):
        """``groups``: user -> its groups (comma-separated), e.g. ``{"etl": "etl"}``."""
        self.state = Path(state).resolve()
        self.groups = groups or {}
        self.proc: subprocess.Popen | None = None
        self.conf: dict[str, str] = {}
        self.port = 0

    @property
    def uri(self) -> str:
        return f"hdfs://127.0.0.1:{self.port}"

    @property
    def http_address(self) -> str:
        return self.conf["dfs.namenode.http-address"].replace("localhost", "127.0.0.1")

    def start(self, timeout: float = 180) -> None:
        jars = sorted(JARS.glob("*.jar"))
        if not jars:
            raise HdfsError(
                f"no jars in {JARS}: run `make jars` (it fetches scripts/maven/hdfs/pom.xml's from Maven Central)"
            )
        self.state.mkdir(parents=True, exist_ok=True)
        details, written = self.state / "details.json", self.state / "cluster-conf.xml"
        details.unlink(missing_ok=True)
        mapping = ";".join(f"{u}={g}" for u, g in self.groups.items())
        cmd = [
            "java",
            "-Xmx384m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Djava.io.tmpdir={self.state}",
            "-cp",
            f"{JARS}/*",
            MAIN,
            "-nomr",
            "-format",
            "-datanodes",
            "1",
            "-writeConfig",
            str(written),
            "-writeDetails",
            str(details),
            "-D",
            f"hdfs.minidfs.basedir={self.state / 'data'}",
            "-D",
            "dfs.permissions.enabled=true",
            *(["-D", f"hadoop.user.group.static.mapping.overrides={mapping}"] if mapping else []),
        ]
        t0 = time.monotonic()
        with open(self.state / "hdfs.log", "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.state, start_new_session=True, env=self._own_env()
            )
        await_start(
            self.proc,
            lambda: details.exists() and details.read_text().strip(),
            t0,
            timeout,
            "MiniDFSCluster",
            self.state / "hdfs.log",
            HdfsError,
            self.stop,
        )
        time.sleep(0.2)  # the configuration is written just before the details
        self.port = int(json.loads(details.read_text())["namenode_port"])
        self.conf = site_properties(written)
        self.started_seconds = time.monotonic() - t0
        record("HDFS MiniDFSCluster (Maven)", self.started_seconds)

    @staticmethod
    def _own_env() -> dict[str, str]:
        """This process's environment without HADOOP_USER_NAME: the cluster runs as the Unix user."""
        return {k: v for k, v in os.environ.items() if k != "HADOOP_USER_NAME"}

    def stop(self) -> None:
        stop_group(self.proc)

    # --- WebHDFS ----------------------------------------------------------------------------
    def webhdfs(self, method: str, path: str, op: str, user: str, **params) -> dict:
        query = urllib.parse.urlencode({"op": op, "user.name": user, **params})
        url = f"http://{self.http_address}/webhdfs/v1{urllib.parse.quote(path)}?{query}"
        req = urllib.request.Request(url, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                body = r.read()
        except urllib.error.HTTPError as e:
            raise HdfsError(f"WebHDFS {op} {path} as {user}: {e.code} {e.read().decode(errors='replace')}") from None
        return json.loads(body) if body else {}

    def make_folder(self, path: str, owner: str, permission: str = "755", as_user: str | None = None) -> None:
        """Create ``path`` (an absolute path) owned by ``owner``, as the superuser by default."""
        su = as_user or self.superuser
        self.webhdfs("PUT", path, "MKDIRS", su, permission=permission)
        self.webhdfs("PUT", path, "SETOWNER", su, owner=owner, group=owner)

    def list(self, path: str, user: str = "nobody") -> list[dict]:
        """The folder's entries as WebHDFS's FileStatus (pathSuffix, type, length, owner, permission...)."""
        return self.webhdfs("GET", path, "LISTSTATUS", user)["FileStatuses"]["FileStatus"]

    def status(self, path: str, user: str = "nobody") -> dict | None:
        try:
            return self.webhdfs("GET", path, "GETFILESTATUS", user)["FileStatus"]
        except HdfsError as e:
            if " 404 " in str(e):
                return None
            raise

    @property
    def superuser(self) -> str:
        import getpass

        return getpass.getuser()
