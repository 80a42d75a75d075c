"""Data safety on the real stack: kills, concurrent writers and runs, refusals. The sampled kill and
adversary matrices are in ``test_safety_kills`` and ``test_safety_actors`` (modules of their own, so
that the suite's two processes can run them side by side)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from matrix_sampling import variants
from test_end_to_end import files_with_times

pytestmark = pytest.mark.integration


def partition_files(folder: Path) -> list[str]:
    """Every entry of a partition folder except the local file system's own .crc side files."""
    return sorted(f.name for f in folder.iterdir() if not (f.name.startswith(".") and f.name.endswith(".crc")))


def test_an_interrupted_commit_is_finished_even_when_the_next_run_selects_other_dates(stack, tmp_path):
    db, table = "faults_dates", "events"
    stack.make_table(db, table, "PARQUET", ["2026-04-06", "2026-04-07"], files=3, rows=150)
    rows = stack.rows(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    killed = stack.spark_submit(
        stack.plan_batches(cfg, run_id="killed")["spark_args"][0]["application_args"][1],
        HIVE_COMPACTION_TEST_KILL_AT="inputs_moved:dt=2026-04-06",
    )
    assert killed.returncode != 0
    assert stack.rows(db, table).get("dt=2026-04-06") is None  # its rows are in the trash right now
    journals = list((stack.work_area(db, table) / "journal").glob("dt_2026-04-06.*.json"))
    assert len(journals) == 1

    # A young journal of another run may belong to a commit still under way: left alone.
    young = stack.run_dag(cfg, conf={"partition_date": "2026-04-07"})
    assert young.state == "success", young.log[-4000:]
    assert stack.rows(db, table).get("dt=2026-04-06") is None and journals[0].exists()

    # Once it is older than any commit lasts, the job that lists the table's partitions
    # finishes it, whatever dates its run selected.
    old = time.time() - 3600
    os.utime(journals[0], (old, old))
    run = stack.run_dag(cfg, conf={"partition_date": "2026-04-07"})
    assert run.state == "success", run.log[-4000:]
    assert stack.rows(db, table) == rows
    assert "finished the commit run killed left behind" in run.log
    assert not journals[0].exists()


def test_files_added_during_a_merge_stay_where_they_are(stack, tmp_path):
    db, table = "writers", "events"
    stack.make_table(db, table, "ORC", ["2026-04-03"], files=4, rows=300)
    # A file the "other writer" drops into the partition while the merge runs.
    stack.make_table(db, "late", "ORC", ["2026-04-03"], files=1, rows=50)
    late_dir = stack.partition_location(db, "late", "dt=2026-04-03")
    late_file = next(f for f in late_dir.iterdir() if f.suffix == ".orc")
    late_rows = stack.rows(db, "late")["dt=2026-04-03"]
    rows_before = stack.rows(db, table)["dt=2026-04-03"]

    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    run = stack.run_dag(
        cfg,
        HIVE_COMPACTION_TEST_HOOK_AT="staged",
        HIVE_COMPACTION_TEST_HOOK_CMD=f'cp "{late_file}" "$HIVE_COMPACTION_PARTITION_DIR/part-late-arrival.zstd.orc"',
    )
    assert run.state == "success", run.log[-5000:]
    folder = stack.partition_location(db, table, "dt=2026-04-03")
    names = partition_files(folder)
    assert "part-late-arrival.zstd.orc" in names and len(names) == 2, names
    assert (folder / "part-late-arrival.zstd.orc").read_bytes() == late_file.read_bytes()
    assert stack.rows(db, table)["dt=2026-04-03"] == sorted(rows_before + late_rows)
    snap = stack.snapshot(db, table)["dt=2026-04-03"]
    assert snap["hms_num_files"] == "2" and snap["hms_total_size"] == str(snap["bytes"])


def test_two_runs_merging_one_partition_at_once_never_duplicate_a_row(stack, tmp_path):
    """Run A reaches its commit only after run B merged the same partition (driven by a hook at
    A's "staged" point, not by timing): A must notice and move nothing."""
    import shlex

    db, table = "conflict", "events"
    stack.make_table(db, table, "ORC", ["2026-04-05"], files=4, rows=300)
    rows = stack.rows(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}"}])
    batch_a = stack.plan_batches(cfg, run_id="run-a")["spark_args"][0]["application_args"][1]
    batch_b = stack.plan_batches(cfg, run_id="run-b")["spark_args"][0]["application_args"][1]
    run_b = "env -u HIVE_COMPACTION_TEST_HOOK_AT " + shlex.join(stack.spark_submit_cmd(batch_b))
    a = stack.spark_submit(batch_a, HIVE_COMPACTION_TEST_HOOK_AT="staged", HIVE_COMPACTION_TEST_HOOK_CMD=run_b)
    assert a.returncode == 1, a.stdout[-3000:]
    assert "changed while it was being merged" in a.stdout
    folder = stack.partition_location(db, table, "dt=2026-04-05")
    assert len(partition_files(folder)) == 1  # B's output only; A moved nothing
    assert stack.rows(db, table) == rows  # every row exactly once
    work = stack.work_area(db, table)
    assert not list((work / "journal").glob("dt_2026-04-06.*.json"))


@pytest.mark.parametrize("point", variants("test_safety: two tables, step", ["staged", "input_moved"]))
def test_two_tables_over_one_folder_merged_at_once_never_duplicate_a_row(stack, tmp_path, point):
    """An external table over another table's folders, each merged by its own run: their commits
    hold the partition in two work areas, so neither journal stops the other. Run A (the external
    table) is paused before its commit or after its first input moved while run B (the table)
    merges the same folder; every file moves once at most, and a commit publishes only when it
    moved all its inputs, so one of them merges and the other moves nothing (or puts back what
    it moved). The plan task keeps two tables' partitions over one folder out of a single run
    (``planning.one_task_per_folder``); this is two runs."""
    import shlex

    db, dt = "shared_folder", "2026-04-07"
    table, alias = f"events_{point}", f"alias_{point}"
    stack.make_table(db, table, "ORC", [dt], files=4, rows=300)
    stack.spark.sql(
        f"CREATE TABLE {db}.{alias} LIKE {db}.{table} "  # external: it has a LOCATION
        f"LOCATION 'file://{stack.partition_location(db, table, f'dt={dt}').parent}'"
    )
    stack.spark.sql(f"MSCK REPAIR TABLE {db}.{alias}")
    stack.spark.sql(f"ANALYZE TABLE {db}.{alias} PARTITION (dt='{dt}') COMPUTE STATISTICS NOSCAN")
    rows = stack.rows(db, table)
    folder = stack.partition_location(db, table, f"dt={dt}")
    assert stack.partition_location(db, alias, f"dt={dt}") == folder
    batch_a = stack.plan_batches(stack.write_config(tmp_path / "a.yaml", [{"name": f"{db}.{alias}"}]), run_id="run-a")[
        "spark_args"
    ][0]["application_args"][1]
    batch_b = stack.plan_batches(stack.write_config(tmp_path / "b.yaml", [{"name": f"{db}.{table}"}]), run_id="run-b")[
        "spark_args"
    ][0]["application_args"][1]
    run_b = "env -u HIVE_COMPACTION_TEST_HOOK_AT " + shlex.join(stack.spark_submit_cmd(batch_b))
    a = stack.spark_submit(batch_a, HIVE_COMPACTION_TEST_HOOK_AT=point, HIVE_COMPACTION_TEST_HOOK_CMD=run_b)
    assert "test hook at" in a.stdout + a.stderr, a.stdout[-3000:]
    assert stack.rows(db, table) == rows == stack.rows(db, alias)  # every row exactly once
    # B merged what it found (after A's first move, that is all but A's moved input, which A put
    # back when it found the rest gone); A published nothing.
    assert len([f for f in partition_files(folder) if f.startswith("part-compacted-")]) == 1, partition_files(folder)
    assert a.returncode == 1 and (
        "changed while it was being merged" in a.stdout or "every file was put back" in a.stdout
    ), a.stdout[-3000:]
    journals = {t: list((stack.work_area(db, t) / "journal").glob("*.json")) for t in (table, alias)}
    assert journals == {table: [], alias: []}


def test_unsafe_or_unsupported_inputs_are_skipped_with_a_reason_and_left_byte_for_byte(stack, tmp_path):
    from hmsclient import hmsclient

    db = "refusals"
    stack.make_table(
        db,
        "events",
        "ORC",
        ["2026-05-01", "2026-05-02", "2026-05-03", "2026-05-04", "2026-05-05", "2026-05-06"],
        files=3,
        rows=120,
    )
    stack.make_table(db, "other", "ORC", ["2026-05-01"], files=3, rows=120)
    stack.make_table(db, "parquet_src", "PARQUET", ["2026-05-01"], files=1, rows=10)
    # A partition a Hive insert is still writing into (its staging folder is there).
    stack.make_table(db, "writing", "PARQUET", ["2026-04-09"], files=3, rows=90)
    writing = stack.partition_location(db, "writing", "dt=2026-04-09")
    (writing / ".hive-staging_hive_2026-04-09_10-00-00_000_1" / "-ext-10000").mkdir(parents=True)
    loc = lambda dt: stack.partition_location(db, "events", f"dt={dt}")
    (loc("2026-05-01") / "part-99999-corrupt.c000.zstd.orc").write_bytes(b"not an ORC file" * 64)
    (loc("2026-05-02") / "part-99998-empty.c000.zstd.orc").write_bytes(b"")
    foreign = next(stack.partition_location(db, "parquet_src", "dt=2026-05-01").glob("*.parquet"))
    shutil.copy(foreign, loc("2026-05-03") / "part-99997-foreign.c000.zstd.orc")

    # Partition locations that would reach outside the partition.
    table_root = loc("2026-05-04").parent
    other_partition = stack.partition_location(db, "other", "dt=2026-05-01")
    with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
        for dt, where in (
            ("2026-05-04", "file:/"),
            ("2026-05-05", f"file:{table_root}"),
            ("2026-05-06", f"file:{other_partition}"),
        ):
            p = c.get_partition_by_name(db, "events", f"dt={dt}")
            p.sd.location = where
            c.alter_partition(db, "events", p)
    stack.spark.sql(
        f"CREATE TABLE {db}.bucketed (id BIGINT, dt STRING) USING ORC PARTITIONED BY (dt) "
        "CLUSTERED BY (id) INTO 4 BUCKETS"
    )
    stack.spark.sql(f"CREATE TABLE {db}.text_table (id BIGINT) PARTITIONED BY (dt STRING) STORED AS TEXTFILE")
    folders = [loc(d) for d in ("2026-05-01", "2026-05-02", "2026-05-03")] + [other_partition, writing]
    before = {f: files_with_times(f) for f in folders}
    root_before = sorted(p.name for p in table_root.iterdir())

    cfg = stack.write_config(
        tmp_path / "c.yaml", [{"name": f"{db}.{t}"} for t in ("events", "bucketed", "text_table", "writing")]
    )
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-5000:]
    report = run.log[run.log.index("run report") :]
    expected = {
        "dt=2026-05-01": "unreadable or foreign file(s): part-99999-corrupt",
        "dt=2026-05-02": "zero-byte file(s) ['part-99998-empty",
        "dt=2026-05-03": "unreadable or foreign file(s): part-99997-foreign",
        "dt=2026-05-04": "is the file system root",
        "dt=2026-05-05": "is the table root",
        "dt=2026-05-06": "is outside the table location",
    }
    lines = report.splitlines()
    for partition, reason in expected.items():
        assert any(partition in line and "skipped" in line and reason in line for line in lines), (partition, reason)
    assert any("refusals.bucketed" in line and "is bucketed" in line for line in lines)
    assert any("refusals.text_table" in line and "unsupported storage format" in line for line in lines)
    assert "a writer is still writing into it (['.hive-staging_hive_2026-04-09" in run.log
    assert {f: files_with_times(f) for f in folders} == before  # not one byte changed
    assert sorted(p.name for p in table_root.iterdir()) == root_before


def test_a_rewrite_whose_output_does_not_match_its_inputs_is_not_committed(stack, tmp_path):
    """The Spark SQL rewrite's read-back check has teeth: a staged output swapped (after the write,
    before the check) for a valid file with other rows fails the partition and leaves it byte for
    byte. (The columnar engine reads its output back inside the task that wrote it.)"""
    db, table = "writers", "tampered"
    stack.make_table(db, table, "ORC", ["2026-04-05"], files=4, rows=400)
    folder = stack.partition_location(db, table, "dt=2026-04-05")
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    one_input = sorted(f for f in folder.iterdir() if f.suffix == ".orc")[0]
    staging = stack.work_area(db, table) / "staging"
    swap = (
        f'for f in "{staging}"/*/rewrite-*/part-*; do cp "{one_input}" "$f"; '
        f'rm -f "$(dirname "$f")/.$(basename "$f").crc"; done'
    )
    cfg = stack.write_config(
        tmp_path / "c.yaml", [{"name": f"{db}.{table}", "merge_mode": "rewrite", "rewrite_engine": "spark_sql"}]
    )
    job = stack.spark_submit(
        stack.plan_batches(cfg, run_id="tampered")["spark_args"][0]["application_args"][1],
        config_path=cfg,
        HIVE_COMPACTION_TEST_HOOK_AT="rewritten",
        HIVE_COMPACTION_TEST_HOOK_CMD=swap,
    )
    log = job.stdout + job.stderr
    assert job.returncode != 0
    assert "test hook at rewritten" in log
    assert "verification failed: inputs had 400 rows" in log
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before


def test_staged_outputs_vanishing_mid_commit_put_every_file_back(stack, tmp_path):
    """The first pass of a commit checks every move: if the staged outputs disappear once the
    inputs are in the trash (a second attempt's cleanup, a purge), the inputs come back and the
    commit fails; no row is lost and nothing is left to replay."""
    db, table = "vanish", "events"
    stack.make_table(db, table, "ORC", ["2026-04-08"], files=4, rows=240)
    folder = stack.partition_location(db, table, "dt=2026-04-08")
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    content = stack.content(db, table)
    work = stack.work_area(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "merge_mode": "rewrite"}])
    job = stack.spark_submit(
        stack.plan_batches(cfg, run_id="vanish")["spark_args"][0]["application_args"][1],
        config_path=cfg,
        HIVE_COMPACTION_TEST_HOOK_AT="inputs_moved",
        HIVE_COMPACTION_TEST_HOOK_CMD=f'rm -rf "{work}/staging"',
    )
    assert job.returncode != 0
    assert "staged output(s) vanished before they moved; every file was put back" in job.stdout + job.stderr
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before
    assert stack.content(db, table) == content
    assert not list((work / "journal").glob("*.json"))


def test_the_shipped_code_holds_no_test_machinery():
    """Faults are injected from outside (``scripts/fault_hooks.py`` wraps the storage and
    Metastore classes): the package reads no ``HIVE_COMPACTION_*`` variable but its config path,
    names no kill point, and neither runs commands nor sends signals."""
    import re

    from hive_compaction.airflow import config

    package = Path(config.__file__).resolve().parents[1]
    shipped = {
        p.relative_to(package).as_posix(): p.read_text() for p in package.rglob("*") if p.suffix in (".py", ".java")
    }
    assert len(shipped) > 40
    variables = {(name, v) for name, text in shipped.items() for v in re.findall(r"HIVE_COMPACTION_[A-Z_]+", text)}
    assert variables == {("airflow/config.py", config.CONFIG_ENV)}, variables
    for word in (
        "KILL_POINTS",
        "fault_point",
        "fault_hook",
        "subprocess",
        "shell=True",
        "os.kill",
        "SIGKILL",
        "before_operation",
    ):
        assert not [name for name, text in shipped.items() if word in text], word


def test_the_fault_injector_stops_a_job_at_named_steps_and_calls(spark, tmp_path, monkeypatch, fault_injection):
    """The injector's view of a commit from outside: the journal's publication is a step, and the
    storage calls are counted from the commit's start, a journal's write and publish included."""
    from commit_records import decided_commit
    from hive_compaction.commit import in_place as commit
    from hive_compaction.storage.hadoop_fs import HadoopFS

    fs = HadoopFS(spark)
    folder = tmp_path / "events" / "dt=2026-06-01"
    folder.mkdir(parents=True)
    (folder / "000000_0").write_text("input")
    area, record, _ = decided_commit(
        tmp_path,
        "inject.events",
        "dt=2026-06-01",
        "run1",
        folder,
        [e.identity() for e in fs.list(f"file://{folder}")],
        {"part-0": "output"},
    )
    seen = tmp_path / "seen"
    monkeypatch.setenv("HIVE_COMPACTION_TEST_HOOK_AT", "journaled:dt=2026-06-02;journaled:dt=2026-06-01;inputs_moved")
    monkeypatch.setenv(
        "HIVE_COMPACTION_TEST_HOOK_CMD", f'ls "$HIVE_COMPACTION_PARTITION_DIR" >> {seen}; echo -- >> {seen}'
    )
    commit.commit(fs, area, record)
    # Once at the journal (the other partition's entry does not match), once with the input in the trash.
    assert seen.read_text().split("--\n") == ["000000_0\n", "", ""]
