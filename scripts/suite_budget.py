"""The test suite's budget: wall time, what each real component cost to start, the slowest tests.

``make test`` must stay fast enough for CI (which stops at 90 minutes) and for a new user. The
pytest plugin here prints, at the end of a run:

- the wall time, and a budget check (``SUITE_BUDGET_MINUTES``, default 40) that fails the run
  when it is passed, separately from the tests' own pass/fail;
- per real component (Metastore, PostgreSQL, Spark session, Airflow, a KDC, ...): how many times
  it was started and the seconds those starts took;
- the ten slowest tests (setup, call and teardown together).

Components are recorded with ``started(name)`` from any process of the run (xdist workers, the
harness, spark-submit wrappers): each record is one JSON line appended to the file
``SUITE_COMPONENT_LOG`` names, which the plugin sets; outside a test run it is unset and
``started`` only times. The figures are also written to ``.test-report/budget.json``.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

LOG_ENV = "SUITE_COMPONENT_LOG"
BUDGET_ENV = "SUITE_BUDGET_MINUTES"
DEFAULT_BUDGET_MINUTES = 40


@contextmanager
def started(component: str):
    """Time the start of a real component and record it for the run's summary."""
    t0 = time.monotonic()
    yield
    record(component, time.monotonic() - t0)


def record(component: str, seconds: float) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        rec = {"component": component, "seconds": round(seconds, 2)}
        test = os.environ.get("PYTEST_CURRENT_TEST")  # "tests/x.py::test_y (call)" in a test's process
        if test:
            rec["test"] = test.rsplit(" ", 1)[0]
        with open(path, "a") as f:  # one short line per write: appends from processes do not interleave
            f.write(json.dumps(rec) + "\n")


def record_note(text: str) -> None:
    """A line for the run's summary (a sampled matrix's seed and cases)."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"note": text}) + "\n")


def read_log(path: Path) -> tuple[dict[str, dict], list[str], dict[str, dict]]:
    """(component -> starts and seconds, notes, test -> component -> starts and seconds)."""
    out: dict[str, dict] = defaultdict(lambda: {"starts": 0, "seconds": 0.0})
    by_test: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: {"starts": 0, "seconds": 0.0}))
    notes = []
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if "note" in rec:
                if rec["note"] not in notes:  # a sample drawn at collection is noted by each test process
                    notes.append(rec["note"])
                continue
            out[rec["component"]]["starts"] += 1
            out[rec["component"]]["seconds"] += rec["seconds"]
            if "test" in rec:
                mine = by_test[rec["test"]][rec["component"]]
                mine["starts"] += 1
                mine["seconds"] = round(mine["seconds"] + rec["seconds"], 2)
    return dict(out), notes, {t: dict(c) for t, c in by_test.items()}


class SuiteBudget:
    """The pytest plugin (registered by tests/conftest.py on the controlling process only)."""

    def __init__(self, config, report_dir: Path):
        self.config = config
        self.report_dir = report_dir
        self.t0 = time.monotonic()
        self.durations: dict[str, float] = defaultdict(float)
        self.worker_busy: dict[str, float] = defaultdict(float)  # xdist worker id -> seconds in tests
        self.budget = float(os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_MINUTES)) * 60
        report_dir.mkdir(parents=True, exist_ok=True)
        self.log = report_dir / "components.jsonl"
        self.log.unlink(missing_ok=True)
        os.environ[LOG_ENV] = str(self.log)  # inherited by xdist workers and every subprocess

    def pytest_runtest_logreport(self, report):
        self.durations[report.nodeid] += report.duration
        node = getattr(report, "node", None)  # set on the controlling process of an xdist run
        self.worker_busy[getattr(getattr(node, "gateway", None), "id", "main")] += report.duration

    def pytest_sessionfinish(self, session, exitstatus):
        wall = time.monotonic() - self.t0
        components, notes, by_test = read_log(self.log)
        slowest = sorted(self.durations.items(), key=lambda kv: -kv[1])[:10]
        modules: dict[str, float] = defaultdict(float)
        for nodeid, seconds in self.durations.items():
            modules[nodeid.split("::")[0]] += seconds
        over = wall > self.budget
        figures = {
            "wall_seconds": round(wall, 1),
            "budget_seconds": self.budget,
            "over_budget": over,
            "tests": len(self.durations),
            "components": components,
            "notes": notes,
            "slowest": [{"test": t, "seconds": round(s, 1)} for t, s in slowest],
            "worker_busy_seconds": {w: round(s, 1) for w, s in sorted(self.worker_busy.items())},
            # every module's time, for finding where a slow run went
            "modules": {m: round(s, 1) for m, s in sorted(modules.items(), key=lambda kv: -kv[1])},
            # every test's time and the components it started (a test's spark-submits, DAG runs)
            "tests_seconds": {t: round(s, 1) for t, s in sorted(self.durations.items(), key=lambda kv: -kv[1])},
            "components_by_test": by_test,
            "workers": os.environ.get("PYTEST_XDIST_WORKER_COUNT")
            or getattr(self.config.option, "numprocesses", None)
            or 1,
        }
        (self.report_dir / "budget.json").write_text(json.dumps(figures, indent=1))
        self.figures = figures
        if over:
            session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter):
        f = getattr(self, "figures", None)
        if f is None:
            return
        tr = terminalreporter
        tr.section("suite budget")
        tr.write_line(
            f"wall time: {f['wall_seconds'] / 60:.1f} min ({f['wall_seconds']:.0f} s) for {f['tests']} "
            f"tests, {f['workers']} worker(s); budget {f['budget_seconds'] / 60:.0f} min"
        )
        tr.write_line("component starts (count, seconds in all):")
        for name, c in sorted(f["components"].items(), key=lambda kv: -kv[1]["seconds"]):
            tr.write_line(f"  {name:<44} {c['starts']:>4} x  {c['seconds']:>7.1f} s")
        for note in f["notes"]:
            tr.write_line(f"sampled: {note}")
        busy = ", ".join(f"{w} {s:.0f} s" for w, s in f["worker_busy_seconds"].items())
        tr.write_line(f"time in tests per worker: {busy} (every module's time: .test-report/budget.json)")
        tr.write_line("ten slowest tests (setup + call + teardown):")
        for s in f["slowest"]:
            tr.write_line(f"  {s['seconds']:>7.1f} s  {s['test']}")
        if f["over_budget"]:
            tr.write_line(
                f"BUDGET EXCEEDED: the tests took {f['wall_seconds'] / 60:.1f} min, more than "
                f"{f['budget_seconds'] / 60:.0f} min ({BUDGET_ENV}); the run fails whatever the tests said",
                red=True,
                bold=True,
            )
