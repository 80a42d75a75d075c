"""Merge tasks routed where Spark is, under the CeleryExecutor for real.

Debian's ``redis-server`` is the broker; Airflow's api-server, scheduler and dag-processor run
with the CeleryExecutor on a metadata database of their own (PostgreSQL); two Celery workers take
two queues: ``spark`` with Java and ``spark-submit`` on its PATH, ``default`` with neither (its
PATH is a folder holding only ``python`` and ``airflow``, and JAVA_HOME / SPARK_HOME are unset).
The config routes the merges to ``spark`` (``airflow_tasks: merge_queue``) and every other task to
``default`` (``airflow_tasks: queue``). A run triggered through the REST API merges a small table;
the workers' own logs then say which task each of them executed: every merge on the ``spark``
worker, ``plan`` and ``refresh_metastore`` on the other, and every row is as it was.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest

import postgres
from airflow_services import DAG_ID, AirflowServices, Redis, service_env
from local_stack import free_port

pytestmark = pytest.mark.integration

DB, TABLE = "routed", "events"
DATES = ["2026-08-01", "2026-08-02"]
MERGE_PRIORITY = 5


def no_spark_path(folder: Path) -> str:
    """A PATH for the worker without Spark: only this environment's python and airflow."""
    folder.mkdir()
    for name in ("python", "python3", "airflow"):
        (folder / name).symlink_to(Path(sys.executable).parent / name)
    return str(folder)


def executed(worker_log: str) -> list[tuple[str, int]]:
    """(task_id, map_index) of every workload a Celery worker's log says it executed."""
    out = []
    for line in worker_log.splitlines():
        if "Executing workload in Celery" in line:
            task = re.search(r"task_id='([^']+)'", line)
            index = re.search(r"map_index=(-?\d+)", line)
            assert task and index, line
            out.append((task.group(1), int(index.group(1))))
    return out


def test_merge_tasks_run_only_on_the_spark_queue(stack, tmp_path):
    t_start = time.monotonic()
    if stack.postgres is None:  # the CeleryExecutor needs a metadata database other than SQLite
        pytest.fail(f"the CeleryExecutor test needs PostgreSQL for Airflow's database: {postgres.missing()}")
    why = Redis.missing()
    if why:
        pytest.fail(f"the CeleryExecutor test needs the broker: {why}")
    spark_submit = shutil.which("spark-submit", path=stack.env()["PATH"])
    assert spark_submit and shutil.which("java", path=stack.env()["PATH"]), "the spark worker needs both"

    # The table is made (in this process's Spark session) while Airflow's services start.
    table = ThreadPoolExecutor(1).submit(
        lambda: (
            stack.make_table(DB, TABLE, "ORC", DATES, files=3, rows=60),
            stack.snapshot(DB, TABLE),
            stack.content(DB, TABLE),
        )[1:]
    )
    cfg = stack.write_config(
        tmp_path / "hive_compaction.yaml",
        [{"name": f"{DB}.{TABLE}"}],
        airflow_tasks={"queue": "default", "merge_queue": "spark", "merge_priority_weight": MERGE_PRIORITY},
    )

    redis = Redis(tmp_path / "redis")
    home = tmp_path / "airflow_home"
    home.mkdir()
    env = service_env(
        stack.env(cfg),
        home,
        free_port(),
        executor="CeleryExecutor",
        broker_url=redis.url,
        AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME="0.5",
        **stack.airflow_database("airflow_celery"),
    )
    no_spark_env = {k: v for k, v in env.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_PYTHON")}
    no_spark_env["PATH"] = no_spark_path(tmp_path / "no-spark-bin")
    svc = AirflowServices(home, env)
    try:
        redis.start()
        svc.migrate()
        svc.start()
        spark_worker = svc.start_worker("spark")
        other_worker = svc.start_worker("default", env=no_spark_env)
        svc.token = svc.wait_ready(DAG_ID)
        for worker in (spark_worker, other_worker):
            svc.wait_worker(worker)
        before, content_before = table.result()
        assert {k: v["num_files"] for k, v in before.items()} == {f"dt={d}": 3 for d in DATES}
        t_ready = time.monotonic()

        # The default queue's worker's environment: neither java nor spark-submit can be found in it
        # (asked in that environment; a worker's /proc environ is overwritten by its process title).
        probe = "import shutil; print(shutil.which('java'), shutil.which('spark-submit'))"
        assert subprocess.run(
            ["python", "-c", probe], env=no_spark_env, capture_output=True, text=True, check=True
        ).stdout.split() == ["None", "None"]
        assert (
            "None"
            not in subprocess.run(
                ["python", "-c", probe], env=env, capture_output=True, text=True, check=True
            ).stdout.split()
        )

        # Triggered while the DAG is paused, then unpaused. Unpausing also queues the latest
        # scheduled run (catchup is off; it plans nothing of this table, whose dates are far from
        # today). One run at a time (max_active_runs): the scheduler starts queued runs in order of
        # run_after, so this run, given an earlier one than the scheduled run's, goes first and the
        # test does not wait for the other.
        run_id = svc.api(
            "POST",
            f"/dags/{DAG_ID}/dagRuns",
            json={
                "logical_date": None,
                "run_after": "2026-01-02T00:00:00Z",
                "conf": {"tables": [f"{DB}.{TABLE}"], "partition_date": DATES[0], "partition_date_to": DATES[-1]},
            },
        )["dag_run_id"]
        assert svc.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})["is_paused"] is False
        run = svc.wait_for_runs(lambda r: r["dag_run_id"] == run_id, 1, timeout=300, poll=1)[0]
        t_run = time.monotonic()
        print(
            f"\ncelery test: table, services and workers ready {t_ready - t_start:.0f}s, the run {t_run - t_ready:.0f}s"
        )
        tis = svc.api("GET", f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances")["task_instances"]
        logs = {name: svc.service_log(name, tail=10**7) for name in (spark_worker, other_worker)}
        assert run["state"] == "success", (
            f"{[(t['task_id'], t['map_index'], t['state'], t['queue']) for t in tis]}\n"
            + "\n".join(f"=== {n}\n{log[-4000:]}" for n, log in logs.items())
            + svc.logs()
        )
    finally:
        svc.stop()
        redis.stop()

    # The metadata database: the queue, pool and priority each task was sent with.
    merges = [t for t in tis if t["task_id"] == "merge"]
    assert merges and all(t["state"] == "success" for t in merges), merges
    # (the weight shown is the total under Airflow's default weight rule, "downstream": the merge's
    # own plus refresh_metastore's and the table's asset event's, 1 each)
    assert {(t["queue"], t["pool"], t["priority_weight"]) for t in merges} == {
        ("spark", "default_pool", MERGE_PRIORITY + 2)
    }
    by_task = {t["task_id"]: t for t in tis}
    assert by_task["plan"]["queue"] == by_task["refresh_metastore"]["queue"] == "default"

    # The workers' logs: who executed what (of this run and of the scheduled one).
    ran = {name: executed(log) for name, log in logs.items()}
    print(f"\nspark worker executed {ran[spark_worker]}\nno-java worker executed {ran[other_worker]}")
    assert sorted(ran[spark_worker]) == [
        ("merge", t["map_index"]) for t in sorted(merges, key=lambda t: t["map_index"])
    ], ran
    assert not [t for t in ran[other_worker] if t[0] == "merge"], ran
    assert ran[other_worker].count(("plan", -1)) >= 1 and ran[other_worker].count(("refresh_metastore", -1)) >= 1
    assert {t for t, _ in ran[other_worker]} >= {"plan", "refresh_metastore"}, ran
    for line in logs[spark_worker].splitlines():  # this run's merges (the scheduled run planned none)
        if "Executing workload in Celery" in line:
            assert run_id in line, line

    # Every row as it was, in one file per partition, statistics refreshed.
    after, content_after = stack.snapshot(DB, TABLE), stack.content(DB, TABLE)
    assert content_after == content_before
    for name, snap in after.items():
        assert snap["num_files"] == 1 < before[name]["num_files"], (name, snap)
        assert snap["hms_num_files"] == "1" and snap["hms_num_rows"] == str(content_after[name][0]), snap
    t_end = time.monotonic()
    print(f"celery test: checks {t_end - t_run:.0f}s; total {t_end - t_start:.0f}s")
