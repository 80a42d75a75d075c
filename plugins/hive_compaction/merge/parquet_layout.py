"""The physical layout of Parquet files that Spark's writer settings decide, read from their footers'
schemas, and the per-write options that keep it when a rewrite writes them again (issue 54).

Two Spark settings lay the same rows out differently, and not every reader reads every layout:

- ``spark.sql.parquet.writeLegacyFormat``: decimals of precision up to 18 as FIXED_LEN_BYTE_ARRAY
  (else INT32 / INT64), lists as ``bag`` / ``array`` groups (else ``list`` / ``element``), maps'
  groups marked MAP_KEY_VALUE. Hive writes this layout, and Hive 2's ``ParquetHiveSerDe`` reads no
  INT32 / INT64 decimal;
- ``spark.sql.parquet.outputTimestampType``: INT96 (Hive's and Impala's), TIMESTAMP_MICROS or
  TIMESTAMP_MILLIS.

A file says which it was written with by its decimals, else its lists and maps, and by its
timestamps (``TIMESTAMP_NTZ`` is INT64 whatever the setting, so it says nothing). Text only: the
footers' schemas are already read (``grouping.FileFooter.schema``, parquet-java's MessageType).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

LEGACY_OPTION = "spark.sql.parquet.writeLegacyFormat"
TIMESTAMP_OPTION = "spark.sql.parquet.outputTimestampType"

# Lines of a MessageType's text: "  optional fixed_len_byte_array(6) amount (DECIMAL(12,2));"
_DECIMAL = re.compile(r"^\s*\w+ (int32|int64|fixed_len_byte_array|binary)\b.* \(DECIMAL\((\d+),\s*\d+\)\)")
_INT96 = re.compile(r"^\s*\w+ int96 ")
# Only instants (isAdjustedToUTC); old converted types TIMESTAMP_MILLIS / TIMESTAMP_MICROS are instants too.
_INSTANT = re.compile(r"^\s*\w+ int64 .* \(TIMESTAMP(?:\((MILLIS|MICROS),\s*true\)|_(MILLIS|MICROS))\)")
_NESTED = re.compile(r"^\s*\w+ group .* \((LIST|MAP)\) \{$")
# Decimals above this precision are FIXED_LEN_BYTE_ARRAY in both layouts.
_LONG_DECIMAL = 18

T = TypeVar("T")


@dataclass(frozen=True)
class ParquetLayout:
    """What of Spark's writer settings a Parquet file's schema shows; None where it shows nothing
    (no decimal, list or map; no timestamp)."""

    legacy: bool | None = None  # spark.sql.parquet.writeLegacyFormat
    timestamps: str | None = None  # spark.sql.parquet.outputTimestampType

    def agrees(self, other: ParquetLayout) -> bool:
        """Whether one output can keep both (each says nothing, or the same)."""
        return all(
            a is None or b is None or a == b
            for a, b in ((self.legacy, other.legacy), (self.timestamps, other.timestamps))
        )

    def kept_by(self, written: ParquetLayout) -> bool:
        """Whether a file written with ``written`` keeps all this layout shows."""
        return (self.legacy is None or self.legacy == written.legacy) and (
            self.timestamps is None or self.timestamps == written.timestamps
        )

    def merged(self, other: ParquetLayout) -> ParquetLayout:
        return ParquetLayout(
            self.legacy if self.legacy is not None else other.legacy, self.timestamps or other.timestamps
        )

    def writer_options(self) -> dict[str, str]:
        """The write options that lay rows out so (Spark 4.2 lets a write's own options win over the
        session's, SPARK-56414, so writes of other layouts may run side by side); where the inputs
        show nothing, the session's setting stands."""
        out = {}
        if self.legacy is not None:
            out[LEGACY_OPTION] = "true" if self.legacy else "false"
        if self.timestamps:
            out[TIMESTAMP_OPTION] = self.timestamps
        return out

    def __str__(self) -> str:
        parts = []
        if self.legacy is not None:
            parts.append("legacy decimals / lists (writeLegacyFormat)" if self.legacy else "standard decimals / lists")
        if self.timestamps:
            parts.append(f"{self.timestamps} timestamps")
        return ", ".join(parts) or "no layout-dependent column"


def of_schema(schema: str) -> ParquetLayout:
    """The layout a footer's MessageType text shows. Decimals decide ``legacy`` (what readers decode
    by), else lists and maps; within one file any legacy one makes it legacy (Spark writes one
    layout per file, so mixed files come from other writers). Timestamps: INT96 if any, else
    MICROS if any, else MILLIS: each keeps every value of the later ones."""
    lines = schema.splitlines()
    decimals, nested, stamps = [], [], set()
    for i, line in enumerate(lines):
        m = _DECIMAL.match(line)
        if m and int(m.group(2)) <= _LONG_DECIMAL and m.group(1) != "binary":
            decimals.append(m.group(1) == "fixed_len_byte_array")
        m = _NESTED.match(line)
        if m and i + 1 < len(lines):
            child = lines[i + 1].strip()
            if m.group(1) == "LIST":  # standard: "repeated group list {" holding "element"
                nested.append(not child.startswith("repeated group list "))
            else:  # standard: "repeated group key_value {", unmarked
                nested.append("(MAP_KEY_VALUE)" in child)
        if _INT96.match(line):
            stamps.add("INT96")
        m = _INSTANT.match(line)
        if m:
            stamps.add(f"TIMESTAMP_{m.group(1) or m.group(2)}")
    evidence = decimals or nested
    legacy = any(evidence) if evidence else None
    timestamps = next((t for t in ("INT96", "TIMESTAMP_MICROS", "TIMESTAMP_MILLIS") if t in stamps), None)
    return ParquetLayout(legacy, timestamps)


def common(layouts: Iterable[ParquetLayout]) -> ParquetLayout:
    """The layout of files that agree (``split`` made them so)."""
    out = ParquetLayout()
    for layout in layouts:
        out = out.merged(layout)
    return out


def split(items: list[T], schema_of: Callable[[T], str]) -> list[tuple[ParquetLayout, list[T]]]:
    """``items`` (files) in classes whose layouts agree, each with its layout, in order of first
    appearance; files that show nothing go with the first class they agree with."""
    layouts = [of_schema(schema_of(item)) for item in items]
    # The most telling files found the classes, so a file that shows less cannot join two of them.
    order = sorted(range(len(items)), key=lambda k: -((layouts[k].legacy is not None) + bool(layouts[k].timestamps)))
    classes: list[tuple[ParquetLayout, list[int]]] = []
    for k in order:
        for c, (layout, members) in enumerate(classes):
            if layout.agrees(layouts[k]):
                classes[c] = (layout.merged(layouts[k]), members + [k])
                break
        else:
            classes.append((layouts[k], [k]))
    classes.sort(key=lambda c: min(c[1]))
    return [(layout, [items[k] for k in sorted(members)]) for layout, members in classes]
