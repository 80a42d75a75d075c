"""Issue 29, part A: no run reports success while a partition's rows are missing or doubled.

The schedule reproduced on 2026-11-26 (a kill after the inputs moved, a retry dying inside its
replay, an INSERT OVERWRITE with new names, later runs), and the two findings of the adversarial
read: a replay un-publishing a finished commit (finding 1), an overwrite with new names getting
old rows published beside its own (finding 2). Real stack, the merge job through spark-submit,
every row checked."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

import pytest

from harness import data_files
from matrix_sampling import variants

pytestmark = pytest.mark.integration


def batch(stack, cfg: Path, run_id: str) -> str:
    return stack.plan_batches(cfg, run_id=run_id)["spark_args"][0]["application_args"][1]


def statuses(output: str, table: str, partition: str) -> list[str]:
    """The statuses the merge job's progress lines give the partition."""
    return re.findall(rf"\] {re.escape(table)} {re.escape(partition)}: (\w+)", output)


def test_a_retried_kill_then_an_overwrite_never_brings_old_rows_back_or_reports_success(stack, tmp_path):
    """The reproduced schedule: an ORC partition in several small files; the merge job killed right
    after its inputs moved to the trash; its retry (the same run) killed at the same point inside
    its replay, leaving a replay claim; then a Spark INSERT OVERWRITE writes new rows under new
    part-<uuid> names. The next run, holding the partition's lock, takes the young claim over at
    once and must not report success for the partition, and no run may publish the old merged
    rows beside the overwrite's: the partition ends with exactly the overwrite's rows, and every
    run after it fails the partition too (the journal stays, marked stopped) until a person decides."""
    db, table, dt = "false_success", "events", "2026-06-01"
    partition, label = f"dt={dt}", f"{db}.{table}"
    stack.make_table(db, table, "ORC", [dt], files=6, rows=600)
    stack.make_table(db, "overwrite", "ORC", [dt], files=1, rows=100)
    folder = stack.partition_location(db, table, partition)
    journals = stack.work_area(db, table) / "journal"
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": label}])
    first = batch(stack, cfg, "killed")

    killed = stack.spark_submit(first, HIVE_COMPACTION_TEST_KILL_AT=f"inputs_moved:{partition}")
    assert killed.returncode != 0 and "test kill point inputs_moved reached" in killed.stdout + killed.stderr
    assert stack.rows(db, table).get(partition) is None  # its rows are in the trash now
    retry = stack.spark_submit(first, HIVE_COMPACTION_TEST_KILL_AT=f"inputs_moved:{partition}")
    assert retry.returncode != 0 and "recovering the interrupted commit" in retry.stdout + retry.stderr
    claims, journal = list(journals.glob("*.replay")), list(journals.glob("*.json"))
    assert len(claims) == 1 and len(journal) == 1

    stack.spark.sql(
        f"INSERT OVERWRITE TABLE {label} PARTITION (dt='{dt}') SELECT event_id, user_id, kind, amount, "
        f"ts, tags, attrs FROM {db}.overwrite WHERE dt = '{dt}'"
    )
    overwritten = stack.rows(db, "overwrite")[partition]
    assert stack.rows(db, table)[partition] == overwritten
    assert all(f.name.startswith("part-") for f in data_files(folder))

    # The next run holds the partition's Metastore lock, so the young claim's job is gone (or
    # stops at its next step): it takes the replay over at once, not after the orphan age, and
    # must not publish the merged old rows beside the overwrite's files: it fails, saying what is
    # where. Runs after it find a partition of the overwrite's rows. Every run is recorded first,
    # checked after: what each reported, what the partition read then.
    seen = {}
    young = stack.spark_submit(batch(stack, cfg, "young"))
    seen["young"] = (
        young.returncode,
        statuses(young.stdout, label, partition),
        stack.rows(db, table).get(partition, []),
    )
    late = stack.spark_submit(batch(stack, cfg, "late"))
    seen["late"] = (late.returncode, statuses(late.stdout, label, partition), stack.rows(db, table).get(partition, []))
    again = stack.spark_submit(batch(stack, cfg, "again"))
    seen["again"] = (
        again.returncode,
        statuses(again.stdout, label, partition),
        stack.rows(db, table).get(partition, []),
    )
    summary = {run: (rc, st, len(rows)) for run, (rc, st, rows) in seen.items()}
    rc, st, rows = seen["young"]
    assert rc != 0 and st == ["failed"] and rows == overwritten, (summary, young.stdout[-3000:])
    assert "this job holds the partition's Metastore lock" in young.stdout + young.stderr, young.stderr[-3000:]
    failed = next(line for line in young.stdout.splitlines() if line.startswith(f"FAILED {label} {partition}"))
    assert "trash" in failed and "staging" in failed and "part-" in failed, failed
    for run in ("late", "again"):  # never rows other than the overwrite's, and FAILED until a person decides
        assert seen[run][2] == overwritten and seen[run][1] == ["failed"], (run, summary)
    assert "until a person decides" in again.stdout, again.stdout[-3000:]
    assert len(list(journals.glob("*.stopped"))) == 1


@pytest.mark.parametrize(
    "point", variants("test_commit_false_success: replay step", ["outputs_moved", "manifest_written"])
)
def test_a_replay_past_its_commit_point_stops_beside_a_file_written_under_an_input_name(stack, tmp_path, point):
    """Killed once every input is in the trash and every output is published (the commit point);
    before the retry a writer puts a file under a name an input had: Hive's INSERT INTO takes
    000000_0 when it is free, and so does Hive's INSERT OVERWRITE, which may have run before the
    outputs moved in (issue 53: the schedule explorer found the replay finishing then, reporting
    the overwritten rows merged beside the overwrite's). The replay cannot tell the two apart, so
    it finishes only a partition that holds nothing else: here it stops, fails the partition
    saying what is where, takes the merged outputs back to staging and leaves the writer's file,
    and the journal stays, marked stopped, until a person decides. Before the manifest is written
    (``outputs_moved``) or after (``manifest_written``), the same."""
    db, table, dt = f"finished_{point}", "events", "2026-06-02"
    partition, label = f"dt={dt}", f"{db}.{table}"
    stack.make_table(db, table, "ORC", [dt], files=4, rows=200)
    stack.make_table(db, "writer", "ORC", [dt], files=1, rows=17)
    folder = stack.partition_location(db, table, partition)
    before = stack.rows(db, table)[partition]
    inputs = [f.name for f in data_files(folder)]
    # Three small files at least: once finished, the partition's two files are left as they are.
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": label, "min_small_files": 3}])
    killed = stack.spark_submit(batch(stack, cfg, "killed"), HIVE_COMPACTION_TEST_KILL_AT=f"{point}:{partition}")
    assert killed.returncode != 0 and f"test kill point {point} reached" in killed.stdout + killed.stderr
    outputs = [f.name for f in data_files(folder)]
    assert len(outputs) == 1 and outputs[0].startswith("part-compacted-")

    writer_file = data_files(stack.partition_location(db, "writer", partition))[0]
    shutil.copy(writer_file, folder / inputs[0])
    written = (folder / inputs[0]).read_bytes()

    retry = stack.spark_submit(batch(stack, cfg, "next"))
    area = stack.work_area(db, table)
    if point == "manifest_written":  # the commit had been finished: the writer's file is the partition's
        assert retry.returncode == 0, retry.stdout[-4000:]
        assert sorted(f.name for f in data_files(folder)) == sorted([inputs[0], outputs[0]])
        assert stack.rows(db, table)[partition] == sorted(before + stack.rows(db, "writer")[partition])
        assert not list((area / "journal").glob("*.json"))
        return
    assert retry.returncode != 0 and statuses(retry.stdout, label, partition) == ["failed"], retry.stdout[-4000:]
    failed = next(line for line in retry.stdout.splitlines() if line.startswith(f"FAILED {label} {partition}"))
    assert "had published its outputs" in failed and "in staging" in failed, failed
    assert [f.name for f in data_files(folder)] == [inputs[0]] and (folder / inputs[0]).read_bytes() == written
    assert stack.rows(db, table)[partition] == stack.rows(db, "writer")[partition]
    assert len(list((area / "journal").glob("*.json"))) == 1 and len(list((area / "journal").glob("*.stopped"))) == 1
    journal = json.loads(next((area / "journal").glob("*.json")).read_text())
    staged = [Path(o["staged"][len("file://") :]) for o in journal["outputs"]]
    assert [o["name"] for o in journal["outputs"]] == outputs and all(p.is_file() for p in staged), staged  # kept


def test_an_overwrite_with_new_names_after_the_inputs_moved_is_never_joined_by_the_old_rows(stack, tmp_path):
    """Finding 2: once the inputs are in the trash, a writer overwrites the partition with files
    under new names (as Spark's INSERT OVERWRITE does: part-<uuid>). The journal's whole listing
    of the partition tells its files apart from the commit's: nothing is published, the old
    inputs are not moved back over the overwrite, and the partition fails saying what is where."""
    db, table, dt = "overwritten_new_names", "events", "2026-06-03"
    partition, label = f"dt={dt}", f"{db}.{table}"
    stack.make_table(db, table, "ORC", [dt], files=4, rows=200)
    stack.make_table(db, "writer", "ORC", [dt], files=1, rows=23)
    folder = stack.partition_location(db, table, partition)
    writer_file = data_files(stack.partition_location(db, "writer", partition))[0]
    new_name = f"part-00000-{uuid.uuid4()}.c000.zstd.orc"
    overwrite = (
        f'find "$HIVE_COMPACTION_PARTITION_DIR" -maxdepth 1 -type f -delete && '
        f'cp "{writer_file}" "$HIVE_COMPACTION_PARTITION_DIR/{new_name}"'
    )
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": label}])
    job = stack.spark_submit(
        batch(stack, cfg, "overwritten"),
        HIVE_COMPACTION_TEST_HOOK_AT="inputs_moved",
        HIVE_COMPACTION_TEST_HOOK_CMD=overwrite,
    )
    out = job.stdout + job.stderr
    assert "test hook at inputs_moved" in out
    assert statuses(job.stdout, label, partition) == ["failed"], job.stdout[-4000:]
    assert job.returncode != 0, job.stdout[-4000:]
    failed = next(line for line in job.stdout.splitlines() if line.startswith(f"FAILED {label} {partition}"))
    assert new_name in failed and "trash" in failed and "staging" in failed, failed
    assert [f.name for f in data_files(folder)] == [new_name]
    assert stack.rows(db, table)[partition] == stack.rows(db, "writer")[partition]
    journals = stack.work_area(db, table) / "journal"  # kept, marked stopped, until a person decides
    assert len(list(journals.glob("*.json"))) == 1 and len(list(journals.glob("*.stopped"))) == 1


def test_a_retry_of_the_same_run_that_merges_a_partition_again_keeps_both_commits(stack, tmp_path):
    """Finding 4: trash and manifests are per attempt. The run's first attempt merges the
    partition; writers then add files, one under a name an input had (Hive's INSERT INTO takes
    000000_0 when it is free); the run's retry merges the partition again. It neither collides
    with the first attempt's trash names nor overwrites its manifest; every row is there; and a
    rollback of the run undoes the second merge first, then refuses the first where a writer's
    file took an original's name, naming it, with every row still there."""
    import subprocess

    db, table, dt = "per_attempt", "events", "2026-06-04"
    partition, label = f"dt={dt}", f"{db}.{table}"
    stack.make_table(db, table, "ORC", [dt], files=4, rows=400)
    stack.make_table(db, "writer", "ORC", [dt], files=3, rows=90)
    folder = stack.partition_location(db, table, partition)
    originals = sorted(f.name for f in data_files(folder))
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": label}])
    job = batch(stack, cfg, "again")

    first = stack.spark_submit(job)
    assert first.returncode == 0 and statuses(first.stdout, label, partition) == ["merged"], first.stdout[-3000:]
    rows = stack.rows(db, table)[partition]
    added = [originals[0], "part-late-1.orc", "part-late-2.orc"]  # the first reuses an original's name
    for source, name in zip(data_files(stack.partition_location(db, "writer", partition)), added):
        shutil.copy(source, folder / name)
    rows = sorted(rows + stack.rows(db, "writer")[partition])

    retry = stack.spark_submit(job)
    assert retry.returncode == 0 and statuses(retry.stdout, label, partition) == ["merged"], retry.stdout[-3000:]
    assert stack.rows(db, table)[partition] == rows
    area = stack.work_area(db, table)
    manifests = sorted(
        (area / "manifests" / "again").glob("*/*.json"), key=lambda f: json.loads(f.read_text())["committed_at"]
    )
    assert len(manifests) == 2 and manifests[0].parent == manifests[1].parent
    trashes = [area / "trash" / "again" / m.parent.name / m.stem for m in manifests]
    assert sorted(f.name for f in data_files(trashes[0])) == originals
    merged_first = [o["name"] for o in json.loads(manifests[0].read_text())["outputs"]]
    assert sorted(f.name for f in data_files(trashes[1])) == sorted(added + merged_first)

    rollback = subprocess.run(
        stack.rollback_cmd(label, "again", cfg), env=stack.env(cfg), capture_output=True, text=True, timeout=600
    )
    out = rollback.stdout + rollback.stderr
    assert rollback.returncode != 0 and originals[0] in out and "exist both in the partition" in out, out[-3000:]
    assert stack.rows(db, table)[partition] == rows  # the second merge undone, nothing lost
    assert sorted(f.name for f in data_files(folder)) == sorted(added + merged_first)
