"""Rollback restores the exact original files and statistics; cleanup purges expired trash."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hmsclient import hmsclient

from hive_compaction.commit.record import CommitRecord, StagedOutput
from hive_compaction.commit.rollback import RollbackError, rollback_partition
from hive_compaction.commit.work_area import WorkArea, read_journal
from hive_compaction.model.results import LISTED_AT, STATISTICS_KEYS
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.listing import RecordedFile
from hive_compaction.storage.paths import partition_id

pytestmark = pytest.mark.integration


def statistics_parameters(stack, db: str, table: str) -> dict[str, dict[str, str]]:
    """Per partition: its parameters among the keys a refresh may change."""
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        return {
            "/".join(f"{k.name}={v}" for k, v in zip(c.get_table(db, table).partitionKeys, p.values)): {
                k: v for k, v in p.parameters.items() if k in STATISTICS_KEYS
            }
            for p in c.get_partitions(db, table, -1)
        }


def test_rollback_restores_the_original_files_and_statistics(stack, tmp_path):
    db, table = "rb", "events"
    stack.make_table(db, table, "PARQUET", ["2026-06-01", "2026-06-02"], files=4, rows=300)
    content = stack.content(db, table)
    before = stack.snapshot(db, table)
    assert sorted(before) == ["dt=2026-06-01", "dt=2026-06-02"], before
    params_before = statistics_parameters(stack, db, table)
    assert sorted(params_before) == sorted(before) and not any(LISTED_AT in p for p in params_before.values())
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    merged = stack.snapshot(db, table)
    assert {n: p["num_files"] for n, p in merged.items()} == {n: 1 for n in before} and merged != before
    params_merged = statistics_parameters(stack, db, table)
    assert sorted(params_merged) == sorted(before) and all(LISTED_AT in p for p in params_merged.values())

    cmd = stack.rollback_cmd(f"{db}.{table}", run.run_id, cfg)
    p = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert sum(line.startswith("rolled back rb.events dt=") for line in p.stdout.splitlines()) == 2
    after = stack.snapshot(db, table)
    for name in before:  # names and bytes of every file, and the statistics, as before the run
        assert after[name]["files"] == before[name]["files"], name
        for key in ("hms_num_files", "hms_total_size", "hms_num_rows"):
            assert after[name][key] == before[name][key], (name, key)
    # Every key the refresh changed, exactly as before: the refresh's listedAt removed again.
    assert statistics_parameters(stack, db, table) == params_before
    assert stack.content(db, table) == content

    again = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and stack.snapshot(db, table) == after  # idempotent

    bogus = subprocess.run(
        stack.rollback_cmd(f"{db}.{table}", "no-such-run", cfg), env=stack.env(cfg), capture_output=True, text=True
    )
    assert bogus.returncode == 1
    assert "run no-such-run has no committed compaction" in bogus.stdout + bogus.stderr, (
        bogus.stdout[-2000:] + bogus.stderr[-2000:]
    )


def test_cleanup_purges_trash_older_than_the_retention_only(stack, tmp_path):
    db, table = "purge", "events"
    stack.make_table(db, table, "ORC", ["2026-06-03"], files=3, rows=100)
    work = stack.work_area(db, table)
    keep = stack.write_config(tmp_path / "keep.yaml", [{"name": f"{db}.{table}", "trash_retention_days": 7}])
    first = stack.run_dag(keep)
    assert first.state == "success", first.log[-4000:]
    trash_runs = [d.name for d in (work / "trash").iterdir()]
    assert len(trash_runs) == 1 and any((work / "trash").rglob("*.orc"))

    second = stack.run_dag(keep)  # within the retention: kept
    assert second.state == "success" and [d.name for d in (work / "trash").iterdir()] == trash_runs

    # The merge job that lists a table's partitions purges its work area: a run of the
    # partition's date lists it (the statistics say it is compact) and purges what expired.
    # Two days later (the first run's folders aged by hand), with a retention of one day.
    old = time.time() - 2 * 86400
    for folder in ("trash", "manifests", "staging"):
        for p in [*(work / folder / trash_runs[0]).rglob("*"), work / folder / trash_runs[0]]:
            if p.exists():
                os.utime(p, (old, old))
    purge = stack.write_config(tmp_path / "purge.yaml", [{"name": f"{db}.{table}", "trash_retention_days": 1}])
    third = stack.run_dag(purge, conf={"partition_date": "2026-06-03"})
    assert third.state == "success", third.log[-4000:]
    assert third.states["merge"] == ["success"] and "purged 3 expired folder(s) of 1 run(s)" in third.log
    for folder in ("trash", "manifests", "staging"):
        assert not (work / folder).exists() or trash_runs[0] not in [d.name for d in (work / folder).iterdir()]
    assert not any(work.rglob("*.orc"))
    # the table itself is untouched by the purge
    assert stack.snapshot(db, table)["dt=2026-06-03"]["num_files"] == 1


def _await(fifo: Path, proc: subprocess.Popen, what: str) -> None:
    """Block until a job paused at its fault point opens ``fifo`` (the hook's `echo > fifo`);
    fail with its output if it ended instead."""
    reader = threading.Thread(target=lambda: fifo.read_text())
    reader.start()
    while reader.is_alive():
        reader.join(timeout=5)
        if reader.is_alive() and proc.poll() is not None:
            fifo.write_text("")  # unblock the reader
            out, err = proc.communicate()
            pytest.fail(f"the {what} ended (exit {proc.returncode}) before its fault point: {out[-3000:]}{err[-3000:]}")


def test_a_purge_never_deletes_the_trash_a_rollback_moves_files_through(stack, tmp_path):
    """A purge decides that a run expired (no journal names it), then a rollback of that run takes
    the partition and moves the merged files into the run's trash, the originals still there.
    Deleting the run's trash now would lose every row of the partition: the purge must leave
    the partition whose journal the rollback holds, and the rollback finishes with every row."""
    db, table, dt, other = "rb_purge", "events", "2026-06-04", "2026-06-05"
    stack.make_table(db, table, "ORC", [dt, other], files=4, rows=200)
    content = stack.content(db, table)
    work = stack.work_area(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "trash_retention_days": 1}])
    run = stack.run_dag(cfg, conf={"partition_date": dt})  # merges dt only
    assert run.state == "success", run.log[-4000:]
    assert stack.snapshot(db, table)[f"dt={dt}"]["num_files"] == 1 and stack.content(db, table) == content
    old = time.time() - 2 * 86400  # the run's folders two days old: past the retention
    for p in [*work.rglob("*"), work]:
        os.utime(p, (old, old))

    fifos = {name: tmp_path / name for name in ("purging", "purge_go", "rolling_back", "rollback_go")}
    for f in fifos.values():
        os.mkfifo(f)
    # The purger: the next run's merge job of the table (it plans the other partition), paused
    # once it decided to purge the expired run.
    batch = stack.plan_batches(cfg, run_id="purger")["spark_args"][0]["application_args"][1]
    purger = subprocess.Popen(
        stack.spark_submit_cmd(batch),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=stack.env(
            cfg,
            HIVE_COMPACTION_TEST_HOOK_AT="purging",
            HIVE_COMPACTION_TEST_HOOK_CMD=f"echo > {fifos['purging']}; cat {fifos['purge_go']}",
        ),
    )
    rollback = None
    try:
        _await(fifos["purging"], purger, "purge")
        # The rollback, paused with the merged file in the trash and the originals still there.
        rollback = subprocess.Popen(
            stack.rollback_cmd(f"{db}.{table}", run.run_id, cfg),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=stack.env(
                cfg,
                HIVE_COMPACTION_TEST_HOOK_AT="rollback_outputs_moved",
                HIVE_COMPACTION_TEST_HOOK_CMD=f"echo > {fifos['rolling_back']}; cat {fifos['rollback_go']}",
            ),
        )
        _await(fifos["rolling_back"], rollback, "rollback")
        fifos["purge_go"].write_text("go\n")
        purged = purger.communicate(timeout=600)
        assert purger.returncode == 0, purged[0][-3000:] + purged[1][-3000:]
        fifos["rollback_go"].write_text("go\n")
        out, err = rollback.communicate(timeout=600)
        assert rollback.returncode == 0, out[-3000:] + err[-3000:]
    finally:
        for proc in (purger, rollback):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert f"rolled back {db}.{table} dt={dt}" in out
    assert stack.content(db, table).get(f"dt={dt}") == content[f"dt={dt}"]  # every original row back
    assert stack.snapshot(db, table)[f"dt={dt}"]["num_files"] == 4
    assert any((work / "trash").rglob("rolled-back/*"))  # the run kept for a later purge


def merged_partition(tmp_path: Path, table: str, partition: str, run: str = "run1"):
    """A partition holding one merged file (part-0) whose two originals (000000_0, 000001_0) are
    in the run's trash, and the manifest of that commit: (folder, area, trash folder, manifest)."""
    pid = partition_id(table, partition)
    folder = tmp_path / "events" / partition
    folder.mkdir(parents=True)
    area = WorkArea(f"file://{tmp_path}/.hive_compaction/events")
    trash = Path(area.trash(run, pid)[len("file://") :])
    trash.mkdir(parents=True)
    for name in ("000000_0", "000001_0"):
        (trash / name).write_text(f"original {name}")
    (folder / "part-0").write_text("merged")
    manifest = CommitRecord(
        run=run,
        pid=pid,
        owner=f"{run}/1",
        table=table,
        partition=partition,
        location=f"file://{folder}",
        inputs=[RecordedFile(n, len(f"original {n}")) for n in ("000000_0", "000001_0")],
        outputs=[StagedOutput(f"{area.staging(run, pid)}/1/part-0", "part-0", 6)],
        trash=area.trash(run, pid),
    )
    return folder, area, trash, manifest


def test_a_rollback_never_acts_beside_a_live_one(spark, tmp_path):
    """Two rollbacks of one partition at once would move the same files, and the first to finish
    would delete the other's journal: the second refuses, changing nothing. A rollback journal
    whose job is gone (this job holds the Metastore lock every rollback holds) is taken over."""
    fs = HadoopFS(spark)
    folder, area, _, manifest = merged_partition(tmp_path, "rb_twice.events", "dt=2026-06-06")
    journal = area.journal(manifest.pid)
    assert fs.create_exclusive(journal, manifest.but(owner="rollback/live", rollback=True).to_json())

    with pytest.raises(RollbackError, match="another rollback .*rollback/live.* holds it"):
        rollback_partition(fs, area, manifest, f"file://{tmp_path}/events", owner="rollback/second")
    assert read_journal(fs, journal).owner == "rollback/live"  # still the live one's
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["part-0"]

    done = rollback_partition(fs, area, manifest, f"file://{tmp_path}/events", owner="rollback/next", locked=True)
    assert done.rolled_back_at and not fs.exists(journal)
    assert {p.name: p.read_text() for p in folder.iterdir() if not p.name.startswith(".")} == {
        "000000_0": "original 000000_0",
        "000001_0": "original 000001_0",
    }


def test_each_partition_gets_its_statistics_back_as_soon_as_it_is_rolled_back(stack, tmp_path):
    """A rollback that fails at a later partition (here a writer reused an original's name) must
    not leave the partitions it already restored with the merge's statistics."""
    db, table, first, second = "rb_stats", "events", "dt=2026-06-07", "dt=2026-06-08"
    stack.make_table(db, table, "PARQUET", ["2026-06-07", "2026-06-08"], files=3, rows=150)
    content, params_before = stack.content(db, table), statistics_parameters(stack, db, table)
    originals = sorted(
        p.name for p in stack.partition_location(db, table, second).iterdir() if not p.name.startswith((".", "_"))
    )
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    merged_params = statistics_parameters(stack, db, table)
    assert merged_params[first] != params_before[first]
    folder = stack.partition_location(db, table, second)
    merged = [p for p in folder.iterdir() if not p.name.startswith((".", "_"))]
    (folder / originals[0]).write_bytes(merged[0].read_bytes())  # the writer, in the later partition

    cmd = stack.rollback_cmd(f"{db}.{table}", run.run_id, cfg)
    p = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and "exist both in the partition and where rollback" in p.stdout + p.stderr, p.stdout[
        -3000:
    ]
    assert f"rolled back {db}.{table} {first}" in p.stdout
    after = statistics_parameters(stack, db, table)
    assert after[first] == params_before[first]  # restored with its files
    assert after[second] == merged_params[second]  # refused: as the merge left it
    assert stack.content(db, table)[first] == content[first]


def test_a_rollback_says_so_when_an_original_left_the_trash_while_it_ran(spark, tmp_path, monkeypatch, fault_injection):
    """An original that leaves the trash between the rollback's checks and its moves (someone
    deleting by hand; a purge holds the journal and cannot) is not counted as restored: the
    rollback fails naming how many came back, instead of logging them all restored."""
    fs = HadoopFS(spark)
    folder, area, trash, manifest = merged_partition(tmp_path, "rb_vanish.events", "dt=2026-06-07")
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_AT", "rollback_outputs_moved")
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_CMD", f"rm '{trash / '000001_0'}'")

    with pytest.raises(RollbackError, match=r"1 original file\(s\) left .* while the rollback ran .*1 of 2 are back"):
        rollback_partition(fs, area, manifest, f"file://{tmp_path}/events", owner="rollback/1")
    assert {p.name: p.read_text() for p in folder.iterdir() if not p.name.startswith(".")} == {
        "000000_0": "original 000000_0"
    }
    assert not fs.exists(area.journal(manifest.pid))


def test_rollback_restores_the_statistics_of_just_before_the_commit_not_the_plans(stack, tmp_path):
    """An ANALYZE (Spark's statistics keys) lands between the plan and the commit: the rollback
    puts back what the partition had just before the commit, Spark's keys included, not what the
    plan read; the file count and size are the folder's."""
    import sys

    db, table, partition = "rb_commit_stats", "events", "dt=2026-06-09"
    stack.make_table(db, table, "ORC", ["2026-06-09"], files=3, rows=150)
    content, params_plan = stack.content(db, table), statistics_parameters(stack, db, table)
    assert "spark.sql.statistics.numRows" not in params_plan[partition]
    at_commit = tmp_path / "at_commit.json"
    analyze = tmp_path / "analyze.py"
    analyze.write_text(f"""
import json
from hmsclient import hmsclient
from hive_compaction.model.results import STATISTICS_KEYS
with hmsclient.HMSClient(host="127.0.0.1", port={stack.port}) as c:
    p = c.get_partition_by_name({db!r}, {table!r}, {partition!r})
    p.parameters.update({{"spark.sql.statistics.numRows": "150",
                          "spark.sql.statistics.totalSize": p.parameters["totalSize"]}})
    c.alter_partition({db!r}, {table!r}, p)
    p = c.get_partition_by_name({db!r}, {table!r}, {partition!r})
    json.dump({{k: v for k, v in p.parameters.items() if k in STATISTICS_KEYS}}, open({str(at_commit)!r}, "w"))
""")
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(
        cfg, HIVE_COMPACTION_TEST_HOOK_AT="staged", HIVE_COMPACTION_TEST_HOOK_CMD=f"{sys.executable} {analyze}"
    )
    assert run.state == "success", run.log[-4000:]
    before_commit = json.loads(at_commit.read_text())
    assert before_commit != params_plan[partition] and "spark.sql.statistics.numRows" in before_commit
    merged = statistics_parameters(stack, db, table)[partition]
    assert merged != before_commit and LISTED_AT in merged

    cmd = stack.rollback_cmd(f"{db}.{table}", run.run_id, cfg)
    p = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert statistics_parameters(stack, db, table)[partition] == before_commit
    assert stack.content(db, table) == content
