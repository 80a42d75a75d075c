"""The Metastore's lock around a commit (issue 11): a Hive writer holding the partition's lock
makes the commit wait, then leave the partition as it is; a writer asking for the lock while a
commit runs waits for it. Real stack: the Metastore's lock API (its transaction tables on
PostgreSQL or Derby), spark-submit of the merge job, `airflow dags test`, every row checked."""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from pathlib import Path

import pytest
from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes

from matrix_sampling import variants

pytestmark = pytest.mark.integration

DT = "2026-07-01"


def lock_request(db: str, table: str, partition: str, agent: str | None = None) -> ttypes.LockRequest:
    """What a Hive writer with DbTxnManager asks for before it writes a partition (``agent``:
    "hive_compaction" for another merge job's)."""
    component = ttypes.LockComponent(
        type=ttypes.LockType.EXCLUSIVE,
        level=ttypes.LockLevel.PARTITION,
        dbname=db,
        tablename=table,
        partitionname=partition,
        operationType=ttypes.DataOperationType.NO_TXN,
        isAcid=False,
    )
    return ttypes.LockRequest(component=[component], user="hive-writer", hostname="localhost", agentInfo=agent)


def files(folder: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in folder.iterdir() if f.is_file() and not f.name.startswith((".", "_"))}


# A Hive writer's lock; and a live merge job's (its agent is the package's), heartbeated, held
# longer than a dead job's lock may be silent: the waiting job must not take it for a dead one.
@pytest.mark.parametrize(
    "agent, wait",
    variants(
        "test_metastore_lock: lock holder",
        [pytest.param(None, 3, id="hive_writer"), pytest.param("hive_compaction", 14, id="live_merge_job")],
    ),
)
def test_a_writers_lock_makes_the_commit_wait_then_leave_the_partition(stack, tmp_path, agent, wait):
    db, table = f"locked_{'job' if agent else 'writer'}", "events"
    stack.make_table(db, table, "ORC", [DT], files=4, rows=120)
    folder = stack.partition_location(db, table, f"dt={DT}")
    before, content = files(folder), stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "lock_wait_seconds": wait}])
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        held = c.lock(lock_request(db, table, f"dt={DT}", agent))
        assert held.state == ttypes.LockState.ACQUIRED
        done = threading.Event()

        def heartbeat():  # as a live writer does: the Metastore drops a silent lock after hive.txn.timeout
            with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as beat:
                while not done.wait(2):
                    beat.heartbeat(ttypes.HeartbeatRequest(lockid=held.lockid, txnid=0))

        beating = threading.Thread(target=heartbeat, daemon=True)
        beating.start()
        try:
            run = stack.run_dag(cfg, conf={"partition_date": DT})
        finally:
            done.set()
            beating.join()
            c.unlock(ttypes.UnlockRequest(lockid=held.lockid))
    assert run.state == "success", run.log[-4000:]
    assert f"another writer holds the Metastore's lock on it (waited {wait}s" in run.log
    assert "stopped heartbeating" not in run.log
    assert files(folder) == before and stack.content(db, table) == content

    run = stack.run_dag(cfg, conf={"partition_date": DT})  # the writer is done: merged now
    assert run.state == "success", run.log[-4000:]
    assert len(files(folder)) == 1 and stack.content(db, table) == content


def test_a_busy_partition_never_holds_back_the_others_of_its_commit_chunk(stack, tmp_path):
    """Three partitions on two driver threads: the first two would commit under one lock (a
    chunk), and a Hive writer holds the first. The chunk's request is withdrawn at once, each of
    its partitions asks alone: the free one is merged without waiting for the busy one, which
    waits its lock_wait_seconds and is left as it is."""
    db, table = "locked_chunk", "events"
    busy_dt, free_dt, other_dt = "2026-07-02", "2026-07-03", "2026-07-04"
    stack.make_table(db, table, "ORC", [busy_dt, free_dt, other_dt], files=3, rows=90)
    busy = stack.partition_location(db, table, f"dt={busy_dt}")
    before, content = files(busy), stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "lock_wait_seconds": 4}])
    job = stack.plan_batches(cfg, run_id="busy")["spark_args"][0]["application_args"][1]
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        held = c.lock(lock_request(db, table, f"dt={busy_dt}"))
        assert held.state == ttypes.LockState.ACQUIRED
        try:
            p = stack.spark_submit(job)
        finally:
            c.unlock(ttypes.UnlockRequest(lockid=held.lockid))
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert f"{db}.{table} (2 partitions): a partition is busy" in out, out[-4000:]
    assert f"{db}.{table}/dt={busy_dt}: another writer holds the Metastore's lock on it (waited 4s" in out
    for dt in (free_dt, other_dt):
        assert f"{db}.{table} dt={dt}: merged" in out, out[-4000:]
        assert len(files(stack.partition_location(db, table, f"dt={dt}"))) == 1
    assert files(busy) == before
    assert stack.content(db, table) == content


@pytest.mark.parametrize(
    "commit_mode, point",
    variants("test_metastore_lock: commit mode", [("in_place", "inputs_moved"), ("location_switch", "folder_built")]),
)
def test_a_writer_asking_for_the_lock_during_a_commit_waits(stack, tmp_path, commit_mode, point):
    db, table = f"locking_{commit_mode}", "events"
    stack.make_table(db, table, "PARQUET", [DT], files=3, rows=90)
    content = stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "commit_mode": commit_mode}])
    seen = tmp_path / "writer.json"
    writer = tmp_path / "writer.py"  # asks for the lock at the paused step, records the answer, withdraws
    writer.write_text(
        "import json, sys\n"
        "from hmsclient import hmsclient\n"
        "from hmsclient.genthrift.hive_metastore import ttypes\n"
        f"sys.path[:0] = {sys.path!r}\n"  # it imports this module as the tests do
        "from test_metastore_lock import lock_request\n"
        f"with hmsclient.HMSClient(host='127.0.0.1', port={stack.port}) as c:\n"
        f"    r = c.lock(lock_request({db!r}, {table!r}, 'dt={DT}'))\n"
        f"    open({str(seen)!r}, 'w').write(json.dumps(ttypes.LockState._VALUES_TO_NAMES[r.state]))\n"
        "    c.unlock(ttypes.UnlockRequest(lockid=r.lockid))\n"
    )
    batch = stack.plan_batches(cfg, run_id="locking")["spark_args"][0]["application_args"][1]
    p = stack.spark_submit(
        batch,
        HIVE_COMPACTION_TEST_HOOK_AT=point,
        HIVE_COMPACTION_TEST_HOOK_CMD=f"{shlex.quote(sys.executable)} {shlex.quote(str(writer))}",
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]  # the job's own lines are on stdout
    assert json.loads(seen.read_text()) == "WAITING"
    assert stack.content(db, table) == content
    assert len(files(stack.partition_location(db, table, f"dt={DT}"))) == 1


def test_a_killed_jobs_lock_goes_by_itself(stack, tmp_path):
    """A job killed mid-commit cannot release its lock; the next job that waits for it releases
    it once its heartbeat has stopped moving (a Metastore would only after hive.txn.timeout, if it
    runs its housekeeper), and finishes the commit."""
    db, table = "lock_killed", "events"
    stack.make_table(db, table, "ORC", [DT], files=3, rows=60)
    content = stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    batch = stack.plan_batches(cfg, run_id="killed")["spark_args"][0]["application_args"][1]
    assert stack.spark_submit(batch, HIVE_COMPACTION_TEST_KILL_AT="inputs_moved").returncode != 0
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        held = [
            lock
            for lock in c.show_locks(ttypes.ShowLocksRequest(dbname=db, tablename=table)).locks
            if lock.agentInfo == "hive_compaction"
        ]
    assert len(held) == 1, held  # the killed job's, still there
    t0 = time.monotonic()
    run = stack.run_dag(cfg, conf={"partition_date": DT})
    assert run.state == "success", run.log[-4000:]
    assert "of a merge job that stopped heartbeating it" in run.log
    assert "recovering the interrupted commit" in run.log, "\n".join(
        line for line in run.log.splitlines() if "hive_compaction" in line or "lock" in line
    )[-5000:]
    assert stack.content(db, table) == content
    assert len(files(stack.partition_location(db, table, f"dt={DT}"))) == 1
    print(f"the next run finished the commit in {time.monotonic() - t0:.0f}s")
