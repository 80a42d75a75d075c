"""Small-file bin packing (Hudi's file-sizing rules applied after the write)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from hive_compaction.merge.sizing import pack_small_files, small_files
from hive_compaction.storage.listing import DataFile

MB = 1024**2


def files_of(*sizes_mb: float, prefix: str = "part") -> list[DataFile]:
    return [DataFile(f"hdfs://nn/wh/t/dt=1/{prefix}-{i:05d}.orc", int(s * MB)) for i, s in enumerate(sizes_mb)]


def sizes(groups: list[list[DataFile]]) -> list[list[int]]:
    return [sorted(f.size // MB for f in g) for g in groups]


# --- DataFile ---------------------------------------------------------------------------------


def test_data_file_name_is_last_path_segment():
    assert DataFile("hdfs://nn/wh/t/dt=1/part-0.orc", 1).name == "part-0.orc"
    assert DataFile("hdfs://nn/wh/t/dt=1/sub/", 1).name == "sub"
    assert DataFile("plain.orc", 1).name == "plain.orc"


def test_data_file_defaults_and_equality():
    f = DataFile("/a/b", 10)
    assert f.modification_time == 0
    assert f == DataFile("/a/b", 10, 0)
    assert f != DataFile("/a/b", 11)


# --- small_files ------------------------------------------------------------------------------


def test_small_files_is_strictly_below_the_limit():
    fs = files_of(99, 100, 101, 0.5)
    assert [f.size for f in small_files(fs, 100 * MB)] == [99 * MB, int(0.5 * MB)]


@pytest.mark.parametrize("limit", [0, -1])
def test_small_files_disabled_by_non_positive_limit(limit):
    assert small_files(files_of(1, 2, 3), limit) == []


# --- worked examples --------------------------------------------------------------------------


def test_hudi_seed_example_after_write():
    """Hudi's docs example: 40, 80, 90, 130, 105 MB files; limit 100 MB; max file size 120 MB.

    Only 40, 80 and 90 are small. Largest first: 90 opens a group, 80 cannot join it (170 > 120),
    40 cannot join 90 (130 > 120) but fits with 80 (exactly 120). The group [90] alone is dropped.
    """
    fs = files_of(40, 80, 90, 130, 105)
    groups = pack_small_files(fs, small_file_limit=100 * MB, target_file_size=120 * MB)
    assert sizes(groups) == [[40, 80]]
    grouped = {f.path for g in groups for f in g}
    assert grouped == {fs[0].path, fs[1].path}
    # files at or above the limit are never in any group
    assert fs[3].path not in grouped and fs[4].path not in grouped
    assert fs[2].path not in grouped  # 90 fits with nothing


def test_group_exactly_at_target_is_allowed():
    groups = pack_small_files(files_of(60, 60), small_file_limit=100 * MB, target_file_size=120 * MB)
    assert sizes(groups) == [[60, 60]]


def test_group_one_byte_over_target_is_not_formed():
    fs = [DataFile("/p/a", 60 * MB), DataFile("/p/b", 60 * MB + 1)]
    assert pack_small_files(fs, small_file_limit=100 * MB, target_file_size=120 * MB) == []


def test_many_tiny_files_fill_groups_up_to_target():
    fs = files_of(*[10] * 30)  # 300 MB of 10 MB files, target 128 MB -> 12 + 12 + 6 files
    groups = pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB)
    assert [len(g) for g in groups] == [12, 12, 6]
    assert all(sum(f.size for f in g) <= 128 * MB for g in groups)
    assert sorted(f.path for g in groups for f in g) == sorted(f.path for f in fs)


def test_first_fit_decreasing_packing():
    # target 110, desc: 70 opens | 50 (120 > 110) opens | 40 joins 70 (110) | 30 joins 50 (80)
    # | 20 joins 50+30 (100)
    fs = files_of(20, 30, 40, 50, 70)
    groups = pack_small_files(fs, small_file_limit=100 * MB, target_file_size=110 * MB)
    assert sorted(sizes(groups)) == [[20, 30, 50], [40, 70]]


def test_groups_are_sorted_by_path():
    fs = [DataFile("/p/c", 3), DataFile("/p/a", 1), DataFile("/p/b", 2)]
    groups = pack_small_files(fs, small_file_limit=10, target_file_size=100)
    assert [[f.path for f in g] for g in groups] == [["/p/a", "/p/b", "/p/c"]]


def test_zero_byte_files_can_join_a_group():
    fs = [DataFile("/p/a", 0), DataFile("/p/b", 5)]
    groups = pack_small_files(fs, small_file_limit=10, target_file_size=10)
    assert [[f.path for f in g] for g in groups] == [["/p/a", "/p/b"]]


# --- edge cases -------------------------------------------------------------------------------


def test_empty_partition():
    assert pack_small_files([], small_file_limit=100 * MB, target_file_size=128 * MB) == []


def test_one_small_file_is_left_alone():
    assert pack_small_files(files_of(5), small_file_limit=100 * MB, target_file_size=128 * MB) == []


def test_one_small_file_among_big_ones_is_left_alone():
    fs = files_of(5, 200, 300)
    assert pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB) == []


def test_all_files_big():
    fs = files_of(100, 128, 500, 1024)
    assert pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB) == []


def test_one_giant_file_among_many_tiny_ones():
    fs = files_of(*([1] * 50), 10_000)
    groups = pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB)
    assert len(groups) == 1
    assert len(groups[0]) == 50
    assert fs[-1] not in groups[0]
    assert sum(f.size for f in groups[0]) == 50 * MB


def test_small_file_limit_zero_turns_it_off():
    fs = files_of(1, 1, 1, 1)
    assert pack_small_files(fs, small_file_limit=0, target_file_size=128 * MB) == []
    # the same files are merged with a positive limit: the zero is what turned it off
    assert pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB) != []


def test_min_small_files_larger_than_the_number_of_small_files():
    fs = files_of(1, 1, 1, 500)  # three small files
    assert pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB, min_small_files=4) == []
    groups = pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB, min_small_files=3)
    assert sizes(groups) == [[1, 1, 1]]


def test_min_small_files_below_two_still_needs_two_files():
    fs = files_of(1)
    assert pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB, min_small_files=1) == []
    fs = files_of(1, 1)
    assert len(pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB, min_small_files=0)) == 1


def test_small_files_that_cannot_pair_give_no_group():
    # three 70 MB files: no two fit in 128 MB, so each would be a group of one -> nothing to do
    fs = files_of(70, 70, 70)
    assert pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB) == []


def test_input_order_does_not_matter_worked_example():
    fs = files_of(5, 17, 33, 41, 60, 72, 88, 99, 3, 12)
    expected = pack_small_files(fs, small_file_limit=100 * MB, target_file_size=128 * MB)
    rng = random.Random(7)
    for _ in range(20):
        shuffled = fs[:]
        rng.shuffle(shuffled)
        assert pack_small_files(shuffled, small_file_limit=100 * MB, target_file_size=128 * MB) == expected


def test_equal_sizes_are_grouped_by_path_whatever_the_input_order():
    # three 60 MB files, 120 MB target: two of them make a group, the third is left alone;
    # which two must not depend on the order the file system listed them in
    fs = [DataFile(f"/p/{n}", 60 * MB) for n in "abc"]
    expected = pack_small_files(fs, small_file_limit=100 * MB, target_file_size=120 * MB)
    assert [[f.path for f in g] for g in expected] == [["/p/a", "/p/b"]]
    for order in ([2, 1, 0], [1, 2, 0], [2, 0, 1]):
        shuffled = [fs[i] for i in order]
        assert pack_small_files(shuffled, small_file_limit=100 * MB, target_file_size=120 * MB) == expected


# --- properties -------------------------------------------------------------------------------


@st.composite
def packing_inputs(draw):
    target = draw(st.integers(min_value=1, max_value=2_000))
    limit = draw(st.integers(min_value=0, max_value=target))
    min_small = draw(st.integers(min_value=0, max_value=6))
    # a few distinct sizes make ties (equal sizes) common, which is where order could leak in
    size = st.one_of(st.integers(min_value=0, max_value=3_000), st.sampled_from([0, 1, 100, 250, 500, 999]))
    file_sizes = draw(st.lists(size, max_size=40))
    files = [DataFile(f"/wh/t/p/f{i:03d}", s) for i, s in enumerate(file_sizes)]
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    return files, limit, target, min_small, seed


@settings(max_examples=300, deadline=None)
@given(packing_inputs())
def test_packing_properties(args):
    files, limit, target, min_small, seed = args
    groups = pack_small_files(files, small_file_limit=limit, target_file_size=target, min_small_files=min_small)

    grouped = [f for g in groups for f in g]
    # no input file is in two groups
    assert len(grouped) == len(set(grouped))
    by_path = {f.path: f for f in files}
    for f in grouped:
        # every grouped file is an input and is small
        assert by_path.get(f.path) == f
        assert f.size < limit
    for g in groups:
        assert len(g) >= 2
        assert sum(f.size for f in g) <= target
    n_small = sum(1 for f in files if f.size < limit) if limit > 0 else 0
    if limit <= 0 or n_small < max(min_small, 2):
        assert groups == []

    # deterministic regardless of input order
    shuffled = files[:]
    random.Random(seed).shuffle(shuffled)
    assert (
        pack_small_files(shuffled, small_file_limit=limit, target_file_size=target, min_small_files=min_small) == groups
    )
    assert (
        pack_small_files(
            list(reversed(files)), small_file_limit=limit, target_file_size=target, min_small_files=min_small
        )
        == groups
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=50), min_size=2, max_size=30))
def test_all_tiny_files_always_merge_into_few_groups(file_sizes):
    """Files no bigger than half the target always pair up: at most one is left out."""
    files = [DataFile(f"/p/f{i}", s) for i, s in enumerate(file_sizes)]
    groups = pack_small_files(files, small_file_limit=100, target_file_size=100)
    grouped = sum(len(g) for g in groups)
    assert grouped >= len(files) - 1
    # first-fit decreasing never leaves two groups that could have been merged, except by size
    totals = sorted(sum(f.size for f in g) for g in groups)
    if len(totals) >= 2:
        assert totals[0] + totals[1] > 100
