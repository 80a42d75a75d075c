"""The content checksum a rewrite is verified with: 128 bits over every value of every row.

Spark's ``xxhash64`` alone is not enough: it skips null values, also inside structs, arrays and
maps (``struct(null, 1)`` hashes as ``struct(1, null)``, ``[]`` as ``[null]``), it treats -0.0 as
0.0, and it refuses maps. So each column is first re-encoded with native expressions (no UDF):
arrays and maps as JSON text with microsecond timestamps (exact for the types it is used on),
others field by field: every nested value carries its own null flag, every float or double a
flag for a negative zero, arrays and maps of other types their length and their elements or
entries in file order (a rewrite keeps it). Timestamps and decimals are hashed by Spark at full
precision (micros, the unscaled value of the column's type). NaN payloads are not told apart: Spark
reads every NaN as its one canonical NaN.

Two 64-bit hashes with different seeds (the second chain starts from a constant) make 128 bits;
each is summed over the rows (order-independent), exactly: as two 64-bit integer sums of its
high (signed) and low (unsigned) 32 bits, which cannot overflow below 2^31 rows per group and
add up to the same sum a decimal would give, at a fifth of a decimal sum's cost (20 M rows on
two cores: 1.0 s against 5.0 s).
"""

from __future__ import annotations

from pyspark.sql import Column, functions as F, types as T

SECOND_SEED = 0x9E3779B97F4A7C15 - (1 << 64)  # any constant: it only moves the second chain's seed


# JSON text is an exact encoding of a nested value once timestamps keep their microseconds and
# null struct fields are written: nulls, lengths, positions and map entry order all show, -0.0
# is written "-0.0". Spark's JSON writer is compiled code; ``transform`` (the lambda encoding
# below) is interpreted, row by row: on arrays and maps it cost about 4x more.
JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "ignoreNullFields": "false",
}
_JSON_EXACT = (
    T.BooleanType,
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.FloatType,
    T.DoubleType,
    T.DecimalType,
    T.StringType,
    T.BinaryType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
)


def _json_exact(dt: T.DataType) -> bool:
    """Whether JSON text tells every two values of ``dt`` apart (the types above, nested)."""
    if isinstance(dt, T.StructType):
        return all(_json_exact(f.dataType) for f in dt.fields)
    if isinstance(dt, T.ArrayType):
        return _json_exact(dt.elementType)
    if isinstance(dt, T.MapType):  # a key is written as its text: only plain keys
        return isinstance(dt.keyType, _JSON_EXACT) and _json_exact(dt.valueType)
    return isinstance(dt, _JSON_EXACT)


def encode(c: Column, dt: T.DataType) -> Column:
    """A value of ``c`` as something xxhash64 hashes completely (never a null it would skip
    silently: every possibly-null value is paired with its null flag)."""
    if isinstance(dt, (T.ArrayType, T.MapType)) and _json_exact(dt):
        return F.to_json(c, JSON_OPTIONS)  # null for a null array or map, hashed with its flag
    if isinstance(dt, T.StructType):
        return F.struct(*[x for f in dt.fields for x in (encode(c[f.name], f.dataType), c[f.name].isNull())])
    if isinstance(dt, T.ArrayType):
        return F.struct(F.size(c), F.transform(c, lambda x: F.struct(encode(x, dt.elementType), x.isNull())))
    if isinstance(dt, T.MapType):
        return F.struct(
            F.size(c),
            F.transform(
                F.map_entries(c),
                lambda e: F.struct(encode(e["key"], dt.keyType), encode(e["value"], dt.valueType), e["value"].isNull()),
            ),
        )
    if isinstance(dt, (T.DoubleType, T.FloatType)):
        # -0.0 == 0.0 for Spark; its text keeps the sign (only computed for zeros).
        return F.struct(c, F.when(c == 0, F.substring(c.cast("string"), 1, 1) == "-"))
    return c


def _columns(schema: T.StructType) -> list[Column]:
    out = []
    for f in schema.fields:
        c = F.col(f"`{f.name}`")
        out += [encode(c, f.dataType), c.isNull()]
    return out


def row_hashes(schema: T.StructType) -> tuple[Column, Column]:
    """Two independent 64-bit hashes of a row of ``schema``."""
    cols = _columns(schema)
    return F.xxhash64(*cols), F.xxhash64(F.lit(SECOND_SEED), *cols)


def _halves(h: Column, name: str) -> list[Column]:
    """Sums of a 64-bit hash's high 32 bits (signed) and low 32 bits (unsigned): their sum times
    2^32 plus the low sum is the hash's exact sum."""
    zero = F.lit(0).cast("bigint")
    return [
        F.coalesce(F.sum(F.shiftright(h, 32)), zero).alias(f"{name}_high"),
        F.coalesce(F.sum(h.bitwiseAND(0xFFFFFFFF)), zero).alias(f"{name}_low"),
    ]


def content_metrics(schema: T.StructType) -> list[Column]:
    """Rows and the two checksums (sums of the row hashes, as halves: ``content``), for
    ``observe()`` or ``agg()``. Built once, the unresolved expressions serve every read with
    ``schema``."""
    first, second = row_hashes(schema)
    return [F.count(F.lit(1)).alias("rows"), *_halves(first, "checksum"), *_halves(second, "checksum2")]


def content(metrics) -> tuple[int, int, int]:
    """(rows, checksum, checksum2) from an observation's or aggregate's row."""

    def whole(name: str) -> int:
        return (int(metrics[f"{name}_high"]) << 32) + int(metrics[f"{name}_low"])

    return int(metrics["rows"]), whole("checksum"), whole("checksum2")
