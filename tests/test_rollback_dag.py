"""The rollback DAG (``hive_compaction_rollback``): its form is checked against what runs really
committed (real Metastore, real merge run), and a dry run through the DAG (``airflow dags test``:
the check, the rollback job by spark-submit with --dry-run, the report) lists what would move back
and moves nothing. The real rollback from the form is in test_as_a_user (a browser)."""

from __future__ import annotations

import pytest

from hive_compaction.airflow import config, rollback
from hive_compaction.airflow.metastore_hook import Metastore
from hive_compaction.airflow.run_params import ParamError
from hive_compaction.storage.paths import run_tag

pytestmark = pytest.mark.integration

DB, TABLE, OTHER = "rbdag", "events", "untouched"
DATES = ["2026-07-01", "2026-07-02"]


@pytest.fixture(scope="module")
def merged(stack, tmp_path_factory):
    """Two partitions of 3 files each merged by one run of the merge DAG; a second configured table
    with nothing committed."""
    stack.make_table(DB, TABLE, "ORC", DATES, files=3, rows=90)
    stack.make_table(DB, OTHER, "ORC", [])
    before, content = stack.snapshot(DB, TABLE), stack.content(DB, TABLE)
    cfg = stack.write_config(
        tmp_path_factory.mktemp("rbdag") / "c.yaml", [{"name": f"{DB}.{TABLE}"}, {"name": f"{DB}.{OTHER}"}]
    )
    run = stack.run_dag(cfg)
    assert run.state == "success", run.log[-4000:]
    assert {n: p["num_files"] for n, p in stack.snapshot(DB, TABLE).items()} == {f"dt={d}": 1 for d in DATES}
    return {"cfg": cfg, "run": run, "before": before, "content": content}


def check(stack, cfg, **params):
    with Metastore("127.0.0.1", stack.port) as hms:
        return rollback.check(config.load(cfg), hms, params)


def test_the_form_is_checked_against_what_runs_committed(stack, merged):
    cfg, run_id = merged["cfg"], merged["run"].run_id
    tag = run_tag(run_id)
    request = check(stack, cfg, table=f"{DB}.{TABLE}", run=run_id)
    assert (request.table, request.run, request.partitions, request.all_partitions, request.dry_run) == (
        f"{DB}.{TABLE}",
        tag,
        ("dt=2026-07-01", "dt=2026-07-02"),
        True,
        False,
    )
    assert check(stack, cfg, table=f"{DB}.{TABLE}", run=tag, partitions=["dt=2026-07-02"], dry_run=True).partitions == (
        "dt=2026-07-02",
    )  # the run's tag works too

    # Each wrong value: an error naming the field, saying what would be right.
    for params, starts, says in (
        ({"table": "rbdag.nope", "run": run_id}, "table:", "the Metastore has no table rbdag.nope"),
        ({"table": "not a table", "run": run_id}, "table:", "expected database.table"),
        ({"table": f"{DB}.{OTHER}", "run": run_id}, "table:", f"no run committed a compaction of {DB}.{OTHER}"),
        (
            {"table": f"{DB}.{TABLE}", "run": "manual__1999-01-01"},
            "run:",
            f"runs that have, newest first: {tag} (2 partition(s): dt=2026-07-01, dt=2026-07-02)",
        ),
        ({"table": f"{DB}.{TABLE}", "run": " "}, "run:", f"required; runs that committed something to {DB}.{TABLE}"),
        (
            {"table": f"{DB}.{TABLE}", "run": run_id, "partitions": ["dt=2026-07-03"]},
            "partitions:",
            f"['dt=2026-07-03'] not committed to {DB}.{TABLE} by run {tag}",
        ),
    ):
        with pytest.raises(ParamError) as e:
            check(stack, cfg, **params)
        assert str(e.value).startswith(starts) and says in str(e.value), (params, str(e.value))


def test_a_dry_run_through_the_dag_lists_what_would_move_back_and_moves_nothing(stack, merged):
    cfg, run_id = merged["cfg"], merged["run"].run_id
    state, content = stack.snapshot(DB, TABLE), stack.content(DB, TABLE)
    out = stack.run_dag(
        cfg,
        {"table": f"{DB}.{TABLE}", "run": run_id, "partitions": ["dt=2026-07-02"], "dry_run": True},
        dag_id="hive_compaction_rollback",
    )
    assert out.state == "success", out.log[-6000:]
    # The job's listing: every original file of that partition, by name, would come back.
    originals = sorted(merged["before"]["dt=2026-07-02"]["files"])
    assert len(originals) == 3
    for name in originals:
        assert "back: " in out.log and f"dt=2026-07-02/{name}" in out.log, (name, out.log[-4000:])
    assert "dt=2026-07-01/" not in out.log.split("dry run:", 1)[1], "a partition that was not asked for"
    # The report (task log): the partition, its state and figures, and the note.
    assert (
        "dry run: rollback of run" in out.log
        and "1 partition(s), 3 original file(s) would move back, 1 merged file(s) out" in out.log
    ), out.log[-4000:]
    assert "dt=2026-07-02  would restore  3" in out.log, out.log[-4000:]
    assert stack.snapshot(DB, TABLE) == state and stack.content(DB, TABLE) == content  # nothing moved
    # A dry run rolls nothing back: the partition is still offered.
    assert check(stack, cfg, table=f"{DB}.{TABLE}", run=run_id).partitions == ("dt=2026-07-01", "dt=2026-07-02")


def test_a_rollback_that_cannot_finish_reports_why_and_moves_nothing(stack, merged):
    """The originals of a partition are gone from the trash (purged by hand): a dry run says which
    partition cannot be restored; the rollback refuses before it moves anything, records why, and
    the report task fails with that reason."""
    import json
    from pathlib import Path
    from urllib.parse import urlsplit

    cfg, run_id = merged["cfg"], merged["run"].run_id
    work = stack.work_area(DB, TABLE)
    [manifest] = [
        m
        for f in (work / "manifests" / run_tag(run_id)).glob("*/*.json")
        if (m := json.loads(f.read_text()))["partition"] == "dt=2026-07-01"
    ]
    for f in manifest["inputs"]:
        (Path(urlsplit(manifest["trash"]).path) / f["name"]).unlink()
    state, content = stack.snapshot(DB, TABLE), stack.content(DB, TABLE)
    # A dry run of the whole run says so: the other partition would be restored, this one cannot.
    dry = stack.run_dag(
        cfg, {"table": f"{DB}.{TABLE}", "run": run_id, "dry_run": True}, dag_id="hive_compaction_rollback"
    )
    assert dry.state == "failed", dry.log[-6000:]
    report = dry.log.split("rollback report", 1)[-1]
    assert (
        "dt=2026-07-01  cannot: 3 original file(s) gone" in report
        and "dt=2026-07-02  would restore" in report
        and "dt=2026-07-01: original file(s) [" in report
    ), dry.log[-6000:]
    out = stack.run_dag(
        cfg,
        {"table": f"{DB}.{TABLE}", "run": run_id, "partitions": ["dt=2026-07-01"]},
        dag_id="hive_compaction_rollback",
    )
    assert out.state == "failed", out.log[-6000:]
    assert out.states == {"check": ["success"], "rollback": ["failed"], "report": ["failed"]}, out.states
    reason = "are no longer in the trash (purged after the retention?); nothing was changed"
    assert (
        f"run {run_tag(run_id)} in {DB}.{TABLE}: 0 partition(s), 0 original file(s) moved back" in out.log
        and reason in out.log.split("rollback report", 1)[-1]
    ), out.log[-6000:]
    assert stack.snapshot(DB, TABLE) == state and stack.content(DB, TABLE) == content
