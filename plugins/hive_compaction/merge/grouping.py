"""What to merge in one partition, decided from its listing and footers: no Spark, no I/O.

The rules, in the order the merge job applies them:

1. *skip rules* (``skip_reason``): a writer's staging folder, sub-folders, files written within
   the quiet period, zero-byte files, and ``merge_mode: copy`` on a SORTED BY table each leave
   the partition as it is, with the reason in the report;
2. *small files* (``sizing.small_files``): fewer than ``min_small_files`` (at least 2) and there
   is nothing to do;
3. *grouping* (``group``): only small files whose footers agree (``FileFooter.copy_key``:
   schema, codec, version and every other footer fact, among them those that change how values
   read, ``READING_KEYS``) and that may be copied at all (``FileFooter.no_copy``) are packed
   into ``copy`` groups; ``rewrite`` groups are packed by the output size predicted from the
   partition's earlier writes (``expansion``), Parquet files of one layout together
   (``rewrite_layouts``). ``merge_mode: auto`` picks one engine for all of
   a partition's small files (``auto_choice``): copy when every one may be copied, disagreeing
   footers do not make a copy leave more files, and the copied stripes / row groups average at least
   ``copy_min_block_size``; else rewrite. Why small files were not copied together (and why
   auto rewrote) is the partition's ``copy_notes``; why files were rewritten apart, ``layout_notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from hive_compaction.commit.record import StagedOutput
from hive_compaction.commit.work_area import WorkArea
from hive_compaction.merge import parquet_layout
from hive_compaction.merge.parquet_layout import ParquetLayout
from hive_compaction.merge.sizing import pack_small_files
from hive_compaction.model.batch import PartitionTask
from hive_compaction.model.results import PartitionResult
from hive_compaction.storage.listing import WRITER_STAGING, DataFile

# Footer facts (``FileFooter.extra`` keys) that change how a reader decodes values: files that
# disagree on one are never copied together (their blocks would be read under one footer).
READING_KEYS = {
    # ORC: the calendar of dates and timestamps (proleptic Gregorian, or hybrid Julian/Gregorian).
    "calendar": "the calendar of dates and timestamps before 1582",
    "meta:org.apache.spark.version": "the Spark version, which decides how Spark rebases old dates",
    # Parquet, Spark: datetimeRebaseModeInWrite / int96RebaseModeInWrite LEGACY write these keys;
    # without them, the writing Spark version decides (before 3.0 / 3.1: rebased).
    "org.apache.spark.legacyDateTime": "Spark's LEGACY datetime rebase (hybrid calendar)",
    "org.apache.spark.legacyINT96": "Spark's LEGACY INT96 rebase (hybrid calendar)",
    "org.apache.spark.version": "the Spark version, which decides how Spark rebases old dates",
    "org.apache.spark.timeZone": "the time zone Spark wrote timestamps in",
    "org.apache.spark.sql.parquet.row.metadata": "Spark's schema (its types, e.g. timestamp_ntz, char)",
    # Parquet, Hive 3.1.3+ / 4: INT96 time zone and calendar of its writes.
    "writer.time.zone": "the time zone Hive wrote INT96 timestamps in",
    "writer.date.proleptic": "the calendar Hive wrote dates in",
    "writer.zone.conversion.legacy": "Hive's legacy time zone conversion of timestamps",
}

# Footer codec names -> the writer's "compression" option.
CODECS = {
    "NONE": "none",
    "UNCOMPRESSED": "none",
    "ZLIB": "zlib",
    "SNAPPY": "snappy",
    "LZO": "lzo",
    "LZ4": "lz4",
    "ZSTD": "zstd",
    "GZIP": "gzip",
    "BROTLI": "brotli",
    "LZ4_RAW": "lz4_raw",
}


class Engine(str, Enum):
    """How a group's files become one: their blocks copied, or their rows rewritten."""

    COPY = "copy"
    REWRITE = "rewrite"


@dataclass(frozen=True)
class FileFooter:
    rows: int
    block_rows: tuple[int, ...]  # rows of each stripe (ORC) / row group (Parquet), in file order
    schema: str  # ORC TypeDescription / Parquet MessageType, as text
    compression: str  # ORC CompressionKind; Parquet codec of the column chunks ("" if none)
    version: str  # ORC "<file version> <writer version>"; Parquet created_by
    block_bytes: tuple[int, ...]  # on-disk bytes of each stripe / row group
    # Other footer facts a copy must agree on and keeps: ORC calendar ("proleptic" / "hybrid"),
    # row index stride and user metadata ("meta:<key>"), Parquet key-value metadata (e.g.
    # Spark's schema JSON and rebase keys, which Spark reads back) but original.created.by.
    extra: tuple[tuple[str, str], ...] = ()
    # Why this file's blocks must never be copied into a new footer ("" when they may): an
    # encrypted file, ORC from a writer other than ORC Java, Parquet pages that need a read
    # workaround keyed on a created_by a copy cannot keep. Not part of the copy key.
    no_copy: str = ""

    @property
    def copy_key(self) -> tuple:
        """Files with equal keys can share one merged footer (the JVM helper checks the same)."""
        return (self.schema, self.compression, self.version, self.extra)


@dataclass
class Group:
    engine: Engine
    files: list[DataFile]
    staged: list[StagedOutput] = field(default_factory=list)
    rows: int = 0
    want: tuple[int, int, int] = (0, 0, 0)  # rows and content checksums of the inputs, seen while writing
    footers: list[FileFooter] = field(default_factory=list)  # of the staged outputs, where read


@dataclass
class Work:
    """One partition on its way through the merge job's phases (prepare, stage, commit)."""

    task: PartitionTask
    pid: str
    area: WorkArea
    result: PartitionResult
    files: list[DataFile]
    footers: dict[str, FileFooter]
    groups: list[Group]
    codec: str
    started: float
    error: str | None = None
    staging: str = ""  # this attempt's own staging folder: a retry never touches another attempt's


def skip_reason(task: PartitionTask, files: list[DataFile], folders: list[str], now_ms: float) -> str | None:
    """Why the partition must be left as it is now, or None."""
    writing = [f for f in folders if f.startswith(WRITER_STAGING)]
    if writing:
        return f"a writer is still writing into it ({writing[:3]})"
    if folders:
        return f"holds sub-folders {folders[:3]}: not a flat Hive partition"
    age_ms = now_ms - max((f.modification_time for f in files), default=0)
    if task.quiet_period_minutes and age_ms < task.quiet_period_minutes * 60_000:
        return f"written to {age_ms / 60_000:.1f} min ago, within the quiet period of {task.quiet_period_minutes} min"
    empty = [f.name for f in files if f.size == 0]
    if empty:
        return f"holds zero-byte file(s) {empty[:3]}"
    return None


def copy_refused(task: PartitionTask) -> str | None:
    """A mode the table's layout cannot have (checked before footers are read)."""
    if task.merge_mode == "copy" and task.sort_columns:
        return "merge_mode copy cannot keep the table's SORTED BY order; use auto or rewrite"
    return None


def tiny_blocks(ft: FileFooter, min_avg_block_bytes: int = 0, min_block_rows: int = 0) -> bool:
    """Whether a file's stripes / row groups average below the floor (copying would keep them tiny)."""
    n = len(ft.block_rows)
    return bool(n) and (sum(ft.block_bytes) / n < min_avg_block_bytes or ft.rows / n < min_block_rows)


def group(
    task: PartitionTask, files: list[DataFile], small: list[DataFile], footers: dict[str, FileFooter]
) -> list[Group]:
    """The partition's merge groups (Hudi-style packing), by ``merge_mode``.

    copy: the small files that may be copied, packed per copy key (the rest stay); rewrite, or a
    table that is SORTED BY (a copy keeps the inputs' order): every small file rewritten; auto
    (the default): one engine for the whole partition, ``auto_choice``."""
    if task.merge_mode == "rewrite" or task.sort_columns:
        return _rewrite_groups(task, files, small, footers)
    if task.merge_mode == "copy":
        return _copy_groups(task, [f for f in small if _copyable(footers[f.path])], footers)
    return auto_choice(task, files, small, footers).groups


@dataclass(frozen=True)
class AutoChoice:
    """``merge_mode: auto``'s decision for one partition: one engine for all its small files."""

    engine: Engine
    groups: list[Group]
    why: str  # why this engine, for the partition's reason when it is not the cheaper copy ("" for copy)


def auto_choice(
    task: PartitionTask, files: list[DataFile], small: list[DataFile], footers: dict[str, FileFooter]
) -> AutoChoice:
    """Copy every small file or rewrite every one: a partition is never split across engines.

    Copy (no decoding, far cheaper) when all three hold, else rewrite:

    - every small file may be copied (it has blocks and no ``no_copy`` reason);
    - copying leaves no more files than it would if their footers all agreed (files whose
      footers disagree go to separate copy groups; a rewrite reads them all into one schema);
    - what readers pay afterwards: the stripes / row groups a copy would keep, over all the
      copied files of the partition, average at least ``copy_min_block_size`` (the copy floor,
      docs/performance.md). Files just above and just below the floor are judged together."""
    rewrite = _rewrite_groups(task, files, small, footers)
    refused = [f for f in small if not _copyable(footers[f.path])]
    if refused:
        return AutoChoice(Engine.REWRITE, rewrite, f"{len(refused)} small file(s) may not be copied")
    copy = _copy_groups(task, small, footers)
    # Against the same files packed as one kind (the copy's own packing, not the rewrite's predicted
    # size): a copy is turned down for more files only where disagreeing footers cause them.
    one_kind = pack_small_files(
        small, target_file_size=task.target_file_size, small_file_limit=task.small_file_limit, min_small_files=2
    )
    after_copy, after_rewrite = _files_after(small, copy), _files_after(small, rewrite)
    if after_copy > _files_after(small, [Group(Engine.COPY, g) for g in one_kind]):
        return AutoChoice(
            Engine.REWRITE,
            rewrite,
            f"copying would make {after_copy} file(s) of the small ones "
            f"(their footers differ), a rewrite {after_rewrite}",
        )
    if not copy:  # no two files fit in one copy: a rewrite, predicted to shrink, may still pack them
        return AutoChoice(
            Engine.REWRITE, rewrite, "no two small files fit in one copy of target_file_size" if rewrite else ""
        )
    copied = [footers[f.path] for g in copy for f in g.files]
    blocks = sum(len(ft.block_bytes) for ft in copied)
    average = sum(sum(ft.block_bytes) for ft in copied) / blocks if blocks else 0
    if average < task.copy_min_block_size:
        return AutoChoice(
            Engine.REWRITE,
            rewrite,
            f"copying would keep stripes / row groups averaging "
            f"{average / 1024:.1f} KB, under copy_min_block_size "
            f"{task.copy_min_block_size / 1024:.1f} KB",
        )
    return AutoChoice(Engine.COPY, copy, "")


def _files_after(small: list[DataFile], groups: list[Group]) -> int:
    """How many of the small files' places remain: files left out of every group, plus one per group."""
    return len(small) - sum(len(g.files) for g in groups) + len(groups)


def _copy_groups(task: PartitionTask, candidates: list[DataFile], footers: dict[str, FileFooter]) -> list[Group]:
    """Copy groups of files whose footers agree (one set of groups per copy key)."""
    compatible: dict[tuple, list[DataFile]] = {}
    for f in candidates:
        compatible.setdefault(footers[f.path].copy_key, []).append(f)
    return [
        Group(Engine.COPY, g)
        for same in compatible.values()
        for g in pack_small_files(
            same, target_file_size=task.target_file_size, small_file_limit=task.small_file_limit, min_small_files=2
        )
    ]


def _rewrite_groups(
    task: PartitionTask, files: list[DataFile], rest: list[DataFile], footers: dict[str, FileFooter]
) -> list[Group]:
    """Rewrite groups, packed by the output size predicted from bytes per row (re-encoding changes
    the size)."""
    if not rest:
        return []
    capacity = int(task.target_file_size / expansion(files, rest, footers))
    return [
        Group(Engine.REWRITE, g)
        for _, same in rewrite_layouts(task, rest, footers)
        for g in pack_small_files(
            same, target_file_size=capacity, small_file_limit=task.small_file_limit, min_small_files=2
        )
    ]


def rewrite_layouts(
    task: PartitionTask, files: list[DataFile], footers: dict[str, FileFooter]
) -> list[tuple[ParquetLayout | None, list[DataFile]]]:
    """Files one rewrite output may hold together, with the layout it keeps: Parquet files whose
    layouts differ (``parquet_layout``: legacy decimals and lists, the timestamps' type) are never
    mixed, as a copy never mixes footers that differ; ORC (None) is written one way."""
    if task.storage_format != "parquet":
        return [(None, files)]
    return parquet_layout.split(files, lambda f: footers[f.path].schema)  # type: ignore[return-value]  # a list of tuples of ParquetLayout


def layout_notes(task: PartitionTask, rewritten: list[DataFile], footers: dict[str, FileFooter]) -> str:
    """Why files to rewrite were not rewritten together ("" when they were): their Parquet
    layouts differ, each kept in outputs of its own."""
    classes = rewrite_layouts(task, rewritten, footers)
    if len(classes) < 2:
        return ""
    shown = "; ".join(f"{layout}: {len(same)} file(s)" for layout, same in classes)
    return f"small files rewritten apart, their Parquet layouts differ ({shown})"


def _copyable(ft: FileFooter) -> bool:
    """Whether a small file's blocks may be copied at all: it has blocks and no ``no_copy`` reason.
    (The copy floor is ``auto``'s, judged over the whole partition: ``auto_choice``.)"""
    return bool(ft.block_rows) and not ft.no_copy


def copy_notes(
    task: PartitionTask, small: list[DataFile], footers: dict[str, FileFooter], files: list[DataFile] | None = None
) -> str:
    """Why some small files may not be copied together, for the partition's reason ("" when
    nothing keeps them apart): files that must not be copied at all, what the footers of the
    copyable ones disagree on (those go to separate copy groups, or to a rewrite), and (auto)
    why the partition was rewritten rather than copied. ``files``: the partition's listing
    (``small`` when not given), from which a rewrite's output size is predicted."""
    if task.merge_mode not in ("auto", "copy") or task.sort_columns:
        return ""
    notes = []
    refused = [f for f in small if footers[f.path].no_copy]
    if refused:
        shown = "; ".join(f"{f.name}: {footers[f.path].no_copy}" for f in refused[:3])
        notes.append(f"{len(refused)} small file(s) not copied ({shown}{'; ...' if len(refused) > 3 else ''})")
    copyable = [footers[f.path] for f in small if _copyable(footers[f.path])]
    differing = footer_differences(copyable)
    if differing:
        notes.append("small files not copied together, their footers differ in " + "; ".join(differing))
    if task.merge_mode == "auto":
        choice = auto_choice(task, files or small, small, footers)
        if choice.why and choice.groups:
            notes.append(f"auto rewrote the partition: {choice.why}")
    return ". ".join(notes)


def footer_differences(footers: list[FileFooter]) -> list[str]:
    """What ``footers`` disagree on in their copy keys, each with its values and how many files
    have each, those that change how values read (``READING_KEYS``) first and marked so."""

    def counted(values: list[str]) -> str:
        seen: dict[str, int] = {}
        for v in values:
            seen[v] = seen.get(v, 0) + 1
        cut = lambda v: '""' if v == "" else v if len(v) <= 40 else v[:37] + "..."
        return ", ".join(f"{cut(v)}: {n}" for v, n in seen.items())

    reading: list[str] = []
    other: list[str] = []
    for name in ("schema", "compression", "version"):
        values = [getattr(ft, name) for ft in footers]
        if len(set(values)) > 1:
            (reading if name == "schema" else other).append(
                f"{name} ({len(set(values))} kinds" + (", changes how values read)" if name == "schema" else ")")
            )
    keys = sorted({k for ft in footers for k, _ in ft.extra})
    for key in keys:
        values = [dict(ft.extra).get(key, "absent") for ft in footers]
        if len(set(values)) > 1:
            if key in READING_KEYS:
                reading.append(f"{key} ({counted(values)}; changes how values read: {READING_KEYS[key]})")
            else:
                other.append(f"{key} ({counted(values)})")
    return reading + other


def expansion(files: list[DataFile], rewrite: list[DataFile], footers: dict[str, FileFooter]) -> float:
    """Predicted output bytes per input byte for a rewrite, Hudi-style from earlier writes: the
    bytes per row of the partition's big (already compacted) files over that of the small ones.
    1.0 (outputs no bigger than their inputs) when there is nothing to learn from."""
    names = {f.path for f in rewrite}
    big = [f for f in files if f.path not in names and f.path in footers and footers[f.path].rows]
    in_rows = sum(footers[f.path].rows for f in rewrite)
    if not big or not in_rows:
        return 1.0
    out_per_row = sum(f.size for f in big) / sum(footers[f.path].rows for f in big)
    in_per_row = sum(f.size for f in rewrite) / in_rows
    return min(1.0, max(0.25, out_per_row / in_per_row))


def output_codec(ft: FileFooter) -> str:
    """The writer's compression option that keeps a file's codec (snappy when unknown)."""
    return CODECS.get(ft.compression.split("+")[0], "snappy")


def staged_suffix(name: str) -> str:
    """Keep Spark's '.snappy.orc'-style ending, so the codec stays visible in the name."""
    parts = name.split(".")
    return "." + ".".join(parts[-2:]) if len(parts) >= 3 else ("." + parts[-1] if len(parts) == 2 else "")
