"""Failure alerts: the message names tables, partitions and the reason; notifiers from the config."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hive_compaction.airflow import alerts
from hive_compaction.airflow.config import AlertSpec, ConfigError, parse

sys.path.insert(0, str(Path(__file__).parent))  # alert_recorder, importable by path
RECORDER = "alert_recorder.RecordingNotifier"

PLAN = {
    "run": "manual__x",
    "results_table": "default.r",
    "batches": [
        {"batch": 0, "label": "db.t dt=2026-01-01", "partitions": [["db.t", "dt=2026-01-01"]]},
        {"batch": 1, "label": "db.t dt=2026-01-02 +1", "partitions": [["db.t", "dt=2026-01-02"], ["db.u", ""]]},
    ],
}


def test_a_merge_failure_names_its_batch_only_and_the_exception():
    f = alerts.failure(
        "merge",
        "manual__x",
        map_index=1,
        label="db.t dt=2026-01-02 +1",
        plan=PLAN,
        exception=RuntimeError("Cannot execute: spark-submit ... Error code is: 1."),
        try_number=3,
    )
    assert f["tables"] == ["db.t", "db.u"]
    assert f["partitions"] == ["db.t/dt=2026-01-02", "db.u"]
    assert f["reason"] == "RuntimeError: Cannot execute: spark-submit ... Error code is: 1."
    assert f["message"] == (
        "hive_compaction: merge[1] (db.t dt=2026-01-02 +1) failed in run manual__x, try 3. "
        "Tables: db.t, db.u. Partitions: db.t/dt=2026-01-02, db.u. "
        "Reason: RuntimeError: Cannot execute: spark-submit ... Error code is: 1."
    )
    assert "dt=2026-01-01" not in f["message"]


def test_a_jobs_kerberos_login_failure_is_named_first():
    """Exit code 3 of the merge and rollback jobs: their Kerberos login failed (said before the
    command line, which the length limit may cut); another code is left as it is."""
    f = alerts.failure(
        "merge",
        "manual__x",
        map_index=0,
        plan=PLAN,
        exception=RuntimeError(
            "Cannot execute: spark-submit --keytab /k --principal p " + "x" * 2000 + " Error code is: 3."
        ),
    )
    assert f["reason"].startswith(
        "the Spark driver's Kerberos login failed (the task log's `error: Kerberos login "
        "failed` line names the principal and keytab"
    )
    assert f["reason"].endswith(" ...") and "RuntimeError: Cannot execute: spark-submit --keytab /k" in f["reason"]
    other = alerts.failure("merge", "manual__x", exception=RuntimeError("Cannot execute: x. Error code is: 13."))
    assert other["reason"] == "RuntimeError: Cannot execute: x. Error code is: 13."


def test_the_jobs_recorded_failures_give_the_reason_and_come_first():
    results = [
        {"table": "db.t", "partition": "dt=2026-01-02", "status": "merged"},
        {"table": "db.u", "partition": "", "status": "failed", "reason": "checksum mismatch"},
    ]
    f = alerts.failure("merge", "r", map_index=1, plan=PLAN, exception=RuntimeError("exit 1"), results=results)
    assert f["reason"] == "db.u/(table): checksum mismatch"
    assert f["partitions"] == ["db.u", "db.t/dt=2026-01-02"]


def test_a_refresh_failure_names_every_planned_partition():
    f = alerts.failure("refresh_metastore", "r", plan=PLAN, exception=ValueError("batch 1 recorded no results"))
    assert f["partitions"] == ["db.t/dt=2026-01-01", "db.t/dt=2026-01-02", "db.u"]
    assert "Reason: ValueError: batch 1 recorded no results" in f["message"]


def test_an_asset_event_failure_names_its_tables_partitions():
    f = alerts.failure("compacted.db.t", "r", plan=PLAN, exception=RuntimeError("api down"))
    assert f["tables"] == ["db.t"] and f["partitions"] == ["db.t/dt=2026-01-01", "db.t/dt=2026-01-02"]


def test_a_plan_failure_names_the_tables_asked_for_and_long_lists_are_cut():
    f = alerts.failure("plan", "r", tables=["db.b", "db.a"], exception=None)
    assert f["tables"] == ["db.a", "db.b"] and f["partitions"] == []
    assert "Partitions: none planned yet" in f["message"] and "Reason: unknown" in f["message"]
    many = {"batches": [{"batch": 0, "partitions": [["db.t", f"dt={i}"] for i in range(25)]}]}
    f = alerts.failure("merge", "r", map_index=0, plan=many, exception="x" * 5000)
    assert "dt=19 and 5 more" in f["message"] and "dt=20" not in f["message"]
    assert len(f["reason"]) < 1100


def test_alerts_config_names_the_entry_and_the_path():
    s = parse({"alerts": [{"notifier": RECORDER, "kwargs": {"path": "/tmp/a"}}]})
    assert s.alerts == (AlertSpec(RECORDER, {"path": "/tmp/a"}),)
    with pytest.raises(
        ConfigError,
        match=r"cfg: alerts\[1\]: key 'notifier': cannot import notifier "
        r"'no_such_module.Notifier': ModuleNotFoundError",
    ):
        parse({"alerts": [RECORDER, {"notifier": "no_such_module.Notifier"}]}, "cfg")
    with pytest.raises(ConfigError, match=r"alerts\[0\]: key 'notifier': 'json.dumps' is not a notifier class"):
        parse({"alerts": [{"notifier": "json.dumps"}]})
    with pytest.raises(ConfigError, match=r"alerts\[0\]: unknown key\(s\) kwarg"):
        parse({"alerts": [{"notifier": RECORDER, "kwarg": {}}]})
    with pytest.raises(ConfigError, match="alerts: expected a list"):
        parse({"alerts": {"notifier": RECORDER}})


def test_check_fails_on_arguments_the_notifier_does_not_take():
    s = parse({"alerts": [{"notifier": RECORDER, "kwargs": {"paht": "/tmp/a"}}]})
    with pytest.raises(
        ConfigError,
        match=r"alerts: notifier 'alert_recorder.RecordingNotifier' cannot be created "
        r"with kwargs \['paht'\]: TypeError",
    ):
        alerts.check(s)


def test_lenient_specs_keep_the_good_entries_of_a_broken_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"tables: [{{name: db.t, target_file_size: lots}}]\n"
        f"alerts:\n  - notifier: {RECORDER}\n    kwargs: {{path: /tmp/a}}\n  - notifier: nope.Nope\n"
    )
    assert alerts.lenient_specs(cfg) == (AlertSpec(RECORDER, {"path": "/tmp/a"}),)
    assert alerts.lenient_specs(tmp_path / "missing.yaml") == ()


def test_the_callback_renders_each_notifier_afresh_and_survives_a_broken_one(tmp_path, monkeypatch):
    out = tmp_path / "alerts.jsonl"
    callback = alerts.FailureAlert(
        (AlertSpec("alert_recorder.BrokenNotifier"), AlertSpec(RECORDER, {"path": str(out)}))
    )
    ti = SimpleNamespace(
        task_id="refresh_metastore",
        map_index=-1,
        try_number=1,
        run_id="r",
        xcom_pull=lambda **kw: PLAN if kw == {"task_ids": "plan", "key": "plan", "map_indexes": -1} else None,
    )
    for error in ("first", "second"):
        callback({"ti": ti, "run_id": "r", "exception": RuntimeError(error)})
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["failure"]["reason"] for g in got] == ["RuntimeError: first", "RuntimeError: second"]
    assert got[1]["message"] == got[1]["failure"]["message"]  # the template was rendered for each alert
    assert "db.u" in got[0]["message"]


def test_a_rollback_failure_names_the_forms_table_and_partitions():
    ti = SimpleNamespace(
        task_id="rollback", map_index=-1, run_id="manual__r", try_number=1, xcom_pull=lambda **kw: None
    )
    params = {"table": "db.t", "run": "scheduled__x", "partitions": ["dt=2026-01-01", ""], "dry_run": False}
    f = alerts.describe({"ti": ti, "params": params, "run_id": "manual__r", "exception": RuntimeError("exit 1")})
    assert f["tables"] == ["db.t"] and f["partitions"] == ["db.t/dt=2026-01-01"], f
    whole = alerts.describe({"ti": ti, "params": {**params, "partitions": None}, "run_id": "manual__r"})
    assert whole["tables"] == ["db.t"] and whole["partitions"] == [], whole


def test_a_merge_alert_reads_the_jobs_results_through_the_config_beside_the_dag(tmp_path, monkeypatch):
    """Installed from the wheel, the config is the YAML beside the DAG file and no
    HIVE_COMPACTION_CONFIG is set: the failed merge's recorded results are read through the
    Metastore connection that file names (not the package's default path), so the alert says why."""
    from hive_compaction.airflow import metastore_hook, results_reader
    from hive_compaction.model.results import PartitionResult, Status, encode_results

    monkeypatch.delenv("HIVE_COMPACTION_CONFIG", raising=False)
    config = tmp_path / "dags" / "hive_compaction.yaml"
    config.parent.mkdir()
    config.write_text("metastore_conn_id: team_hms\ntables: [{name: db.t}]\n")
    connections = []

    class Recorded:  # the Metastore hook, as far as _recorded uses it
        def __init__(self, metastore_conn_id=None):
            connections.append(metastore_conn_id)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    failed = PartitionResult("db.t", "dt=2026-01-01", "/t/dt=2026-01-01", Status.FAILED, reason="checksum mismatch")
    monkeypatch.setattr(metastore_hook, "Metastore", Recorded)
    monkeypatch.setattr(results_reader, "read", lambda hms, table, run, batches: {0: encode_results([failed])})
    ti = SimpleNamespace(
        task_id="merge", map_index=0, try_number=1, run_id="r", rendered_map_index="db.t", xcom_pull=lambda **kw: PLAN
    )
    f = alerts.describe({"ti": ti, "run_id": "r", "exception": RuntimeError("Cannot execute: spark-submit")}, config)
    assert connections == ["team_hms"]
    assert f["reason"] == "db.t/dt=2026-01-01: checksum mismatch", f
