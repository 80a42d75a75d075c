"""Both sides of one version: the plan's batches carry the package's version, and a merge job of
another version (a stale py_files zip, an old wheel on a gateway) refuses the batch with both
versions named, before it touches anything."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import hive_compaction
from hive_compaction.model.batch import VersionMismatch, batch_payload, check_version, decode_batch, encode_batch

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_written_once_and_pyproject_reads_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hive_compaction.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", hive_compaction.__version__)


def test_a_batch_carries_the_version_and_the_same_version_passes():
    payload = decode_batch(encode_batch(batch_payload("run", 0, False, [])))
    assert payload["version"] == hive_compaction.__version__
    check_version(payload)


@pytest.mark.parametrize("planned", ["0.1.0", None])
def test_a_batch_of_another_version_is_refused_naming_both(planned):
    payload = batch_payload("run", 0, False, [])
    if planned is None:
        del payload["version"]  # planned before batches carried one
    else:
        payload["version"] = planned
    with pytest.raises(VersionMismatch) as e:
        check_version(payload)
    assert hive_compaction.__version__ in str(e.value)
    assert (planned or "does not record it") in str(e.value)


def test_the_merge_job_refuses_before_it_starts_spark(monkeypatch, capsys):
    """The job's entry point returns 2 before it starts Spark (nothing is touched)."""
    from hive_compaction.jobs import compact_partitions as job

    class NoSpark:
        def __getattr__(self, name):
            raise AssertionError("the job started Spark for a batch it must refuse")

    monkeypatch.setattr(job, "SparkContext", NoSpark())
    payload = {**batch_payload("run", 0, False, []), "version": "0.0.1"}
    assert job.main(["--batch", encode_batch(payload)]) == 2
    err = capsys.readouterr().err
    assert "hive-compaction 0.0.1" in err and f"hive-compaction {hive_compaction.__version__}" in err


@pytest.mark.integration
def test_a_real_merge_job_refuses_a_batch_of_another_version_and_moves_nothing(stack, tmp_path):
    db, table = "versions", "events"
    stack.make_table(db, table, "ORC", ["2026-09-02"], files=3, rows=60)
    before, content = stack.snapshot(db, table), stack.content(db, table)
    cfg = stack.write_config(tmp_path / "c.yaml", [{"name": f"{db}.{table}", "merge_mode": "rewrite"}])
    batch = stack.plan_batches(cfg, run_id="versions")["spark_args"][0]["application_args"][1]
    payload = decode_batch(batch)
    assert payload["version"] == hive_compaction.__version__
    p = stack.spark_submit(encode_batch({**payload, "version": "0.0.1"}), cfg)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    # (spark-submit passes the Python driver's stderr on to its stdout)
    assert (
        f"planned by hive-compaction 0.0.1 but this merge job is hive-compaction {hive_compaction.__version__}"
        in p.stdout + p.stderr
    )
    location = stack.partition_location(db, table, "dt=2026-09-02")
    assert len([f for f in location.iterdir() if not f.name.startswith((".", "_"))]) == 3
    assert stack.snapshot(db, table) == before and stack.content(db, table) == content
