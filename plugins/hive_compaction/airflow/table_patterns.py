"""The names a ``tables:`` or ``exclude:`` entry (or the form's ``tables`` field) may hold, and what they
match: an exact ``db.table``; a glob on either part (``sales.*``, ``sales_*.events_?``, ``[ab]*.t``:
fnmatch's ``*``, ``?``, ``[...]``); or a regular expression on the whole ``db.table`` after ``re:``
(``re:sales\\.events_\\d+``, matched in full, case-insensitively). Matching is done here on the names the
Metastore lists, never by the Metastore's own pattern syntax (which differs between Hive 2.3, 3.1 and 4).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

EXACT = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")
_GLOB_PART = r"[A-Za-z0-9_*?\[\]!]+"
GLOB = re.compile(rf"^{_GLOB_PART}\.{_GLOB_PART}$")
REGEX_PREFIX = "re:"
# For the JSON Schema and the form: an exact name, a glob, or re:<regular expression>.
ENTRY_PATTERN = rf"^({_GLOB_PART}\.{_GLOB_PART}|{REGEX_PREFIX}.+)$"


@dataclass(frozen=True)
class NamePattern:
    """One entry's name, parsed. ``database``: the database it names literally (None: a database glob or a
    regular expression, which needs the Metastore's list of databases)."""

    text: str
    kind: str  # "exact", "glob" or "regex"
    database: str | None
    _match: re.Pattern

    @property
    def is_exact(self) -> bool:
        return self.kind == "exact"

    def matches(self, name: str) -> bool:
        return self._match.fullmatch(name.lower()) is not None

    def may_hold(self, database: str) -> bool:
        """Whether a table of ``database`` can match (a regular expression: any database can)."""
        if self.kind == "regex":
            return True
        return fnmatch.fnmatchcase(database.lower(), self.text.split(".", 1)[0])


def parse(text: object) -> NamePattern:
    """``text`` (as a file or form gives it) parsed; ValueError saying what is expected (or why the regular
    expression is wrong)."""
    if not isinstance(text, str):
        raise ValueError(
            f"name must be 'database.table', a glob like 'sales.*' or 're:<regular expression>', got {text!r}"
        )
    if text.startswith(REGEX_PREFIX):
        body = text[len(REGEX_PREFIX) :]
        try:
            compiled = re.compile(body, re.IGNORECASE)
        except re.error as e:
            raise ValueError(f"{text!r} is not a valid regular expression: {e}") from None
        if not body.strip():
            raise ValueError(f"{text!r}: the regular expression is empty")
        return NamePattern(text, "regex", None, compiled)
    if EXACT.fullmatch(text):
        low = text.lower()
        return NamePattern(low, "exact", low.split(".")[0], re.compile(re.escape(low)))
    if GLOB.fullmatch(text):
        low = text.lower()
        db = low.split(".")[0]
        literal_db = db if EXACT.fullmatch(f"{db}.x") else None
        try:
            compiled = re.compile(fnmatch.translate(low))
        except re.error as e:  # an unbalanced [ ... ]
            raise ValueError(f"{text!r} is not a valid glob: {e}") from None
        return NamePattern(low, "glob", literal_db, compiled)
    raise ValueError(f"name must be 'database.table', a glob like 'sales.*' or 're:<regular expression>', got {text!r}")
