"""The merge job's decisions for one partition (skip rules, copy or rewrite groups, predicted
output size), as pure functions of its listing and footers."""

from __future__ import annotations

from dataclasses import replace

from hive_compaction.merge.grouping import (
    Engine,
    FileFooter,
    auto_choice,
    copy_notes,
    expansion,
    group,
    output_codec,
    skip_reason,
    staged_suffix,
    tiny_blocks,
)
from hive_compaction.model.batch import PartitionTask
from hive_compaction.storage.hadoop_fs import Entry
from hive_compaction.storage.listing import DataFile, data_files

MB = 1 << 20
NOW = 1_800_000_000_000
TASK = PartitionTask(
    "db",
    "t",
    "dt=1",
    ("1",),
    "file:/w/t/dt=1",
    "file:/w/t",
    "orc",
    "file:/w/.hc",
    target_file_size=128 * MB,
    small_file_limit=64 * MB,
    min_small_files=2,
    merge_mode="auto",
    copy_min_block_size=1 * MB,
)


def footer(
    rows=1000,
    blocks=1,
    block_bytes=2 * MB,
    schema="struct<a:int>",
    codec="SNAPPY",
    calendar="hybrid",
    no_copy="",
    **meta,
) -> FileFooter:
    extra = (("calendar", calendar), ("row_index_stride", "10000")) + tuple(sorted(meta.items()))
    return FileFooter(
        rows, (rows // blocks,) * blocks, schema, codec, "0.12 ORC_14", (block_bytes,) * blocks, extra, no_copy
    )


def files(n, size=4 * MB, prefix="f"):
    return [DataFile(f"file:/w/t/dt=1/{prefix}{i}", size, NOW - 3_600_000) for i in range(n)]


def test_listing_keeps_visible_files_and_the_folders_that_matter():
    entries = [
        Entry("p/a", "a", 5, 1, False),
        Entry("p/_SUCCESS", "_SUCCESS", 0, 1, False),
        Entry("p/.a.crc", ".a.crc", 1, 1, False),
        Entry("p/sub", "sub", 0, 1, True),
        Entry("p/.hive-staging_1", ".hive-staging_1", 0, 1, True),
        Entry("p/.other", ".other", 0, 1, True),
    ]
    got_files, folders = data_files(entries)
    assert [f.name for f in got_files] == ["a"]
    assert folders == ["sub", ".hive-staging_1"]


def test_skip_rules_name_the_reason():
    fs = files(3)
    assert skip_reason(TASK, fs, [], NOW) is None
    assert "writer is still writing" in skip_reason(TASK, fs, ["sub", "_temporary"], NOW)
    assert "sub-folders ['sub']" in skip_reason(TASK, fs, ["sub"], NOW)
    quiet = replace(TASK, quiet_period_minutes=90)
    assert "within the quiet period of 90 min" in skip_reason(quiet, fs, [], NOW)
    assert skip_reason(replace(TASK, quiet_period_minutes=30), fs, [], NOW) is None
    assert "zero-byte file(s) ['z0']" in skip_reason(TASK, fs + files(1, size=0, prefix="z"), [], NOW)


def test_copy_mode_copies_what_may_be_copied_and_leaves_the_rest():
    fs = files(6)
    footers = {f.path: footer() for f in fs[:4]}
    footers.update({f.path: footer(schema="struct<b:string>") for f in fs[4:5]})  # alone: not copyable
    footers[fs[5].path] = footer(blocks=10, block_bytes=MB // 10)  # tiny blocks: copy mode has no floor
    groups = group(replace(TASK, merge_mode="copy"), fs, fs, footers)
    assert [(g.engine, sorted(f.name for f in g.files)) for g in groups] == [
        (Engine.COPY, ["f0", "f1", "f2", "f3", "f5"])
    ]
    # auto: one engine for the partition; the odd schema would stay a file of its own in a copy
    groups = group(TASK, fs, fs, footers)
    assert [(g.engine, len(g.files)) for g in groups] == [(Engine.REWRITE, 6)]


def test_merge_modes_and_sorted_tables():
    fs = files(4)
    footers = {f.path: footer() for f in fs}
    assert [g.engine for g in group(replace(TASK, merge_mode="rewrite"), fs, fs, footers)] == [Engine.REWRITE]
    assert [g.engine for g in group(replace(TASK, sort_columns=("a",)), fs, fs, footers)] == [Engine.REWRITE]
    assert [g.engine for g in group(TASK, fs, fs, footers)] == [Engine.COPY]
    tiny = {f.path: footer(blocks=10, block_bytes=MB // 10) for f in fs}
    assert group(replace(TASK, merge_mode="copy"), fs, fs, tiny)[0].engine is Engine.COPY  # no floor in copy mode
    assert [g.engine for g in group(TASK, fs, fs, tiny)] == [Engine.REWRITE]


# --- auto: one engine per partition, chosen from the partition as a whole ----------------------
def around_the_floor(above: int, below: int, above_bytes: int, below_bytes: int):
    """A partition of one-block files, ``above`` of them with blocks of ``above_bytes`` and
    ``below`` with ``below_bytes`` (TASK's floor is 1 MB)."""
    fs = files(above, size=above_bytes + 1000, prefix="a") + files(below, size=below_bytes + 1000, prefix="b")
    footers = {f.path: footer(block_bytes=above_bytes if i < above else below_bytes) for i, f in enumerate(fs)}
    return fs, footers


def test_auto_never_splits_a_partition_of_files_on_both_sides_of_the_floor():
    # 20 files just above the floor, 20 just below, averaging above it: one copy, one output
    fs, footers = around_the_floor(20, 20, MB + 20_000, MB - 10_000)
    groups = group(TASK, fs, fs, footers)
    assert [(g.engine, len(g.files)) for g in groups] == [(Engine.COPY, 40)]
    choice = auto_choice(TASK, fs, fs, footers)
    assert choice.engine is Engine.COPY and choice.why == "" and copy_notes(TASK, fs, footers) == ""
    # the same, averaging below it: one rewrite, one output
    fs, footers = around_the_floor(20, 20, MB + 10_000, MB - 20_000)
    groups = group(TASK, fs, fs, footers)
    assert [(g.engine, len(g.files)) for g in groups] == [(Engine.REWRITE, 40)]
    assert copy_notes(TASK, fs, footers) == (
        "auto rewrote the partition: copying would keep stripes / row groups "
        "averaging 1019.1 KB, under copy_min_block_size 1024.0 KB"
    )


def test_auto_copies_all_or_rewrites_all():
    fs, footers = around_the_floor(6, 0, 2 * MB, 0)
    assert [(g.engine, len(g.files)) for g in group(TASK, fs, fs, footers)] == [(Engine.COPY, 6)]
    fs, footers = around_the_floor(0, 6, 0, 100_000)
    assert [(g.engine, len(g.files)) for g in group(TASK, fs, fs, footers)] == [(Engine.REWRITE, 6)]
    # a rewrite predicted to shrink (the partition's compacted file holds more rows per byte)
    # would make fewer outputs: still copied, only disagreeing footers turn a copy down for that
    big = files(1, size=100 * MB, prefix="big")
    small = files(8, size=20 * MB, prefix="s")
    footers = {**{f.path: footer(rows=1000) for f in small}, big[0].path: footer(rows=20_000)}
    assert len(group(replace(TASK, merge_mode="rewrite"), big + small, small, footers)) == 1
    assert [(g.engine, len(g.files)) for g in group(TASK, big + small, small, footers)] == [
        (Engine.COPY, 6),
        (Engine.COPY, 2),
    ]
    # many files: several outputs, still one engine
    fs, footers = around_the_floor(30, 30, MB + 20_000, MB - 10_000)
    groups = group(replace(TASK, target_file_size=16 * MB), fs, fs, footers)
    assert len(groups) == 4 and {g.engine for g in groups} == {Engine.COPY} and sum(len(g.files) for g in groups) == 60
    groups = group(replace(TASK, target_file_size=16 * MB, copy_min_block_size=2 * MB), fs, fs, footers)
    assert len(groups) == 4 and {g.engine for g in groups} == {Engine.REWRITE}
    assert sum(len(g.files) for g in groups) == 60


def test_auto_keeps_every_refusal_and_rewrites_the_whole_partition_instead():
    fs = files(5)
    footers = {f.path: footer() for f in fs}
    # a file that must never be copied: the partition is rewritten, that file with the rest
    refused = {**footers, fs[4].path: footer(no_copy="encrypted")}
    choice = auto_choice(TASK, fs, fs, refused)
    assert choice.engine is Engine.REWRITE and [len(g.files) for g in choice.groups] == [5]
    assert copy_notes(TASK, fs, refused).endswith("auto rewrote the partition: 1 small file(s) may not be copied")
    # a file without blocks
    empty = {**footers, fs[4].path: FileFooter(0, (), "struct<a:int>", "SNAPPY", "0.12 ORC_14", ())}
    assert [(g.engine, len(g.files)) for g in group(TASK, fs, fs, empty)] == [(Engine.REWRITE, 5)]
    # footers that disagree: copying would make two files, a rewrite one
    mixed = {**footers, fs[3].path: footer(calendar="proleptic"), fs[4].path: footer(calendar="proleptic")}
    assert [(g.engine, len(g.files)) for g in group(TASK, fs, fs, mixed)] == [(Engine.REWRITE, 5)]
    assert copy_notes(TASK, fs, mixed).endswith(
        "auto rewrote the partition: copying would make 2 file(s) of the small ones (their footers differ), a rewrite 1"
    )
    # ... unless the rewrite would make as many (each kind fills its own output): then copy, per kind
    big = replace(TASK, target_file_size=8 * MB)
    assert sorted((g.engine, len(g.files)) for g in group(big, fs[1:], fs[1:], mixed)) == [
        (Engine.COPY, 2),
        (Engine.COPY, 2),
    ]
    # files too big to share a copy: a rewrite predicted to shrink may still pack them
    task = replace(TASK, target_file_size=100 * MB)
    pair, big = files(2, size=60 * MB, prefix="p"), files(1, size=100 * MB, prefix="big")
    shrink = {**{f.path: footer(rows=1000) for f in pair}, big[0].path: footer(rows=10_000)}
    choice = auto_choice(task, big + pair, pair, shrink)
    assert (choice.engine, [len(g.files) for g in choice.groups]) == (Engine.REWRITE, [2])
    assert choice.why == "no two small files fit in one copy of target_file_size"
    assert group(replace(task, merge_mode="copy"), big + pair, pair, shrink) == []
    assert copy_notes(task, pair, shrink) == ""  # no big file to learn from: nothing merged, nothing said
    # a SORTED BY table is rewritten, whatever its blocks
    assert [g.engine for g in group(replace(TASK, sort_columns=("a",)), fs, fs, footers)] == [Engine.REWRITE]


def test_rewrite_groups_are_packed_by_the_predicted_output_size():
    small = files(8, size=30 * MB, prefix="s")
    big = files(1, size=100 * MB, prefix="b")
    # The compacted file holds 4x the rows per byte of the small ones: outputs shrink to a quarter.
    footers = {f.path: footer(rows=1000, schema=f"x{i}") for i, f in enumerate(small)}
    footers[big[0].path] = footer(rows=13_334)
    assert 0.24 < expansion(big + small, small, footers) < 0.26
    groups = group(replace(TASK, merge_mode="rewrite"), big + small, small, footers)
    assert [len(g.files) for g in groups] == [8]  # 240 MB of input -> about 60 MB out, one file
    assert expansion(small, small, footers) == 1.0  # nothing to learn from


def test_tiny_blocks_codec_and_suffix():
    assert tiny_blocks(footer(blocks=4, block_bytes=100), min_avg_block_bytes=101)
    assert not tiny_blocks(footer(blocks=4, block_bytes=100), min_avg_block_bytes=100)
    assert tiny_blocks(footer(rows=400, blocks=4), min_block_rows=101)
    assert output_codec(footer(codec="ZSTD")) == "zstd" and output_codec(footer(codec="WEIRD")) == "snappy"
    assert staged_suffix("part-0.snappy.orc") == ".snappy.orc" and staged_suffix("a.parquet") == ".parquet"
    assert staged_suffix("noext") == ""


def test_the_decisions_need_no_spark():
    import subprocess
    import sys

    code = (
        "import sys, hive_compaction.merge.grouping, hive_compaction.merge.sizing; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')]; assert not bad, bad"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_files_that_read_differently_are_never_copied_together_and_the_reason_is_recorded():
    fs = files(7)
    footers = {f.path: footer() for f in fs[:3]}
    footers.update({f.path: footer(calendar="proleptic") for f in fs[3:5]})
    footers[fs[5].path] = footer(no_copy="written by ORC_CPP, and a copy's footer would name the ORC Java writer")
    footers[fs[6].path] = footer(calendar="proleptic", blocks=10, block_bytes=MB // 10)  # tiny blocks
    # auto: a file that must not be copied, footers that disagree: the partition is rewritten, as one
    groups = group(TASK, fs, fs, footers)
    assert [(g.engine, sorted(f.name for f in g.files)) for g in groups] == [
        (Engine.REWRITE, ["f0", "f1", "f2", "f3", "f4", "f5", "f6"])
    ]
    note = copy_notes(TASK, fs, footers)
    assert note == (
        "1 small file(s) not copied (f5: written by ORC_CPP, and a copy's footer would name the ORC Java "
        "writer). small files not copied together, their footers differ in calendar (hybrid: 3, "
        "proleptic: 3; changes how values read: the calendar of dates and timestamps before 1582). "
        "auto rewrote the partition: 1 small file(s) may not be copied"
    )
    assert copy_notes(replace(TASK, merge_mode="copy"), fs, footers) == note.split(". auto rewrote")[0]
    # copy mode: the file that must not be copied stays; rewrite mode and sorted tables: no note
    assert [sorted(f.name for f in g.files) for g in group(replace(TASK, merge_mode="copy"), fs, fs, footers)] == [
        ["f0", "f1", "f2"],
        ["f3", "f4", "f6"],
    ]
    assert copy_notes(replace(TASK, merge_mode="rewrite"), fs, footers) == ""
    assert copy_notes(replace(TASK, sort_columns=("a",)), fs, footers) == ""
    assert copy_notes(TASK, fs[:3], footers) == ""


def test_the_note_names_every_difference_reading_ones_first():
    fs = files(3)
    footers = {
        fs[0].path: footer(**{"meta:org.apache.spark.version": "3.5.1", "meta:owner": "a"}),
        fs[1].path: footer(**{"meta:org.apache.spark.version": "4.2.0", "meta:owner": "b"}),
        fs[2].path: footer(codec="ZLIB", schema="struct<b:int>", **{"meta:owner": "a"}),
    }
    note = copy_notes(TASK, fs, footers)
    assert note.startswith(
        "small files not copied together, their footers differ in schema (2 kinds, changes "
        "how values read); meta:org.apache.spark.version (3.5.1: 1, 4.2.0: 1, absent: 1; "
        "changes how values read"
    )
    assert note.endswith(
        "compression (2 kinds); meta:owner (a: 2, b: 1). auto rewrote the partition: copying "
        "would make 3 file(s) of the small ones (their footers differ), a rewrite 1"
    )


def test_a_tables_rewrite_groups_go_in_jobs_growing_from_a_small_first_one():
    from hive_compaction.merge.rewrite import job_chunks

    big, small = list(range(250)), ["a", "b", "c"]
    chunks = job_chunks([big, small], per_job=100, first=8)
    assert [len(c) for c in chunks] == [8, 3, 32, 100, 100, 10]
    # every table's first job before any second one; nothing lost, nothing twice, in order
    assert chunks[0] == big[:8] and chunks[1] == small and chunks[2] == big[8:40]
    assert [x for c in chunks if c[0] != "a" for x in c] == big
    assert job_chunks([], per_job=100, first=8) == [] and job_chunks([[1]], per_job=100, first=8) == [[1]]


def test_each_partition_commits_once_its_rewrite_groups_are_staged():
    """runner.ReadyCommits: a partition that only copies starts at once; one with rewrite groups when
    the last of them is reported (staged or failed), in chunks of one table; each exactly once; one
    never reported fails, its files untouched, rather than committing without its outputs."""
    from types import SimpleNamespace as NS

    from hive_compaction.merge.runner import ReadyCommits

    def work(table: str, *engines: Engine):
        return NS(task=NS(table_name=table), groups=[NS(engine=e) for e in engines], error=None)

    copy_only, one, two, other, lost = (
        work("db.a", Engine.COPY),
        work("db.a", Engine.REWRITE),
        work("db.a", Engine.REWRITE, Engine.COPY, Engine.REWRITE),
        work("db.b", Engine.REWRITE),
        work("db.a", Engine.REWRITE),
    )
    started: list[list] = []
    commits = ReadyCommits(
        list(enumerate([copy_only, one, two, other, lost])),
        lambda chunk: started.append([i for i, _ in chunk]) or "future",
        ways=2,
    )
    assert started == [[0]]
    commits.staged([(two, two.groups[0]), (one, one.groups[0]), (other, other.groups[0])])
    assert started == [[0], [1], [3]]  # two waits for its second rewrite group; one chunk per table
    commits.staged([(two, two.groups[2])])
    commits.staged([(one, one.groups[0])])  # reported again: never started twice
    assert started == [[0], [1], [3], [2]]
    commits.fail_unreported()
    assert started[-1] == [4] and lost.error and not any(w.error for w in (copy_only, one, two, other))
    commits.fail_unreported()
    assert len(started) == 5


def test_without_spark_sql_the_partitions_to_rewrite_fail_and_are_reported(monkeypatch):
    """RewriteEngine.stage: when Spark SQL's session cannot be made (and the columnar engine's jar
    is not there to take the groups), each partition to rewrite fails with why (its files
    untouched) and is reported to its commit, so the copies of the batch go on."""
    from types import SimpleNamespace as NS

    from hive_compaction.merge import executor_merges
    from hive_compaction.merge.rewrite import RewriteEngine

    monkeypatch.setattr(executor_merges, "engine", lambda spark: None)

    class NoSession:
        def session(self):
            raise RuntimeError("no Spark SQL here")

    rewrite, copy = NS(engine=Engine.REWRITE), NS(engine=Engine.COPY)
    works = [NS(groups=[rewrite, copy], error=None), NS(groups=[copy], error=None)]
    reported = []
    RewriteEngine(NoSession(), None, "run", 2, None).stage(works, reported.extend)
    assert reported == [(works[0], rewrite)]
    assert "Spark SQL's session for the rewrites failed: " in works[0].error and "no Spark SQL here" in works[0].error
    assert works[1].error is None


# Parquet footers' schemas (parquet-java's MessageType text) as Spark 4.2 writes them.
HIVE_LAYOUT = """message spark_schema {
  optional fixed_len_byte_array(6) amount (DECIMAL(12,2));
  optional fixed_len_byte_array(9) big (DECIMAL(20,3));
  optional int96 ts;
  optional int64 ntz (TIMESTAMP(MICROS,false));
  optional group tags (LIST) {
    repeated group bag {
      optional int64 array;
    }
  }
}"""
STANDARD = """message spark_schema {
  optional int64 amount (DECIMAL(12,2));
  optional fixed_len_byte_array(9) big (DECIMAL(20,3));
  optional int64 ts (TIMESTAMP(MICROS,true));
  optional int64 ntz (TIMESTAMP(MICROS,false));
  optional group tags (LIST) {
    repeated group list {
      optional int64 element;
    }
  }
}"""


def test_a_parquet_footer_shows_the_writer_settings_that_keep_its_layout():
    from hive_compaction.merge.parquet_layout import ParquetLayout, of_schema

    assert of_schema(HIVE_LAYOUT) == ParquetLayout(legacy=True, timestamps="INT96")
    assert of_schema(HIVE_LAYOUT).writer_options() == {
        "spark.sql.parquet.writeLegacyFormat": "true",
        "spark.sql.parquet.outputTimestampType": "INT96",
    }
    assert of_schema(STANDARD) == ParquetLayout(legacy=False, timestamps="TIMESTAMP_MICROS")
    # Lists and maps decide where no decimal does; a long decimal and TIMESTAMP_NTZ say nothing.
    maps = "message m {\n  optional group m (MAP) {\n    repeated group key_value (MAP_KEY_VALUE) {\n"
    assert of_schema(maps) == ParquetLayout(legacy=True)
    assert of_schema(
        "message m {\n  optional int64 t (TIMESTAMP(MILLIS,true));\n"
        "  optional fixed_len_byte_array(9) big (DECIMAL(20,3));\n"
        "  optional int64 ntz (TIMESTAMP(MICROS,false));\n}"
    ) == ParquetLayout(timestamps="TIMESTAMP_MILLIS")
    assert of_schema("message m {\n  optional int32 a;\n}").writer_options() == {}  # the session's settings stand
    assert ParquetLayout(legacy=True, timestamps="INT96").kept_by(of_schema(HIVE_LAYOUT))
    assert not ParquetLayout(legacy=True).kept_by(of_schema(STANDARD))


def test_parquet_files_of_differing_layouts_are_never_rewritten_together_and_the_reason_is_recorded():
    from hive_compaction.merge.grouping import layout_notes, rewrite_layouts

    task = replace(TASK, storage_format="parquet", merge_mode="rewrite")
    fs = files(5)
    plain = "message spark_schema {\n  optional int32 id;\n}"  # shows nothing: goes with the first it agrees with
    footers = {f.path: footer(schema=s) for f, s in zip(fs, [STANDARD, HIVE_LAYOUT, plain, HIVE_LAYOUT, STANDARD])}
    groups = group(task, fs, fs, footers)
    assert [sorted(f.name for f in g.files) for g in groups] == [["f0", "f2", "f4"], ["f1", "f3"]]
    assert [str(layout) for layout, _ in rewrite_layouts(task, fs, footers)] == [
        "standard decimals / lists, TIMESTAMP_MICROS timestamps",
        "legacy decimals / lists (writeLegacyFormat), INT96 timestamps",
    ]
    assert layout_notes(task, fs, footers) == (
        "small files rewritten apart, their Parquet layouts differ (standard decimals / lists, TIMESTAMP_MICROS "
        "timestamps: 3 file(s); legacy decimals / lists (writeLegacyFormat), INT96 timestamps: 2 file(s))"
    )
    assert layout_notes(task, fs[1::2], footers) == ""  # one layout
    assert len(group(replace(task, storage_format="orc"), fs, fs, footers)) == 1  # ORC: one way to write it
