"""The trigger form and run selection: good input accepted, bad input rejected naming the field."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from airflow.sdk import Param
from airflow.sdk.definitions.param import ParamsDict

from hive_compaction.airflow import config
from hive_compaction.airflow.run_params import PARAM_DEFAULTS, ParamError, params_schema, select

SETTINGS = config.parse(
    {
        "defaults": {"partition_lag_days": 1},
        "tables": [
            {"name": "db.events"},
            {"name": "db.late", "partition_lag_days": 3, "target_file_size": "64MB", "small_file_limit": "32MB"},
        ],
    }
)


def form(**values):
    """Validate values the way Airflow validates the UI form / REST conf against the Params."""
    params = ParamsDict(
        {
            name: Param(PARAM_DEFAULTS[name], **schema)
            for name, schema in params_schema([t.name for t in SETTINGS.tables]).items()
        }
    )
    params.update(values)
    params.validate()
    return dict(params)


def test_good_form_input_is_accepted_and_selects_tables_and_dates():
    values = form(
        tables=["db.late"],
        partition_date="2026-03-01",
        partition_date_to="2026-03-03",
        dry_run=True,
        target_file_size_mb=256,
        small_file_limit_mb=100,
    )
    s = select(SETTINGS, values, "manual", datetime(2026, 3, 10, tzinfo=UTC))
    assert [t.name for t in s.tables] == ["db.late"]
    assert s.dates == {"db.late": (date(2026, 3, 1), date(2026, 3, 3))}
    assert s.dry_run is True
    assert s.tables[0].policy.target_file_size == 256 * 1024**2
    assert s.tables[0].policy.small_file_limit == 100 * 1024**2


def test_the_tables_field_is_a_pick_list_that_may_be_left_empty():
    """Airflow's trigger form shows a multi-select for an array with ``examples`` and sends null when
    nothing is picked: null and [] both mean every configured table."""
    schema = params_schema([t.name for t in SETTINGS.tables])["tables"]
    assert schema["examples"] == ["db.events", "db.late"] and "null" in schema["type"]
    for empty in (None, []):
        s = select(SETTINGS, form(tables=empty), "manual", None)
        assert [t.name for t in s.tables] == ["db.events", "db.late"]
    assert "examples" not in params_schema([])["tables"]  # no configured table: a free list


@pytest.mark.parametrize(
    "field, value",
    [
        ("tables", ["db.unknown"]),
        ("tables", ["not a table"]),
        ("tables", "db.events"),
        ("partition_date", "2026-13-01"),
        ("partition_date", "yesterday"),
        ("partition_date", 20260301),
        ("dry_run", "yes"),
        ("target_file_size_mb", 0),
        ("target_file_size_mb", 10**6),
        ("small_file_limit_mb", -1),
        ("small_file_limit_mb", 1.5),
    ],
)
def test_the_form_rejects_bad_values_naming_the_field(field, value):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=field):
        form(**{field: value})


@pytest.mark.parametrize(
    "values, field",
    [
        ({"tables": ["db.unknown"]}, "tables"),
        ({"partition_date": "2026-02-30"}, "partition_date"),
        ({"partition_date_to": "2026-03-01"}, "partition_date_to"),
        ({"partition_date": "2026-03-05", "partition_date_to": "2026-03-01"}, "partition_date_to"),
        ({"partition_date": "2025-01-01", "partition_date_to": "2026-03-01"}, "partition_date_to"),
        ({"small_file_limit_mb": 100, "tables": ["db.late"]}, "small_file_limit_mb"),
        ({"dry_run": "true"}, "dry_run"),
        ({"target_file_size_mb": True}, "target_file_size_mb"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_selection_rejects_what_the_form_cannot_catch_naming_the_field(values, field):
    """What reaches the plan task through `dags test --conf` or the API is checked again."""
    with pytest.raises(ParamError, match=field):
        select(SETTINGS, values, "manual", None)


def test_scheduled_runs_compact_each_tables_date_minus_its_lag():
    s = select(SETTINGS, {}, "scheduled", datetime(2026, 3, 10, tzinfo=UTC))
    assert s.dates == {"db.events": (date(2026, 3, 9),) * 2, "db.late": (date(2026, 3, 7),) * 2}


def test_the_task_sdks_run_type_enum_is_understood():
    """Inside a task, dag_run.run_type is the SDK's DagRunType enum, whose str() is not its value."""
    from airflow.sdk.api.datamodels._generated import DagRunType

    day = datetime(2026, 3, 10, tzinfo=UTC)
    assert select(SETTINGS, {}, DagRunType.SCHEDULED, day).dates["db.events"] == (date(2026, 3, 9),) * 2
    assert select(SETTINGS, {}, DagRunType.BACKFILL, day).dates["db.events"] == (date(2026, 3, 10),) * 2
    assert select(SETTINGS, {}, DagRunType.MANUAL, day).dates["db.events"] is None


def test_scheduled_and_backfill_runs_of_one_partition_key_mean_the_same_dates():
    """The key is the date for tables with the DAG's lag (1); db.late (lag 3) compacts 2 days before it."""
    for run_type in ("scheduled", "backfill", "manual"):
        s = select(SETTINGS, {}, run_type, None, "2026-03-09")
        assert s.dates == {"db.events": (date(2026, 3, 9),) * 2, "db.late": (date(2026, 3, 7),) * 2}, run_type
    # a key and a logical date (runs from before the keys) of the same scheduled run agree
    assert (
        select(SETTINGS, {}, "scheduled", datetime(2026, 3, 10)).dates
        == select(SETTINGS, {}, "scheduled", None, "2026-03-09").dates
    )


def test_only_scheduled_runs_look_back_and_they_know_the_next_scheduled_key():
    s = select(SETTINGS, {}, "scheduled", None, "2026-03-09")
    assert s.lookback == {
        "db.events": (date(2026, 3, 2), date(2026, 3, 8)),
        "db.late": (date(2026, 2, 28), date(2026, 3, 6)),
    }
    assert s.next_key == date(2026, 3, 10) and s.key_lag_days == 1
    assert select(SETTINGS, {}, "backfill", None, "2026-03-09").lookback == {}
    # other runs: the key of the next daily tick after now
    now = datetime(2026, 3, 20, 15, tzinfo=UTC)
    assert select(SETTINGS, {}, "backfill", None, "2026-03-09", now=now).next_key == date(2026, 3, 20)
    assert select(SETTINGS, {"partition_date": "2026-01-02"}, "manual", None, now=now).next_key == date(2026, 3, 20)
    off = config.parse({"defaults": {"lookback_days": 0}, "tables": [{"name": "db.events"}]})
    assert select(off, {}, "scheduled", None, "2026-03-09").lookback == {}


def test_a_form_date_wins_over_the_runs_key_and_a_bad_key_names_the_field():
    s = select(SETTINGS, {"partition_date": "2026-01-02"}, "manual", None, "2026-03-09")
    assert s.dates["db.late"] == (date(2026, 1, 2),) * 2 and s.lookback == {}
    with pytest.raises(ParamError, match="partition_key"):
        select(SETTINGS, {}, "scheduled", None, "2026-03-09T00:00:00")


def test_the_dags_schedule_keys_runs_as_select_reads_them():
    """The DAG's CronPartitionTimetable, as the scheduler runs it: the run at 2026-03-10 00:00 UTC
    carries the key 2026-03-09 (the default lag of one day)."""
    import pendulum
    from airflow.timetables.trigger import CronPartitionTimetable

    from hive_compaction.airflow.run_params import KEY_FORMAT

    tt = CronPartitionTimetable("0 0 * * *", timezone="UTC", run_offset=-SETTINGS.key_lag_days, key_format=KEY_FORMAT)
    _, key = tt._get_partition_info(pendulum.datetime(2026, 3, 10, tz="UTC"))
    assert key == "2026-03-09"
    assert select(SETTINGS, {}, "scheduled", None, key).dates["db.events"] == (date(2026, 3, 9),) * 2


def test_backfill_runs_compact_the_partition_date_they_name():
    s = select(SETTINGS, {}, "backfill", datetime(2026, 3, 10, tzinfo=UTC))
    assert s.dates == {"db.events": (date(2026, 3, 10),) * 2, "db.late": (date(2026, 3, 10),) * 2}


def test_manual_runs_without_a_date_compact_every_partition_and_a_date_wins_over_the_schedule():
    assert select(SETTINGS, {}, "manual", datetime(2026, 3, 10)).dates == {"db.events": None, "db.late": None}
    s = select(SETTINGS, {"partition_date": "2026-01-02"}, "scheduled", datetime(2026, 3, 10))
    assert s.dates["db.events"] == (date(2026, 1, 2), date(2026, 1, 2))


def test_an_empty_config_is_an_error_naming_tables():
    with pytest.raises(ParamError, match="tables: no table is configured"):
        select(config.parse({}), {}, "manual", None)
