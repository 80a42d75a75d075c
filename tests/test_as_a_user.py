"""Airflow as a user runs it: the real services (API server, scheduler, DAG processor) on
loopback, the DAG unpaused and triggered through the REST API, a backfill from the CLI, and the
downstream example DAG scheduled on a table's partitioned asset events.

The services get the stack's environment (Metastore and Spark connections, dags and plugins
folders) with a fresh, migrated AIRFLOW_HOME and metadata database of their own on PostgreSQL
(as users run it; the Metastore is on PostgreSQL too), the LocalExecutor and the SimpleAuthManager
with every user an admin, so a token comes from ``GET /auth/token``. Without Debian's PostgreSQL
packages these tests skip, saying so (CI installs them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

import postgres
from airflow_services import DAG_ID, AirflowServices, service_env
from hive_compaction.storage.paths import run_tag
from local_stack import free_port
from suite_budget import started
from test_end_to_end import files_with_times
from test_metrics import StatsdListener

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration

DOWNSTREAM_ID = "hive_compaction_downstream_example"
DB = "user"
FORM_TABLE, FORM_DATES = "events", ["2026-09-01", "2026-09-02"]
BACKFILL_TABLE, BACKFILL_DATES, LATER_DATE = "backfill_events", ["2026-09-10", "2026-09-11", "2026-09-12"], "2026-09-13"
DAILY_TABLE = "daily_events"  # holds the dates around today, for the scheduled run unpausing starts
BROWSER_TABLE = "clicks"  # picked in the trigger form in a real browser
# The backfill's table first: the downstream example DAG listens to the config's first table.
TABLES = (BACKFILL_TABLE, FORM_TABLE, DAILY_TABLE, BROWSER_TABLE)


class Services(AirflowServices):
    """The started Airflow services and a REST client for them."""

    def __init__(self, home: Path, env: dict[str, str], before: dict):
        super().__init__(home, env)
        self.before = before
        self.scheduled_run: dict = {}
        self.scheduled_metrics: dict[str, str] = {}  # the StatsD lines received by the end of that run

    # --- REST (request, api, runs, wait_for_runs: AirflowServices') ---------------------------
    def run(self, run_id: str) -> dict:
        return self.api("GET", f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}")

    def task_instances(self, run_id: str, dag_id: str = DAG_ID) -> list[dict]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances")["task_instances"]

    def states(self, run_id: str, dag_id: str = DAG_ID) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for ti in sorted(self.task_instances(run_id, dag_id), key=lambda t: (t["task_id"], t["map_index"])):
            out.setdefault(ti["task_id"], []).append(ti["state"])
        return out

    def xcom(self, run_id: str, task_id: str, key: str = "return_value", dag_id: str = DAG_ID):
        value = self.api(
            "GET", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/xcomEntries/{key}"
        )["value"]
        return json.loads(value) if isinstance(value, str) else value

    def unpause(self, dag_id: str, timeout: float = 120) -> None:
        """Unpause a DAG once the DAG processor has parsed it (new DAGs start paused)."""
        deadline = time.monotonic() + timeout
        while self.request("GET", f"/api/v2/dags/{dag_id}").status_code == 404:
            assert time.monotonic() < deadline, f"{dag_id} not parsed after {timeout:.0f}s\n{self.logs()}"
            time.sleep(2)
        assert self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})["is_paused"] is False

    def task_logs(self, run_id: str, tail: int = 4000) -> str:
        out = []
        for f in sorted((self.home / "logs").rglob("*.log")):
            if f"run_id={run_id}" in str(f):
                out.append(f"--- {f.relative_to(self.home / 'logs')}\n{f.read_text(errors='replace')[-tail:]}")
        return "\n".join(out)

    def diagnostics(self, run_id: str | None = None) -> str:
        return self.logs(3000) + (f"\n=== task logs of {run_id}\n{self.task_logs(run_id)}" if run_id else "")


def partition_state(stack, db: str, table: str) -> dict[str, tuple[dict, dict]]:
    """Per partition: (data files on disk with sizes and times, the snapshot with Metastore stats)."""
    return {
        name: (files_with_times(stack.partition_location(db, table, name)), snap)
        for name, snap in stack.snapshot(db, table).items()
    }


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
    Its own Airflow (services, database, home): the scheduler drives these runs, and the other
    tests' ``airflow dags test`` runs must not become its DAG runs.

    Unpausing makes the scheduler start the latest scheduled run (catchup is off). Before that
    the daily table gets partitions of the days around today; the tests' own tables exist, empty
    (the tests fill them), so that this run has nothing of theirs to plan."""
    if stack.postgres is None:
        pytest.skip(f"Airflow's services run on PostgreSQL here, and {postgres.missing()}")
    started = time.monotonic()
    tmp = tmp_path_factory.mktemp("as_a_user")
    today = datetime.now(UTC).date()
    stack.make_table(DB, DAILY_TABLE, "ORC", [str(today - timedelta(days=d)) for d in (2, 1, 0)], files=3, rows=100)
    for table in (FORM_TABLE, BACKFILL_TABLE, BROWSER_TABLE):
        stack.make_table(DB, table, "ORC", [])
    before = {DAILY_TABLE: (partition_state(stack, DB, DAILY_TABLE), stack.content(DB, DAILY_TABLE))}
    cfg = stack.write_config(tmp / "hive_compaction.yaml", [{"name": f"{DB}.{t}"} for t in TABLES])

    home = tmp / "airflow_home"
    home.mkdir()
    listener = StatsdListener()  # the deployment's StatsD: Airflow's [metrics] send to it
    env = service_env(
        stack.env(cfg), home, free_port(), **stack.airflow_database("airflow_as_a_user"), **listener.env()
    )
    svc = Services(home, env, before=before)
    try:
        svc.migrate()
        svc.start()
        svc.token = svc.wait_ready(DAG_ID)
        assert svc.api("GET", f"/dags/{DAG_ID}")["is_paused"] is True  # new DAGs start paused
        svc.unpause(DOWNSTREAM_ID)  # before any event: a paused DAG is not queued by one
        svc.unpause(DAG_ID)

        svc.scheduled_run = svc.wait_for_runs(lambda r: r["run_type"] == "scheduled", 1, timeout=360)[0]
        svc.scheduled_metrics = listener.received()
        print(f"services up and the scheduled run done in {time.monotonic() - started:.0f}s")
        yield svc
    finally:
        svc.stop()
        listener.close()


@pytest.mark.variant("test_as_a_user: a run the scheduler drives", "form")
def test_trigger_from_the_form_compacts_that_date_only(airflow, stack):
    svc = airflow
    stack.make_table(DB, FORM_TABLE, "ORC", FORM_DATES, files=4, rows=200)
    before, content_before = partition_state(stack, DB, FORM_TABLE), stack.content(DB, FORM_TABLE)
    assert {k: v[1]["num_files"] for k, v in before.items()} == {"dt=2026-09-01": 4, "dt=2026-09-02": 4}
    daily_before = partition_state(stack, DB, DAILY_TABLE)

    # Invalid form input: the API refuses it, naming the field, and no run is created.
    runs_before = {r["dag_run_id"] for r in svc.runs()}
    for conf, field_name in (
        ({"partition_date": "not-a-date"}, "partition_date"),
        ({"tables": ["user.nope"]}, "tables"),
        ({"target_file_size_mb": 0}, "target_file_size_mb"),
    ):
        r = svc.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
        assert 400 <= r.status_code < 500, (conf, r.status_code, r.text)
        assert field_name in r.json()["detail"], (conf, r.text)
    assert {r["dag_run_id"] for r in svc.runs()} == runs_before

    # The form as the UI sends it: no logical date, the chosen table and date.
    t0 = time.monotonic()
    created = svc.api(
        "POST",
        f"/dags/{DAG_ID}/dagRuns",
        json={"logical_date": None, "conf": {"tables": [f"{DB}.{FORM_TABLE}"], "partition_date": "2026-09-02"}},
    )
    run_id = created["dag_run_id"]
    assert created["run_type"] == "manual" and created["conf"]["partition_date"] == "2026-09-02"
    run = svc.wait_for_runs(lambda r: r["dag_run_id"] == run_id, 1, timeout=420)[0]
    print(f"manual run {run_id}: {run['state']} in {time.monotonic() - t0:.0f}s")
    assert run["state"] == "success", svc.diagnostics(run_id)
    states = svc.states(run_id)
    assert states["merge"] == ["success"], states
    assert states["refresh_metastore"] == ["success"], states
    # The merge task's log names the job; its encoded batch argument is masked.
    merge_log = svc.task_logs(run_id, tail=10**7)
    assert re.search(r"Spark-Submit cmd: .*compact_partitions\.py --batch \*\*\*", merge_log), re.findall(
        r"Spark-Submit cmd: .{0,300}", merge_log
    )[:1]

    after, content_after = partition_state(stack, DB, FORM_TABLE), stack.content(DB, FORM_TABLE)
    assert after["dt=2026-09-01"] == before["dt=2026-09-01"]  # same files, sizes, times and statistics
    assert_compacted(stack, DB, FORM_TABLE, "dt=2026-09-02", before, content_before, after, content_after, 200)
    assert content_after == content_before
    assert partition_state(stack, DB, DAILY_TABLE) == daily_before  # not chosen in the form

    report = svc.xcom(run_id, "refresh_metastore")
    assert report["summary"]["partitions_merged"] == 1, report["summary"]
    assert report["summary"]["files_before"] == 4 and report["summary"]["files_after"] == 1, report["summary"]
    assert report["summary"]["failed"] == 0, report["summary"]
    assert [(p["table"], p["partition"], p["status"]) for p in report["partitions"]] == [
        (f"{DB}.{FORM_TABLE}", "dt=2026-09-02", "merged")
    ]
    assert report["dates"] == {f"{DB}.{FORM_TABLE}": ["2026-09-02", "2026-09-02"]}


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by Selenium (Debian's chromium and chromium-driver; CI installs
    them), in US English so that date fields take mm/dd/yyyy."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        pytest.skip(f"selenium is not installed ({e}): pip install -r requirements.txt")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("no Chromium here: apt-get install chromium chromium-driver (CI installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1300", "--lang=en-US"):
        options.add_argument(arg)
    with started("Chromium (headless, Selenium)"):
        d = webdriver.Chrome(options=options, service=Service(driver))
    d.implicitly_wait(10)
    try:
        yield d
    finally:
        d.quit()


def test_the_trigger_form_in_a_browser(airflow, stack, browser):
    """A person in the UI: opens the DAG, Trigger, picks a table from the pick list, types a date,
    switches dry run on and triggers; the run succeeds and its report (the refresh task's log) names
    that table and partition, and nothing changed on disk. A year typed with a digit too many
    shows the form's error naming the field, and no run starts. Screenshots go to
    test-artifacts/trigger_form_browser/ (or $TEST_ARTIFACTS/trigger_form_browser/)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    svc, d = airflow, browser
    shots = Path(os.environ.get("TEST_ARTIFACTS", ROOT / "test-artifacts")) / "trigger_form_browser"
    shots.mkdir(parents=True, exist_ok=True)
    stack.make_table(DB, BROWSER_TABLE, "ORC", ["2026-08-01", "2026-08-02"], files=3, rows=60)
    before = partition_state(stack, DB, BROWSER_TABLE)

    def open_form():
        d.get(f"{svc.url}/dags/{DAG_ID}")
        d.find_element(By.CSS_SELECTOR, "button[aria-label='Trigger Dag']").click()
        d.find_element(By.ID, "element_tables").click()
        options = [o.text for o in d.find_elements(By.CSS_SELECTOR, "[role=option]") if o.text]
        assert options == sorted(f"{DB}.{t}" for t in TABLES), options  # the configured tables
        next(o for o in d.find_elements(By.CSS_SELECTOR, "[role=option]") if o.text == f"{DB}.{BROWSER_TABLE}").click()

    def type_date(month_day_year: tuple[str, str, str]) -> str:
        field = d.find_element(By.ID, "element_partition_date")
        for part in month_day_year:
            field.send_keys(part)
        return field.get_attribute("value")

    def trigger_button():
        return [b for b in d.find_elements(By.CSS_SELECTOR, "[role=dialog] button") if b.text.strip() == "Trigger"][-1]

    # A mistyped year: the API refuses the form's value, the dialog says why, no run starts.
    runs_before = {r["dag_run_id"] for r in svc.runs()}
    open_form()
    assert type_date(("08", "02", "20261")) == "20261-08-02"
    trigger_button().click()
    error = WebDriverWait(d, 30).until(
        lambda drv: next(
            (e.text for e in drv.find_elements(By.CSS_SELECTOR, "[role=dialog]") if "Invalid input" in e.text), None
        )
    )
    d.save_screenshot(str(shots / "wrong_date.png"))
    assert "Invalid input for param partition_date" in error and "'20261-08-02' is not a 'date'" in error, error
    assert {r["dag_run_id"] for r in svc.runs()} == runs_before

    # The right date, dry run: the run page opens and the run succeeds.
    open_form()
    assert type_date(("08", "02", "2026")) == "2026-08-02"
    d.find_element(By.ID, "switch:element_dry_run").click()
    d.save_screenshot(str(shots / "filled_form.png"))
    trigger_button().click()
    WebDriverWait(d, 30).until(lambda drv: "/runs/" in drv.current_url)
    run_id = unquote(d.current_url.split("/runs/", 1)[1].split("/")[0])
    run = svc.wait_for_runs(lambda r: r["dag_run_id"] == run_id, 1, timeout=420)[0]
    assert run["state"] == "success", svc.diagnostics(run_id)
    assert run["conf"] == {
        **run["conf"],
        "tables": [f"{DB}.{BROWSER_TABLE}"],
        "partition_date": "2026-08-02",
        "dry_run": True,
    }, run["conf"]

    # The report as a person reads it: the refresh task's log in the UI.
    d.get(f"{svc.url}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/refresh_metastore")
    report = WebDriverWait(d, 60).until(
        lambda drv: next((t for t in [drv.find_element(By.TAG_NAME, "body").text] if "run note:" in t), None)
    )
    d.save_screenshot(str(shots / "run_report.png"))
    assert re.search(rf"{DB}\.{BROWSER_TABLE}\s+dt=2026-08-02\s+would_merge\s+3 -> 1", report), report[-3000:]
    assert "dry run, would merge 1 of 1 partition(s) in 1 table(s)" in report, report[-3000:]
    assert partition_state(stack, DB, BROWSER_TABLE) == before  # a dry run changes nothing


def test_the_scheduled_run_compacts_its_key_and_the_backlog_before_it(airflow, stack):
    """The run unpausing started fires at today's 00:00 UTC and carries the key of yesterday (the lag
    of one day): it compacts each table's partitions of that date and, looking back
    lookback_days, the day before yesterday's (never listed); today's are left alone."""
    svc = airflow
    run = svc.scheduled_run
    today = datetime.now(UTC).date()
    yesterday, before_yesterday = str(today - timedelta(days=1)), str(today - timedelta(days=2))
    assert run["state"] == "success", svc.diagnostics(run["dag_run_id"])
    assert run["partition_key"] == yesterday and run["logical_date"] is None, run
    assert run["run_after"][:10] == str(today), run
    report = svc.xcom(run["dag_run_id"], "refresh_metastore")
    assert report["dates"] == {f"{DB}.{t}": [yesterday, yesterday] for t in TABLES}, (
        f"scheduled run keyed {yesterday}: the plan selected {report['dates']}"
    )
    week_before = str(today - timedelta(days=8))
    assert report["lookback"] == {f"{DB}.{t}": [week_before, before_yesterday] for t in TABLES}, report["lookback"]

    before, content_before = airflow.before[DAILY_TABLE]
    after, content_after = partition_state(stack, DB, DAILY_TABLE), stack.content(DB, DAILY_TABLE)
    assert [(p["partition"], p["status"]) for p in report["partitions"]] == [
        (f"dt={before_yesterday}", "merged"),
        (f"dt={yesterday}", "merged"),
    ], report
    for day in (before_yesterday, yesterday):
        assert_compacted(stack, DB, DAILY_TABLE, f"dt={day}", before, content_before, after, content_after, 100)
    assert after[f"dt={today}"] == before[f"dt={today}"]  # today's: untouched
    assert content_after == content_before
    # the daily table's event names both partitions; the tables with nothing merged emit none
    assert {
        ti["task_id"]: ti["state"]
        for ti in svc.task_instances(run["dag_run_id"])
        if ti["task_id"].startswith("compacted.")
    } == {
        f"compacted.{DB}.{BACKFILL_TABLE}": "skipped",
        f"compacted.{DB}.{DAILY_TABLE}": "success",
        f"compacted.{DB}.{FORM_TABLE}": "skipped",
        f"compacted.{DB}.{BROWSER_TABLE}": "skipped",
    }
    assert svc.xcom(run["dag_run_id"], f"compacted.{DB}.{DAILY_TABLE}") == [f"dt={before_yesterday}", f"dt={yesterday}"]
    # Its figures reached the deployment's StatsD from the refresh task (airflow/metrics.py).
    got, daily = svc.scheduled_metrics, f"{DAG_ID}.{DB}.{DAILY_TABLE}"
    summary = report["summary"]
    assert got[f"airflow.hive_compaction.partitions_merged.{DAG_ID}"] == "2|c", got
    assert got[f"airflow.hive_compaction.table.partitions_merged.{daily}"] == "2|c", got
    assert got[f"airflow.hive_compaction.table.files_before.{daily}"] == f"{summary['files_before']}|c", got
    assert got[f"airflow.hive_compaction.table.files_after.{daily}"] == "2|c", got
    assert got[f"airflow.hive_compaction.table.rows_verified.{daily}"] == "200|c", got
    assert got[f"airflow.hive_compaction.table.partitions_merged.{DAG_ID}.{DB}.{FORM_TABLE}"] == "0|c", got
    assert got[f"airflow.hive_compaction.run_seconds.{DAG_ID}"].endswith("|ms"), got
    print("StatsD lines of the scheduled run:\n  " + "\n  ".join(f"{k}:{v}" for k, v in sorted(got.items())))
    # A backfill would leave that key alone (the scheduled run holds its partition date) and create
    # a run for the day before, whose key no run has: backfills and the schedule share their keys.
    p = subprocess.run(
        [
            "airflow",
            "backfill",
            "create",
            "--dag-id",
            DAG_ID,
            "--from-date",
            before_yesterday,
            "--to-date",
            yesterday,
            "--dry-run",
        ],
        env=svc.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    attempted = p.stdout.split("Runs to be attempted:")[-1]
    assert before_yesterday in attempted and yesterday not in attempted, p.stdout[-3000:]


@pytest.fixture(scope="module")
def backfill(airflow, stack):
    """`airflow backfill create` over three partition dates of the backfill table, two runs at once;
    returns the runs and the table's state before."""
    svc = airflow
    stack.make_table(DB, BACKFILL_TABLE, "PARQUET", BACKFILL_DATES + [LATER_DATE], files=3, rows=150)
    before, content_before = partition_state(stack, DB, BACKFILL_TABLE), stack.content(DB, BACKFILL_TABLE)
    assert {k: v[1]["num_files"] for k, v in before.items()} == {f"dt={d}": 3 for d in BACKFILL_DATES + [LATER_DATE]}
    others_before = {t: partition_state(stack, DB, t) for t in (FORM_TABLE, DAILY_TABLE)}

    t0 = time.monotonic()
    p = subprocess.run(
        [
            "airflow",
            "backfill",
            "create",
            "--dag-id",
            DAG_ID,
            "--from-date",
            BACKFILL_DATES[0],
            "--to-date",
            BACKFILL_DATES[-1],
            "--max-active-runs",
            "2",
        ],
        env=svc.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    backfills = svc.api("GET", "/backfills", params={"dag_id": DAG_ID})["backfills"]
    assert len(backfills) == 1 and backfills[0]["max_active_runs"] == 2, backfills

    runs = svc.wait_for_runs(lambda r: r["run_type"] == "backfill", 3, timeout=540)
    print(f"backfill of {len(runs)} runs done in {time.monotonic() - t0:.0f}s")
    return {"runs": runs, "before": before, "content_before": content_before, "others_before": others_before}


@pytest.mark.variant("test_as_a_user: a run the scheduler drives", "backfill")
def test_backfill_compacts_each_date_of_the_range_and_nothing_else(airflow, stack, backfill):
    """One run per partition key of the range, each meaning what a scheduled run of that key means
    (the keys are partition dates: a backfill does not apply the schedule's run_offset)."""
    svc, runs = airflow, backfill["runs"]
    before, content_before = backfill["before"], backfill["content_before"]
    assert len(runs) == 3, runs
    by_key = {r["partition_key"]: r for r in runs}
    assert sorted(by_key) == BACKFILL_DATES
    for r in runs:
        assert r["state"] == "success", svc.diagnostics(r["dag_run_id"])
        assert r["logical_date"] is None and r["run_after"][:10] == r["partition_key"], r
    # never more than two at once
    spans = [(datetime.fromisoformat(r["start_date"]), datetime.fromisoformat(r["end_date"])) for r in runs]
    assert max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans) <= 2, spans

    for d, r in by_key.items():  # each run compacted the partitions of its own key, one each
        report = svc.xcom(r["dag_run_id"], "refresh_metastore")
        assert report["dates"] == {f"{DB}.{t}": [d, d] for t in TABLES}, (
            f"backfill run keyed {d}: expected only partitions of {d}, the plan selected {report['dates']}"
        )
        assert report["lookback"] == {}, report["lookback"]  # backfill runs do not look back
        assert [(p["partition"], p["status"]) for p in report["partitions"]] == [(f"dt={d}", "merged")], report
        assert report["summary"]["partitions_merged"] == 1, report["summary"]
        assert svc.xcom(r["dag_run_id"], f"compacted.{DB}.{BACKFILL_TABLE}") == [f"dt={d}"]

    after, content_after = partition_state(stack, DB, BACKFILL_TABLE), stack.content(DB, BACKFILL_TABLE)
    for d in BACKFILL_DATES:
        assert_compacted(stack, DB, BACKFILL_TABLE, f"dt={d}", before, content_before, after, content_after, 150)
    assert after[f"dt={LATER_DATE}"] == before[f"dt={LATER_DATE}"]  # outside the range: untouched
    assert content_after == content_before
    assert {t: partition_state(stack, DB, t) for t in (FORM_TABLE, DAILY_TABLE)} == backfill["others_before"]


@pytest.mark.variant("test_as_a_user: a run the scheduler drives", "backfill")
def test_the_downstream_example_runs_once_per_compacted_date(airflow, stack, backfill):
    """The example DAG (PartitionedAssetTimetable on the backfill table's asset, StartOfDayMapper
    over "dt=%Y-%m-%d") gets one run per date the backfill compacted, keyed by that date, with the
    partition's figures from the event; no run for a date nothing was merged in."""
    svc = airflow
    runs = svc.wait_for_runs(lambda r: True, len(BACKFILL_DATES), timeout=300, dag_id=DOWNSTREAM_ID)
    assert sorted(r["partition_key"] for r in runs) == BACKFILL_DATES, runs
    for r in runs:
        assert r["state"] == "success" and r["run_type"] == "asset_triggered", r
        out = svc.xcom(r["dag_run_id"], "use_compacted_date", dag_id=DOWNSTREAM_ID)
        day = r["partition_key"]
        assert out["date"] == day and out["table"] == f"{DB}.{BACKFILL_TABLE}", out
        [(partition, figures)] = out["partitions"].items()
        assert partition == f"dt={day}" and (figures["files_before"], figures["files_after"]) == (3, 1), out
        assert figures["rows"] == 150, out
    assert len(svc.runs(DOWNSTREAM_ID)) == len(BACKFILL_DATES)


ROLLBACK_ID = "hive_compaction_rollback"


def type_into(field, text: str) -> None:
    """Type ``text`` key by key: the form's fields re-render on each change, and a string sent at
    once lost a character now and then (seen: one 'b' of a run id)."""
    for ch in text:
        field.send_keys(ch)
    assert field.get_attribute("value") == text, (field.get_attribute("value"), text)


def test_the_rollback_form_in_a_browser_brings_the_original_files_back(airflow, stack, browser):
    """A person rolls back one partition of the scheduled run (which merged the daily table's two
    dates before today) from the rollback DAG's form: the table typed (the configured ones are
    offered), the run id pasted, the partition on its line. The partition then holds its original
    files again (names, sizes, times; content checksum equal), its statistics equal the disk; the
    other partition stays merged. Runs after the tests that read the daily table's merged state."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    svc, d = airflow, browser
    shots = Path(os.environ.get("TEST_ARTIFACTS", ROOT / "test-artifacts")) / "rollback_form_browser"
    shots.mkdir(parents=True, exist_ok=True)
    run_id = svc.scheduled_run["dag_run_id"]
    today = datetime.now(UTC).date()
    back, kept = f"dt={today - timedelta(days=1)}", f"dt={today - timedelta(days=2)}"
    before, content_before = airflow.before[DAILY_TABLE]
    merged = partition_state(stack, DB, DAILY_TABLE)
    assert merged[back][1]["num_files"] == merged[kept][1]["num_files"] == 1, merged  # what the scheduled run left
    t0 = time.monotonic()
    svc.unpause(ROLLBACK_ID)
    # What the form's schema refuses, the API refuses too, naming the field; no run is created.
    for conf, field_name in (
        ({"table": "not a table", "run": run_id}, "table"),
        ({"table": f"{DB}.{DAILY_TABLE}"}, "run"),
        ({"table": f"{DB}.{DAILY_TABLE}", "run": run_id, "dry_run": "yes"}, "dry_run"),
    ):
        r = svc.request("POST", f"/api/v2/dags/{ROLLBACK_ID}/dagRuns", json={"logical_date": None, "conf": conf})
        assert 400 <= r.status_code < 500 and field_name in r.json()["detail"], (conf, r.status_code, r.text)
    assert svc.runs(ROLLBACK_ID) == []

    d.get(f"{svc.url}/dags/{ROLLBACK_ID}")
    d.find_element(By.CSS_SELECTOR, "button[aria-label='Trigger Dag']").click()
    table = d.find_element(By.ID, "element_table")
    offered = [o.get_attribute("value") for o in d.find_elements(By.CSS_SELECTOR, "datalist#list_table option")]
    assert offered == sorted(f"{DB}.{t}" for t in TABLES), offered  # the configured tables
    type_into(table, f"{DB}.{DAILY_TABLE}")
    type_into(d.find_element(By.ID, "element_run"), run_id)
    type_into(d.find_element(By.ID, "element_partitions"), back)
    d.save_screenshot(str(shots / "filled_form.png"))
    [b for b in d.find_elements(By.CSS_SELECTOR, "[role=dialog] button") if b.text.strip() == "Trigger"][-1].click()
    WebDriverWait(d, 30).until(lambda drv: "/runs/" in drv.current_url)
    rb_run = unquote(d.current_url.split("/runs/", 1)[1].split("/")[0])
    run = svc.wait_for_runs(lambda r: r["dag_run_id"] == rb_run, 1, timeout=300, dag_id=ROLLBACK_ID)[0]
    assert run["state"] == "success", svc.diagnostics(rb_run)
    print(f"rollback run {rb_run} from the form: {run['state']} in {time.monotonic() - t0:.0f}s")
    assert run["conf"] == {"table": f"{DB}.{DAILY_TABLE}", "run": run_id, "partitions": [back], "dry_run": False}, run

    after, content_after = partition_state(stack, DB, DAILY_TABLE), stack.content(DB, DAILY_TABLE)
    assert after[back][0] == before[back][0]  # the original files: names, sizes, modification times
    assert content_after[back] == content_before[back]  # rows and content checksum
    snap = after[back][1]
    assert (snap["hms_num_files"], snap["hms_total_size"], snap["hms_num_rows"]) == (
        str(snap["num_files"]),
        str(snap["bytes"]),
        before[back][1]["hms_num_rows"],
    ), snap  # statistics = disk
    assert after[kept] == merged[kept]  # not asked for: still merged
    report = svc.xcom(rb_run, "report", dag_id=ROLLBACK_ID)
    assert report["summary"] == {
        **report["summary"],
        "partitions_restored": 1,
        "files_moved_back": 3,
        "merged_files_moved_out": 1,
        "statistics_restored": 1,
    }, report
    assert [(p["partition"], p["state"]) for p in report["partitions"]] == [(back, "restored")], report
    # The report as a person reads it: the report task's log in the UI.
    d.get(f"{svc.url}/dags/{ROLLBACK_ID}/runs/{quote(rb_run, safe='')}/tasks/report")
    text = WebDriverWait(d, 60).until(
        lambda drv: next(
            (t for t in [drv.find_element(By.TAG_NAME, "body").text] if "original file(s) moved back" in t), None
        )
    )
    d.save_screenshot(str(shots / "rollback_report.png"))
    assert (
        f"rollback of run {run_tag(run_id)} in {DB}.{DAILY_TABLE}: 1 partition(s), 3 original file(s) moved back"
        in text
    ), text[-3000:]
