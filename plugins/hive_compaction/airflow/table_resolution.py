"""The tables a run's plan works on: the config's exact names, and what its pattern entries match among
the Metastore's names as they are when the run plans (so a table created since the last run is in).

Precedence: an exact name is the table's own entry wherever it stands; otherwise the first pattern
entry that matches it (in the file's order) gives its policy. ``exclude:`` leaves out what patterns
match (an exact name that is excluded is refused by the config). The results table is never matched.

Metastore calls: one for the databases (none when every pattern names its database), one per database
a pattern may hold (its table names), then the matched tables' objects, ``batch_size`` names a call.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol

from hive_compaction.airflow.config import Settings, TableConfig
from hive_compaction.airflow.metastore_types import TableInfo
from hive_compaction.airflow.table_patterns import parse

log = logging.getLogger(__name__)
LOGGED_NAMES = 20  # names of an entry's matches the log shows; the rest are counted


class Catalog(Protocol):
    """What resolution reads from the Metastore (metastore_hook.Metastore has these)."""

    def databases(self) -> list[str]: ...

    def table_names(self, database: str) -> list[str]: ...

    def tables(self, database: str, names: Iterable[str]) -> Iterator[TableInfo]: ...


@dataclass(frozen=True)
class EntryMatch:
    """What one pattern entry matched (its tables, and those ``exclude:`` left out)."""

    entry: str
    tables: tuple[str, ...]
    excluded: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolution:
    tables: tuple[TableConfig, ...]  # exact names first (the file's order), then the matched ones by name
    entries: tuple[EntryMatch, ...] = ()
    # the matched tables' Metastore objects (fetched in batches, so that the plan reads none again)
    infos: dict[str, TableInfo] = field(default_factory=dict)

    @property
    def matched_by(self) -> dict[str, str]:
        """Per table a pattern matched: its entry."""
        return {t: e.entry for e in self.entries for t in e.tables}

    def settings(self, settings: Settings) -> Settings:
        """``settings`` with every resolved table in ``tables``."""
        return replace(settings, tables=self.tables)

    def describe(self) -> list[dict]:
        """For the plan and the report: per pattern entry, the tables it matched and those excluded."""
        return [{"entry": e.entry, "tables": list(e.tables), "excluded": list(e.excluded)} for e in self.entries]


def resolve(settings: Settings, catalog: Catalog) -> Resolution:
    """The run's tables (see the module's docstring); logs what each pattern entry matched."""
    if not settings.patterns:
        return Resolution(settings.tables)
    patterns = [p.pattern for p in settings.patterns]
    exclude = [parse(x) for x in settings.exclude] + [parse(settings.results_table)]
    exact = {t.name for t in settings.tables}
    if all(p.database for p in patterns):
        databases = sorted({p.database for p in patterns if p.database})
    else:
        databases = sorted({d.lower() for d in catalog.databases()})
    matched: dict[str, int] = {}
    excluded: dict[int, list[str]] = {}
    for db in databases:
        wanted = [i for i, p in enumerate(patterns) if p.may_hold(db)]
        if not wanted:
            continue
        for name in sorted({f"{db}.{t.lower()}" for t in catalog.table_names(db)}):
            first = next((i for i in wanted if patterns[i].matches(name)), None)
            if first is None or name in exact:
                continue
            if any(x.matches(name) for x in exclude):
                excluded.setdefault(first, []).append(name)
            else:
                matched[name] = first
    infos: dict[str, TableInfo] = {}
    for db in sorted({n.split(".", 1)[0] for n in matched}):
        names = [n.split(".", 1)[1] for n in matched if n.startswith(f"{db}.")]
        infos.update({f"{t.database}.{t.table}".lower(): t for t in catalog.tables(db, names)})
    gone = sorted(set(matched) - set(infos))
    if gone:  # dropped between the listing and the fetch
        log.info("%d matched table(s) gone before they were read, left out: %s", len(gone), ", ".join(gone[:10]))
    kept = sorted(n for n in matched if n in infos)
    resolved = tuple(
        TableConfig(*n.split(".", 1), settings.patterns[matched[n]].policy(settings.policy_of(n.split(".", 1)[0])))  # type: ignore[call-arg, arg-type]  # database.table
        for n in kept
    )
    entries = tuple(
        EntryMatch(p.entry, tuple(n for n in kept if matched[n] == i), tuple(excluded.get(i, ())))
        for i, p in enumerate(settings.patterns)
    )
    for e in entries:
        shown = ", ".join(e.tables[:LOGGED_NAMES]) + (
            f" and {len(e.tables) - LOGGED_NAMES} more" if len(e.tables) > LOGGED_NAMES else ""
        )
        log.info(
            "tables %s: %d matched%s%s",
            e.entry,
            len(e.tables),
            f" ({shown})" if e.tables else "",
            f"; {len(e.excluded)} excluded ({', '.join(e.excluded[:LOGGED_NAMES])})" if e.excluded else "",
        )
    return Resolution(settings.tables + resolved, entries, {n: infos[n] for n in kept})
