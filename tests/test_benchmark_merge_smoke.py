"""Smoke run of benchmarks/merge_speed.py --quick: every contestant on identical tiny data, every
row kept, each of our contestants leaves one file per partition."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "merge_speed.py"
OURS = ("dag", "copy", "rewrite")
CONTESTANTS = {"floor", "dag", "copy", "rewrite", "loop", "per_partition"}


@pytest.mark.integration
def test_merge_speed_quick(tmp_path):
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    figures = json.loads(out.read_text())

    assert figures["ok"] and figures["checksums_ok"] and figures["all_ran"]
    assert figures["config"]["quick"] is True
    partitions = figures["config"]["partitions"]
    assert figures["formats"], "no format was benchmarked"
    for fmt, f in figures["formats"].items():
        assert f["rows"] == partitions * figures["config"]["rows"], fmt  # the digests counted every row
        contestants = f["contestants"]
        assert set(contestants) == CONTESTANTS, fmt
        for name, c in contestants.items():
            assert c["checksum_ok"] is True, (fmt, name, c.get("error"))
            assert c["ran_ok"] is True, (fmt, name, c.get("error"))
            assert c["wall_seconds"] is not None and c["wall_seconds"] >= 0, (fmt, name)
            assert c["files_before"] == partitions * figures["config"]["files"], (fmt, name)
        for name in OURS:
            c = contestants[name]
            per_partition = c["files_after_per_partition"]
            assert len(per_partition) == partitions, (fmt, name, per_partition)
            assert set(per_partition.values()) == {1}, (fmt, name, per_partition)
            assert c["statuses"] == ["merged"], (fmt, name, c["statuses"])
            assert c["in_app_seconds"] is not None and 0 < c["in_app_seconds"] <= c["wall_seconds"], (fmt, name)
        assert contestants["copy"]["modes"] == ["copy"] and contestants["rewrite"]["modes"] == ["rewrite"]
        assert contestants["per_partition"]["spark_submits"] == partitions
        for target in f["ratios"]["targets"].values():
            assert target["result"] in ("HIT", "MISS") and target["value"] is not None, target


@pytest.mark.integration
def test_merge_speed_scale_mode_smoke(tmp_path):
    """--scale on a tiny shape: one spark-submit per partition measured on one partition and
    extrapolated, the phase figures read from our jobs' logs, the planning-only pass."""
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--scale", "--partitions", "3", "--files", "3", "--rows", "100",
                           "--sample", "1", "--planning-partitions", "40", "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    figures = json.loads(out.read_text())
    assert figures["ok"] and figures["config"]["scale"] is True
    f = figures["formats"]["orc"]
    per_partition = f["contestants"]["per_partition"]
    assert per_partition["spark_submits"] == 1 and per_partition["extrapolated_from"] == 1
    assert per_partition["wall_seconds"] == pytest.approx(3 * per_partition["measured_wall_seconds"], rel=1e-3)
    assert "measured on 1 of 3 partitions" in proc.stdout
    for name in ("dag", "copy", "rewrite"):
        assert 0 < f["contestants"][name]["fixed_seconds"] < f["contestants"][name]["wall_seconds"], name
        assert f["per_partition_seconds"][name] > 0, name
    assert 0 < f["contestants"]["rewrite"]["rewrite_verify_seconds"] < f["contestants"]["rewrite"]["in_app_seconds"]
    assert 0 < f["contestants"]["copy"]["copy_verify_seconds"] < f["contestants"]["copy"]["copy_seconds"]
    assert {t["result"] for t in f["ratios"]["targets"].values()} <= {"HIT", "MISS"}
    planning = figures["planning"]
    assert planning["ran_ok"] and planning["partitions"] == 40 and planning["planning_seconds"] > 0
