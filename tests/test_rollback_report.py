"""The rollback DAG's pieces that need no service: the job's record in the results table, the
report and its log table, the job's arguments, the form's partitions, the rollback_job key."""

from __future__ import annotations

import json

import pytest

from hive_compaction.airflow import config, rollback
from hive_compaction.airflow.run_params import ParamError
from hive_compaction.model import rollbacks
from hive_compaction.model.results import MAX_PARAM_CHARS, PartitionResult, Status, encode_results


def line(partition: str, state: str, files: int = 3, outputs: int = 1) -> dict:
    return {
        "partition": partition,
        "location": f"file:///w/t/{partition}",
        "mode": "in_place",
        "state": state,
        "files_back": files,
        "bytes_back": 300 * files,
        "outputs_out": outputs,
        "names_back": [f"part-{i}.orc" for i in range(files)],
        "statistics": {"numFiles": str(files), "totalSize": str(300 * files), "numRows": "90"},
    }


def test_the_record_round_trips_and_is_told_from_a_merge_batch():
    parts = [line("dt=2026-07-01", "restored"), line("dt=2026-07-02", "already rolled back")]
    params = rollbacks.encode("scheduled__x", "db.t", False, parts, "boom")
    assert rollbacks.decode(params) == {
        "of_run": "scheduled__x",
        "table": "db.t",
        "dry_run": False,
        "error": "boom",
        "complete": True,
        "partitions": parts,
    }
    assert all(len(v) <= MAX_PARAM_CHARS for v in params.values())
    batch = encode_results([PartitionResult("db.t", "dt=2026-07-01", "file:///w", Status.MERGED)])
    assert rollbacks.decode(batch) is None
    assert rollbacks.record_run("manual__r") == "rollback.manual__r"
    # paths and file names too long for the column: the partition (Hive: up to 767 characters) and figures stay
    long = dict(line("k=" + "v" * 760, "restored"), location="file:///" + "x" * 4000, names_back=["n" * 300] * 20)
    [(key, text)] = [
        (k, v)
        for k, v in rollbacks.encode("r", "db.t", True, [long]).items()
        if k.startswith(rollbacks.PARTITION_PREFIX)
    ]
    assert len(text) <= MAX_PARAM_CHARS and json.loads(text)["files_back"] == 3


def test_the_report_counts_what_moved_and_says_so():
    rec = rollbacks.decode(
        rollbacks.encode(
            "scheduled__x",
            "db.t",
            False,
            [line("dt=2026-07-01", "restored", 4, 1), line("dt=2026-07-02", "already rolled back")],
        )
    )
    rep = rollback.report(rec)
    assert rep["summary"] == {
        "partitions": 2,
        "partitions_restored": 1,
        "already_rolled_back": 1,
        "files_moved_back": 4,
        "bytes_moved_back": 1200,
        "merged_files_moved_out": 1,
        "statistics_restored": 2,
    }
    assert rep["note"] == (
        "rollback of run scheduled__x in db.t: 1 partition(s), 4 original file(s) moved back, "
        "1 merged file(s) out, statistics restored for 2"
    )
    text = rollback.render(rep).splitlines()
    assert text[0].split() == [
        "partition",
        "state",
        "files",
        "back",
        "merged",
        "out",
        "numFiles",
        "totalSize",
        "numRows",
    ]
    assert text[2].split() == ["dt=2026-07-01", "restored", "4", "1", "4", "1200", "90"]
    unknown = rollback.report(
        rollbacks.decode(
            rollbacks.encode(
                "r",
                "db.t",
                False,
                [{**line("dt=1", "restored"), "statistics": {"numFiles": "3", "totalSize": "900", "numRows": None}}],
            )
        )
    )
    assert rollback.render(unknown).splitlines()[2].split()[-1] == "-"  # a key the partition does not have
    dry = rollback.report(
        rollbacks.decode(rollbacks.encode("r", "db.t", True, [line("dt=1", "would restore")], "stopped here"))
    )
    assert dry["note"] == (
        "dry run: rollback of run r in db.t: 1 partition(s), 3 original file(s) would move back, "
        "1 merged file(s) out; stopped: stopped here"
    )
    assert dry["summary"]["statistics_restored"] == 0


def test_job_arguments_name_partitions_only_when_the_form_did():
    settings = config.parse({"results_table": "ops.results"})
    whole = rollback.Request("db.t", "run1", ("dt=1", "dt=2"), True, False, None)
    assert rollback.job_arguments(settings, whole, "thrift://h:9083", "manual__r") == [
        "--table",
        "db.t",
        "--run",
        "run1",
        "--metastore",
        "thrift://h:9083",
        "--results-table",
        "ops.results",
        "--record-as",
        "manual__r",
    ]
    some = rollback.Request("db.t", "run1", ("dt=2",), False, True, "hdfs:///tmp/hc")
    assert rollback.job_arguments(settings, some, None, "manual__r") == [
        "--table",
        "db.t",
        "--run",
        "run1",
        "--partition",
        "dt=2",
        "--work-dir",
        "hdfs:///tmp/hc",
        "--dry-run",
        "--results-table",
        "ops.results",
        "--record-as",
        "manual__r",
    ]


def test_the_forms_partitions_drop_blank_lines_and_refuse_other_types():
    assert rollback._partitions(None) == [] and rollback._partitions(["", "dt=1 ", "dt=1", "dt=2"]) == ["dt=1", "dt=2"]
    assert rollback._partitions("dt=1\n\ndt=2\n") == ["dt=1", "dt=2"]
    with pytest.raises(ParamError, match="^partitions: expected a list"):
        rollback._partitions([1])


def test_the_form_requires_table_and_run_and_offers_the_configured_tables():
    schema = rollback.params_schema(["db.b", "db.a"])
    assert schema["table"]["examples"] == ["db.a", "db.b"] and "enum" not in schema["table"]
    assert set(rollback.PARAM_DEFAULTS) == {"partitions", "dry_run"}  # table and run: no default, required
    assert set(schema) == {"table", "run", "partitions", "dry_run"}


def test_rollback_job_defaults_to_the_file_beside_the_merge_job():
    assert config.parse({}).rollback_job_file.endswith("/hive_compaction/jobs/rollback.py")
    assert (
        config.parse({"merge_job": "hdfs://nn/apps/compact_partitions.py"}).rollback_job_file
        == "hdfs://nn/apps/rollback.py"
    )
    assert config.parse({"rollback_job": "s3a://b/rollback.py"}).rollback_job_file == "s3a://b/rollback.py"
    with pytest.raises(config.ConfigError, match=r"^cfg.yaml: rollback_job: expected a Python file \(rollback.py"):
        config.parse({"rollback_job": "/opt/rollback.jar"}, "cfg.yaml")
