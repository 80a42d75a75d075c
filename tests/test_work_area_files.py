"""Reading the small JSON files of a table's work area from Airflow (journals, results)."""
from __future__ import annotations

import json

from hive_compaction.dag_tasks import pending_commits, read_json_files


def test_a_torn_journal_is_ignored_not_fatal(tmp_path):
    """A job killed while writing a journal leaves it empty or cut short: its commit never
    started, so planning must go on (the merge job discards it); whole journals still count."""
    journal = tmp_path / "journal"
    journal.mkdir()
    (journal / "a.json").write_text(json.dumps({"partition": "dt=2026-01-01", "run": "r1"}))
    (journal / "b.json").write_text("")
    (journal / "c.json").write_text('{"partition": "dt=2026-01-0')
    (journal / "d.txt").write_text("not a journal")
    assert read_json_files(str(journal)) == [{"partition": "dt=2026-01-01", "run": "r1"}]
    assert pending_commits(str(tmp_path), read_json_files) == frozenset({"dt=2026-01-01"})
    assert read_json_files(str(tmp_path / "missing")) == []
