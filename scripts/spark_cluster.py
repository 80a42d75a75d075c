"""A Spark standalone cluster from the pyspark wheel: one Master and two Workers on loopback.

    python scripts/spark_cluster.py start|stop|status STATE_DIR

Each daemon is its own JVM (``spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``, with ``SPARK_HOME`` the pyspark package folder), in a process group of its
own, logging to a file in the state folder. Executors of the applications then run in JVMs of
their own, started by the workers (``<worker work dir>/app-*/<executor id>/stderr``). Everything
binds to 127.0.0.1 (``SPARK_LOCAL_IP``). ``start`` returns once both workers are registered (the
master's ``/json/`` says ``aliveworkers``), or raises with the tails of the logs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_stack import free_port
from suite_budget import record

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


class ClusterError(RuntimeError):
    pass


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class StandaloneCluster:
    def __init__(self, state_dir: Path | str, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.state = Path(state_dir).resolve()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.state_file = self.state / "cluster.json"
        self.info: dict = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}

    # --- where things are -------------------------------------------------------------------
    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.info['port']}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.info['webui_port']}"

    def worker_dirs(self) -> list[Path]:
        return [self.state / f"worker-{i}" / "work" for i in range(self.workers)]

    def logs(self) -> list[Path]:
        return [self.state / "master.log"] + [self.state / f"worker-{i}.log" for i in range(self.workers)]

    def status(self) -> dict:
        """The master's JSON status (workers, active and completed applications)."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as r:
            return json.load(r)

    def worker_status(self, i: int) -> dict:
        """A worker's JSON status (its running and finished executors, with their app ids)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.info['worker_webui_ports'][i]}/json/", timeout=5) as r:
            return json.load(r)

    # --- start / stop -----------------------------------------------------------------------
    def _command(self, cls: str, args: list[str]) -> list[str]:
        home = spark_home()
        spark_class = home / "bin" / "spark-class"
        if spark_class.exists():
            return ["bash", str(spark_class), cls, *args]
        # A wheel without bin/: what spark-class would run.
        return ["java", "-Xmx512m", "-cp", f"{home / 'conf'}:{home / 'jars'}/*", cls, *args]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(spark_home()),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.state),
                "SPARK_PID_DIR": str(self.state),
                "SPARK_DAEMON_MEMORY": "512m",
                "SPARK_NO_DAEMONIZE": "1",
                "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
            }
        )
        env.pop("SPARK_CONF_DIR", None)  # the wheel's defaults, nothing from the machine
        return env

    def _spawn(self, name: str, cls: str, args: list[str]) -> int:
        log = self.state / f"{name}.log"
        with open(log, "ab") as out:
            p = subprocess.Popen(
                self._command(cls, args),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state,
                env=self._env(),
                start_new_session=True,
            )
        return p.pid

    def alive(self) -> bool:
        pids = self.info.get("pids") or []
        if not pids:
            return False
        try:
            return all(_exists(pid) for pid in pids) and self.status().get("aliveworkers") == self.workers
        except OSError:
            return False

    def start(self, timeout: float = 90) -> StandaloneCluster:
        if self.alive():
            return self
        if shutil.which("java") is None:
            raise ClusterError("java not found: the standalone cluster needs a Java 17 runtime")
        self.stop()
        t0 = time.monotonic()
        self.state.mkdir(parents=True, exist_ok=True)
        port, webui = free_port(), free_port()
        worker_webui = [free_port() for _ in range(self.workers)]
        self.info = {"port": port, "webui_port": webui, "worker_webui_ports": worker_webui, "pids": []}
        self.info["pids"].append(
            self._spawn("master", MASTER, ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)])
        )
        self.state_file.write_text(json.dumps(self.info))
        for i, (ui, work) in enumerate(zip(worker_webui, self.worker_dirs())):
            work.mkdir(parents=True, exist_ok=True)
            self.info["pids"].append(
                self._spawn(
                    f"worker-{i}",
                    WORKER,
                    [
                        self.master_url,
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        str(ui),
                        "--work-dir",
                        str(work),
                    ],
                )
            )
            self.state_file.write_text(json.dumps(self.info))
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            dead = [pid for pid in self.info["pids"] if not _exists(pid)]
            if dead:
                last = f"process(es) {dead} exited"
                break
            try:
                st = self.status()
                last = f"aliveworkers={st.get('aliveworkers')}"
                if st.get("aliveworkers") == self.workers:
                    record("Spark standalone cluster (master + workers)", time.monotonic() - t0)
                    return self
            except (OSError, ValueError) as e:
                last = f"{type(e).__name__}: {e}"
            time.sleep(0.5)
        logs = "\n".join(f"--- {p.name} ---\n{tail(p)}" for p in self.logs())
        self.stop()
        raise ClusterError(f"the standalone cluster did not come up within {timeout:.0f}s ({last})\n{logs}")

    def stop(self) -> None:
        pids = self.info.get("pids") or []
        for pid in reversed(pids):  # workers first (they kill their executors), then the master
            _killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_exists(p) for p in pids):
            time.sleep(0.2)
        for pid in pids:
            if _exists(pid):
                _killpg(pid, signal.SIGKILL)
        self.info["pids"] = []
        self.state_file.unlink(missing_ok=True)


def _exists(pid: int) -> bool:
    if not _ours(pid):
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie of ours (the Popen object was dropped) is gone as far as we care
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True  # not our child (started by another process): it exists


def _ours(pid: int) -> bool:
    """The pid is still one of our daemons (a pid from a stale state file may belong to another program)."""
    try:
        return b"org.apache.spark.deploy." in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return sys.platform != "linux"  # no /proc to ask: trust the state file


def _killpg(pid: int, sig: int) -> None:
    if not _ours(pid):
        return
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main() -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("state_dir")
    args = p.parse_args()
    c = StandaloneCluster(args.state_dir)
    try:
        if args.action == "start":
            c.start()
            print(f"Spark standalone master at {c.master_url} (web UI {c.webui_url}), {c.workers} workers")
        elif args.action == "stop":
            c.stop()
        else:
            up = c.alive()
            print(f"{c.master_url if c.info else 'cluster'}: {'up' if up else 'down'}")
            return 0 if up else 1
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
