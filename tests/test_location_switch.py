"""commit_mode location_switch (issue 11): the partition is rebuilt in a fresh folder and one
alter_partition is the commit point. Real stack: the Metastore, spark-submit of the merge job,
`airflow dags test`, real ORC and Parquet files; every row checked by content checksum."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from harness import data_files
from matrix_sampling import variants

pytestmark = pytest.mark.integration

DT = "2026-06-01"


def table_folder(stack, db: str, table: str) -> Path:
    return Path(str(stack.metastore.state)) / "warehouse" / f"{db}.db" / table


def make(stack, db: str, table: str, storage: str, tmp_path: Path, rows: int = 200) -> tuple[Path, Path]:
    """A partition of four small files and one big one (a file of another table with many rows),
    and a config whose small-file limit lies between them: the big file is left alone."""
    stack.make_table(db, table, storage, [DT], files=4, rows=rows)
    stack.make_table(db, f"{table}_big", storage, [DT], files=1, rows=20000)
    folder = stack.partition_location(db, table, f"dt={DT}")
    big = data_files(stack.partition_location(db, f"{table}_big", f"dt={DT}"))[0]
    shutil.copy(big, folder / f"big-{big.name}")
    small = max(f.stat().st_size for f in data_files(folder) if not f.name.startswith("big-"))
    assert big.stat().st_size > 4 * small
    cfg = stack.write_config(
        tmp_path / f"{table}.yaml",
        [
            {
                "name": f"{db}.{table}",
                "commit_mode": "location_switch",
                "small_file_limit": small + 1,
                "target_file_size": big.stat().st_size * 4,
            }
        ],
    )
    return folder, cfg


def test_a_switch_builds_the_partition_anew_and_readers_see_before_or_after(stack, tmp_path):
    """An ORC and a Parquet table, in one run: each partition built anew in its own folder; the old
    folder's files leave the partition's default path for the run's trash, byte for byte (a
    partition dropped and written there again must not read them: issue 53, finding 4)."""

    def serde_content(db: str, table: str, storage: str):  # Hive's own SerDe reader, not Spark's native one
        serde = f"spark.sql.hive.convertMetastore{storage.capitalize()}"
        stack.spark.conf.set(serde, "false")
        try:
            return stack.content(db, table)
        finally:
            stack.spark.conf.unset(serde)

    tables, cfgs = {}, []
    for storage in ("ORC", "PARQUET"):
        db, table = f"switch_{storage.lower()}", "events"
        # Parquet as Hive lays it out (FIXED_LEN_BYTE_ARRAY decimals): Hive 2.3's SerDe reads no INT64
        # decimal (ETypeConverter's decimal converter takes binaries only), Spark's default layout.
        stack.spark.conf.set("spark.sql.parquet.writeLegacyFormat", str(storage == "PARQUET").lower())
        try:
            folder, cfg = make(stack, db, table, storage, tmp_path)
        finally:
            stack.spark.conf.unset("spark.sql.parquet.writeLegacyFormat")
        listed = data_files(folder)  # a reader lists the partition before the switch ...
        tables[storage] = {
            "db": db,
            "table": table,
            "folder": folder,
            "listed": listed,
            "before_rows": stack.rows(db, table)[f"dt={DT}"],
            "content": stack.content(db, table),
            "serde": serde_content(db, table, storage),
            "old_bytes": {f.name: f.read_bytes() for f in listed},
        }
        cfgs += yaml.safe_load(cfg.read_text())["tables"]  # read now: the next make() reuses the path
    cfg = stack.write_config(tmp_path / "both.yaml", cfgs)

    run = stack.run_dag(cfg, conf={"partition_date": DT})
    assert run.state == "success", run.log[-4000:]
    for storage, t in tables.items():
        db, table, folder, old_bytes, content = t["db"], t["table"], t["folder"], t["old_bytes"], t["content"]
        new = stack.partition_location(db, table, f"dt={DT}")
        assert new.parent == table_folder(stack, db, table) / "_compacted" / f"dt={DT}", new
        assert stack.content(db, table) == content
        # Hive's own SerDe reader reads the folder under _compacted too, as it read the old one.
        assert serde_content(db, table, storage) == t["serde"], storage
        t["new"], t["files"] = new, data_files(new)
        big = [f for f in t["files"] if f.name.startswith("big-")]
        assert len(t["files"]) == 2 and len(big) == 1, t["files"]  # one merged output, the big file copied as it was
        assert big[0].read_bytes() == old_bytes[big[0].name]
        # The old folder is left empty; its files are in the run's trash as they were, for a rollback.
        assert data_files(folder) == []
        trash = stack.work_area(db, table) / "trash"
        assert {
            f.name: f.read_bytes() for f in trash.rglob("*") if f.is_file() and not f.name.startswith(".")
        } == old_bytes
        snap = stack.snapshot(db, table)[f"dt={DT}"]
        assert (snap["hms_num_files"], snap["hms_total_size"], snap["hms_num_rows"]) == (
            str(snap["num_files"]),
            str(snap["bytes"]),
            str(len(t["before_rows"])),
        ), (storage, snap)
        # MSCK REPAIR finds nothing to add: _compacted is hidden from it, the old folder's partition exists
        stack.spark.sql(f"MSCK REPAIR TABLE {db}.{table}")
        assert stack.content(db, table) == content
        assert list(stack.snapshot(db, table)) == [f"dt={DT}"]
        assert not list((stack.work_area(db, table) / "journal").glob("*.json"))

        # Once the run's trash expires, the old folder is retired: its files deleted, then the folder.
        for d, dirs, names in os.walk(stack.work_area(db, table)):
            for n in dirs + names:
                old = time.time() - 40 * 86400
                os.utime(os.path.join(d, n), (old, old))
    run = stack.run_dag(cfg, conf={"partition_date": DT})
    assert run.state == "success", run.log[-4000:]
    for storage, t in tables.items():
        db, table = t["db"], t["table"]
        assert not t["folder"].exists(), (storage, list(t["folder"].iterdir()))
        assert stack.partition_location(db, table, f"dt={DT}") == t["new"] and data_files(t["new"]) == t["files"]
        stack.spark.sql(f"MSCK REPAIR TABLE {db}.{table}")
        assert stack.content(db, table) == t["content"]


def test_a_killed_switch_is_finished_or_undone_by_the_next_run(stack, tmp_path):
    """Killed before the commit point (ORC), the next run undoes the new folder and merges again;
    killed after it (Parquet), the next run finishes the switch. Either way every row is there
    once. One recovery run for both."""
    cases, cfgs = {}, []
    for point, storage in (("folder_built", "ORC"), ("switched", "PARQUET")):
        db, table = f"switch_kill_{point}", "events"
        folder, cfg = make(stack, db, table, storage, tmp_path)
        content = stack.content(db, table)
        batch = stack.plan_batches(cfg, run_id="killed")["spark_args"][0]["application_args"][1]
        p = stack.spark_submit(batch, HIVE_COMPACTION_TEST_KILL_AT=point)
        assert p.returncode != 0, p.stdout[-3000:]
        [journal] = (stack.work_area(db, table) / "journal").glob("*.json")
        assert stack.content(db, table) == content  # the old folder or the new: the same rows
        switched = stack.partition_location(db, table, f"dt={DT}") != folder
        assert switched == (point == "switched")
        old = time.time() - 3600  # the killed job is gone: its journal is older than a live commit can be
        os.utime(journal, (old, old))
        cases[point] = (db, table, folder, content)
        cfgs += yaml.safe_load(cfg.read_text())["tables"]  # read now: the next make() reuses the path
    cfg = stack.write_config(tmp_path / "both.yaml", cfgs)

    run = stack.run_dag(cfg, conf={"partition_date": DT})
    assert run.state == "success", run.log[-4000:]
    for _point, (db, table, folder, content) in cases.items():
        assert stack.content(db, table) == content
        new = stack.partition_location(db, table, f"dt={DT}")
        assert new != folder and len(data_files(new)) == 2
        versions = sorted((table_folder(stack, db, table) / "_compacted" / f"dt={DT}").iterdir())
        assert versions == [new], versions  # an undone folder is gone
        assert not list((stack.work_area(db, table) / "journal").glob("*.json"))
        snap = stack.snapshot(db, table)[f"dt={DT}"]
        assert (snap["hms_num_files"], snap["hms_total_size"]) == (str(snap["num_files"]), str(snap["bytes"])), snap
    assert "finished the location switch run killed left behind" in run.log
    assert "did not happen; removing its new folder" in run.log


def test_a_zombie_journal_published_after_a_later_switch_is_undone_not_failed(stack, tmp_path):
    """A merge job hung between writing its journal and publishing it (the Metastore hung, its lock
    taken over); the retry merged and switched the partition; then the zombie's journal landed.
    Its switch can no longer happen (the partition is at another folder of ours, not at the one it
    merged): the next run removes it and its new folder, and the run succeeds with every row once."""
    db, table = "switch_zombie", "events"
    folder, cfg = make(stack, db, table, "ORC", tmp_path)
    content = stack.content(db, table)
    batch = stack.plan_batches(cfg, run_id="zombie")["spark_args"][0]["application_args"][1]
    p = stack.spark_submit(batch, HIVE_COMPACTION_TEST_KILL_AT="journaled")
    assert p.returncode != 0, p.stdout[-3000:]
    [journal] = (stack.work_area(db, table) / "journal").glob("*.json")
    zombie = journal.read_text()
    old = time.time() - 3600
    os.utime(journal, (old, old))
    batch = stack.plan_batches(cfg, run_id="retry")["spark_args"][0]["application_args"][1]
    p = stack.spark_submit(batch)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    switched = stack.partition_location(db, table, f"dt={DT}")
    assert switched != folder and not journal.exists()
    journal.write_text(zombie)  # the zombie's publish, late: a journal naming the old folder and its own new one
    zombie_folder = Path(urlsplit(json.loads(zombie)["new_location"]).path)
    zombie_folder.mkdir(parents=True)  # and it had begun building its new folder
    shutil.copy(data_files(switched)[0], zombie_folder / "part-zombie.orc")

    run = stack.run_dag(cfg, conf={"partition_date": DT})
    assert run.state == "success", run.log[-4000:]
    assert stack.content(db, table) == content
    assert stack.partition_location(db, table, f"dt={DT}") == switched
    assert not journal.exists() and not zombie_folder.exists()
    assert "a later location switch" in run.log


# An ALTER TABLE ... PARTITION (...) SET SERDEPROPERTIES through the Metastore, taking no lock.
ALTER_SERDE = """
import sys
from hmsclient import hmsclient
port, db, table, partition = sys.argv[1:]
with hmsclient.HMSClient(host="127.0.0.1", port=int(port)) as c:
    p = c.get_partition_by_name(db, table, partition)
    p.sd.serdeInfo.parameters["serialization.null.format"] = "NULL"
    c.alter_partition(db, table, p)
"""


@pytest.mark.parametrize("actor", variants("test_location_switch: actor during the build", ["add", "drop", "alter"]))
def test_a_writer_or_a_drop_during_the_switch_stops_it(stack, tmp_path, actor):
    """A file added to the old folder, the partition dropped, or its storage descriptor altered
    while the new folder is built: the switch does not happen, the new folder is deleted, no row
    is lost or resurrected, and the alter is not overwritten."""
    db, table, storage = f"switch_{actor}", "events", "ORC"
    folder, cfg = make(stack, db, table, storage, tmp_path)
    stack.make_table(db, "late", storage, [DT], files=1, rows=11)
    late = data_files(stack.partition_location(db, "late", f"dt={DT}"))[0]
    expected = sorted(stack.rows(db, table)[f"dt={DT}"] + stack.rows(db, "late")[f"dt={DT}"])
    if actor == "add":
        cmd = f"cp {late} {folder}/part-late.orc"
    elif actor == "alter":
        (tmp_path / "alter.py").write_text(ALTER_SERDE)
        cmd = f"{sys.executable} {tmp_path / 'alter.py'} {stack.port} {db} {table} dt={DT}"
        expected = stack.rows(db, table)[f"dt={DT}"]
    else:
        cmd = (
            f"python -c \"from hmsclient import hmsclient; c = hmsclient.HMSClient(host='127.0.0.1', "
            f"port={stack.port}); c.open(); c.drop_partition_by_name('{db}', '{table}', 'dt={DT}', True)\""
        )
    batch = stack.plan_batches(cfg, run_id="raced")["spark_args"][0]["application_args"][1]
    p = stack.spark_submit(batch, HIVE_COMPACTION_TEST_HOOK_AT="folder_built", HIVE_COMPACTION_TEST_HOOK_CMD=cmd)
    assert "the location was not switched, the partition is as it was" in p.stdout + p.stderr, (p.stdout + p.stderr)[
        -3000:
    ]
    assert not list((table_folder(stack, db, table) / "_compacted").glob("*/*")), "the new folder is left"
    assert not list((stack.work_area(db, table) / "journal").glob("*.json"))
    if actor == "drop":
        assert f"dt={DT}" not in stack.snapshot(db, table) and not folder.exists()  # never re-created
        stack.spark.sql(f"MSCK REPAIR TABLE {db}.{table}")
        assert f"dt={DT}" not in stack.rows(db, table)
        return
    assert stack.partition_location(db, table, f"dt={DT}") == folder
    assert stack.rows(db, table)[f"dt={DT}"] == expected
    if actor == "alter":
        assert "storage descriptor changed since the commit read it" in p.stdout, p.stdout[-3000:]
        assert f"FAILED {db}.{table} dt={DT}" in p.stdout, p.stdout[-3000:]
    run = stack.run_dag(cfg, conf={"partition_date": DT})  # the next run merges the late file too
    assert run.state == "success", run.log[-4000:]
    assert stack.rows(db, table)[f"dt={DT}"] == expected
    assert stack.partition_location(db, table, f"dt={DT}") != folder
    if actor == "alter":  # the next run switched with the altered descriptor, keeping the change
        from hmsclient import hmsclient

        with hmsclient.HMSClient(host="127.0.0.1", port=stack.port) as c:
            serde = c.get_partition_by_name(db, table, f"dt={DT}").sd.serdeInfo.parameters
        assert serde.get("serialization.null.format") == "NULL", serde


def test_rollback_switches_back_to_the_old_folder_with_its_statistics(stack, tmp_path):
    """One alter_partition back while the old folder is whole: the location, every statistics key
    the switch and the refresh changed, and the rows as before, except numFiles and totalSize,
    which are the folder's (the big file copied in by hand left them stale before the run); the
    unused new folder retires with the run's trash.

    Never over rows written after the switch: once the partition reads the new folder, a writer
    may add files there (Hive's INSERT INTO writes into the partition's location); switching back
    would hide them (and the purge delete them), so the rollback refuses, naming the file, and
    changes nothing. A file a by-path writer drops into the unread new folder after the rollback
    is kept when the run's trash expires, and so is the folder."""
    from test_rollback_and_cleanup import statistics_parameters

    db, table, storage = "switch_rollback", "events", "PARQUET"
    folder, cfg = make(stack, db, table, storage, tmp_path)
    content, params_before = stack.content(db, table), statistics_parameters(stack, db, table)
    run = stack.run_dag(cfg, conf={"partition_date": DT})
    assert run.state == "success", run.log[-4000:]
    new = stack.partition_location(db, table, f"dt={DT}")
    assert new != folder and statistics_parameters(stack, db, table) != params_before
    late = new / "part-late-insert.parquet"
    shutil.copy(data_files(new)[0], late)
    with_late = stack.content(db, table)

    cmd = stack.rollback_cmd(f"{db}.{table}", run.run_id, cfg)
    p = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert p.returncode != 0 and "part-late-insert.parquet" in p.stdout + p.stderr, p.stdout[-3000:] + p.stderr[-3000:]
    assert "would hide their rows" in p.stdout + p.stderr
    assert stack.partition_location(db, table, f"dt={DT}") == new and stack.content(db, table) == with_late
    late.unlink()  # the writer's rows are someone's to keep: here, gone before the rollback goes through

    p = subprocess.run(cmd, env=stack.env(cfg), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"rolled back {db}.{table} dt={DT}: reads file:{folder} again" in p.stdout, p.stdout[-2000:]
    assert stack.partition_location(db, table, f"dt={DT}") == folder
    disk = data_files(folder)
    assert params_before[f"dt={DT}"]["numFiles"] != str(len(disk))  # stale before the run
    params_before[f"dt={DT}"].update(numFiles=str(len(disk)), totalSize=str(sum(f.stat().st_size for f in disk)))
    assert statistics_parameters(stack, db, table) == params_before
    assert stack.content(db, table) == content
    shutil.copy(data_files(folder)[0], new / "part-by-path.parquet")

    for d, dirs, names in os.walk(stack.work_area(db, table)):  # the run's trash expires
        for n in dirs + names:
            t = time.time() - 40 * 86400
            os.utime(os.path.join(d, n), (t, t))
    stack.write_config(cfg, [{"name": f"{db}.{table}", "commit_mode": "location_switch", "small_file_limit": 1}])
    run = stack.run_dag(cfg, conf={"partition_date": DT})  # lists the partition, merges nothing
    assert run.state == "success", run.log[-4000:]
    assert [f.name for f in data_files(new)] == ["part-by-path.parquet"]  # the rest of it retired
    assert stack.partition_location(db, table, f"dt={DT}") == folder
    assert stack.content(db, table) == content


# The two writers by path after the switch: one a day (the schedule explorer runs both every run).
@pytest.mark.variant("test_location_switch: a writer by path after the switch", "append")
def test_a_writer_that_looked_the_location_up_before_the_switch_has_its_rows_read(stack, tmp_path):
    """Issue 29, finding 5: a writer that resolved the partition's folder before the switch and
    writes into it by path afterwards would write where nobody reads. A file that arrives right
    after the switch, while the old files are still there, is moved into the new folder by the
    commit (the log names it). One that arrives once they left for the trash could as well be an
    overwrite's (issue 53, finding 4): the old folder's retirement keeps it there and says so, and
    moves nothing beside the merged copy. Every row by content."""
    db, table, storage = "switch_late", "events", "ORC"
    folder, cfg = make(stack, db, table, storage, tmp_path)
    stack.make_table(db, "late", storage, [DT], files=1, rows=11)
    late = data_files(stack.partition_location(db, "late", f"dt={DT}"))[0]
    late_rows = stack.rows(db, "late")[f"dt={DT}"]
    expected = sorted(stack.rows(db, table)[f"dt={DT}"] + late_rows)
    batch = stack.plan_batches(cfg, run_id="late")["spark_args"][0]["application_args"][1]
    p = stack.spark_submit(
        batch,
        HIVE_COMPACTION_TEST_HOOK_AT="switched",
        HIVE_COMPACTION_TEST_HOOK_CMD=f"cp {late} {folder}/part-late-1.orc",
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "['part-late-1.orc'] were written to the old folder" in out, out[-3000:]
    new = stack.partition_location(db, table, f"dt={DT}")
    assert new != folder and (new / "part-late-1.orc").exists() and not (folder / "part-late-1.orc").exists()
    assert stack.rows(db, table)[f"dt={DT}"] == expected

    shutil.copy(late, folder / "part-late-2.orc")  # later still: the old folder's retirement keeps it
    for d, dirs, names in os.walk(stack.work_area(db, table)):  # the run's trash expires
        for n in dirs + names:
            t = time.time() - 40 * 86400
            os.utime(os.path.join(d, n), (t, t))
    run = stack.run_dag(cfg, conf={"partition_date": DT})
    assert run.state == "success", run.log[-4000:]
    assert [f.name for f in data_files(folder)] == ["part-late-2.orc"], "kept where it was written"
    assert "['part-late-2.orc'] arrived there after its files left for the trash" in run.log, run.log[-4000:]
    assert stack.rows(db, table)[f"dt={DT}"] == expected


@pytest.mark.variant("test_location_switch: a writer by path after the switch", "overwrite")
def test_a_by_path_overwrite_right_after_the_switch_is_what_the_partition_reads(stack, tmp_path):
    """Issue 53, finding 4, second half, on the real stack: a writer that looked the location up
    before the switch replaces the old folder's files by path (new names, as Spark's INSERT
    OVERWRITE writes) right after the alter_partition. The job switches the partition back to the
    folder as that writer left it and reports FAILED saying so, instead of MERGED on the merged
    copy of the rows the writer replaced; the next run merges the writer's rows."""
    db, table, storage = "switch_overwritten", "events", "ORC"
    folder, cfg = make(stack, db, table, storage, tmp_path)
    stack.make_table(db, "writer", storage, [DT], files=2, rows=13)
    written = data_files(stack.partition_location(db, "writer", f"dt={DT}"))
    expected = stack.rows(db, "writer")[f"dt={DT}"]
    overwrite = " && ".join(
        [f"rm {folder}/[!._]*"] + [f"cp {f} {folder}/part-{k:05d}-w.c000.orc" for k, f in enumerate(written)]
    )
    batch = stack.plan_batches(cfg, run_id="overwritten")["spark_args"][0]["application_args"][1]
    p = stack.spark_submit(batch, HIVE_COMPACTION_TEST_HOOK_AT="switched", HIVE_COMPACTION_TEST_HOOK_CMD=overwrite)
    out = p.stdout + p.stderr
    assert "switched back, the partition reads" in out, out[-3000:]
    assert stack.partition_location(db, table, f"dt={DT}") == folder
    assert stack.rows(db, table)[f"dt={DT}"] == expected
    run = stack.run_dag(cfg, conf={"partition_date": DT})
    assert run.state == "success", run.log[-4000:]
    assert stack.rows(db, table)[f"dt={DT}"] == expected
