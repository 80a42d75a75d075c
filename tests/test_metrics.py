"""The run's metrics (``airflow/metrics.py``): the figures taken from a report, and sent through
Airflow's own metrics backend, initialised from ``[metrics]`` as Airflow's task runner does it,
to a StatsD listener (a UDP socket this test reads). The scheduler-driven run of
tests/test_as_a_user.py checks the same from a real task."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from hive_compaction.airflow import metrics


def result(table, partition, status, **kw):
    base = {
        "table": table,
        "partition": partition,
        "status": status,
        "files_before": 0,
        "files_after": 0,
        "bytes_before": 0,
        "bytes_after": 0,
        "rows_merged": 0,
        "seconds": 0.0,
        "listed": True,
        "recovered": False,
    }
    return {**base, **kw}


REPORT = {
    "dates": {"db.a": ["2026-12-01", "2026-12-01"], "db.b": None, "db.idle": ["2026-12-01", "2026-12-01"]},
    "partitions": [
        result(
            "db.a",
            "dt=1",
            "merged",
            files_before=10,
            files_after=1,
            bytes_before=1000,
            bytes_after=900,
            rows_merged=500,
            seconds=2.5,
        ),
        result(
            "db.a",
            "dt=2",
            "merged",
            files_before=4,
            files_after=1,
            bytes_before=400,
            bytes_after=380,
            rows_merged=40,
            seconds=1.0,
            recovered=True,
        ),
        result("db.b", "dt=1", "failed", seconds=0.5),
        result("db.b", "dt=2", "skipped", listed=False),
    ],
    "skipped": [{"table": "db.a", "partition": "dt=3", "reason": "too few small files"}],
    "deferred": [
        {"table": "db.b", "partition": "dt=9", "again": "next run"},
        {"table": "db.b", "partition": "dt=8", "again": "next run"},
    ],
}


def test_the_figures_of_a_run_and_of_each_table():
    total, tables = metrics.figures(REPORT)
    a, b, idle = tables["db.a"], tables["db.b"], tables["db.idle"]
    assert (
        a.partitions_merged,
        a.partitions_skipped,
        a.files_before,
        a.files_after,
        a.bytes_before,
        a.bytes_after,
        a.rows_verified,
        a.partitions_recovered,
    ) == (2, 1, 14, 2, 1400, 1280, 540, 1)
    assert a.merge_seconds == pytest.approx(3.5)
    assert (b.partitions_failed, b.partitions_skipped, b.partitions_deferred, b.partitions_listed) == (1, 1, 2, 1)
    assert idle == metrics.Figures()  # a configured table with nothing this run: zeros, still sent
    assert (
        total.partitions_merged,
        total.partitions_failed,
        total.partitions_skipped,
        total.partitions_deferred,
        total.partitions_listed,
        total.files_before,
        total.rows_verified,
    ) == (2, 1, 2, 2, 3, 14, 540)


class StatsdListener:
    """A UDP socket on loopback that keeps every StatsD line whose name starts with ``prefix``
    (Airflow's own metrics arrive too), read by a thread: {name: "value|type"}, the last of each."""

    def __init__(self, prefix: str = "airflow.hive_compaction."):
        self.prefix, self.lines = prefix, {}
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                packet = self.sock.recv(65535).decode()
            except TimeoutError:
                continue
            for line in packet.splitlines():
                name, _, rest = line.partition(":")
                if name.startswith(self.prefix):
                    self.lines[name] = rest

    def env(self) -> dict[str, str]:
        """Airflow's [metrics] settings that send to this listener."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        }

    def received(self, settle: float = 1.0) -> dict[str, str]:
        time.sleep(settle)
        return dict(self.lines)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def statsd_listener():
    listener = StatsdListener()
    yield listener
    listener.close()


def test_the_figures_reach_a_statsd_listener_through_airflows_metrics_config(statsd_listener, monkeypatch):
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    for name, value in statsd_listener.env().items():
        monkeypatch.setenv(name, value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=True)  # as the task runner does
    try:
        metrics.send("maint", REPORT, planned_at=None)
        got = statsd_listener.received()
    finally:
        stats.initialize(factory=stats_utils.NoStatsLogger, export_legacy_names=True)
    assert got["airflow.hive_compaction.partitions_merged.maint"] == "2|c", got
    assert got["airflow.hive_compaction.partitions_deferred.maint"] == "2|c", got
    assert got["airflow.hive_compaction.backlog_partitions.maint"] == "2|g", got
    assert got["airflow.hive_compaction.table.files_before.maint.db.a"] == "14|c", got
    assert got["airflow.hive_compaction.table.rows_verified.maint.db.a"] == "540|c", got
    assert got["airflow.hive_compaction.table.partitions_failed.maint.db.b"] == "1|c", got
    assert got["airflow.hive_compaction.table.merge_seconds.maint.db.a"].endswith("|ms"), got
    assert float(got["airflow.hive_compaction.table.merge_seconds.maint.db.a"].split("|")[0]) == pytest.approx(3500)
    assert got["airflow.hive_compaction.table.partitions_merged.maint.db.idle"] == "0|c", got
