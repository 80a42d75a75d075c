"""The backlog of scheduled runs: which partitions of the lookback window are planned again, in
what order within the fan-out caps, and what the report says about when a partition left alone
is looked at again. Pure logic, with an in-memory Metastore for the plan task's body."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from hive_compaction.airflow import backlog, config, tasks as dag_tasks
from hive_compaction.airflow.metastore_types import PartitionInfo, PartitionRecord, TableInfo
from hive_compaction.airflow.planning import DDL_TIME
from hive_compaction.airflow.run_params import select
from hive_compaction.model.results import (
    LISTED_AT,
    NUM_FILES,
    PLANNED_AT,
    SMALL_FILES,
    TOTAL_SIZE,
    PartitionResult,
    Status,
    encode_results,
)

ORC_IN = "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat"
POLICY = config.TablePolicy()
KEY = date(2026, 8, 2)
NOW = 1_800_000_000


def part(day: date | str, **params) -> PartitionInfo:
    name = f"dt={day}"
    return PartitionInfo(name, (str(day),), f"file:///wh/db.db/events/{name}", {k: str(v) for k, v in params.items()})


# --- which partitions of the window are pending ---------------------------------------------------
@pytest.mark.parametrize(
    "params, why",
    [
        ({}, "never listed by this package"),
        ({LISTED_AT: 100, PLANNED_AT: 200, SMALL_FILES: 0}, "deferred or failed in an earlier run"),
        ({LISTED_AT: 100, DDL_TIME: 150, SMALL_FILES: 0}, "altered since its last listing"),
        ({LISTED_AT: 100, SMALL_FILES: 5, NUM_FILES: 1}, "5 small file(s) at its last listing"),
        ({LISTED_AT: 100, NUM_FILES: 3}, "statistics show small files"),  # listed before smallFiles existed
    ],
)
def test_pending_partitions_and_why(params, why):
    assert backlog.pending(part("2026-08-01", **params), POLICY).startswith(why)


@pytest.mark.parametrize(
    "params",
    [
        {LISTED_AT: 300, PLANNED_AT: 200, SMALL_FILES: 1},  # listed after it was planned: one small file left
        {LISTED_AT: 300, DDL_TIME: 300, SMALL_FILES: 0},
        {LISTED_AT: 300, NUM_FILES: 1},
    ],
)
def test_a_partition_whose_last_listing_left_no_small_files_is_not_pending(params):
    assert backlog.pending(part("2026-08-01", **params), POLICY) is None


def test_nothing_is_pending_for_a_table_turned_off():
    assert backlog.pending(part("2026-08-01"), config.TablePolicy(small_file_limit=0)) is None


@pytest.mark.parametrize(
    "result, pends",
    [
        ({"status": "failed", "listed": True, "files_after": 1, "sizes_after": [0, 0, 1, 0]}, True),
        ({"status": "skipped", "listed": False, "files_after": 0}, True),  # planned, never listed
        ({"status": "skipped", "listed": True, "files_after": 30, "sizes_after": [30, 0, 0, 0]}, True),  # quiet
        ({"status": "merged", "listed": True, "files_after": 2, "sizes_after": [1, 0, 1, 0]}, False),
        ({"status": "merged", "listed": True, "files_after": 1, "sizes_after": None}, False),
        ({"status": "nothing_to_do", "listed": True, "files_after": 3, "sizes_after": None}, True),
    ],
)
def test_pending_after_the_refresh(result, pends):
    assert backlog.pending_after(result, POLICY) is pends


# --- when a partition is looked at again -------------------------------------------------------------
def test_revisit_within_and_beyond_the_lookback_window():
    nxt = KEY + timedelta(days=1)
    assert (
        backlog.revisit(KEY, POLICY, 1, nxt, True)
        == "again in the scheduled run of 2026-08-03 (within lookback_days: 7)"
    )
    assert backlog.revisit(nxt - timedelta(days=7), POLICY, 1, nxt, True).startswith("again in the scheduled run")
    assert (
        backlog.revisit(nxt - timedelta(days=8), POLICY, 1, nxt, True)
        == "not again automatically: older than lookback_days (7); trigger a run for its date"
    )
    assert backlog.revisit(KEY, POLICY, 1, nxt, False).startswith("not again automatically: the Metastore's")
    assert backlog.revisit(KEY, config.TablePolicy(lookback_days=0), 1, nxt, True).startswith(
        "not again automatically: older than lookback_days (0)"
    )


def test_revisit_of_a_date_whose_own_scheduled_run_is_still_to_come():
    # a manual run compacted a partition of today; today's own scheduled run (key today) lists it
    today = date(2026, 8, 10)
    assert backlog.revisit(today, POLICY, 1, today, False) == "again in the scheduled run of 2026-08-10 (its own date)"


def test_revisit_counts_a_tables_own_lag_from_the_key():
    """A table with a lag of 3 (DAG lag 1): the run keyed K compacts its date K - 2."""
    late = config.TablePolicy(partition_lag_days=3)
    nxt = KEY + timedelta(days=1)  # compacts the late table's 2026-08-01 and looks back to 07-25
    assert (
        backlog.revisit(date(2026, 8, 1), late, 1, nxt, False)
        == "again in the scheduled run of 2026-08-03 (its own date)"
    )
    assert backlog.revisit(date(2026, 7, 25), late, 1, nxt, True).startswith("again in the scheduled run of 2026-08-03")
    assert backlog.revisit(date(2026, 7, 24), late, 1, nxt, True).startswith("not again automatically: older")


def test_revisit_of_undated_and_unpartitioned():
    assert backlog.revisit(None, POLICY, 1, KEY, True).startswith("not again automatically: no date in its 'dt'")
    assert (
        backlog.revisit(None, POLICY, 1, KEY, True, partitioned=False)
        == "again in the scheduled run of 2026-08-02 (every scheduled run lists this table)"
    )


def test_the_next_scheduled_key():
    assert backlog.next_scheduled_key("scheduled", KEY, 1, date(2030, 1, 1)) == date(2026, 8, 3)
    assert backlog.next_scheduled_key("manual", None, 1, date(2026, 8, 10)) == date(2026, 8, 10)
    assert backlog.next_scheduled_key("backfill", KEY, 2, date(2026, 8, 10)) == date(2026, 8, 9)


# --- the plan task's body: own date first, then the backlog oldest first, within the caps ----------
class FakeMetastore:
    """The calls dag_tasks.plan makes, on partitions held in memory."""

    uris = "thrift://fake:9083"
    batch_size = 100

    def __init__(self, tables: dict[str, list[PartitionInfo]]):
        self.parts = {
            name: {
                p.name: PartitionInfo(
                    p.name, p.values, f"file:///wh/{name.replace('.', '.db/')}/{p.name}", p.parameters
                )
                for p in ps
            }
            for name, ps in tables.items()
        }
        self.calls = 0

    def table(self, db, tbl):
        return TableInfo(
            database=db,
            table=tbl,
            location=f"file:///wh/{db}.db/{tbl}",
            storage_format="orc",
            input_format=ORC_IN,
            partition_keys=(("dt", "string"),),
            table_type="EXTERNAL_TABLE",
            parameters={},
        )

    def partition_names(self, table):
        return sorted(self.parts[table.name])

    def partitions(self, table, names=None, filter_expr=None):
        return [self.parts[table.name][n] for n in (names if names is not None else self.partition_names(table))]

    def update_statistics(self, table, stats):
        for name, updates in stats.items():
            self.parts[table.name][name].parameters.update(updates)
        return len(stats)

    recorded: dict = {}  # the results table: batch number -> parameters

    # The results table: it exists, nothing to prune, the recorded batches.
    def table_exists(self, db, tbl):
        return True

    def partition_names_of(self, db, tbl):
        return []

    def partition_records(self, db, tbl, names):
        return [PartitionRecord(("run", str(b)), self.recorded[b], 0) for b in self.recorded]


def small(day, **params):
    return part(day, **{NUM_FILES: 10, TOTAL_SIZE: 10 * 1024, **params})


def settings_for(**fan_out):
    return config.parse(
        {
            "defaults": {"partition_lag_days": 1, "quiet_period_minutes": 0},
            "fan_out": fan_out,
            "tables": [{"name": "db.events"}, {"name": "db.late", "partition_lag_days": 3}],
        }
    )


def test_a_scheduled_run_plans_its_date_then_the_backlog_oldest_first_and_marks_what_it_deferred():
    d = lambda n: KEY - timedelta(days=n)
    hms = FakeMetastore(
        {
            "db.events": [
                small(KEY),
                small(d(2)),  # never listed
                small(d(3), **{LISTED_AT: NOW - 86400, SMALL_FILES: 0, NUM_FILES: 1}),  # clean
                small(d(5), **{LISTED_AT: NOW - 5 * 86400, PLANNED_AT: NOW - 4 * 86400}),  # deferred once
                small(d(8)),
            ],  # outside the window (7 days)
            "db.late": [small(d(2)), small(d(4))],
        }
    )  # lag 3: the run keyed KEY compacts 07-31, looks back from 07-30
    settings = settings_for(max_spark_jobs=1, max_partitions_per_job=3)
    sel = select(settings, {}, "scheduled", None, str(KEY))
    assert sel.dates == {"db.events": (KEY, KEY), "db.late": (d(2), d(2))}
    assert sel.lookback == {"db.events": (d(7), d(1)), "db.late": (d(9), d(3))}
    planned = dag_tasks.plan(settings, hms, "scheduled__x", sel, now=NOW)["plan"]

    [batch] = planned["batches"]
    # own dates first (both tables), then the backlog oldest first: db.events 07-28 before 07-31
    assert sorted(map(tuple, batch["partitions"])) == sorted(
        [("db.events", f"dt={KEY}"), ("db.late", f"dt={d(2)}"), ("db.events", f"dt={d(5)}")]
    )
    # deferred by the cap: the newer backlog dates (db.late's 07-29 is older than db.events' 07-31)
    assert [(x["table"], x["partition"]) for x in planned["deferred"]] == [
        ("db.late", f"dt={d(4)}"),
        ("db.events", f"dt={d(2)}"),
    ]
    again = {x["partition"] + "@" + x["table"]: x["again"] for x in planned["deferred"]}
    assert again[f"dt={d(2)}@db.events"] == "again in the scheduled run of 2026-08-03 (within lookback_days: 7)"
    assert again[f"dt={d(4)}@db.late"] == "again in the scheduled run of 2026-08-03 (within lookback_days: 7)"
    assert planned["lookback"] == {"db.events": [str(d(7)), str(d(1))], "db.late": [str(d(9)), str(d(3))]}
    # the deferred partitions are marked (the refresh marks those that fail)
    marked = {(t, n) for t, ps in hms.parts.items() for n, p in ps.items() if p.parameters.get(PLANNED_AT) == str(NOW)}
    assert marked == {("db.events", f"dt={d(2)}"), ("db.late", f"dt={d(4)}")}


def test_the_backlog_orders_oldest_first_after_the_runs_own_date():
    d = lambda n: KEY - timedelta(days=n)
    hms = FakeMetastore(
        {"db.events": [small(d(1)), small(d(6)), small(d(3)), part(KEY, **{NUM_FILES: 1})], "db.late": []}
    )
    settings = settings_for(max_spark_jobs=1, max_partitions_per_job=2)
    planned = dag_tasks.plan(settings, hms, "scheduled__y", select(settings, {}, "scheduled", None, str(KEY)), now=NOW)[
        "plan"
    ]
    # KEY's partition (stats: one file) is listed anyway; then the oldest of the backlog
    assert sorted(map(tuple, planned["batches"][0]["partitions"])) == [
        ("db.events", f"dt={d(6)}"),
        ("db.events", f"dt={KEY}"),
    ]
    assert [x["partition"] for x in planned["deferred"]] == [f"dt={d(3)}", f"dt={d(1)}"]


def test_a_dry_run_marks_nothing_and_says_what_the_metastore_as_it_stands_implies():
    listed_clean = {LISTED_AT: NOW - 60, SMALL_FILES: 0, NUM_FILES: 1}
    hms = FakeMetastore({"db.events": [part(KEY, **listed_clean), small(KEY - timedelta(days=1))], "db.late": []})
    settings = settings_for(max_spark_jobs=1, max_partitions_per_job=1)
    sel = select(settings, {"dry_run": True}, "scheduled", None, str(KEY))
    planned = dag_tasks.plan(settings, hms, "scheduled__z", sel, now=NOW)["plan"]
    assert not any(PLANNED_AT in p.parameters for ps in hms.parts.values() for p in ps.values())
    assert planned["unpicked"] == [["db.events", f"dt={KEY}"]]
    # the refresh's statements for what the dry run would merge
    results = [
        {"table": "db.events", "partition": f"dt={KEY}", "status": "would_merge", "listed": True, "files_after": 4}
    ]
    [r] = dag_tasks.add_revisits(planned, results)
    assert r["again"].startswith("not again automatically: the Metastore's statistics and its last listing")


def test_the_refresh_says_when_skipped_and_failed_partitions_come_back():
    hms = FakeMetastore({"db.events": [small(KEY)], "db.late": []})
    settings = settings_for()
    planned = dag_tasks.plan(settings, hms, "scheduled__w", select(settings, {}, "scheduled", None, str(KEY)), now=NOW)[
        "plan"
    ]
    old = KEY - timedelta(days=9)
    results = [
        {
            "table": "db.events",
            "partition": f"dt={KEY}",
            "status": "skipped",
            "listed": True,
            "files_after": 12,
            "sizes_after": [12, 0, 0, 0],
            "reason": "within the quiet period",
        },
        {"table": "db.events", "partition": f"dt={old}", "status": "failed", "listed": False, "files_after": 0},
        {"table": "db.events", "partition": f"dt={KEY}x", "status": "merged", "listed": True, "files_after": 1},
    ]
    skipped, failed, merged = dag_tasks.add_revisits(planned, results)
    assert skipped["again"] == "again in the scheduled run of 2026-08-03 (within lookback_days: 7)"
    assert failed["again"] == "not again automatically: older than lookback_days (7); trigger a run for its date"
    assert "again" not in merged


def test_the_refresh_marks_failed_partitions_and_records_the_small_files_left():
    d1 = KEY - timedelta(days=1)
    hms = FakeMetastore({"db.events": [small(KEY), small(d1)], "db.late": []})
    settings = settings_for()
    planned = dag_tasks.plan(settings, hms, "scheduled__v", select(settings, {}, "scheduled", None, str(KEY)), now=NOW)[
        "plan"
    ]
    assert {tuple(p) for b in planned["batches"] for p in b["partitions"]} == {
        ("db.events", f"dt={KEY}"),
        ("db.events", f"dt={d1}"),
    }
    loc = "file:///wh/db.db/events"
    planned_stats = hms.parts["db.events"][f"dt={KEY}"].parameters  # what the job records the plan saw
    hms.recorded = {
        0: encode_results(
            [
                PartitionResult(
                    "db.events",
                    f"dt={KEY}",
                    f"{loc}/dt={KEY}",
                    Status.MERGED,
                    files_before=10,
                    files_after=1,
                    listed=True,
                    sizes_before=[10, 0, 0, 0],
                    sizes_after=[1, 0, 0, 0],
                    stats_files=int(planned_stats[NUM_FILES]),
                    stats_bytes=int(planned_stats[TOTAL_SIZE]),
                ),
                PartitionResult("db.events", f"dt={d1}", f"{loc}/dt={d1}", Status.FAILED, reason="boom"),
            ]
        )
    }
    report = dag_tasks.refresh(settings, hms, planned, now=NOW + 60)
    merged, failed = (hms.parts["db.events"][f"dt={day}"].parameters for day in (KEY, d1))
    assert (merged[LISTED_AT], merged[SMALL_FILES], merged[NUM_FILES]) == (str(NOW + 60), "1", "1")
    assert PLANNED_AT not in merged and backlog.pending(hms.parts["db.events"][f"dt={KEY}"], POLICY) is None
    assert failed[PLANNED_AT] == str(NOW + 60) and LISTED_AT not in failed
    assert backlog.pending(hms.parts["db.events"][f"dt={d1}"], POLICY) == "never listed by this package"
    [r] = [r for r in report["partitions"] if r["status"] == "failed"]
    assert r["again"] == "again in the scheduled run of 2026-08-03 (within lookback_days: 7)"
