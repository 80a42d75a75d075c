"""Airflow as a user runs it: the real services (API server, scheduler, DAG processor) on
loopback, the DAG unpaused and triggered through the REST API, a backfill from the CLI.

The services get the stack's environment (Metastore and Spark connections, dags and plugins
folders) with a fresh, migrated AIRFLOW_HOME of their own, the LocalExecutor (SQLite) and the
SimpleAuthManager with every user an admin, so a token comes from ``GET /auth/token``.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from local_stack import free_port
from test_end_to_end import files_with_times

pytestmark = pytest.mark.integration

DAG_ID = "hive_compaction"
DB = "user"
FORM_TABLE, FORM_DATES = "events", ["2026-09-01", "2026-09-02"]
BACKFILL_TABLE, BACKFILL_DATES, LATER_DATE = "backfill_events", ["2026-09-10", "2026-09-11", "2026-09-12"], "2026-09-13"
DAILY_TABLE = "daily_events"  # holds the dates around today, for the scheduled run unpausing starts
TERMINAL = {"success", "failed"}


@dataclass
class Services:
    """The started Airflow services and a REST client for them."""
    home: Path
    url: str
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    token: str = ""
    before: dict = field(default_factory=dict)
    scheduled_run: dict = field(default_factory=dict)

    # --- processes --------------------------------------------------------------------------
    def start(self, name: str, *args: str) -> None:
        log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen(["airflow", *args], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=self.home)
        log.close()

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise AssertionError(f"airflow {name} exited with {p.returncode}:\n{self.service_log(name)}")

    def service_log(self, name: str, tail: int = 6000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        for p in self.procs.values():
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():  # the whole group, even when its leader is gone
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.stragglers():  # task processes that left the groups (by pid, ours only)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

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

    # --- REST -------------------------------------------------------------------------------
    def request(self, method: str, path: str, **kw) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=60, **kw)

    def api(self, method: str, path: str, **kw):
        r = self.request(method, f"/api/v2{path}", **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()

    def runs(self) -> list[dict]:
        return self.api("GET", f"/dags/{DAG_ID}/dagRuns", params={"limit": 100})["dag_runs"]

    def run(self, run_id: str) -> dict:
        return self.api("GET", f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}")

    def task_instances(self, run_id: str) -> list[dict]:
        return self.api("GET", f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances")["task_instances"]

    def states(self, run_id: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for ti in sorted(self.task_instances(run_id), key=lambda t: (t["task_id"], t["map_index"])):
            out.setdefault(ti["task_id"], []).append(ti["state"])
        return out

    def xcom(self, run_id: str, task_id: str, key: str = "return_value"):
        value = self.api("GET", f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
                                f"/xcomEntries/{key}")["value"]
        return json.loads(value) if isinstance(value, str) else value

    def wait_for_runs(self, select, count: int, timeout: float) -> list[dict]:
        """Poll until ``count`` runs chosen by ``select(run)`` have all finished."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            runs = [r for r in self.runs() if select(r)]
            if len(runs) >= count and all(r["state"] in TERMINAL for r in runs):
                return runs
            if time.monotonic() > deadline:
                raise AssertionError(f"runs not finished after {timeout:.0f}s: "
                                     f"{[(r['dag_run_id'], r['state']) for r in runs]}\n{self.diagnostics()}")
            time.sleep(3)

    def task_logs(self, run_id: str, tail: int = 4000) -> str:
        out = []
        for f in sorted((self.home / "logs").rglob("*.log")):
            if f"run_id={run_id}" in str(f):
                out.append(f"--- {f.relative_to(self.home / 'logs')}\n{f.read_text(errors='replace')[-tail:]}")
        return "\n".join(out)

    def diagnostics(self, run_id: str | None = None) -> str:
        parts = [f"=== {n}.log\n{self.service_log(n, 3000)}" for n in self.procs]
        if run_id:
            parts.append(f"=== task logs of {run_id}\n{self.task_logs(run_id)}")
        return "\n".join(parts)


def partition_state(stack, db: str, table: str) -> dict[str, tuple[dict, dict]]:
    """Per partition: (data files on disk with sizes and times, the snapshot with Metastore stats)."""
    return {name: (files_with_times(stack.partition_location(db, table, name)), snap)
            for name, snap in stack.snapshot(db, table).items()}


def assert_compacted(stack, db, table, name, before, content_before, after, content_after, rows):
    files_before, snap_before = before[name]
    snap = after[name][1]
    assert snap_before["num_files"] > 1, (name, snap_before)
    assert snap["num_files"] == 1, (name, snap)
    assert content_after[name] == content_before[name] == (rows, content_after[name][1]), name
    assert snap["hms_num_files"] == str(snap["num_files"]), (name, snap)
    assert snap["hms_total_size"] == str(snap["bytes"]), (name, snap)
    assert snap["hms_num_rows"] == str(rows), (name, snap)
    assert not set(snap["files"]) & set(files_before), name  # the output is a new file


@pytest.fixture(scope="module")
def airflow(stack, tmp_path_factory):
    """A config listing the tables, then Airflow's services started on it and the DAG unpaused.

    Unpausing makes the scheduler start the latest scheduled run (catchup is off). Before that
    the daily table gets partitions of the days around today; the tests' own tables exist, empty
    (the tests fill them), so that this run has nothing of theirs to plan."""
    started = time.monotonic()
    tmp = tmp_path_factory.mktemp("as_a_user")
    today = datetime.now(timezone.utc).date()
    stack.make_table(DB, DAILY_TABLE, "ORC", [str(today - timedelta(days=d)) for d in (2, 1, 0)], files=3, rows=100)
    for table in (FORM_TABLE, BACKFILL_TABLE):
        stack.make_table(DB, table, "ORC", [])
    before = {DAILY_TABLE: (partition_state(stack, DB, DAILY_TABLE), stack.content(DB, DAILY_TABLE))}
    cfg = stack.write_config(tmp / "hive_compaction.yaml",
                             [{"name": f"{DB}.{t}"} for t in (FORM_TABLE, BACKFILL_TABLE, DAILY_TABLE)])

    home = tmp / "airflow_home"
    home.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = stack.env(
        cfg,
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__PARALLELISM="4",
        AIRFLOW__CORE__AUTH_MANAGER="airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
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
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)

    svc = Services(home, url, env, before=before)
    try:
        svc.start("api-server", "api-server", "--host", "127.0.0.1", "--port", str(port))
        svc.start("scheduler", "scheduler")
        svc.start("dag-processor", "dag-processor")

        deadline = time.monotonic() + 240
        while True:  # the API answers, hands out a token, and knows the parsed DAG
            svc.check_alive()
            try:
                if not svc.token:
                    r = httpx.get(f"{url}/auth/token", timeout=10)
                    if r.status_code == 201:
                        svc.token = r.json()["access_token"]
                if svc.token and svc.request("GET", f"/api/v2/dags/{DAG_ID}").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"API or DAG not ready:\n{svc.diagnostics()}"
            time.sleep(2)
        assert svc.api("GET", f"/dags/{DAG_ID}")["is_paused"] is True  # new DAGs start paused
        assert svc.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})["is_paused"] is False

        svc.scheduled_run = svc.wait_for_runs(lambda r: r["run_type"] == "scheduled", 1, timeout=360)[0]
        print(f"services up and the scheduled run done in {time.monotonic() - started:.0f}s")
        yield svc
    finally:
        svc.stop()


def test_trigger_from_the_form_compacts_that_date_only(airflow, stack):
    svc = airflow
    stack.make_table(DB, FORM_TABLE, "ORC", FORM_DATES, files=4, rows=200)
    before, content_before = partition_state(stack, DB, FORM_TABLE), stack.content(DB, FORM_TABLE)
    assert {k: v[1]["num_files"] for k, v in before.items()} == {"dt=2026-09-01": 4, "dt=2026-09-02": 4}
    daily_before = partition_state(stack, DB, DAILY_TABLE)

    # Invalid form input: the API refuses it, naming the field, and no run is created.
    runs_before = {r["dag_run_id"] for r in svc.runs()}
    for conf, field_name in (({"partition_date": "not-a-date"}, "partition_date"),
                             ({"tables": ["user.nope"]}, "tables"),
                             ({"target_file_size_mb": 0}, "target_file_size_mb")):
        r = svc.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
        assert 400 <= r.status_code < 500, (conf, r.status_code, r.text)
        assert field_name in r.json()["detail"], (conf, r.text)
    assert {r["dag_run_id"] for r in svc.runs()} == runs_before

    # The form as the UI sends it: no logical date, the chosen table and date.
    t0 = time.monotonic()
    created = svc.api("POST", f"/dags/{DAG_ID}/dagRuns", json={
        "logical_date": None, "conf": {"tables": [f"{DB}.{FORM_TABLE}"], "partition_date": "2026-09-02"}})
    run_id = created["dag_run_id"]
    assert created["run_type"] == "manual" and created["conf"]["partition_date"] == "2026-09-02"
    run = svc.wait_for_runs(lambda r: r["dag_run_id"] == run_id, 1, timeout=420)[0]
    print(f"manual run {run_id}: {run['state']} in {time.monotonic() - t0:.0f}s")
    assert run["state"] == "success", svc.diagnostics(run_id)
    states = svc.states(run_id)
    assert states["merge"] == ["success"], states
    assert states["refresh_metastore"] == ["success"], states

    after, content_after = partition_state(stack, DB, FORM_TABLE), stack.content(DB, FORM_TABLE)
    assert after["dt=2026-09-01"] == before["dt=2026-09-01"]  # same files, sizes, times and statistics
    assert_compacted(stack, DB, FORM_TABLE, "dt=2026-09-02", before, content_before, after, content_after, 200)
    assert content_after == content_before
    assert partition_state(stack, DB, DAILY_TABLE) == daily_before  # not chosen in the form

    report = svc.xcom(run_id, "refresh_metastore")
    assert report["summary"]["partitions_merged"] == 1, report["summary"]
    assert report["summary"]["files_before"] == 4 and report["summary"]["files_after"] == 1, report["summary"]
    assert report["summary"]["failed"] == 0, report["summary"]
    assert [(p["table"], p["partition"], p["status"]) for p in report["partitions"]] == \
        [(f"{DB}.{FORM_TABLE}", "dt=2026-09-02", "merged")]
    assert report["dates"] == {f"{DB}.{FORM_TABLE}": ["2026-09-02", "2026-09-02"]}


def test_the_scheduled_run_compacts_the_day_before_its_date_only(airflow, stack):
    """The run unpausing started: each table's partitions of its date minus the lag (one day)."""
    svc = airflow
    run = svc.scheduled_run
    day = run["logical_date"][:10]
    yesterday = str(datetime.fromisoformat(day).date() - timedelta(days=1))
    assert run["state"] == "success", svc.diagnostics(run["dag_run_id"])
    report = svc.xcom(run["dag_run_id"], "refresh_metastore")
    assert report["dates"] == {f"{DB}.{t}": [yesterday, yesterday] for t in (FORM_TABLE, BACKFILL_TABLE, DAILY_TABLE)}, \
        f"scheduled run of {day}: expected only partitions of {yesterday}, the plan selected {report['dates']}"

    before, content_before = airflow.before[DAILY_TABLE]
    after, content_after = partition_state(stack, DB, DAILY_TABLE), stack.content(DB, DAILY_TABLE)
    assert [(p["partition"], p["status"]) for p in report["partitions"]] == [(f"dt={yesterday}", "merged")], report
    assert_compacted(stack, DB, DAILY_TABLE, f"dt={yesterday}", before, content_before, after, content_after, 100)
    for name in set(before) - {f"dt={yesterday}"}:
        assert after[name] == before[name], name  # today's and the day before yesterday's: untouched
    assert content_after == content_before


def test_backfill_compacts_each_date_of_the_range_and_nothing_else(airflow, stack):
    svc = airflow
    stack.make_table(DB, BACKFILL_TABLE, "PARQUET", BACKFILL_DATES + [LATER_DATE], files=3, rows=150)
    before, content_before = partition_state(stack, DB, BACKFILL_TABLE), stack.content(DB, BACKFILL_TABLE)
    assert {k: v[1]["num_files"] for k, v in before.items()} == {f"dt={d}": 3 for d in BACKFILL_DATES + [LATER_DATE]}
    others_before = {t: partition_state(stack, DB, t) for t in (FORM_TABLE, DAILY_TABLE)}

    t0 = time.monotonic()
    for attempt in range(4):
        p = subprocess.run(["airflow", "backfill", "create", "--dag-id", DAG_ID, "--from-date", BACKFILL_DATES[0],
                            "--to-date", BACKFILL_DATES[-1], "--max-active-runs", "2"],
                           env=svc.env, capture_output=True, text=True, timeout=300)
        # SQLite (this test's Airflow database) can be locked by the running scheduler; the CLI's
        # transaction then rolls back and creating the backfill again is the remedy.
        locked = p.returncode != 0 and "database is locked" in p.stdout + p.stderr
        if not locked or svc.api("GET", "/backfills", params={"dag_id": DAG_ID})["backfills"]:
            break
        time.sleep(2 + attempt * 3)
    assert p.returncode == 0 or locked, p.stdout[-3000:] + p.stderr[-3000:]
    backfills = svc.api("GET", "/backfills", params={"dag_id": DAG_ID})["backfills"]
    assert len(backfills) == 1 and backfills[0]["max_active_runs"] == 2, backfills

    runs = svc.wait_for_runs(lambda r: r["run_type"] == "backfill", 3, timeout=540)
    print(f"backfill of {len(runs)} runs done in {time.monotonic() - t0:.0f}s")
    assert len(runs) == 3, runs
    by_date = {r["logical_date"][:10]: r for r in runs}
    assert sorted(by_date) == BACKFILL_DATES
    for r in runs:
        assert r["state"] == "success", svc.diagnostics(r["dag_run_id"])
    # never more than two at once
    spans = [(datetime.fromisoformat(r["start_date"]), datetime.fromisoformat(r["end_date"])) for r in runs]
    assert max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans) <= 2, spans

    for d, r in by_date.items():  # each run compacted the partitions of its own date, one each
        report = svc.xcom(r["dag_run_id"], "refresh_metastore")
        assert report["dates"] == {f"{DB}.{t}": [d, d] for t in (FORM_TABLE, BACKFILL_TABLE, DAILY_TABLE)}, \
            f"backfill run of {d}: expected only partitions of {d}, the plan selected {report['dates']}"
        assert [(p["partition"], p["status"]) for p in report["partitions"]] == [(f"dt={d}", "merged")], report
        assert report["summary"]["partitions_merged"] == 1, report["summary"]

    after, content_after = partition_state(stack, DB, BACKFILL_TABLE), stack.content(DB, BACKFILL_TABLE)
    for d in BACKFILL_DATES:
        assert_compacted(stack, DB, BACKFILL_TABLE, f"dt={d}", before, content_before, after, content_after, 150)
    assert after[f"dt={LATER_DATE}"] == before[f"dt={LATER_DATE}"]  # outside the range: untouched
    assert content_after == content_before
    assert {t: partition_state(stack, DB, t) for t in (FORM_TABLE, DAILY_TABLE)} == others_before
