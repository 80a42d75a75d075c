"""The run report: summary counts and the fixed-width table for the task log."""

from __future__ import annotations

import pytest

from hive_compaction.airflow.report import _size, render, summarize

MB = 1024**2


def result(
    table="db.t",
    partition="dt=1",
    status="merged",
    files_before=10,
    files_after=2,
    bytes_before=100 * MB,
    bytes_after=99 * MB,
    **extra,
) -> dict:
    return {
        "table": table,
        "partition": partition,
        "status": status,
        "files_before": files_before,
        "files_after": files_after,
        "bytes_before": bytes_before,
        "bytes_after": bytes_after,
        **extra,
    }


RESULTS = [
    result(partition="dt=2", rows=1000, rows_merged=900, mode="rewrite", seconds=12.34),
    result(
        partition="dt=1",
        files_before=5,
        files_after=1,
        bytes_before=10 * MB,
        bytes_after=9 * MB,
        rows=50,
        rows_merged=50,
        mode="copy",
        seconds=1.0,
    ),
    result(
        partition="dt=3",
        status="nothing_to_do",
        files_before=3,
        files_after=3,
        bytes_before=7,
        bytes_after=7,
        mode="rewrite",
    ),
    result(partition="dt=4", status="skipped", files_before=4, files_after=4, reason="holds sub-folders ['x']"),
    result(
        table="db.a",
        partition="",
        status="failed",
        files_before=8,
        files_after=8,
        bytes_before=None,
        bytes_after=None,
        reason="RuntimeError: boom",
        rows=None,
        rows_merged=None,
    ),
]
SKIPPED = [
    {"table": "db.v", "partition": "", "reason": "is a view"},
    {"table": "db.t", "partition": "dt=9", "reason": "location x is outside the table location y"},
]
AGAIN = "again in the scheduled run of 2026-08-03 (within lookback_days: 7)"
DEFERRED = [
    {"table": "db.t", "partition": "dt=10", "again": AGAIN},
    {"table": "db.t", "partition": "dt=11", "again": AGAIN},
]


@pytest.mark.parametrize(
    "n, text",
    [
        (None, "-"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 * MB, "5.0 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (2 * 1024**4, "2.0 TiB"),
        (2048 * 1024**4, "2048.0 TiB"),
    ],
)
def test_size(n, text):
    assert _size(n) == text


def test_summarize_counts_only_merged_partitions_for_files_and_bytes():
    s = summarize(RESULTS, SKIPPED, DEFERRED)
    assert s == {
        "partitions_examined": 5,
        "partitions_merged": 2,
        "files_before": 15,
        "files_after": 3,
        "bytes_before": 110 * MB,
        "bytes_after": 108 * MB,
        "rows_merged": 950,
        "skipped": 3,  # two from planning, one from the merge job
        "deferred": 2,
        "failed": 1,
        "listed": 0,
        "stale_statistics": 0,
        "reader_window_ms_max": 0,
        "unlocked": 0,
        "recovered": 0,
    }


def test_summarize_counts_skipped_and_failed_separately():
    rs = [
        result(partition="dt=1", status="skipped"),
        result(partition="dt=2", status="skipped"),
        result(partition="dt=3", status="would_merge"),
        result(partition="dt=4", status="failed"),
    ]
    s = summarize(rs, [], [{"table": "db.t", "partition": "dt=5"}])
    assert (s["skipped"], s["failed"], s["deferred"], s["partitions_merged"]) == (2, 1, 1, 0)
    assert s["files_before"] == 0  # only merged partitions count


def test_summarize_empty():
    s = summarize([], [], [])
    assert s["partitions_examined"] == 0 and s["partitions_merged"] == 0
    assert s["files_before"] == s["bytes_after"] == s["rows_merged"] == 0
    assert (s["skipped"], s["deferred"], s["failed"]) == (0, 0, 0)


def test_summarize_reports_the_longest_reader_window_of_merged_partitions():
    rs = [
        result(reader_window_ms=3.5),
        result(partition="dt=2", reader_window_ms=12.0),
        result(partition="dt=3", status="failed", reader_window_ms=99.0),
        result(partition="dt=4"),
    ]
    assert summarize(rs, [], [])["reader_window_ms_max"] == 12.0


def test_summarize_missing_rows_merged_counts_as_zero():
    s = summarize([result(), result(partition="dt=2", rows_merged=None)], [], [])
    assert s["rows_merged"] == 0 and s["partitions_merged"] == 2


def test_render_table_layout():
    text = render(RESULTS, SKIPPED, DEFERRED)
    lines = text.split("\n")
    assert lines[0].split() == ["table", "partition", "status", "files", "bytes", "rows", "mode", "secs", "reason"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    # columns line up: every header word starts where its column starts
    header = lines[0]
    starts = [header.index(w) for w in ("partition", "status")]
    body = lines[2 : 2 + len(RESULTS) + len(SKIPPED) + len(DEFERRED)]
    assert len(body) == 9
    for line in body:
        assert line[starts[0] - 2 : starts[0]] == "  "
        assert line[starts[1] - 2 : starts[1]] == "  "
    assert lines[-2] == ""
    assert all(line == line.rstrip() for line in lines)


def test_render_rows_sorted_and_formatted():
    lines = render(RESULTS, SKIPPED, DEFERRED).split("\n")
    body = lines[2:11]
    # results sorted by (table, partition); then planning skips; then deferred
    assert [line.split()[:3] for line in body[:5]] == [
        ["db.a", "-", "failed"],
        ["db.t", "dt=1", "merged"],
        ["db.t", "dt=2", "merged"],
        ["db.t", "dt=3", "nothing_to_do"],
        ["db.t", "dt=4", "skipped"],
    ]
    merged = body[2]
    assert "10 -> 2" in merged and "100.0 MiB -> 99.0 MiB" in merged
    assert " 1000 " in merged and "rewrite" in merged and "12.3" in merged
    failed = body[0]
    assert "8 -> 8" in failed and "- -> -" in failed and failed.endswith("RuntimeError: boom")
    assert " 0.0 " in failed  # no seconds recorded
    assert body[4].endswith("holds sub-folders ['x']")
    assert body[5].split()[:3] == ["db.v", "-", "skipped"] and body[5].endswith("is a view")
    assert body[6].split()[:3] == ["db.t", "dt=9", "skipped"]
    assert body[7].split()[:3] == ["db.t", "dt=10", "deferred"]
    assert body[7].endswith(f"fan-out limit reached; {AGAIN}")
    assert body[8].split()[:3] == ["db.t", "dt=11", "deferred"]


def test_render_summary_line():
    last = render(RESULTS, SKIPPED, DEFERRED).split("\n")[-1]
    assert last == (
        "2 of 5 partitions merged: 15 -> 3 files, 110.0 MiB -> 108.0 MiB, 950 rows verified; "
        "3 skipped, 2 deferred, 1 failed; 0 listed, 0 with statistics that disagreed with the disk"
    )


def test_render_empty_run():
    text = render([], [], [])
    lines = text.split("\n")
    assert lines[0].split()[0] == "table"
    assert (
        lines[-1] == "0 of 0 partitions merged: 0 -> 0 files, 0 B -> 0 B, 0 rows verified; "
        "0 skipped, 0 deferred, 0 failed; 0 listed, 0 with statistics that disagreed with the disk"
    )
    assert len(lines) == 4  # header, rule, blank, summary


def test_render_accepts_merge_job_result_dicts():
    """The merge job records ``PartitionResult.to_dict()``: exactly those keys must render."""
    from dataclasses import fields

    from hive_compaction.model.results import PartitionResult, Status, decode_results, encode_results

    r = PartitionResult(
        "db.t",
        "dt=1",
        "hdfs://nn/wh/t/dt=1",
        Status.MERGED,
        files_before=4,
        files_after=1,
        bytes_before=4000,
        bytes_after=3900,
        rows=10,
        rows_merged=10,
        mode="copy",
        seconds=0.25,
        listed=True,
        stats_files=1,
        stats_bytes=1000,
    )
    d = r.to_dict()
    assert {f.name for f in fields(PartitionResult)} == set(d) and d["status"] == "merged"
    assert decode_results(encode_results([r])) == [r]
    text = render([d], [], [])
    assert "4 -> 1" in text and "3.9 KiB -> 3.8 KiB" in text and "copy" in text and "0.2" in text
    assert "statistics said 1 file(s) (1000 B), the disk had 4 (3.9 KiB)" in text
    assert summarize([d], [], [])["rows_merged"] == 10
    assert summarize([d], [], [])["stale_statistics"] == 1


def test_results_fit_the_metastore_parameter_column_and_a_cut_batch_is_refused():
    from hive_compaction.model.results import MAX_PARAM_CHARS, PartitionResult, Status, decode_results, encode_results

    long = PartitionResult(
        "db.t",
        "dt=1",
        "x",
        Status.FAILED,
        reason="boom " * 5000,
        outputs=[f"part-{i:05d}-{'x' * 60}.orc" for i in range(200)],
    )
    params = encode_results([long, long])
    assert all(len(v) <= MAX_PARAM_CHARS for v in params.values())
    assert len(decode_results(params)) == 2
    del params["result.00001"]
    with pytest.raises(ValueError):
        decode_results(params)


# --- file-size distribution and the run note --------------------------------------------------

from hive_compaction.airflow.report import bucket_labels, distribution, note, render_distribution  # noqa: E402 - this section's
from hive_compaction.model.results import size_histogram  # noqa: E402 - this section's

POLICY = {"small_file_limit": 100 * MB, "target_file_size": 128 * MB}


def test_size_histogram_buckets_around_the_limit_and_the_target():
    sizes = [0, 25 * MB - 1, 25 * MB, 100 * MB - 1, 100 * MB, 128 * MB - 1, 128 * MB, 900 * MB]
    assert size_histogram(sizes, 100 * MB, 128 * MB) == [2, 2, 2, 2]
    assert bucket_labels(100 * MB, 128 * MB) == [
        "< 25.0 MiB",
        "25.0 MiB - 100.0 MiB",
        "100.0 MiB - 128.0 MiB",
        ">= 128.0 MiB",
    ]
    assert size_histogram([5, 50], 0, 10) == [0, 0, 1, 1]  # limit 0: nothing is small


def test_distribution_sums_recorded_buckets_and_lists_the_small_files_left_with_reasons():
    results = [
        result(
            partition="dt=1",
            files_before=12,
            files_after=3,
            files_merged=10,
            groups=1,
            sizes_before=[8, 2, 1, 1],
            sizes_after=[0, 1, 1, 1],
        ),
        result(
            partition="dt=2",
            status="nothing_to_do",
            files_before=2,
            files_after=2,
            reason="1 small file(s), fewer than min_small_files (2)",
            sizes_before=[1, 0, 0, 1],
            sizes_after=[1, 0, 0, 1],
        ),
        result(
            partition="dt=3",
            files_before=4,
            files_after=1,
            files_merged=4,
            groups=1,
            sizes_before=[4, 0, 0, 0],
            sizes_after=[0, 0, 1, 0],
        ),
    ]
    t = distribution(
        results,
        [{"table": "db.t", "partition": "dt=9", "reason": "quiet period"}],
        [{"table": "db.t", "partition": "dt=10", "again": AGAIN}],
        {"db.t": POLICY},
    )["db.t"]
    assert (t["before"], t["after"]) == ([13, 2, 1, 2], [1, 1, 2, 2])
    assert (t["files_before"], t["files_after"], t["merged_inputs"], t["outputs"]) == (18, 6, 14, 2)
    assert t["small_files_left"] == [
        {
            "partition": "dt=1",
            "small_files": 1,
            "reason": "too little small data left to fill a file of the small-file limit",
        },
        {"partition": "dt=2", "small_files": 1, "reason": "1 small file(s), fewer than min_small_files (2)"},
        {"partition": "dt=9", "small_files": None, "reason": "quiet period"},
        {"partition": "dt=10", "small_files": None, "reason": f"fan-out limit reached; {AGAIN}"},
    ]
    text = render_distribution({"db.t": t})
    rows = {line.rsplit(None, 2)[0].strip(): line.split()[-2:] for line in text.splitlines()[2:6]}
    assert rows == {
        "< 25.0 MiB": ["13", "1"],
        "25.0 MiB - 100.0 MiB": ["2", "1"],
        "100.0 MiB - 128.0 MiB": ["1", "2"],
        ">= 128.0 MiB": ["2", "2"],
    }
    assert "left: dt=2: 1 small file(s): 1 small file(s), fewer than min_small_files (2)" in text


def test_a_merged_partitions_left_reason_is_its_note_only_where_inputs_were_left():
    """Only its one small output left: too little data (auto's note on why it rewrote rather than
    copied does not say why a file is small). Inputs left beside the outputs: the note says why."""
    note = "auto rewrote the partition: copying would keep stripes / row groups averaging 1.3 KB, under ..."
    results = [
        result(
            partition="dt=1",
            files_before=4,
            files_after=1,
            files_merged=4,
            groups=1,
            reason=note,
            sizes_before=[4, 0, 0, 0],
            sizes_after=[1, 0, 0, 0],
        ),
        result(
            partition="dt=2",
            files_before=5,
            files_after=3,
            files_merged=3,
            groups=1,
            reason="2 small file(s) not copied (a.orc: encrypted; b.orc: encrypted)",
            sizes_before=[5, 0, 0, 0],
            sizes_after=[3, 0, 0, 0],
        ),
    ]
    t = distribution(results, [], [], {"db.t": POLICY})["db.t"]
    assert t["small_files_left"] == [
        {
            "partition": "dt=1",
            "small_files": 1,
            "reason": "too little small data left to fill a file of the small-file limit",
        },
        {
            "partition": "dt=2",
            "small_files": 3,
            "reason": "2 small file(s) not copied (a.orc: encrypted; b.orc: encrypted)",
        },
    ]


def test_distribution_without_recorded_sizes_says_what_is_known():
    results = [
        result(partition="dt=1", files_merged=10, groups=2),
        result(partition="dt=2", status="skipped", files_before=4, files_after=4, reason="sub-folders"),
        result(partition="dt=3", status="nothing_to_do", files_before=1, files_after=1),
    ]
    t = distribution(results, [], [], {"db.t": POLICY})["db.t"]
    assert t["before"] is None and t["after"] is None
    assert t["small_files_left"] == [{"partition": "dt=2", "small_files": None, "reason": "sub-folders"}]
    assert "sizes per file not recorded by the merge job: 10 small file(s) merged into 2" in render_distribution(
        {"db.t": t}
    )


def test_commits_without_the_metastores_lock_are_named_in_the_report_and_the_note():
    """require_locks: false on a Metastore without locks: every run says its commits ran unlocked."""
    rs = [
        result(unlocked=True),
        result(partition="dt=2", unlocked=True),
        result(partition="dt=3"),
        result(partition="dt=4", status="failed", unlocked=True),
    ]
    s = summarize(rs, [], [])
    assert s["unlocked"] == 2  # merged ones only
    assert "2 partition(s) committed WITHOUT the Metastore's lock (require_locks: false)" in render(rs, [], [])
    line = note(rs, s, distribution(rs, [], [], {"db.t": POLICY}))
    assert "\n" not in line and line.endswith(
        "2 partition(s) committed WITHOUT the Metastore's lock "
        "(require_locks: false): a Hive writer could not be told to wait"
    )
    locked = [result()]
    assert "WITHOUT" not in render(locked, [], []) + note(locked, summarize(locked, [], []), {})


def test_note_is_one_line_and_counts_would_merge_in_a_dry_run():
    results = [
        result(partition="dt=1", files_merged=10, groups=2),
        result(partition="dt=2", status="failed", reason="boom"),
    ]
    tables = distribution(results, [], [], {"db.t": POLICY})
    line = note(results, summarize(results, [], []), tables)
    assert line == (
        "merged 1 of 2 partition(s) in 1 table(s): 10 -> 2 files, 100.0 MiB -> 99.0 MiB; "
        "1 partition(s) with small files left; 0 skipped, 0 deferred, 1 failed"
    )
    dry = [dict(r, status="would_merge") for r in results[:1]]
    line = note(dry, summarize(dry, [], []), distribution(dry, [], [], {}), dry_run=True)
    assert line.startswith("dry run, would merge 1 of 1 partition(s) in 1 table(s): 10 -> 2 files") and "\n" not in line


def test_the_refresh_writes_only_the_statistics_that_differ_and_when_it_listed():
    from hive_compaction.model.results import (
        LISTED_AT,
        NUM_FILES,
        NUM_ROWS,
        SPARK_NUM_ROWS,
        SPARK_TOTAL_SIZE,
        TOTAL_SIZE,
        PartitionResult,
        Status,
        statistics_update,
    )

    r = PartitionResult(
        "db.t",
        "dt=1",
        "file:/t/dt=1",
        Status.MERGED,
        files_before=4,
        files_after=1,
        bytes_before=400,
        bytes_after=300,
        rows=10,
        listed=True,
    )
    spark_keys = {NUM_FILES: "4", TOTAL_SIZE: "300", SPARK_TOTAL_SIZE: "400", SPARK_NUM_ROWS: "10"}
    assert statistics_update(r, spark_keys, 1000.9) == {
        NUM_FILES: "1",
        NUM_ROWS: "10",
        SPARK_TOTAL_SIZE: "300",
        LISTED_AT: "1000",
    }
    r.rows = None  # rows unknown: no row count is written, Spark's own keys only where present
    assert statistics_update(r, {}, 5) == {NUM_FILES: "1", TOTAL_SIZE: "300", LISTED_AT: "5"}


def test_column_statistics_marked_accurate_for_another_row_count_lose_the_mark():
    """Issue 29, finding 6: Hive's COLUMN_STATS_ACCURATE vouched for the old numRows; where the
    disk's count differs, the mark goes (None removes the key); where it agrees, it stays."""
    from hive_compaction.model.results import (
        COLUMN_STATS_ACCURATE,
        NUM_ROWS,
        PartitionResult,
        Status,
        statistics_update,
    )

    r = PartitionResult(
        "db.t", "dt=1", "file:/t/dt=1", Status.MERGED, files_after=1, bytes_after=300, rows=10, listed=True
    )
    accurate = '{"BASIC_STATS":"true","COLUMN_STATS":{"id":"true"}}'
    update = statistics_update(r, {NUM_ROWS: "7", COLUMN_STATS_ACCURATE: accurate}, 5)
    assert update[NUM_ROWS] == "10" and update[COLUMN_STATS_ACCURATE] is None
    assert COLUMN_STATS_ACCURATE not in statistics_update(r, {NUM_ROWS: "10", COLUMN_STATS_ACCURATE: accurate}, 5)


def test_the_refresh_leaves_statistics_written_since_the_plan_for_the_next_run():
    """Issue 29, finding 6: statistics another writer wrote after the plan read them are not
    overwritten by the refresh with the merge job's older listing."""
    from hive_compaction.airflow.tasks import changed_since_planned
    from hive_compaction.model.results import NUM_FILES, TOTAL_SIZE, PartitionResult, Status

    r = PartitionResult(
        "db.t",
        "dt=1",
        "file:/t/dt=1",
        Status.NOTHING_TO_DO,
        files_after=3,
        bytes_after=300,
        listed=True,
        stats_files=3,
        stats_bytes=300,
    )
    assert not changed_since_planned(r, {NUM_FILES: "3", TOTAL_SIZE: "300"})
    assert changed_since_planned(r, {NUM_FILES: "4", TOTAL_SIZE: "400"})
    assert changed_since_planned(r, {})  # dropped and re-created since
    r.stats_files = r.stats_bytes = None  # the plan saw no statistics
    assert not changed_since_planned(r, {}) and changed_since_planned(r, {NUM_FILES: "1", TOTAL_SIZE: "9"})


def test_the_reader_gap_after_a_dead_commit_is_printed_as_retry_delay_plus_lease():
    """Issue 29: the longest time readers of a partition miss rows after its merge job dies
    mid-commit: the first retry's longest wait (twice the delay, exponential backoff) plus the
    lock's lease, both named; without retries, the next run."""
    from hive_compaction.airflow.report import reader_gap_note

    note = reader_gap_note(2, 60, 10)
    assert "at most 130 s and the retry's start" in note and "retry_delay 60 s" in note and "silent 10 s" in note
    assert "the next run" in reader_gap_note(0, 60, 10)


def test_a_run_that_finished_an_earlier_runs_commit_says_so():
    """After a replay the run merged nothing itself ("0 of 1"): the report says that it finished
    an interrupted commit, which the partition's row names."""
    replayed = [
        result(
            status="skipped",
            files_before=1,
            files_after=1,
            recovered=True,
            reason="finished the location switch run r1 left behind (the partition reads x)",
        )
    ]
    text = render(replayed, [], [])
    assert "finished the location switch run r1 left behind" in text
    assert text.split("\n")[-1] == (
        "1 interrupted commit(s) left by earlier runs or attempts finished (their "
        "partitions read every row again; see the rows above)"
    )
    assert summarize(replayed, [], [])["recovered"] == 1
    assert "interrupted" not in render(RESULTS, SKIPPED, DEFERRED)
