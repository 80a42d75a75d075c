"""The commit protocol against other actors (issue 11): writers that rewrite a partition after a
commit was decided, tampered journals, rollbacks that would clash, exclusive journals, private
work areas. Real stack: the Metastore, spark-submit of the merge job, real ORC and Parquet files;
every row checked by content checksum."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from commit_records import decided_commit
from harness import data_files
from hive_compaction.commit import in_place as commit, steps
from hive_compaction.commit.record import CommitRecord, StagedOutput
from hive_compaction.commit.steps import Step
from hive_compaction.commit.work_area import WorkArea
from hive_compaction.storage import metastore_client
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.paths import partition_id
from matrix_sampling import variants

pytestmark = pytest.mark.integration


def _owner(text: str):
    """The owner a journal's text names; None for a torn one (a reader that met half a file)."""
    try:
        return json.loads(text)["owner"]
    except ValueError:
        return None


def killed_at(stack, cfg, point: str, run_id: str = "killed"):
    batch = stack.plan_batches(cfg, run_id=run_id)["spark_args"][0]["application_args"][1]
    p = stack.spark_submit(batch, HIVE_COMPACTION_TEST_KILL_AT=point)
    assert p.returncode != 0, p.stdout[-3000:]
    return p


@pytest.mark.parametrize(
    "point, storage", variants("test_commit_protocol: replay step", [("journaled", "ORC"), ("inputs_moved", "PARQUET")])
)
def test_a_replay_never_acts_on_inputs_a_writer_replaced_since_the_commit_was_decided(stack, tmp_path, point, storage):
    """A crash after the journal, then a writer rewrites the partition reusing a file name (as
    Hive's INSERT OVERWRITE does with 000000_0): the next run must not retire the new file or
    publish the stale merged output. The partition keeps exactly the writer's rows. Once the
    inputs had moved, the run fails the partition (an append cannot be told from an overwrite:
    a person looks); before any move, the partition is simply the writer's."""
    db, table, dt = f"replaced_{point}", "events", "2026-05-01"
    stack.make_table(db, table, storage, [dt], files=4, rows=200)
    stack.make_table(db, "writer", storage, [dt], files=1, rows=37)
    folder = stack.partition_location(db, table, f"dt={dt}")
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    inputs = [f.name for f in data_files(folder)]
    p = killed_at(stack, cfg, point)
    assert len(list((stack.work_area(db, table) / "journal").glob("*.json"))) == 1, (p.stdout + p.stderr)[-5000:]

    # The writer: the partition now holds only its file, under the name of one of the inputs.
    for f in folder.iterdir():  # with the local file system's .crc side files
        f.unlink()
    shutil.copy(data_files(stack.partition_location(db, "writer", f"dt={dt}"))[0], folder / inputs[0])
    writer_content = stack.content(db, "writer")[f"dt={dt}"]
    written = (folder / inputs[0]).read_bytes()

    run = stack.run_dag(cfg, conf={"partition_date": dt})
    if point == "journaled":  # none of its moves had happened: the partition is the writer's, skipped
        assert run.state == "success", run.log[-4000:]
        assert "the interrupted commit of run killed was not finished" in run.log
        assert "changed or vanished since it was decided" in run.log
    else:  # the old inputs are in the trash: the partition fails, saying what is where (issue 29)
        assert run.state == "failed", run.log[-4000:]
        assert f"input(s) ['{inputs[0]}'] changed since the commit of run killed was decided" in run.log
        assert "input(s) in the trash" in run.log and "in staging" in run.log
    assert [f.name for f in data_files(folder)] == [inputs[0]] and (folder / inputs[0]).read_bytes() == written
    assert stack.content(db, table)[f"dt={dt}"] == writer_content
    journals = stack.work_area(db, table) / "journal"
    if point == "journaled":
        assert not list(journals.glob("*.json"))
    else:  # the journal stays, marked stopped, until a person decides (every later run fails the partition)
        assert len(list(journals.glob("*.json"))) == 1 and len(list(journals.glob("*.stopped"))) == 1


def test_a_tampered_journal_moves_nothing(stack, tmp_path):
    """Whoever can write the work area must not be able to make the job move other files: a
    journal naming a file outside the partition (or staged outside the work area) is refused."""
    db, table, dt = "tampered", "events", "2026-05-02"
    stack.make_table(db, table, "ORC", [dt], files=3, rows=90)
    stack.make_table(db, "victim", "ORC", [dt], files=2, rows=40)
    folder = stack.partition_location(db, table, f"dt={dt}")
    victim = stack.partition_location(db, "victim", f"dt={dt}")
    victim_files = {f.name: f.read_bytes() for f in data_files(victim)}
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    killed_at(stack, cfg, "journaled")
    before = {f.name: f.read_bytes() for f in data_files(folder)}
    content = stack.content(db, table)
    journal = next((stack.work_area(db, table) / "journal").glob("*.json"))
    record = json.loads(journal.read_text())
    record["inputs"][0]["name"] = f"../../victim/dt={dt}/{data_files(victim)[0].name}"
    journal.write_text(json.dumps(record))

    run = stack.run_dag(cfg, conf={"partition_date": dt})
    assert run.state == "failed"  # a person must look: someone wrote into the work area
    assert "the commit record in" in run.log and "is refused, nothing was moved" in run.log
    assert "are not plain names" in run.log
    assert {f.name: f.read_bytes() for f in data_files(victim)} == victim_files
    assert {f.name: f.read_bytes() for f in data_files(folder)} == before
    assert stack.content(db, table) == content


def test_rollback_checks_every_clash_before_it_moves_anything(stack, tmp_path):
    db, table, dt = "rb_clash", "events", "2026-05-03"
    stack.make_table(db, table, "PARQUET", [dt], files=4, rows=120)
    folder = stack.partition_location(db, table, f"dt={dt}")
    inputs = [f.name for f in data_files(folder)]
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg, conf={"partition_date": dt})
    assert run.state == "success", run.log[-4000:]
    merged = data_files(folder)
    assert len(merged) == 1
    # A writer adds a file under the name one original had: restoring that original would
    # replace it, so the rollback must refuse before moving the merged file out.
    shutil.copy(merged[0], folder / inputs[-1])  # (no .crc side file: none is needed to read it)
    after_writer = {f.name: f.read_bytes() for f in data_files(folder)}
    cmd = stack.rollback_cmd(f"{db}.{table}", run.run_id, cfg)
    p = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout[-3000:]
    assert f"file name(s) ['{inputs[-1]}'] exist both in the partition and where rollback" in p.stdout + p.stderr, (
        p.stdout[-3000:]
    )
    assert {f.name: f.read_bytes() for f in data_files(folder)} == after_writer
    assert not list((stack.work_area(db, table) / "journal").glob("*.json"))  # its hold released


def test_work_areas_are_private_to_the_account_that_merges(stack, tmp_path):
    db, table, dt = "private", "events", "2026-05-04"
    stack.make_table(db, table, "ORC", [dt], files=3, rows=60)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(cfg, conf={"partition_date": dt})
    assert run.state == "success", run.log[-4000:]
    assert stack.work_area(db, table).stat().st_mode & 0o777 == 0o700


def test_a_journal_is_published_whole_and_to_one_publisher_only(spark, tmp_path):
    """The local file system's create(overwrite=false) checks, then writes: two committers could
    both win. Ours publishes with a hard link (``storage.HARD_LINK``): of many racing publishers
    exactly one wins, and what it published is whole."""
    fs = HadoopFS(spark)
    target = f"file://{tmp_path}/journal/p.json"
    for round_ in range(5):
        wins, barrier = [], threading.Barrier(4)

        def publish(i: int) -> None:  # its threads are joined within the round
            barrier.wait()  # noqa: B023 - this round's
            if fs.create_exclusive(target, json.dumps({"owner": i, "pad": "x" * 200_000})):
                wins.append(i)  # noqa: B023 - this round's

        threads = [threading.Thread(target=publish, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1, (round_, wins)
        assert json.loads(fs.read_text(target))["owner"] == wins[0]
        assert sorted(p.name for p in (tmp_path / "journal").iterdir() if not p.name.endswith(".crc")) == ["p.json"]
        fs.delete(target)


def decided(fs, tmp_path: Path, table: str, partition: str, run: str, outputs: tuple[str, ...]):
    """A partition of two inputs (000000_0, 000001_0) and staged ``outputs``, and the record of
    the commit that merges them: (folder, area, staging folder, record)."""
    folder = tmp_path / "events" / partition
    folder.mkdir(parents=True)
    pid = partition_id(table, partition)
    area = WorkArea(f"file://{tmp_path}/.hive_compaction/events")
    staged = Path(area.staging(run, pid)[len("file://") :]) / "attempt-1"
    staged.mkdir(parents=True)
    for name in ("000000_0", "000001_0"):
        (folder / name).write_text(f"input {name}")
    for name in outputs:
        (staged / name).write_text(f"output {name}")
    record = CommitRecord(
        run=run,
        pid=pid,
        owner=f"{run}/1",
        table=table,
        partition=partition,
        location=f"file://{folder}",
        table_location=f"file://{folder.parent}",
        inputs=[e.identity() for e in fs.list(f"file://{folder}") if not e.name.startswith(".")],
        outputs=[StagedOutput(f"file://{staged / n}", n, (staged / n).stat().st_size) for n in outputs],
        staging=f"file://{staged}",
    )  # the attempt's own staging folder, as a merge job's commit names it
    return folder, area, staged, record


def test_a_partition_dropped_while_outputs_move_in_stays_dropped(spark, tmp_path, monkeypatch, fault_injection):
    """A DROP PARTITION after the commit's last check, between two outputs' moves: the second
    output must not re-create the folder (MSCK REPAIR would register it again, with a part of
    the merged rows). The commit stops as for a dropped partition: the inputs stay in the trash."""
    fs = HadoopFS(spark)
    run = "run1"
    folder, area, staged, record = decided(fs, tmp_path, "dropped.events", "dt=2026-05-05", run, ("part-0", "part-1"))
    pid = record.pid
    # The writer drops the partition once the first output is in.
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_AT", "output_moved")
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_CMD", f"rm -r '{folder}'")

    with pytest.raises(RuntimeError, match="is gone .*nothing was moved into it"):
        commit.commit(fs, area, record)
    assert not folder.exists()
    trash = Path(area.trash_of(record)[len("file://") :] + commit.MOVING_TRASH)  # where inputs move while it runs
    assert {f.name: f.read_text() for f in data_files(trash)} == {
        "000000_0": "input 000000_0",
        "000001_0": "input 000001_0",
    }
    assert {f.name: f.read_text() for f in data_files(staged)} == {"part-1": "output part-1"}
    assert not fs.exists(area.journal(pid))


@pytest.mark.parametrize("step", ["input_moved", "outputs_moving"])
def test_an_overwrite_under_new_names_mid_commit_keeps_only_the_writers_rows(
    spark, tmp_path, monkeypatch, fault_injection, step
):
    """Issue 29, finding 2: an INSERT OVERWRITE that deletes every file and writes Spark's
    ``part-<uuid>`` names while the first pass moves files (after the first input left, or after
    the last check, before the outputs move in). Neither the merged output nor a moved input may
    come back beside the writer's file: the commit stops naming it, the partition holds the
    writer's file only, what moved stays in the trash, the outputs in staging."""
    fs = HadoopFS(spark)
    folder, area, staged, record = decided(
        fs, tmp_path, "overwritten.events", "dt=2026-05-06", "run1", ("part-compacted-0",)
    )
    writer = "part-00000-6f1c2a3e.c000.orc"
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_AT", step)
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_CMD", f"rm -f '{folder}'/0000* && echo written > '{folder}/{writer}'")

    with pytest.raises(commit.InputsChanged, match=rf"a writer wrote \['{writer}'\]"):
        commit.commit(fs, area, record)
    assert {f.name: f.read_text() for f in data_files(folder)} == {writer: "written\n"}
    moved = {"input_moved": {"000000_0"}, "outputs_moving": {"000000_0", "000001_0"}}[step]
    assert {f.name for f in data_files(Path(area.trash_of(record)[len("file://") :] + commit.MOVING_TRASH))} == moved
    assert {f.name for f in data_files(staged)} == {"part-compacted-0"}
    # The journal stays, marked stopped with what is where: no run merges the partition until a person decides.
    assert fs.exists(area.journal(record.pid)) and "are in staging" in fs.read_text(area.stopped_mark(record.pid))
    with pytest.raises(commit.CommitHeld, match="until a person decides"):
        commit.recover(fs, area, record.pid, "run2/1", location=record.location)


def test_the_fault_injection_sees_every_step_the_commit_reports(spark, tmp_path, monkeypatch, fault_injection):
    """The protocol's steps are named once (``commit.steps.Step``): a commit reports each step it
    passes to its step timer, and the tests' fault injection, which recognises the steps from the
    storage calls, must see the same steps in the same order (plus the first move of each batch,
    which only it can split), so a step the code adds cannot go unkilled by the matrices."""
    fs = HadoopFS(spark)
    folder, area, staged, record = decided(
        fs, tmp_path, "stepped.events", "dt=2026-05-07", "run1", ("part-compacted-0", "part-compacted-1")
    )
    seen_by_hooks = []
    recognised = fault_injection._step

    def step(point, haystack, folder=None):
        seen_by_hooks.append(point)
        recognised(point, haystack, folder)

    monkeypatch.setattr(fault_injection, "_step", step)
    # Named, so that the injection splits each batch after its first move (as the kill matrix's entries do).
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_AT", f"{Step.INPUT_MOVED};{Step.OUTPUT_MOVED}")
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_CMD", "true")
    reported = []
    with steps.observed(lambda s, label: reported.append(s)):
        commit.commit(fs, area, record)
    assert reported == [s for s in steps.IN_PLACE_STEPS[1:] if s not in steps.WITHIN_A_BATCH]
    assert [s for s in seen_by_hooks if s in {m.value for m in Step}] == [s.value for s in steps.IN_PLACE_STEPS[1:]]
    assert {f.name for f in data_files(folder)} == {"part-compacted-0", "part-compacted-1"}


def test_a_journal_being_taken_over_never_stops_existing(spark, tmp_path):
    """A replay takes a journal over by rewriting it with its own name as owner. If the old one
    were deleted before the new one arrived, a rival committer's exclusive publish could win in
    that gap, and two jobs would act on one partition. A rival trying all along never wins, and
    a reader always finds a whole journal, the old owner's or the new one's."""
    fs = HadoopFS(spark)
    journal = f"file://{tmp_path}/journal/p.json"
    assert fs.create_exclusive(journal, json.dumps({"owner": "first"}))
    done, rival_won, seen = threading.Event(), [], set()

    def rival() -> None:
        while not done.is_set():
            if fs.create_exclusive(journal, json.dumps({"owner": "rival"})):
                rival_won.append(True)
                return

    def reader() -> None:
        while not done.is_set():
            seen.add(_owner(fs.read_text(journal)) if fs.exists(journal) else None)

    threads = [threading.Thread(target=rival), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    try:
        for i in range(150):
            fs.write_text_atomic(journal, json.dumps({"owner": f"replay-{i}", "pad": "x" * 2000}))
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not rival_won
    assert seen and None not in seen and seen <= {"first"} | {f"replay-{i}" for i in range(150)}
    assert _owner(fs.read_text(journal)) == "replay-149"
    assert sorted(p.name for p in (tmp_path / "journal").iterdir() if not p.name.endswith(".crc")) == ["p.json"]


def test_a_file_rewritten_with_the_same_name_size_and_time_is_told_apart(stack, tmp_path, monkeypatch, fault_injection):
    """An input replaced after the journal by another file of the same name, size and
    modification time (a writer that set the time, a coarse clock) is not the input: its version
    (here the inode, on HDFS the file id, on S3A / ABFS the etag), recorded in the journal, differs.
    The commit stops before moving anything; the writer's file stays. Through a viewfs mount a
    file has the version of the file the mount leads to."""
    fs = HadoopFS(stack.spark)
    table, partition, run = "rewritten.events", "dt=2026-05-06", "run1"
    pid = partition_id(table, partition)
    folder = Path(str(stack.metastore.state)) / "viewfs-data" / "rewritten" / "events" / partition
    folder.mkdir(parents=True)
    for name in ("000000_0", "000001_0"):
        (folder / name).write_text(f"input {name}")
    via_mount = f"{stack.metastore.viewfs_root}/rewritten/events/{partition}"
    listed = [e for e in fs.list(f"file://{folder}") if not e.name.startswith(".")]
    assert [e.version for e in listed] == [f"ino:{(folder / e.name).stat().st_ino}" for e in listed]
    assert [e.identity() for e in fs.list(via_mount) if not e.name.startswith(".")] == [e.identity() for e in listed]
    assert fs.status(f"{via_mount}/000000_0").version == listed[0].version

    area, record, staged = decided_commit(
        tmp_path, table, partition, run, folder, [e.identity() for e in listed], {"part-0": "output part-0"}
    )
    # The writer, once the journal is out: same name, same size, same time, other bytes, other file.
    before = (folder / "000000_0").stat()
    rewrite = (
        f"import os; p={str(folder / '000000_0')!r}; open(p + '.w', 'w').write('other 000000_0'); "
        f"os.replace(p + '.w', p); os.utime(p, ns=({before.st_atime_ns}, {before.st_mtime_ns}))"
    )
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_AT", "journaled")
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_CMD", f"python3 -c {json.dumps(rewrite)}")

    with pytest.raises(
        metastore_client.CommitConflict,
        match=r"input\(s\) \['000000_0'\] of rewritten.events/dt=2026-05-06 "
        "changed while it was being merged; nothing was committed",
    ):
        commit.commit(fs, area, record)
    now = fs.status(f"file://{folder}/000000_0")
    assert (now.size, now.modification_time) == (listed[0].size, listed[0].modification_time)
    assert now.version != listed[0].version
    assert {f.name: f.read_text() for f in data_files(folder)} == {
        "000000_0": "other 000000_0",
        "000001_0": "input 000001_0",
    }
    assert (staged / "part-0").read_text() == "output part-0"
    assert not fs.exists(area.journal(pid))
    # A move that names the input's identity leaves the other file where it is.
    assert (
        fs.move_all(
            [
                (
                    f"file://{folder}/000000_0",
                    f"file://{tmp_path}/moved",
                    listed[0].size,
                    listed[0].modification_time,
                    listed[0].version,
                )
            ]
        )
        == 0
    )
    assert (folder / "000000_0").read_text() == "other 000000_0"


def test_a_late_file_whose_move_stopped_after_its_copy_is_adopted_once(spark, tmp_path, monkeypatch):
    """On an object store a move is a copy then a delete. A late file of a retired folder (a
    writer by path after a location switch) whose move into the new folder stopped in between is
    in both: the next look deletes the original instead of adding the copy again as _copy_1."""
    from hive_compaction.commit import location_switch

    fs = HadoopFS(spark)
    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        folder.mkdir()
        (folder / "part-late-0").write_text("late rows")
    (old / "part-late-1").write_text("later rows")
    (new / "part-compacted-0").write_text("merged")
    monkeypatch.setattr(location_switch, "is_object_store", lambda scheme: scheme == "file")  # as S3A's
    adopted = location_switch.adopt_late_files(fs, f"file://{old}", f"file://{new}", [], "t/dt=1")
    assert sorted(adopted) == ["part-late-0", "part-late-1"]
    assert data_files(old) == []
    assert {f.name: f.read_text() for f in data_files(new)} == {
        "part-compacted-0": "merged",
        "part-late-0": "late rows",
        "part-late-1": "later rows",
    }


def test_inputs_another_tables_merge_took_mid_commit_put_back_what_moved(spark, tmp_path, monkeypatch, fault_injection):
    """Two tables over one folder, each merged by its own run (``test_safety``'s two-table test,
    without the stack): after this commit's first input moved, the other table's merge takes the
    input still there and publishes its own merged file. This commit cannot move all its inputs,
    so it puts back the one it moved, beside the other merge's file: every row once, nothing
    left in the trash."""
    fs = HadoopFS(spark)
    folder, area, staged, record = decided(
        fs, tmp_path, "alias.events", "dt=2026-05-07", "run1", ("part-compacted-mine",)
    )
    other = tmp_path / "other-trash"
    other.mkdir()
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_AT", "input_moved")
    monkeypatch.setenv(
        "HIVE_COMPACTION_TEST_HOOK_CMD",
        f"mv '{folder}/000001_0' '{other}/' && echo merged > '{folder}/part-compacted-theirs'",
    )

    with pytest.raises(commit.CommitStopped, match="every file was put back"):
        commit.commit(fs, area, record)
    assert {f.name: f.read_text() for f in data_files(folder)} == {
        "000000_0": "input 000000_0",
        "part-compacted-theirs": "merged\n",
    }
    assert {f.name for f in data_files(staged)} == {"part-compacted-mine"}
    assert not fs.exists(area.journal(record.pid))
