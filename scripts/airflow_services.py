"""The services docker-compose.yaml declares, started natively on loopback: PostgreSQL, the Hive
Metastore on it, and Airflow's api-server, scheduler and dag-processor (LocalExecutor) on it.

    make stack-up      # or: python scripts/airflow_services.py up   [--port 8080] [--executor celery]
    make stack-down    #     python scripts/airflow_services.py down

``--executor celery``: the CeleryExecutor instead, with Debian's ``redis-server`` as its broker and
one Celery worker on the queues ``default`` and ``spark`` (the queue names the config's
``airflow_tasks:`` section may route to).

State, logs and pid files live in ``.state/services/``. The UI is at http://127.0.0.1:8080 with
Airflow's SimpleAuthManager and every user an admin: for a person's own machine, not a server.
The tests (tests/test_as_a_user.py) start Airflow's services through ``AirflowServices`` too.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import postgres
from local_stack import Metastore, StackError, free_port
from suite_budget import record, started

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("api-server", "scheduler", "dag-processor")
DAG_ID = "hive_compaction"
TERMINAL = {"success", "failed"}  # a DAG run's states once it has finished
EXECUTORS = ("LocalExecutor", "CeleryExecutor")
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"  # 3.x's default


def service_env(
    base: dict[str, str],
    home: Path,
    port: int,
    executor: str = "LocalExecutor",
    broker_url: str | None = None,
    **extra: str,
) -> dict[str, str]:
    """Airflow's settings for the three services on one machine (loopback), over ``base`` and under
    ``extra`` (e.g. the metadata database's AIRFLOW__DATABASE__SQL_ALCHEMY_CONN). ``executor``:
    LocalExecutor (tasks run in the scheduler's processes) or CeleryExecutor (tasks go to Celery
    workers through the broker at ``broker_url``, e.g. a ``Redis``'s ``url``; their results to
    the metadata database)."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    if (executor == "CeleryExecutor") != bool(broker_url):
        raise ValueError("a broker_url goes with the CeleryExecutor, and only with it")
    url = f"http://127.0.0.1:{port}"
    env = dict(base)
    if broker_url:
        env["AIRFLOW__CELERY__BROKER_URL"] = broker_url
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__EXECUTOR=executor,
        AIRFLOW__CORE__PARALLELISM="4",
        AIRFLOW__CORE__AUTH_MANAGER=SIMPLE_AUTH_MANAGER,
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{url}/execution/",
        AIRFLOW__API__BASE_URL=url,
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__SECRET_KEY=secrets.token_hex(16),
        AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(32),
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
    )
    env.update(extra)
    return env


class Redis:
    """Debian's ``redis-server`` on loopback, in memory only: the CeleryExecutor's broker."""

    def __init__(self, state: Path, port: int | None = None):
        self.state = Path(state)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def missing() -> str | None:
        """Why Redis cannot start here, or None."""
        return None if shutil.which("redis-server") else "redis-server not found (Debian: apt-get install redis-server)"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30) -> None:
        why = self.missing()
        if why:
            raise StackError(why)
        self.state.mkdir(parents=True, exist_ok=True)
        with started("Redis (the Celery broker)"):
            with open(self.state / "redis.log", "ab") as log:
                self.proc = subprocess.Popen(
                    [
                        "redis-server",
                        "--port",
                        str(self.port),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--dir",
                        str(self.state),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            (self.state / "redis.pid").write_text(str(self.proc.pid))
            deadline = time.monotonic() + timeout
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=2) as c:
                        c.sendall(b"PING\r\n")
                        if c.recv(16).startswith(b"+PONG"):
                            return
                except OSError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise StackError(
                        f"redis-server did not answer on port {self.port}:\n"
                        f"{(self.state / 'redis.log').read_text(errors='replace')[-2000:]}"
                    )
                time.sleep(0.1)

    def stop(self) -> None:
        pid_file = self.state / "redis.pid"
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        elif pid_file.exists() and pid_file.read_text().strip().isdigit():  # started by another process
            pid = int(pid_file.read_text())
            if _alive(pid) and b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGTERM)
        pid_file.unlink(missing_ok=True)


# A database `airflow db migrate` made is the template of the next ones (each ~7 s of migrations
# under the suite's load, nine a run): on PostgreSQL a database of the same server, copied by
# CREATE DATABASE ... TEMPLATE; on SQLite a file in .state/. Keyed by Airflow's release and the
# settings that add tables of their own (the auth manager's, external database managers').
def migrate(env: dict[str, str]) -> None:
    """``airflow db migrate`` for the metadata database ``env`` names, or, where that database is
    new and empty, a copy of one it migrated before; StackError with its output."""
    url = env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
    sqlite = None if url else Path(env["AIRFLOW_HOME"]) / "airflow.db"
    key = _template_key(env)
    t0 = time.monotonic()
    if _copied_template(url, sqlite, key):
        record("Airflow metadata database (a copy of a migrated one)", time.monotonic() - t0)
        return
    with started("Airflow metadata database (airflow db migrate)"):
        p = subprocess.run(["airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise StackError(f"airflow db migrate failed:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    _keep_template(url, sqlite, key)


def _template_key(env: dict[str, str]) -> str:
    import hashlib
    from importlib.metadata import version

    settings = [
        version("apache-airflow"),
        env.get("AIRFLOW__CORE__AUTH_MANAGER", SIMPLE_AUTH_MANAGER),
        env.get("AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS", ""),
    ]
    return hashlib.sha256("|".join(settings).encode()).hexdigest()[:12]


def _sqlite_template(key: str) -> Path:
    return ROOT / ".state" / "airflow-db-template" / f"airflow-{key}.db"


def _pg_server(url: str, key: str) -> tuple[int, str, str] | None:
    """(port, database, the template's name) of a loopback PostgreSQL URL of
    ``postgres.Postgres.sqlalchemy_url``'s."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if not parts.scheme.startswith("postgresql") or parts.hostname != "127.0.0.1" or not parts.port:
        return None
    return parts.port, parts.path.strip("/"), f"airflow_migrated_{key}"


def _copied_template(url: str, sqlite: Path | None, key: str) -> bool:
    if sqlite is not None:
        template = _sqlite_template(key)
        if sqlite.exists() or not template.exists():
            return False
        sqlite.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, sqlite)
        return True
    server = _pg_server(url, key)
    if server is None or not postgres.database_exists(server[0], server[2]):
        return False
    port, database, template = server
    tables = postgres.psql(
        port, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'", database
    )
    if tables.strip() != "0":  # a database in use (make stack-up again): migrated in place
        return False
    postgres.psql(port, f'DROP DATABASE IF EXISTS "{database}"')  # empty, just made by the caller
    postgres.psql(port, f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
    return True


def _keep_template(url: str, sqlite: Path | None, key: str) -> None:
    """Keep the database just migrated as the template, unless one is there (best effort: where
    the copy fails, the next database is migrated)."""
    if sqlite is not None:
        template = _sqlite_template(key)
        if not template.exists():
            template.parent.mkdir(parents=True, exist_ok=True)
            partial = template.with_suffix(f".{os.getpid()}.part")
            shutil.copyfile(sqlite, partial)
            partial.replace(template)  # whole: another process never copies half a file
        return
    server = _pg_server(url, key)
    if server is not None and not postgres.database_exists(server[0], server[2]):
        try:  # nothing is connected to it: the migration's process has ended
            postgres.psql(server[0], f'CREATE DATABASE "{server[2]}" TEMPLATE "{server[1]}"')
        except subprocess.CalledProcessError:
            pass


class AirflowServices:
    """Airflow's api-server, scheduler and dag-processor as processes of their own session."""

    def __init__(self, home: Path, env: dict[str, str]):
        self.home = Path(home)
        self.env = env
        self.url = env["AIRFLOW__API__BASE_URL"]
        self.procs: dict[str, subprocess.Popen] = {}
        self.token = ""  # the bearer token of the REST calls: set it from wait_ready's

    def migrate(self) -> None:
        migrate(self.env)

    def start(self) -> None:
        port = self.env["AIRFLOW__API__PORT"]
        for name, args in (
            ("api-server", ("api-server", "--host", "127.0.0.1", "--port", port)),
            ("scheduler", ("scheduler",)),
            ("dag-processor", ("dag-processor",)),
        ):
            with open(self.home / f"{name}.log", "ab") as log:
                self.procs[name] = subprocess.Popen(
                    ["airflow", *args],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=self.home,
                )
            (self.home / f"{name}.pid").write_text(str(self.procs[name].pid))

    def start_worker(self, queues: str, env: dict[str, str] | None = None, concurrency: int = 1) -> str:
        """A Celery worker (CeleryExecutor) taking the comma-separated ``queues``, in ``env`` (by
        default the services'; e.g. another PATH), logging to ``worker-<queues>.log``; its name."""
        name = f"worker-{queues.replace(',', '+')}"
        with open(self.home / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [
                    "airflow",
                    "celery",
                    "worker",
                    "--queues",
                    queues,
                    "--concurrency",
                    str(concurrency),
                    "--celery-hostname",
                    f"{name}@%h",
                    "--pid",
                    str(self.home / f"{name}.celery.pid"),
                    "--skip-serve-logs",
                    "--without-mingle",
                    "--without-gossip",
                ],
                env=env or self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.home,
            )
        (self.home / f"{name}.pid").write_text(str(self.procs[name].pid))
        return name

    def wait_worker(self, name: str, timeout: float = 180) -> None:
        """Wait until the Celery worker ``name`` (``start_worker``'s) says it is ready; recorded."""
        t0 = time.monotonic()
        while " ready." not in self.service_log(name, tail=200_000):
            self.check_alive()
            if time.monotonic() - t0 > timeout:
                raise StackError(f"Celery {name} not ready after {timeout:.0f}s:\n{self.service_log(name)}")
            time.sleep(0.5)
        record("Celery worker (airflow celery worker) ready", time.monotonic() - t0)

    def fetch_token(self) -> str | None:
        """A bearer token once the API answers (every user is an admin under this auth manager)."""
        try:
            r = httpx.get(f"{self.url}/auth/token", timeout=10)
            return r.json()["access_token"] if r.status_code == 201 else None
        except httpx.TransportError:
            return None

    def wait_ready(self, dag_id: str | None = None, timeout: float = 240) -> str:
        """Wait until the API hands out a token (and knows ``dag_id``, parsed); return the token."""
        deadline = time.monotonic() + timeout
        token, t0 = None, time.monotonic()
        while True:
            self.check_alive()
            token = token or self.fetch_token()
            if token and (
                dag_id is None
                or httpx.get(
                    f"{self.url}/api/v2/dags/{dag_id}", timeout=10, headers={"Authorization": f"Bearer {token}"}
                ).status_code
                == 200
            ):
                record("Airflow services (api-server, scheduler, dag-processor) ready", time.monotonic() - t0)
                return token
            if time.monotonic() > deadline:
                raise StackError(f"Airflow's API or the DAG not ready after {timeout:.0f}s:\n{self.logs(3000)}")
            time.sleep(2)

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=60, **kw)

    def api(self, method: str, path: str, **kw):
        """Airflow's REST API v2 (``path`` under /api/v2): the JSON answer; StackError unless 2xx."""
        r = self.request(method, f"/api/v2{path}", **kw)
        if r.status_code >= 300:
            raise StackError(f"{method} {path}: {r.status_code} {r.text}")
        return r.json()

    def runs(self, dag_id: str = DAG_ID) -> list[dict]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]

    def wait_for_runs(self, select, count: int, timeout: float, dag_id: str = DAG_ID, poll: float = 3) -> list[dict]:
        """Poll until ``count`` runs chosen by ``select(run)`` have all finished."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            runs = [r for r in self.runs(dag_id) if select(r)]
            if len(runs) >= count and all(r["state"] in TERMINAL for r in runs):
                return runs
            if time.monotonic() > deadline:
                raise StackError(
                    f"runs not finished after {timeout:.0f}s: "
                    f"{[(r['dag_run_id'], r['state']) for r in runs]}\n{self.logs(3000)}"
                )
            time.sleep(poll)

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise StackError(f"airflow {name} exited with {p.returncode}:\n{self.service_log(name)}")

    def service_log(self, name: str, tail: int = 6000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"=== {n}.log\n{self.service_log(n, tail)}" for n in SERVICES)

    def stop(self) -> None:
        """Stop the services and every process they started (task runners, Spark drivers)."""
        pids = [p.pid for p in self.procs.values()] or [
            int(f.read_text())
            for f in self.home.glob("*.pid")
            if (f.stem in SERVICES or f.stem.startswith("worker-")) and f.read_text().strip().isdigit()
        ]
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 5)):
            for pid in pids:
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
                for p in self.procs.values():
                    p.poll()  # reap our own children
                time.sleep(0.2)
        for pid in self.stragglers():  # task processes that left the groups (by pid, ours only)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for name in {*SERVICES, *self.procs}:
            (self.home / f"{name}.pid").unlink(missing_ok=True)

    def stragglers(self) -> list[int]:
        """Processes still carrying this AIRFLOW_HOME in their environment: started by the services."""
        marker = f"AIRFLOW_HOME={self.home}".encode()
        found = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != os.getpid():
                try:
                    if marker in (d / "environ").read_bytes().split(b"\0"):
                        found.append(int(d.name))
                except OSError:
                    pass
        return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# --- make stack-up / stack-down --------------------------------------------------------------------
def _parts(state: Path, pg_port: int, hms_port: int, api_port: int, redis_port: int, executor: str):
    pg = postgres.Postgres(state / "postgres", pg_port)
    hms = Metastore(state / "hms", hms_port, **pg.metastore_args())
    redis = Redis(state / "redis", redis_port)
    home = state / "airflow"
    base = dict(
        os.environ,
        AIRFLOW_CONN_HIVE_METASTORE=json.dumps({"conn_type": "generic", "host": "127.0.0.1", "port": hms_port}),
    )
    return (
        pg,
        hms,
        redis,
        AirflowServices(
            home,
            service_env(
                base,
                home,
                api_port,
                executor=executor,
                broker_url=redis.url if executor == "CeleryExecutor" else None,
                AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=pg.sqlalchemy_url("airflow"),
            ),
        ),
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["up", "down"])
    p.add_argument("--state", default=str(ROOT / ".state" / "services"))
    p.add_argument("--port", type=int, default=8080, help="the Airflow API server's port")
    p.add_argument("--postgres-port", type=int, default=55432)
    p.add_argument("--metastore-port", type=int, default=int(os.environ.get("HIVE_METASTORE_PORT", "9083")))
    p.add_argument(
        "--executor",
        choices=["local", "celery"],
        default="local",
        help="celery: the CeleryExecutor, a Redis broker and a worker on the queues default,spark",
    )
    p.add_argument("--redis-port", type=int, default=56379)
    args = p.parse_args()
    state = Path(args.state).resolve()
    executor = {"local": "LocalExecutor", "celery": "CeleryExecutor"}[args.executor]
    pg, hms, redis, airflow = _parts(
        state, args.postgres_port, args.metastore_port, args.port, args.redis_port, executor
    )
    try:
        if args.action == "down":
            airflow.stop()
            redis.stop()
            hms.stop()
            pg.stop()
            return 0
        why = postgres.missing() or (redis.missing() if executor == "CeleryExecutor" else None)
        if why:
            raise StackError(why)
        airflow.home.mkdir(parents=True, exist_ok=True)
        pg.start()
        for db in ("metastore", "airflow"):
            pg.create_database(db)
        pg.create_transaction_tables("metastore")
        hms.start()  # says so if it is already running
        airflow.migrate()
        if executor == "CeleryExecutor":
            redis.start()
        airflow.start()
        if executor == "CeleryExecutor":
            worker = airflow.start_worker("default,spark")
        airflow.wait_ready()
        if executor == "CeleryExecutor":
            airflow.wait_worker(worker)
        print(f"Airflow at {airflow.url} (every user an admin), logs in {airflow.home}; stop with: make stack-down")
        return 0
    except (StackError, RuntimeError, subprocess.CalledProcessError) as e:
        print(f"error: {getattr(e, 'stderr', None) or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
