"""The rewrite's content checksum (row_hash) notices every single-row change: rows dropped or
duplicated, any one value changed, nulls moved inside structs, arrays and maps, -0.0 for 0.0,
a microsecond inside a map; and it does not depend on row order."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pyspark.sql import types as T

from hive_compaction.merge.checksum import content, content_metrics

INNER = T.StructType([T.StructField("t", T.TimestampType()), T.StructField("x", T.DoubleType())])
SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("d", T.DoubleType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("dec", T.DecimalType(10, 2)),
        T.StructField("s", T.StructType([T.StructField("a", T.IntegerType()), T.StructField("b", T.IntegerType())])),
        T.StructField("arr", T.ArrayType(T.IntegerType())),
        T.StructField("m", T.MapType(T.StringType(), INNER)),
    ]
)


def checksum(spark, rows: list[tuple]) -> tuple[int, int, int]:
    df = spark.createDataFrame(rows, SCHEMA)
    return content(df.agg(*content_metrics(SCHEMA)).first())


def checksums(spark, tables: list[list[tuple]]) -> list[tuple[int, int, int]]:
    """Each list of rows' checksum, in one Spark job: grouped by list, as the read-back groups by file."""
    tagged = T.StructType([T.StructField("table_no", T.IntegerType())] + SCHEMA.fields)
    df = spark.createDataFrame([(n,) + r for n, rows in enumerate(tables) for r in rows], tagged)
    got = {r["table_no"]: content(r) for r in df.groupBy("table_no").agg(*content_metrics(SCHEMA)).collect()}
    return [got[n] if rows else checksum(spark, []) for n, rows in enumerate(tables)]  # no group for no rows


def row(**kw) -> tuple:
    base = dict(
        id=1,
        d=1.5,
        ts=datetime(2026, 1, 1, 12),
        dec=Decimal("1.10"),
        s=(1, 2),
        arr=[1, 2],
        m={"k": (datetime(2026, 1, 1, 12, 0, 0, 1000), 2.0)},
    )
    base.update(kw)
    return tuple(base[f.name] for f in SCHEMA.fields)


@pytest.mark.parametrize(
    "a, b",
    [
        (row(s=(None, 1)), row(s=(1, None))),  # nested nulls swapped in a struct
        (row(arr=[]), row(arr=[None])),  # empty array vs one null element
        (row(arr=[None, 1]), row(arr=[1, None])),  # nulls swapped in an array
        (row(m={"k": None}), row(m={"k": (None, None)})),  # map value null vs a struct of nulls
        (row(m={"k": (None, 1.0)}), row(m={"k": (datetime(2026, 1, 1), None)})),
        (row(d=0.0), row(d=-0.0)),  # a negative zero
        (row(m={"k": (None, 0.0)}), row(m={"k": (None, -0.0)})),  # ... inside a map
        (
            row(m={"k": (datetime(2026, 1, 1, 12, 0, 0, 1000), 2.0)}),
            row(m={"k": (datetime(2026, 1, 1, 12, 0, 0, 1001), 2.0)}),
        ),  # a microsecond inside a map
        (row(dec=Decimal("1.10")), row(dec=Decimal("1.11"))),
        (row(dec=Decimal("1.10")), row(dec=Decimal("11.00"))),  # the same digits, the point moved
        (row(s=None), row(s=(None, None))),  # a null struct vs a struct of nulls
    ],
)
def test_values_that_spark_hashes_alike_get_different_checksums(spark, a, b):
    rest = [row(id=7), row(id=8, arr=None)]
    assert checksum(spark, [a] + rest) != checksum(spark, [b] + rest)


timestamps = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1))
doubles = st.floats(allow_nan=False, allow_infinity=True, width=64)
values = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.none() | doubles,
    st.none() | timestamps,
    st.none() | st.decimals(min_value=-(10**7), max_value=10**7, places=2, allow_nan=False, allow_infinity=False),
    st.none() | st.tuples(st.none() | st.integers(-(2**31), 2**31 - 1), st.none() | st.integers(-(2**31), 2**31 - 1)),
    st.none() | st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=3),
    st.none()
    | st.dictionaries(
        st.text(max_size=3), st.none() | st.tuples(st.none() | timestamps, st.none() | doubles), max_size=2
    ),
)


def same(a, b) -> bool:
    """Equal as stored: repr tells -0.0 from 0.0, where == does not."""
    return repr(a) == repr(b)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(values, min_size=1, max_size=6),
    other=values,
    column=st.integers(0, len(SCHEMA.fields) - 1),
    which=st.integers(0, 5),
)
def test_every_single_row_change_changes_the_checksum(spark, rows, other, column, which):
    rows = [tuple(r) for r in rows]
    i = which % len(rows)
    changed = rows[i][:column] + (other[column],) + rows[i][column + 1 :]
    base, reordered, dropped, duplicated, one_changed = checksums(
        spark, [rows, list(reversed(rows)), rows[1:], rows + [rows[0]], rows[:i] + [changed] + rows[i + 1 :]]
    )
    assert reordered == base  # row order does not matter
    assert dropped != base  # a row dropped
    assert duplicated != base  # a row duplicated
    if not same(changed, rows[i]):
        assert one_changed != base, (rows[i], changed)


WIDE = T.StructType([T.StructField("dec", T.DecimalType(38, 10))])  # unscaled values beyond a long


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(digits=st.integers(1, 10**27 - 1), exponent=st.integers(-10, 0), shift=st.sampled_from([-1, 1]))
def test_a_decimal_whose_point_moved_changes_the_checksum(spark, digits, exponent, shift):
    """The same digits at another scale (1.23 -> 12.3 or 0.123): a different value of the column."""
    a, b = Decimal(digits).scaleb(exponent), Decimal(digits).scaleb(max(-10, min(0, exponent + shift)))
    if a == b:
        return
    sums = [content(spark.createDataFrame([(v,)], WIDE).agg(*content_metrics(WIDE)).first()) for v in (a, b)]
    assert sums[0] != sums[1], (a, b)


def test_the_two_halves_are_independent_hashes(spark):
    rows = [row(id=i) for i in range(5)]
    _, first, second = checksum(spark, rows)
    assert first != second and first != 0 and second != 0


def test_each_checksum_is_the_exact_sum_of_its_row_hashes(spark):
    """The sums are taken as 32-bit halves in 64-bit integers: recombined, they are the exact
    (unbounded) sums of the row hashes, with hashes of both signs and enough rows that a plain
    64-bit sum would have wrapped around."""
    from hive_compaction.merge.checksum import row_hashes

    rows = [row(id=i, d=i * 0.25) for i in range(400)]
    df = spark.createDataFrame(rows, SCHEMA)
    hashes = df.select(*row_hashes(SCHEMA)).collect()
    exact = (len(rows), sum(h[0] for h in hashes), sum(h[1] for h in hashes))
    assert any(h[0] < 0 for h in hashes) and any(h[0] > 0 for h in hashes)
    assert max(abs(sum(h[0] for h in hashes[:k])) for k in range(len(hashes))) > 2**63  # a 64-bit sum wraps
    assert content(df.agg(*content_metrics(SCHEMA)).first()) == exact
