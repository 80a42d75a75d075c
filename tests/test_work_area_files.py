"""The work area's own rules, on real files through the Spark job's Hadoop FileSystem."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from hive_compaction.commit.record import CommitRecord, PurgeHold, StagedOutput, UnsafeRecord, parse
from hive_compaction.commit.work_area import WorkArea, check_record, journal_files, purge_expired, read_journal
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.listing import RecordedFile
from hive_compaction.storage.paths import partition_id


def _age(path, days: float) -> None:
    t = time.time() - days * 86400
    for p in [path, *path.rglob("*")]:
        os.utime(p, (t, t))


def record(**changes) -> CommitRecord:
    area = WorkArea("file:///w/.hive_compaction/events")
    return CommitRecord(
        run="r1",
        pid=partition_id("db.events", "dt=1"),
        owner="r1/a1",
        table="db.events",
        partition="dt=1",
        location="file:///w/events/dt=1",
        inputs=[RecordedFile("000000_0", 1)],
        outputs=[StagedOutput(f"{area.root}/staging/r1/x", "part-0", 1)],
    ).but(**changes)


def test_torn_journals_read_as_none_whole_ones_as_records(spark, tmp_path):
    area = WorkArea(f"file://{tmp_path}")
    journal = tmp_path / "journal"
    journal.mkdir()
    (journal / "a.json").write_text(record(mode="location_switch", rows=7).to_json())
    (journal / "b.json").write_text("")
    (journal / "c.json").write_text('{"partition": "dt=')
    (journal / "d.json").write_text(PurgeHold("r0", "p", 1.5).to_json())
    fs = HadoopFS(spark)
    found = {e.name: read_journal(fs, e.path) for e in journal_files(fs, area)}
    assert found == {
        "a.json": record(mode="location_switch", rows=7),
        "b.json": None,
        "c.json": None,
        "d.json": PurgeHold("r0", "p", 1.5),
    }
    assert journal_files(fs, WorkArea(f"file://{tmp_path}/missing")) == []


def test_a_record_of_an_older_version_reads_with_the_defaults_and_a_newer_ones_extra_fields_are_ignored():
    old = json.loads(record().to_json())
    for key in ("mode", "listing", "attempt", "descriptor"):
        del old[key]
    assert parse(json.dumps({**old, "a_later_field": 1})) == record(attempt="")


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"inputs": "000000_0"}, "inputs is str, not list[RecordedFile]"),
        ({"outputs": ["part-0"]}, "outputs holds items that are not objects"),
        ({"inputs": [{"name": "000000_0", "size": "1"}]}, "inputs[0]: size is str"),
        ({"outputs": [{"name": "part-0", "size": 1}]}, "outputs[0]: staged is missing"),
        ({"files": [{"size": 1, "mtime": 1.5}]}, "files[0]: name is missing; files[0]: mtime is float"),
        ({"location": None}, "location is NoneType, not str"),
        ({"rows": True}, "rows is bool, not int"),
        ({"run": None, "owner": 3}, "run is NoneType, not str; owner is int, not str"),
    ],
)
def test_a_journal_whose_fields_have_other_types_is_refused_before_anything_moves(change, problem):
    """Anyone who may write the work area could write any JSON there: a field of another type
    is refused by name, not met later as a crash half-way through a commit."""
    with pytest.raises(UnsafeRecord, match=re.escape(f"db.events/dt=1 is refused, nothing was moved: {problem}") + "$"):
        parse(json.dumps({**json.loads(record().to_json()), **change}))
    missing = json.loads(record().to_json())
    del missing["location"]
    with pytest.raises(UnsafeRecord, match="location is missing"):
        parse(json.dumps(missing))


def test_purge_deletes_the_temporary_journal_names_killed_jobs_left(spark, tmp_path):
    """A job killed while publishing a journal leaves its hidden temporary name (before the
    publish: the only copy of a journal never published; after: a second name of a published
    one). The purge deletes those older than the retention and nothing else."""
    area = WorkArea(f"file://{tmp_path}")
    journal = tmp_path / "journal"
    journal.mkdir()
    names = {
        "old": ".dt_1.0123456789abcdef.json.aaaaaaaaaaaa.tmp",
        "new": ".dt_2.0123456789abcdef.json.bbbbbbbbbbbb.tmp",
        "journal": "dt_3.0123456789abcdef.json",
    }
    for name in names.values():
        (journal / name).write_text("{}")
    _age(journal / names["old"], 10)
    _age(journal / names["journal"], 10)  # a journal of a job that is gone: recovery's, not the purge's
    purge_expired(HadoopFS(spark), area, retention_days=7, keep_runs=set())
    assert sorted(p.name for p in journal.iterdir()) == sorted([names["new"], names["journal"]])


def test_purge_deletes_only_runs_older_than_the_retention_and_never_kept_ones(spark, tmp_path):
    area = WorkArea(f"file://{tmp_path}")
    for run in ("old", "new", "pending"):
        for folder in ("trash", "manifests", "staging"):
            (tmp_path / folder / run / "p1").mkdir(parents=True)
            (tmp_path / folder / run / "p1" / "f").write_text(run)
    _age(tmp_path / "trash" / "old", 10)
    _age(tmp_path / "manifests" / "old", 10)
    _age(tmp_path / "staging" / "old", 10)
    _age(tmp_path / "trash" / "pending", 10)
    _age(tmp_path / "manifests" / "pending", 10)
    _age(tmp_path / "staging" / "pending", 10)
    # "new" was touched in one folder only recently: a run's age is its newest change
    _age(tmp_path / "trash" / "new", 10)
    deleted = purge_expired(HadoopFS(spark), area, retention_days=7, keep_runs={"pending"})
    assert sorted(d.rsplit("/", 2)[-2] for d in deleted) == ["manifests", "staging", "trash"]
    for folder in ("trash", "manifests", "staging"):
        assert sorted(p.name for p in (tmp_path / folder).iterdir()) == ["new", "pending"]


def test_a_record_whose_attempt_is_not_a_plain_name_is_refused():
    """The attempt names the trash and manifest folders a commit moves files into: a journal
    naming ``../..`` there would move them out of the work area."""
    area = WorkArea("file:///w/.hive_compaction/events")
    pid = partition_id("db.events", "dt=1")
    check_record(record(attempt="a1b2c3"), area, pid, location="file:///w/events/dt=1")
    with pytest.raises(UnsafeRecord, match=r"attempt '\.\./\.\.' is not a plain name"):
        check_record(record(attempt="../.."), area, pid, location="file:///w/events/dt=1")


def test_on_an_object_store_a_runs_age_is_its_commit_records_not_its_objects_times(spark, tmp_path):
    """S3A gives a folder the time of the call and a rewritten object a new time: there a run's age
    is its manifests' newest committed_at or rolled_back_at; a run without one (an attempt's
    staged outputs) is aged by its files, three folders deep, never by its folders' times."""
    from hive_compaction.commit.work_area import _record_age

    area = WorkArea(f"file://{tmp_path}")
    committed = time.time() - 3 * 86400
    for pid, manifest in (
        ("p1", record(committed_at=committed)),
        ("p2", record(committed_at=committed - 86400, rolled_back_at=committed - 3600)),
    ):
        (tmp_path / "manifests" / "switched" / pid).mkdir(parents=True)
        (tmp_path / "manifests" / "switched" / pid / "a1.json").write_text(manifest.to_json())
    fs = HadoopFS(spark)
    assert _record_age(fs, area, "switched") == int(committed * 1000)  # the files were written just now
    staged = tmp_path / "staging" / "failed" / "p1" / "a1"
    staged.mkdir(parents=True)
    (staged / "part-0.orc").write_text("x")
    _age(staged / "part-0.orc", 5)
    assert abs(_record_age(fs, area, "failed") / 1000 - (time.time() - 5 * 86400)) < 60


def test_a_journal_that_is_no_record_is_reported_and_holds_back_the_purge(spark, tmp_path):
    """Maintenance meets a journal whose inputs are not a list: the partition it names is FAILED
    with the reason, nothing it names moves, and no run of that work area is purged meanwhile (a
    run it may belong to could be deleted with the files it would need)."""
    from hive_compaction.commit.recovery import maintain
    from hive_compaction.model.results import Status

    area = WorkArea(f"file://{tmp_path}")
    (tmp_path / "journal").mkdir()
    bad = json.loads(record().to_json())
    bad["inputs"] = "000000_0"
    (tmp_path / "journal" / f"{bad['pid']}.json").write_text(json.dumps(bad))
    (tmp_path / "trash" / "old" / "p1").mkdir(parents=True)
    (tmp_path / "trash" / "old" / "p1" / "f").write_text("kept")
    _age(tmp_path / "trash" / "old", 30)
    [result] = maintain(
        HadoopFS(spark),
        "now",
        "now/1",
        [
            {
                "table": "db.events",
                "table_location": "file:///w/events",
                "work_dir": area.root,
                "trash_retention_days": 7,
            }
        ],
        [],
    )
    assert (result.table, result.partition, result.status) == ("db.events", "dt=1", Status.FAILED)
    assert "inputs is str, not list[RecordedFile]" in result.reason
    assert (tmp_path / "trash" / "old" / "p1" / "f").read_text() == "kept"
    assert (tmp_path / "journal" / f"{bad['pid']}.json").exists()
