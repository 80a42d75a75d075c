"""Candidates from Metastore statistics, table refusals, and packing into a bounded number of jobs."""

from __future__ import annotations

import json
import random
import string
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from hive_compaction.airflow.config import FanOut, TablePolicy
from hive_compaction.airflow.metastore_types import PartitionInfo, TableInfo, storage_format
from hive_compaction.airflow.planning import (
    DDL_TIME,
    LISTED_AT,
    Skipped,
    batch_label,
    candidate,
    one_task_per_folder,
    pack_batches,
    plan_table,
    priority,
    split_oversized,
    table_refusal,
)
from hive_compaction.model.batch import (
    MAX_ENCODED_BATCH,
    PartitionTask,
    batch_payload,
    batch_tasks,
    decode_batch,
    encode_batch,
    task_from_dict,
    task_to_dict,
)
from hive_compaction.model.results import NUM_FILES, TOTAL_SIZE

MB = 1024**2
GB = 1024**3
ORC_IN = "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat"
PARQUET_IN = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
TEXT_IN = "org.apache.hadoop.mapred.TextInputFormat"


def make_task(
    i: int = 0,
    *,
    table: str = "events",
    database: str = "db",
    total_size: int | None = 1 * MB,
    num_files: int | None = 10,
    partition: str | None = None,
) -> PartitionTask:
    part = f"dt={i:05d}" if partition is None else partition
    loc = f"hdfs://nn/wh/{database}.db/{table}"
    return PartitionTask(
        database=database,
        table=table,
        partition=part,
        values=(part.split("=", 1)[-1],) if part else (),
        location=f"{loc}/{part}" if part else loc,
        table_location=loc,
        storage_format="orc",
        work_dir=f"hdfs://nn/wh/{database}.db/.hive_compaction/{table}",
        target_file_size=128 * MB,
        small_file_limit=100 * MB,
        min_small_files=2,
        merge_mode="auto",
        num_files=num_files,
        total_size=total_size,
        num_rows=None,
    )


def make_table(**kw) -> TableInfo:
    base = dict(
        database="db",
        table="events",
        location="hdfs://nn/wh/db.db/events",
        storage_format="orc",
        input_format=ORC_IN,
        partition_keys=(("dt", "string"),),
        table_type="MANAGED_TABLE",
        parameters={},
    )
    base.update(kw)
    return TableInfo(**base)


def make_partition(name: str = "dt=1", *, location: str | None = None, **params) -> PartitionInfo:
    loc = f"hdfs://nn/wh/db.db/events/{name}" if location is None else location
    return PartitionInfo(
        name, tuple(kv.split("=", 1)[1] for kv in name.split("/") if kv), loc, {k: str(v) for k, v in params.items()}
    )


def check_batches(tasks, batches, deferred, fan_out, max_map_length):
    assert len(batches) <= min(fan_out.max_spark_jobs, max_map_length)
    assert all(0 < len(b) <= fan_out.max_partitions_per_job for b in batches)
    placed = Counter(id(t) for b in batches for t in b)
    deferred_ids = Counter(id(t) for t in deferred)
    for t in tasks:
        # every task is either in exactly one batch or deferred, never both
        assert placed[id(t)] + deferred_ids[id(t)] == 1, t.label
    assert sum(placed.values()) + len(deferred) == len(tasks)


# --- metastore helpers used by planning --------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("12", 12),
        ("0", 0),
        ("-1", None),
        ("abc", None),
        ("1.5", None),
        ("", None),
    ],
)
def test_partition_stat(raw, expected):
    assert PartitionInfo("dt=1", ("1",), "/x", {NUM_FILES: raw}).stat(NUM_FILES) == expected


def test_partition_stat_missing_key():
    assert PartitionInfo("dt=1", ("1",), "/x", {TOTAL_SIZE: "5"}).stat(NUM_FILES) is None
    assert PartitionInfo("dt=1", ("1",), "/x", {TOTAL_SIZE: "5"}).stat(TOTAL_SIZE) == 5


@pytest.mark.parametrize(
    "input_format, params, expected",
    [
        (ORC_IN, {}, "orc"),
        (PARQUET_IN, {}, "parquet"),
        (TEXT_IN, {}, None),
        ("", {}, None),
        ("org.apache.hadoop.mapred.SequenceFileInputFormat", {"spark.sql.sources.provider": "parquet"}, "parquet"),
        ("org.apache.hadoop.mapred.SequenceFileInputFormat", {"spark.sql.sources.provider": "ORC"}, "orc"),
        ("org.apache.hadoop.mapred.SequenceFileInputFormat", {"spark.sql.sources.provider": "csv"}, None),
        (ORC_IN, {"spark.sql.sources.provider": "hive"}, "orc"),
        # Hudi tables synced to the Metastore: their file layout is owned by Hudi's timeline
        ("org.apache.hudi.hadoop.HoodieParquetInputFormat", {}, None),
        ("org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat", {}, None),
        ("org.apache.hudi.hadoop.HoodieParquetInputFormat", {"spark.sql.sources.provider": "hudi"}, None),
        (PARQUET_IN, {"spark.sql.sources.provider": "delta"}, None),
    ],
)
def test_storage_format(input_format, params, expected):
    assert storage_format(input_format, params) == expected


# --- table_refusal ----------------------------------------------------------------------------


def test_plain_table_is_not_refused():
    assert table_refusal(make_table()) is None
    assert table_refusal(make_table(partition_keys=())) is None


def test_view_is_refused():
    assert table_refusal(make_table(table_type="VIRTUAL_VIEW")) == "is a view"
    assert table_refusal(make_table(table_type="virtual_view")) == "is a view"


def test_transactional_table_is_refused():
    reason = table_refusal(make_table(parameters={"transactional": "TRUE"}))
    assert reason is not None and "transactional" in reason
    assert table_refusal(make_table(parameters={"transactional": "false"})) is None


def test_bucketed_table_is_refused():
    reason = table_refusal(make_table(num_buckets=16))
    assert reason is not None and "16 buckets" in reason


def test_unsupported_format_is_refused_naming_it():
    reason = table_refusal(make_table(storage_format=None, input_format=TEXT_IN))
    assert reason is not None and TEXT_IN in reason
    assert "unknown" in table_refusal(make_table(storage_format=None, input_format=""))


# --- candidate --------------------------------------------------------------------------------


def test_candidate_by_num_files():
    policy = TablePolicy(min_small_files=3)
    assert candidate(make_partition(numFiles=3), policy)
    assert candidate(make_partition(numFiles=300), policy)
    assert not candidate(make_partition(numFiles=2), policy)
    assert not candidate(make_partition(numFiles=0), policy)


def test_candidate_without_statistics_is_listed():
    policy = TablePolicy()
    assert candidate(make_partition(), policy)
    assert candidate(make_partition(numFiles=-1), policy)  # Hive's "unknown"
    assert candidate(make_partition(numFiles="garbage"), policy)


def test_candidate_never_when_turned_off():
    policy = TablePolicy(small_file_limit=0)
    assert not candidate(make_partition(numFiles=1000), policy)
    assert not candidate(make_partition(), policy)


# --- plan_table -------------------------------------------------------------------------------


def test_plan_table_makes_tasks_with_everything_the_job_needs():
    table = make_table(parameters={"orc.compress": "ZSTD", "comment": "x", "transactional": "false"})
    policy = TablePolicy(target_file_size=256 * MB, small_file_limit=64 * MB, min_small_files=4, merge_mode="copy")
    parts = [
        make_partition("dt=1", numFiles=10, totalSize=1000, numRows=50),
        make_partition("dt=2", numFiles=3, **{LISTED_AT: str(NOW - 3600)}),  # below min_small_files
        make_partition("dt=3"),
    ]  # no statistics
    tasks, skipped = plan_table(table, policy, parts, now=NOW)
    assert skipped == []
    assert [t.partition for t in tasks] == ["dt=1", "dt=3"]
    assert [t.reason for t in tasks] == ["statistics", "statistics"]
    t = tasks[0]
    assert (t.database, t.table, t.values) == ("db", "events", ("1",))
    assert t.location == "hdfs://nn/wh/db.db/events/dt=1"
    assert t.table_location == table.location
    assert t.storage_format == "orc"
    assert (t.target_file_size, t.small_file_limit, t.min_small_files, t.merge_mode) == (256 * MB, 64 * MB, 4, "copy")
    assert (t.num_files, t.total_size, t.num_rows) == (10, 1000, 50)
    assert t.table_parameters == {"orc.compress": "ZSTD"}
    assert t.work_dir == "hdfs://nn/wh/db.db/.hive_compaction/events"
    assert (tasks[1].num_files, tasks[1].total_size, tasks[1].num_rows) == (None, None, None)
    assert t.label == "db.events/dt=1"


NOW = 1_800_000_000


def test_statistics_never_decide_alone_a_dated_run_lists_every_selected_partition():
    table = make_table()
    policy = TablePolicy(min_small_files=4)
    parts = [
        make_partition("dt=1", numFiles=1, **{LISTED_AT: str(NOW)}),  # stale after an append?
        make_partition("dt=2", numFiles=9),
    ]
    tasks, _ = plan_table(table, policy, parts, list_all=True, now=NOW)
    assert [(t.partition, t.reason) for t in tasks] == [("dt=1", "selected"), ("dt=2", "statistics")]
    # ... but a table turned off stays off
    assert plan_table(table, TablePolicy(small_file_limit=0), parts, list_all=True, now=NOW)[0] == []


def test_audit_lists_partitions_never_listed_listed_long_ago_or_altered_since():
    table = make_table()
    policy = TablePolicy(min_small_files=4, audit_days=7)
    day = 86400
    parts = [
        make_partition("dt=never", numFiles=1),
        make_partition("dt=recent", numFiles=1, **{LISTED_AT: str(NOW - day)}),
        make_partition("dt=old", numFiles=1, **{LISTED_AT: str(NOW - 8 * day)}),
        make_partition("dt=altered", numFiles=1, **{LISTED_AT: str(NOW - day), DDL_TIME: str(NOW - 60)}),
    ]
    tasks, _ = plan_table(table, policy, parts, now=NOW)
    assert {t.partition: t.reason for t in tasks} == {"dt=never": "audit", "dt=old": "audit", "dt=altered": "audit"}
    assert plan_table(table, replace(policy, audit_days=0), parts, now=NOW)[0] == []


def test_priority_puts_flagged_partitions_first_then_the_longest_unlisted():
    tasks = [
        replace(make_task(1), partition="a", reason="audit", listed_at=NOW),
        replace(make_task(2), partition="b", reason="audit", listed_at=None),
        replace(make_task(3), partition="c", reason="statistics", num_files=5),
        replace(make_task(4), partition="d", reason="statistics", num_files=50),
        replace(make_task(5), partition="e", reason="selected", listed_at=NOW - 10),
    ]
    assert [t.partition for t in sorted(tasks, key=priority)] == ["d", "c", "b", "e", "a"]


def test_batch_payload_sends_the_table_once_and_round_trips():
    tasks = [
        replace(
            make_task(i, partition=f"dt=2024-01-0{i}"),
            values=(f"2024-01-0{i}",),
            location=f"hdfs://nn/wh/db.db/events/dt=2024-01-0{i}",
        )
        for i in range(1, 6)
    ]
    tasks.append(replace(make_task(9, partition="dt=x"), location="hdfs://nn/wh/db.db/events/elsewhere"))
    payload = batch_payload("run-1", 2, False, tasks, [{"table": "db.events", "work_dir": "w"}])
    assert len(payload["tables"]) == 1 and len(payload["partitions"]) == 6
    assert [row[3] for row in payload["partitions"]][:5] == [None] * 5  # Hive's own layout: not repeated
    assert batch_tasks(decode_batch(encode_batch(payload))) == tasks


def test_plan_table_work_dir_from_policy_or_root():
    table = make_table()
    parts = [make_partition("dt=1")]
    tasks, _ = plan_table(table, TablePolicy(), parts, work_root="hdfs://nn/tmp/hc/")
    assert tasks[0].work_dir == "hdfs://nn/tmp/hc/db.events"
    tasks, _ = plan_table(table, TablePolicy(work_dir="hdfs://nn/work"), parts, work_root="hdfs://nn/tmp/hc")
    assert tasks[0].work_dir == "hdfs://nn/work/db.events"


@pytest.mark.parametrize("work_dir", ["s3a://b/work", "hdfs://other-nn/work", "file:///tmp/work"])
def test_a_work_dir_on_another_file_system_than_its_table_is_refused_at_planning(work_dir):
    """A commit renames files between the work area and the partition: across file systems that
    fails at commit time; the plan refuses the table first, naming the setting."""
    tasks, skipped = plan_table(make_table(), TablePolicy(work_dir=work_dir), [make_partition("dt=1")])
    assert tasks == [] and len(skipped) == 1
    assert skipped[0].partition == "" and "its work_dir" in skipped[0].reason and work_dir in skipped[0].reason
    assert "on another file system than the table (hdfs://nn)" in skipped[0].reason


@pytest.mark.parametrize(
    "location, refused",
    [
        ("hdfs://nn/wh/db.db/events", False),
        ("file:/wh/db.db/events", False),
        ("/wh/db.db/events", False),
        ("viewfs://cluster/wh/db.db/events", False),  # its mount is resolved by the merge job
        ("s3a://bucket/wh/events", True),
        ("gs://bucket/wh/events", True),
        ("abfss://c@acct.dfs.core.windows.net/e", True),
    ],
)
def test_tables_on_storage_without_atomic_renames_are_refused_with_the_reason(location, refused):
    reason = table_refusal(make_table(location=location))
    assert (reason is not None) == refused, reason
    if refused:
        assert f"storage scheme '{location.split(':')[0]}'" in reason and "duplicate or lose rows" in reason


@pytest.mark.parametrize(
    "location, mode, refused",
    [
        ("s3a://bucket/wh/events", "location_switch", None),
        ("s3a://bucket/wh/events", "in_place", "is an object store: a rename there is a copy then a delete"),
        ("gs://bucket/wh/events", "location_switch", "is not known to rename atomically"),
        ("abfss://c@acct.dfs.core.windows.net/e", "location_switch", "is not known to rename atomically"),
        ("hdfs://nn/wh/db.db/events", "location_switch", None),
    ],
)
def test_s3a_tables_are_merged_by_location_switch_only(location, mode, refused):
    """On S3A a rename is a copy: the in-place commit is refused, naming the fix; the location switch
    (journals by conditional PUT, one Metastore call) is planned. Other object stores stay refused."""
    reason = table_refusal(make_table(location=location), mode)
    assert (reason is None) == (refused is None), reason
    if refused:
        assert refused in reason and "duplicate or lose rows" in reason, reason
    if mode == "in_place" and refused:
        assert "set commit_mode: location_switch for this table" in reason
    tasks, skipped = plan_table(
        make_table(location=location),
        TablePolicy(commit_mode=mode),
        [make_partition("dt=1", numFiles=9, location=f"{location}/dt=1")],
    )
    assert ([t.partition for t in tasks], [s.reason for s in skipped]) == (
        ([], [reason]) if refused else (["dt=1"], [])
    )


def test_two_partitions_sharing_one_folder_are_not_both_planned():
    table = make_table()
    shared = "hdfs://nn/wh/db.db/events/dt=1"
    tasks, skipped = plan_table(
        table,
        TablePolicy(),
        [make_partition("dt=1", numFiles=9), make_partition("dt=2", location=shared + "/", numFiles=9)],
    )
    assert [t.partition for t in tasks] == ["dt=1"]
    assert skipped == [Skipped("db.events", "dt=2", f"shares its folder {shared}/ with partition dt=1")]


def test_two_tables_over_one_folder_are_not_both_planned():
    """An external table over another's location: each table's commit holds the partition in
    its own work area, so only one of them may merge a shared folder in a run."""
    events, copy = make_table(), make_table(table="events_copy", table_type="EXTERNAL_TABLE")
    parts = [make_partition("dt=1", numFiles=9), make_partition("dt=2", numFiles=9)]
    planned = plan_table(events, TablePolicy(), parts[:1])[0] + plan_table(copy, TablePolicy(), parts)[0]
    kept, skipped = one_task_per_folder(planned)
    assert [(t.table_name, t.partition) for t in kept] == [("db.events", "dt=1"), ("db.events_copy", "dt=2")]
    assert skipped == [
        Skipped(
            "db.events_copy",
            "dt=1",
            "shares its folder hdfs://nn/wh/db.db/events/dt=1 with db.events dt=1, merged by this run instead",
        )
    ]


def test_plan_table_refused_table_gives_one_skip_and_no_tasks():
    table = make_table(num_buckets=4)
    tasks, skipped = plan_table(table, TablePolicy(), [make_partition("dt=1")])
    assert tasks == []
    assert skipped == [Skipped("db.events", "", "is bucketed (4 buckets): merging files would break the bucket layout")]


def test_plan_table_skips_partitions_with_unsafe_locations():
    table = make_table()
    parts = [
        make_partition("dt=1"),
        make_partition("dt=2", location="hdfs://nn/wh/db.db/events"),
        make_partition("dt=3", location="hdfs://nn/elsewhere/dt=3"),
        make_partition("dt=4", location="hdfs://nn/wh/db.db/events2/dt=4"),
        make_partition("dt=5", location=""),
    ]
    tasks, skipped = plan_table(table, TablePolicy(), parts)
    assert [t.partition for t in tasks] == ["dt=1"]
    reasons = {s.partition: s.reason for s in skipped}
    assert set(reasons) == {"dt=2", "dt=3", "dt=4", "dt=5"}
    assert "table root" in reasons["dt=2"]
    assert "outside" in reasons["dt=3"] and "outside" in reasons["dt=4"]
    assert "no location" in reasons["dt=5"]
    assert all(s.table == "db.events" for s in skipped)


def test_plan_table_non_partitioned_table():
    table = make_table(partition_keys=())
    tasks, skipped = plan_table(table, TablePolicy(), [PartitionInfo("", (), table.location, {NUM_FILES: "5"})])
    assert skipped == []
    assert len(tasks) == 1
    assert tasks[0].partition == "" and tasks[0].location == table.location
    assert tasks[0].label == "db.events"


def test_plan_table_accepts_a_generator_of_partitions():
    table = make_table()
    tasks, _ = plan_table(table, TablePolicy(), (make_partition(f"dt={i}") for i in range(5)), now=NOW)
    assert len(tasks) == 5


# --- pack_batches -----------------------------------------------------------------------------


def test_pack_batches_empty():
    assert pack_batches([], FanOut()) == ([], [])


def test_pack_batches_one_small_task_one_batch():
    t = make_task()
    batches, deferred = pack_batches([t], FanOut())
    assert batches == [[t]] and deferred == []


def test_pack_batches_jobs_grow_with_bytes():
    tasks = [make_task(i, total_size=10 * GB) for i in range(6)]  # 60 GB, 20 GB per job -> 3 jobs
    batches, deferred = pack_batches(tasks, FanOut(max_spark_jobs=8, max_bytes_per_job=20 * GB))
    assert deferred == []
    assert len(batches) == 3
    assert sorted(len(b) for b in batches) == [2, 2, 2]


def test_pack_batches_jobs_grow_with_partition_count():
    tasks = [make_task(i, total_size=0) for i in range(25)]
    batches, deferred = pack_batches(tasks, FanOut(max_spark_jobs=8, max_partitions_per_job=10))
    assert deferred == []
    assert len(batches) == 3
    assert all(len(b) <= 10 for b in batches)


def test_pack_batches_balances_bytes_largest_first():
    sizes = [9, 7, 6, 5, 4, 3, 2, 1]
    tasks = [make_task(i, total_size=s * GB) for i, s in enumerate(sizes)]
    batches, _ = pack_batches(tasks, FanOut(max_spark_jobs=3, max_bytes_per_job=10 * GB))
    loads = sorted(sum(t.total_size for t in b) for b in batches)
    assert len(batches) == 3
    # LPT: 9 | 7 | 6, then 5 -> 6, 4 -> 7, 3 -> 9, 2 -> 7+4, 1 -> 6+5: loads 12, 13, 12
    assert loads == [12 * GB, 12 * GB, 13 * GB]


def test_pack_batches_never_more_than_max_spark_jobs():
    tasks = [make_task(i, total_size=50 * GB) for i in range(40)]
    fan_out = FanOut(max_spark_jobs=4, max_partitions_per_job=500, max_bytes_per_job=1 * GB)
    batches, deferred = pack_batches(tasks, fan_out)
    assert len(batches) == 4
    assert deferred == []
    check_batches(tasks, batches, deferred, fan_out, 1024)


def test_pack_batches_max_map_length_caps_jobs():
    tasks = [make_task(i, total_size=50 * GB) for i in range(40)]
    fan_out = FanOut(max_spark_jobs=16, max_bytes_per_job=1 * GB)
    batches, deferred = pack_batches(tasks, fan_out, max_map_length=2)
    assert len(batches) == 2
    check_batches(tasks, batches, deferred, fan_out, 2)


def test_pack_batches_zero_max_map_length_still_makes_one_job():
    tasks = [make_task(i) for i in range(3)]
    batches, deferred = pack_batches(tasks, FanOut(), max_map_length=0)
    assert len(batches) == 1 and deferred == []


def test_pack_batches_defers_what_does_not_fit():
    tasks = [make_task(i, total_size=(i + 1) * MB) for i in range(25)]
    fan_out = FanOut(max_spark_jobs=2, max_partitions_per_job=10)
    batches, deferred = pack_batches(tasks, fan_out)
    assert [len(b) for b in batches] == [10, 10]
    assert len(deferred) == 5
    # the biggest partitions are placed first, the smallest are deferred to the next run
    assert sorted(t.total_size for t in deferred) == [i * MB for i in range(1, 6)]
    check_batches(tasks, batches, deferred, fan_out, 1024)


def test_pack_batches_ten_thousand_partitions():
    tasks = [make_task(i, total_size=(i % 97 + 1) * MB, table=f"t{i % 7}") for i in range(10_000)]
    fan_out = FanOut(max_spark_jobs=4, max_partitions_per_job=500, max_bytes_per_job=20 * GB)
    batches, deferred = pack_batches(tasks, fan_out)
    assert len(batches) == 4
    assert all(len(b) == 500 for b in batches)
    assert len(deferred) == 10_000 - 4 * 500
    check_batches(tasks, batches, deferred, fan_out, 1024)


def test_pack_batches_ten_thousand_partitions_all_fit_when_allowed():
    tasks = [make_task(i, total_size=None) for i in range(10_000)]
    fan_out = FanOut(max_spark_jobs=32, max_partitions_per_job=500)
    batches, deferred = pack_batches(tasks, fan_out, max_map_length=1024)
    assert deferred == []
    assert len(batches) == 20  # ceil(10000 / 500)
    check_batches(tasks, batches, deferred, fan_out, 1024)


def test_pack_batches_batches_are_sorted_and_deterministic():
    tasks = [make_task(i, total_size=(i * 7919) % 1000 * MB, table=f"t{i % 3}") for i in range(200)]
    fan_out = FanOut(max_spark_jobs=5, max_partitions_per_job=30, max_bytes_per_job=1 * GB)
    batches, deferred = pack_batches(tasks, fan_out)
    assert batches
    for b in batches:
        assert b == sorted(b, key=lambda t: (t.table_name, t.partition))
    again = pack_batches(list(reversed(tasks)), fan_out)
    assert again == (batches, deferred)


@st.composite
def fan_out_inputs(draw):
    n = draw(st.integers(min_value=0, max_value=300))
    tasks = [
        make_task(
            i, table=f"t{i % 4}", total_size=draw(st.one_of(st.none(), st.integers(min_value=0, max_value=50 * GB)))
        )
        for i in range(n)
    ]
    fan_out = FanOut(
        max_spark_jobs=draw(st.integers(min_value=1, max_value=40)),
        max_partitions_per_job=draw(st.integers(min_value=1, max_value=60)),
        max_bytes_per_job=draw(st.integers(min_value=1, max_value=100 * GB)),
    )
    return tasks, fan_out, draw(st.integers(min_value=0, max_value=50))


@settings(max_examples=150, deadline=None)
@given(fan_out_inputs())
def test_pack_batches_properties(args):
    tasks, fan_out, max_map_length = args
    batches, deferred = pack_batches(tasks, fan_out, max_map_length)
    assert len(batches) <= max(1, min(fan_out.max_spark_jobs, max_map_length))
    check_batches(tasks, batches, deferred, fan_out, max(1, max_map_length))
    # nothing is deferred while a job slot has room
    if deferred:
        assert all(len(b) == fan_out.max_partitions_per_job for b in batches)
        assert len(batches) == max(1, min(fan_out.max_spark_jobs, max_map_length))


# --- batch_label ------------------------------------------------------------------------------


def test_batch_label_groups_by_table_and_truncates():
    batch = [make_task(i, table="a") for i in range(5)] + [make_task(9, table="b")]
    assert batch_label(batch) == "db.a: dt=00000, dt=00001, dt=00002 +2 more; db.b: dt=00009"
    assert batch_label(batch, shown=5) == "db.a: dt=00000, dt=00001, dt=00002, dt=00003, dt=00004; db.b: dt=00009"


def test_batch_label_non_partitioned_table():
    assert batch_label([make_task(partition="")]) == "db.events: (table)"


# --- encoding ---------------------------------------------------------------------------------


def test_encode_decode_round_trip_and_is_command_line_safe():
    payload = {
        "run": "manual__2024-01-01T00-00-00",
        "batch": 3,
        "dry_run": False,
        "tasks": [task_to_dict(make_task(i, partition=f"dt=2024/x=é {i}%")) for i in range(50)],
    }
    text = encode_batch(payload)
    assert decode_batch(text) == payload
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")
    assert len(text) < len(json.dumps(payload))  # compressed
    assert encode_batch(payload) == text  # deterministic (sorted keys)


def test_task_dict_round_trip():
    t = replace(
        make_task(3, partition="dt=1/country=US"),
        values=("1", "US"),
        num_rows=7,
        table_parameters={"orc.compress": "ZLIB"},
    )
    d = task_to_dict(t)
    assert d["values"] == ["1", "US"]
    assert task_from_dict(json.loads(json.dumps(d))) == t
    assert task_from_dict(decode_batch(encode_batch(d))) == t


def test_task_from_dict_rejects_unknown_keys():
    d = task_to_dict(make_task())
    d["bogus"] = 1
    with pytest.raises(TypeError):
        task_from_dict(d)


# --- split_oversized --------------------------------------------------------------------------


def fake_encode(per_task: int):
    return lambda batch: "x" * (per_task * len(batch))


def test_split_oversized_keeps_batches_that_fit():
    batches = [[make_task(i) for i in range(3)], [make_task(9)]]
    assert split_oversized(batches, fake_encode(100)) == batches


def test_split_oversized_halves_until_it_fits_in_order():
    tasks = [make_task(i) for i in range(100)]
    per_task = MAX_ENCODED_BATCH // 12  # at most 12 tasks fit
    out = split_oversized([tasks, [make_task(500)]], fake_encode(per_task))
    assert [t for b in out for t in b] == tasks + [make_task(500)]  # nothing lost, order kept
    assert all(len(fake_encode(per_task)(b)) <= MAX_ENCODED_BATCH for b in out)
    assert max(len(b) for b in out) > 6  # halving, not one task per batch


def test_split_oversized_single_task_is_kept_even_if_too_big():
    t = make_task()
    assert split_oversized([[t]], fake_encode(MAX_ENCODED_BATCH * 2)) == [[t]]


def test_split_oversized_with_the_real_encoding():
    rng = random.Random(1)  # random parameter values do not compress: each task is ~2 KB encoded
    alphabet = string.ascii_letters + string.digits
    tasks = [
        replace(make_task(i), table_parameters={"orc.compress": "".join(rng.choice(alphabet) for _ in range(2000))})
        for i in range(200)
    ]

    def encode(b):
        return encode_batch({"tasks": [task_to_dict(t) for t in b]})

    assert len(encode(tasks)) > MAX_ENCODED_BATCH
    out = split_oversized([tasks], encode)
    assert len(out) > 1
    assert all(len(encode(b)) <= MAX_ENCODED_BATCH for b in out)
    assert [t for b in out for t in b] == tasks
