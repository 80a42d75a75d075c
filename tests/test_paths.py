"""Location checks, the work-area layout, file-name-safe ids and Hive partition names."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from hive_compaction.airflow.metastore_types import escape_path_name, partition_name, unescape_path_name
from hive_compaction.storage.paths import (
    canonical,
    default_work_dir,
    is_within,
    location_problem,
    partition_id,
    run_tag,
    split_uri,
)

TABLE = "hdfs://nn:8020/wh/db.db/t"
SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9_.-]+$")


# --- split_uri / canonical --------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("file:/a/b", ("file", "", "/a/b")),
        ("file:///a/b/", ("file", "", "/a/b")),
        ("/a/b", ("file", "", "/a/b")),
        ("HDFS://nn:8020//wh///t/", ("hdfs", "nn:8020", "/wh/t")),
        ("hdfs://nn", ("hdfs", "nn", "/")),
        ("hdfs://nn/", ("hdfs", "nn", "/")),
        ("s3a://bucket/key/x=1", ("s3a", "bucket", "/key/x=1")),
        ("abfs://c@acct.dfs.core.windows.net/d", ("abfs", "c@acct.dfs.core.windows.net", "/d")),
    ],
)
def test_split_uri(uri, expected):
    assert split_uri(uri) == expected


def test_file_uri_spellings_are_equal():
    assert split_uri("file:/a/b") == split_uri("file:///a/b/") == split_uri("file:///a//b")
    assert canonical("file:/a/b") == canonical("file:///a/b/") == "file:///a/b"
    assert split_uri("file:/a/b") != split_uri("file:/a/b/c")


def test_canonical():
    assert canonical("hdfs://nn//x/y/") == "hdfs://nn/x/y"
    assert canonical("hdfs://nn") == "hdfs://nn/"


# --- is_within --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "child, parent, expected",
    [
        ("hdfs://nn/wh/t/dt=1", "hdfs://nn/wh/t", True),
        ("hdfs://nn/wh/t/dt=1/c=2", "hdfs://nn/wh/t/", True),
        ("hdfs://nn/wh/t", "hdfs://nn/wh/t", False),  # strictly below
        ("hdfs://nn/wh/t/", "hdfs://nn/wh/t", False),
        ("hdfs://nn/wh/t2/dt=1", "hdfs://nn/wh/t", False),  # shares a prefix only
        ("hdfs://nn/wh/t2", "hdfs://nn/wh/t", False),
        ("hdfs://nn/wh", "hdfs://nn/wh/t", False),
        ("hdfs://other/wh/t/dt=1", "hdfs://nn/wh/t", False),
        ("s3a://nn/wh/t/dt=1", "hdfs://nn/wh/t", False),
        ("file:/wh/t/dt=1", "file:///wh/t/", True),
        ("/wh/t/dt=1", "file:///wh/t", True),
        ("hdfs://nn/anything", "hdfs://nn/", True),
    ],
)
def test_is_within(child, parent, expected):
    assert is_within(child, parent) is expected


# --- location_problem -------------------------------------------------------------------------


def test_normal_partition_is_accepted():
    assert location_problem(f"{TABLE}/dt=2024-01-01", TABLE, True) is None
    assert location_problem(f"{TABLE}/dt=2024-01-01/country=US/", TABLE + "/", True) is None
    assert location_problem("file:/wh/t/dt=1", "file:///wh/t/", True) is None


@pytest.mark.parametrize(
    "location, table, words",
    [
        ("hdfs://nn:8020/", TABLE, "root"),
        ("hdfs://nn:8020", TABLE, "root"),
        ("file:///", "file:///wh/t", "root"),
        (TABLE, TABLE, "table root"),
        (TABLE + "/", TABLE, "table root"),
        ("hdfs://nn:8020//wh/db.db//t", TABLE, "table root"),
        ("hdfs://nn:8020/wh/db.db/other/dt=1", TABLE, "outside"),
        ("hdfs://nn:8020/wh/db.db", TABLE, "outside"),
        ("hdfs://nn:8020/wh/db.db/t2/dt=1", TABLE, "outside"),  # sibling sharing a prefix
        ("hdfs://nn:8020/wh/db.db/t_old/dt=1", TABLE, "outside"),
        ("s3a://nn:8020/wh/db.db/t/dt=1", TABLE, "another file system (s3a://nn:8020)"),  # other scheme
        ("hdfs://nn2:8020/wh/db.db/t/dt=1", TABLE, "another file system (hdfs://nn2:8020)"),  # other authority
        ("hdfs://nn/wh/db.db/t/dt=1", TABLE, "another file system (hdfs://nn)"),  # other authority (no port)
        ("hdfs://ns2/wh/db.db/t/dt=1", "hdfs://ns1/wh/db.db/t", "than its table (hdfs://ns1)"),  # other nameservice
        ("file:///wh/db.db/t/dt=1", TABLE, "another file system (file://)"),
        ("hdfs://nn:8020/wh/db.db/t/dt=1/../../other", TABLE, "contains '..'"),
        ("hdfs://nn:8020/wh/db.db/t/..", TABLE, "contains '..'"),
        ("hdfs://nn:8020/wh/db.db/t/../t2/dt=1", TABLE, "contains '..'"),
        ("file:/wh/t/../../etc", "file:/wh/t", "contains '..'"),
        ("hdfs://nn:8020/wh/db.db/t/.", TABLE, "'.' segment"),  # the table root in disguise
        ("hdfs://nn:8020/wh/db.db/t/./dt=1", TABLE, "'.' segment"),
        ("", TABLE, "no location"),
    ],
)
def test_location_problem_refuses(location, table, words):
    problem = location_problem(location, table, True)
    assert problem is not None
    assert words in problem


def test_sibling_table_sharing_a_prefix():
    problem = location_problem("/wh/t2/dt=1", "/wh/t", True)
    assert problem is not None and "outside" in problem
    assert location_problem("/wh/t/dt=1", "/wh/t", True) is None


def test_non_partitioned_table_may_use_its_own_location():
    assert location_problem(TABLE, TABLE, False) is None
    assert location_problem("hdfs://nn:8020/", TABLE, False) is not None
    assert location_problem(f"{TABLE}/../x", TABLE, False) is not None
    assert location_problem("", TABLE, False) is not None


def test_dots_inside_names_are_fine():
    assert location_problem(f"{TABLE}/dt=1..2", TABLE, True) is None
    assert location_problem(f"{TABLE}/v=.hidden", TABLE, True) is None
    assert location_problem(f"{TABLE}/v=...", TABLE, True) is None


# --- default_work_dir -------------------------------------------------------------------------


def test_default_work_dir_is_beside_the_table_not_inside():
    wd = default_work_dir(TABLE, "db", "t", None)
    assert wd == "hdfs://nn:8020/wh/db.db/.hive_compaction/t"
    assert not is_within(wd, TABLE) and wd != canonical(TABLE)
    assert split_uri(wd)[:2] == split_uri(TABLE)[:2]  # same file system: moves are renames


def test_default_work_dir_of_a_table_at_the_root():
    assert default_work_dir("hdfs://nn/t", "db", "t", None) == "hdfs://nn/.hive_compaction/t"


def test_default_work_dir_with_a_work_root():
    assert default_work_dir(TABLE, "db", "t", "hdfs://nn//tmp/hc/") == "hdfs://nn/tmp/hc/db.t"
    assert default_work_dir("file:/wh/t", "db", "t", "file:/w") == "file:///w/db.t"


# --- partition_id / run_tag -------------------------------------------------------------------


def test_partition_id_is_file_name_safe_and_distinct():
    a = partition_id("db.t", "dt=2024-01-01/country=US")
    assert a.startswith("dt_2024-01-01_country_US.")
    assert SAFE_SEGMENT.match(a)
    assert a == partition_id("db.t", "dt=2024-01-01/country=US")
    assert a != partition_id("db.u", "dt=2024-01-01/country=US")
    # names that map to the same label still get different ids
    assert partition_id("db.t", "k=a b") != partition_id("db.t", "k=a%20b")
    assert partition_id("db.t", "").startswith("table.")


def test_partition_id_length_is_bounded():
    pid = partition_id("db.t", "k=" + "x" * 1000)
    assert len(pid) <= 60 + 1 + 16


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_partition_id_is_always_a_safe_single_segment(partition):
    pid = partition_id("db.t", partition)
    assert SAFE_SEGMENT.match(pid)
    assert pid not in (".", "..")
    assert not pid.startswith("_")


@pytest.mark.parametrize(
    "run_id, expected",
    [
        ("manual__2024-01-01T00:00:00+00:00", "manual__2024-01-01T00-00-00-00-00"),
        ("scheduled__2024-05-06T01:02:03.456789+00:00", "scheduled__2024-05-06T01-02-03.456789-00-00"),
        ("::::", "run"),
        ("", "run"),
        ("a/b", "a-b"),
    ],
)
def test_run_tag(run_id, expected):
    assert run_tag(run_id) == expected


@pytest.mark.parametrize("run_id", [".", "..", "...."])
def test_run_tag_is_never_a_dot_segment(run_id):
    tag = run_tag(run_id)
    assert tag not in (".", "..")
    assert tag == ("...." if run_id == "...." else "run")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_run_tag_is_always_a_safe_single_segment(run_id):
    tag = run_tag(run_id)
    assert SAFE_SEGMENT.match(tag)
    assert tag not in (".", "..")
    assert len(tag) <= 120


# --- Hive partition names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, escaped",
    [
        ("2024-01-01", "2024-01-01"),
        ("a b", "a b"),  # Hive does not escape spaces on Linux
        ("a/b", "a%2Fb"),
        ("k=v", "k%3Dv"),
        ("100%", "100%25"),
        ("12:30", "12%3A30"),
        ("é ü 日本", "é ü 日本"),  # non-ASCII is kept
        ("tab\there", "tab%09here"),
        ("#'\"*?\\^[]{}", "%23%27%22%2A%3F%5C%5E%5B%5D%7B}"),  # Hive escapes '{' but not '}'
        ("\x7f", "%7F"),
        ("", ""),
    ],
)
def test_escape_path_name(value, escaped):
    assert escape_path_name(value) == escaped
    assert unescape_path_name(escaped) == value


@pytest.mark.parametrize(
    "text, value",
    [
        ("%zz", "%zz"),  # not hex: kept as is
        ("50%", "50%"),
        ("%4", "%4"),
        ("a%2fb", "a/b"),  # lower-case hex
        ("%41%42", "AB"),
    ],
)
def test_unescape_tolerates_stray_percent_signs(text, value):
    assert unescape_path_name(text) == value


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_escape_round_trip(value):
    escaped = escape_path_name(value)
    assert unescape_path_name(escaped) == value
    assert "/" not in escaped and "=" not in escaped and ":" not in escaped


def test_partition_name_multi_level():
    keys = (("dt", "string"), ("country", "string"), ("hour", "int"))
    assert partition_name(keys, ["2024-01-01", "US", "7"]) == "dt=2024-01-01/country=US/hour=7"
    assert partition_name(keys, ["2024/01/01", "a=b", "12:00"]) == "dt=2024%2F01%2F01/country=a%3Db/hour=12%3A00"
    assert partition_name((), []) == ""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1), min_size=1, max_size=4))
def test_partition_name_round_trip(values):
    keys = tuple((f"k{i}", "string") for i in range(len(values)))
    name = partition_name(keys, values)
    parts = name.split("/")
    assert len(parts) == len(values)
    back = []
    for (key, _), part in zip(keys, parts):
        k, v = part.split("=")
        assert k == key
        back.append(unescape_path_name(v))
    assert back == values


def test_a_partition_on_another_file_system_is_refused_with_the_reason():
    problem = location_problem("hdfs://nn1.example:8020/wh/db.db/t/dt=1", "hdfs://ns1/wh/db.db/t", True)
    assert problem.startswith(
        "location hdfs://nn1.example:8020/wh/db.db/t/dt=1 is on another file system "
        "(hdfs://nn1.example:8020) than its table (hdfs://ns1)"
    )
    assert "renames, which cannot cross file systems" in problem
    # the scheme and authority are compared without case or doubled slashes, as written otherwise
    assert location_problem("HDFS://ns1//wh/db.db/t/dt=1", "hdfs://ns1/wh/db.db/t", True) is None
