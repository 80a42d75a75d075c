"""The commit record: one partition's decided merge, as its journal holds it while the commit runs
and as its manifest keeps it afterwards (what replay, rollback and purge read). Journals and
manifests are written and read only as ``CommitRecord`` (a purge's short hold of a journal as
``PurgeHold``): a field a step needs is named here, with its type, not picked out of a dict.

A record comes from the work area, which anyone who may write it could change: ``parse`` takes
only a record whose every field has its type (``UnsafeRecord`` otherwise), and
``work_area.check_record`` checks its names and folders before any file moves."""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any, cast

from hive_compaction.storage.capabilities import IN_PLACE, LOCATION_SWITCH
from hive_compaction.storage.listing import RecordedFile


class UnsafeRecord(RuntimeError):
    """A journal or manifest that could move files it must not: refused before anything moves."""

    def __init__(self, message: str, table: str = "", partition: str = ""):
        super().__init__(message)
        self.table, self.partition = table, partition


@dataclass(frozen=True)
class StagedOutput:
    """A merged output waiting for the commit: where it is staged, its name in the partition, its size."""

    staged: str
    name: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"staged": self.staged, "name": self.name, "size": self.size}


@dataclass
class CommitRecord:
    """A decided merge of one partition: which inputs the outputs replace, where the outputs are
    staged, the statistics just before the commit (every key of ``STATISTICS_KEYS``, None where the
    partition had none; read under the Metastore lock)."""

    run: str
    pid: str
    table: str
    partition: str
    location: str  # the partition's folder that was merged
    inputs: list[RecordedFile]  # what a replay checks
    outputs: list[StagedOutput]
    owner: str = ""  # the job that holds the journal (a replay or rollback takes it over)
    attempt: str = ""  # the merge job's attempt: its trash and manifest are its own
    staging: str = ""
    table_location: str | None = None
    # its text is the journal schema's type (_TYPES), so it stays plain dict
    stats_before: dict = field(default_factory=dict)  # type: ignore[type-arg]
    # Committed without the Metastore's lock (require_locks: false, a Metastore serving none):
    # its replay and rollback need none either.
    unlocked: bool = False
    mode: str = IN_PLACE
    # The partition's every visible file when the journal was written (in place): any other file
    # found before publishing stops the commit. None: an older journal.
    listing: list[RecordedFile] | None = None
    # A location switch: the partition's values, its old folder's files, the new folder, the files
    # copied into it unmerged, the rows in the old folder, its storage descriptor under the lock.
    values: list[str] = field(default_factory=list)
    files: list[RecordedFile] = field(default_factory=list)
    new_location: str = ""
    copies: list[str] = field(default_factory=list)
    rows: int = 0
    descriptor: str | None = None
    decided_at: float | None = None  # when the switch's journal was written (epoch seconds)
    # A manifest: when the commit passed its commit point, where its inputs went, how long readers
    # could miss rows, the late files a switch moved into its new folder, when it was rolled back.
    committed_at: float | None = None
    trash: str = ""
    reader_window_ms: float | None = None
    adopted: list[str] = field(default_factory=list)
    rolled_back_at: float | None = None
    rollback: bool = False  # the journal is a rollback's hold of the partition
    # In place: where the inputs move while the commit runs (renamed to the run's trash once it is
    # finished); "" in an older journal, whose inputs move to the run's trash directly.
    moving_trash: str = ""
    # How many replays took the commit over: each renamed the staging folder and the moving trash
    # (``<folder>~<n>``), so that a paused earlier holder's moves from or into them fail.
    generation: int = 0

    @property
    def label(self) -> str:
        return f"{self.table}/{self.partition}"

    @property
    def switched(self) -> bool:
        """Committed (or to be committed) by a location switch."""
        return self.mode == LOCATION_SWITCH

    def but(self, **changes: Any) -> CommitRecord:
        """A copy with these fields changed."""
        return replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(vars(self), default=_entry_json)  # no deep copy (asdict), and the C encoder


def _entry_json(entry: RecordedFile | StagedOutput) -> dict[str, Any]:
    return entry.to_json()


@dataclass
class PurgeHold:
    """A purge holds the partition's journal for a moment while it deletes an expired run's files."""

    run: str
    pid: str
    at: float
    purge: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))


_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list[RecordedFile]": (list,),
    "list[StagedOutput]": (list,),
    "list[str]": (list,),
    "dict": (dict,),
    "str | None": (str, type(None)),
    "float | None": (int, float, type(None)),
    "list[RecordedFile] | None": (list, type(None)),
}
# The typed entries of a record's file lists: each JSON object's fields and their types.
_ENTRIES: dict[str, tuple[type, dict[str, tuple[type, ...]], dict[str, tuple[type, ...]]]] = {
    "RecordedFile": (RecordedFile, {"name": (str,), "size": (int,)}, {"mtime": (int,), "version": (str,)}),
    "StagedOutput": (StagedOutput, {"staged": (str,), "name": (str,), "size": (int,)}, {}),
}


def parse(text: str) -> CommitRecord | PurgeHold | None:
    """The record in a journal's or manifest's text; None for a torn one (empty or cut short: a
    job killed while writing it, so nothing it names moved). Raises UnsafeRecord for JSON that is
    not a record: a field missing or of another type, an item of a file list that is not an object."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        raise UnsafeRecord(f"not a commit record: a JSON {type(data).__name__}")
    cls = PurgeHold if data.get("purge") else CommitRecord
    known, required = _SCHEMA[cls]
    problems = [f"{name} is missing" for name in required if name not in data]
    for name, value in data.items():
        declared = known.get(name)
        if declared is None:
            continue  # a field of a newer version: not needed here
        types = _TYPES[declared]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            problems.append(f"{name} is {type(value).__name__}, not {declared}")
        elif _entry_kind(declared) and value:
            entry = _ENTRIES[_entry_kind(declared)]  # type: ignore[index]  # not None: the line above
            items: list[Any] = value  # type: ignore[assignment]  # a list: its declared type said so
            if not all(isinstance(v, dict) for v in items):
                problems.append(f"{name} holds items that are not objects")
            else:
                problems += [f"{name}[{i}]: {p}" for i, v in enumerate(items) for p in _entry_problems(v, entry)]
    if problems:
        table, partition = str(data.get("table", "")), str(data.get("partition", ""))
        raise UnsafeRecord(
            f"the commit record of {table}/{partition} is refused, nothing was moved: {'; '.join(problems)}",
            table,
            partition,
        )
    values = {k: v for k, v in data.items() if k in known}
    for name, value in values.items():
        kind = _entry_kind(known[name])
        if kind and value is not None:
            entry_cls, required_, optional = _ENTRIES[kind]
            values[name] = [entry_cls(**{k: v[k] for k in (*required_, *optional) if k in v}) for v in value]
    return cls(**values)


def _entry_kind(declared: str) -> str | None:
    """The typed entry a field's declared type lists ("list[RecordedFile] | None" -> "RecordedFile")."""
    kind = declared[len("list[") :].split("]")[0] if declared.startswith("list[") else None
    return kind if kind in _ENTRIES else None


def _entry_problems(item: dict[str, Any], entry: tuple[Any, ...]) -> list[str]:
    """What is wrong with one item of a record's file list: a field missing or of another type."""
    _, required, optional = entry
    problems = [f"{k} is missing" for k in required if k not in item]
    for k, types in (*required.items(), *optional.items()):
        v = item.get(k)
        if k in item and v is not None and (not isinstance(v, types) or isinstance(v, bool)):
            problems.append(f"{k} is {type(v).__name__}")
    return problems


# Each record class's fields (name -> declared type) and the names it cannot do without, read once.
_SCHEMA: dict[type, tuple[dict[str, str], list[str]]] = {
    cls: (
        {f.name: cast(str, f.type) for f in fields(cls)},  # annotations are text here (from __future__)
        [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING],
    )
    for cls in (CommitRecord, PurgeHold)
}
