"""The commit protocol under the schedule explorer (``scripts/explorer``): the real commit,
recovery, rollback, retire and purge code of both modes, run by actors that may be killed or
paused before any storage or Metastore call, against a file system and a Metastore in memory.

- a seeded sample of schedules (at least 20,000; ``SUITE_MATRIX_SEED`` replays it), none of which
  may violate an invariant within the lease (what no lease can fence is counted and printed:
  docs/safety.md);
- the five schedules of issue 53, written out, each of which violated an invariant on f9600e7, and
  those the explorer found since, each of which violated one on the tree before its fix.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import Counter

import pytest

from explorer.explore import explore, print_figures, shrink
from explorer.scenario import DEFAULT_LOCATION, INPUT_NAMES, Rule, Script, run_schedule, world_clock
from explorer.scheduler import render
from hive_compaction.model.results import Status

SAMPLE = int(os.environ.get("SUITE_EXPLORER_SCHEDULES", "20000"))


@pytest.fixture(autouse=True)
def quiet_logs():
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def test_sampled_schedules_keep_every_invariant(matrix_rng, capsys):
    seed, _ = matrix_rng
    started = time.monotonic()
    figures = explore(SAMPLE, seed)
    with capsys.disabled():
        print()
        print_figures(figures, show=0)
        print(f"  replay this sample: SUITE_MATRIX_SEED={seed}; {time.monotonic() - started:.1f} s")
    assert figures.schedules == SAMPLE
    if figures.violating:
        shown = []
        for kind, outcome in figures.by_kind.items():
            small = shrink(outcome)
            shown.append(
                f"{figures.counts[kind]} x {kind} (--replay {outcome.seed}):\n  " + "\n  ".join(render(small.trace))
            )
        pytest.fail(
            f"seed {seed}: {figures.violating} of {figures.schedules} schedules violated an invariant:\n"
            + "\n".join(shown)
        )


def actor(world, name: str):
    return next(a for a in world.sched.actors if a.name == name)


def gone(*names: str):
    return lambda world: all(actor(world, name).done for name in names)


def paused(name: str):
    return lambda world: actor(world, name).wake_at > world.clock.now + 1


def paused_or_gone(name: str):
    """A start condition that stays true once the actor waited for has woken and finished."""
    return lambda world: paused(name)(world) or gone(name)(world)


def waiting_at(name: str, *texts: str):
    """The actor's next call is the one whose description holds every one of ``texts``."""
    return lambda world: all(text in world.sched._before(actor(world, name)) for text in texts)


def output_published(world) -> bool:
    return any(p.rsplit("/", 1)[1].startswith("part-compacted-run1-1") for p, _ in world.fs.children(DEFAULT_LOCATION))


def scripted(mode: str, cast: tuple[str, ...], rules: list[Rule], starts: dict | None = None):
    with world_clock():
        outcome = run_schedule(None, mode, cast, script=Script(rules, starts))
    trace = "\n  ".join(render(outcome.trace))
    return outcome, trace


def test_a_replay_after_an_overwrite_puts_no_old_row_back():
    """Finding 1: killed once its output moved in, an INSERT OVERWRITE, then the next run."""
    outcome, trace = scripted(
        "in_place",
        ("merge run1/1", "writer overwrite", "merge run2/1"),
        [Rule("merge run1/1", output_published)],
        {"writer overwrite": gone("merge run1/1"), "merge run2/1": gone("writer overwrite")},
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert world.partition_rows() == world.intent and sum(world.intent.values()) == 3, trace
    assert any(who.startswith("run2/1") and status is Status.FAILED for who, status, _ in world.reports), trace


def test_a_takeover_never_deletes_the_folder_a_switch_in_flight_names():
    """Finding 2: a switch's alter_partition in flight while a retry takes over."""
    outcome, trace = scripted(
        "location_switch",
        ("merge run1/1", "merge run1/2"),
        [Rule("merge run1/1", waiting_at("merge run1/1", "alter_partition (location"), "pause:30")],
        {"merge run1/2": paused("merge run1/1")},
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert world.location() in world.fs.dirs and world.partition_rows() == world.intent, trace


def test_a_paused_committer_never_unpublishes_a_later_owners_commit():
    """Finding 3: A paused with its output in, B takes over and finishes, a writer appends, A resumes."""
    outcome, trace = scripted(
        "in_place",
        ("merge run1/1", "merge run1/2", "writer append"),
        [Rule("merge run1/1", output_published, "pause:700")],
        {"merge run1/2": paused("merge run1/1"), "writer append": gone("merge run1/2")},
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert world.partition_rows() == world.intent and sum(world.intent.values()) == 11, trace
    assert not [s for who, s, _ in world.reports if who.startswith("run1/2") and s is Status.FAILED], trace


def test_a_partition_dropped_and_written_again_at_its_old_folder_reads_no_merged_row():
    """Finding 4: after a location switch, DROP PARTITION then INSERT INTO at the default path."""
    outcome, trace = scripted(
        "location_switch", ("merge run1/1", "writer drop_recreate"), [], {"writer drop_recreate": gone("merge run1/1")}
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert world.location() == DEFAULT_LOCATION and world.partition_rows() == world.intent, trace
    assert sum(world.intent.values()) == 3, trace


def test_a_paused_switch_finish_never_undoes_a_later_rollback():
    """Found by the explorer after the five: A switched and paused while its finish moved the old
    files to the trash; B took the switch over and finished it; a rollback switched the partition
    back and put the old files back. A resumes: it must not move them to the trash again, nor write
    over the rollback's manifest (its moves go into a moving trash that B's takeover renamed)."""
    outcome, trace = scripted(
        "location_switch",
        ("merge run1/1", "merge run1/2", "rollback run1"),
        [Rule("merge run1/1", waiting_at("merge run1/1", "/dt=1/000001_0 ->"), "pause:700")],
        {"merge run1/2": paused("merge run1/1"), "rollback run1": gone("merge run1/2")},
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert world.partition_rows() == world.intent and sum(world.intent.values()) == 8, trace
    assert "run1/2: reported SKIPPED" in trace and "rollback run1: rolled back run run1" in trace, trace


def test_a_switch_stopped_before_its_folder_was_built_is_undone_at_once():
    """The in-flight wait (finding 2) only where an alter_partition can be on the way: a switch
    killed before it moved its outputs into the new folder is undone by the next run, which then
    merges the partition, instead of leaving it SKIPPED for IN_FLIGHT_SECONDS."""
    outcome, trace = scripted(
        "location_switch",
        ("merge run1/1", "merge run2/1"),
        [Rule("merge run1/1", lambda w: w.commit_in_flight() and waiting_at("merge run1/1", "/staging/run1/")(w))],
        {"merge run2/1": gone("merge run1/1")},
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert [s for who, s, _ in world.reports if who.startswith("run2/1")] == [Status.MERGED], trace
    assert world.partition_rows() == world.intent, trace


def test_a_switch_that_lost_its_lock_before_switching_gives_itself_up():
    """Its folder built, the switch's job paused before its alter_partition and a retry took the
    lock (finding it in flight, it left the switch alone); resumed, the job finds its lock lost and
    stops, and since no call of it can land, it removes its own new folder and journal, so the next
    run merges the partition instead of leaving it SKIPPED for IN_FLIGHT_SECONDS (the
    location-switch adversary sample met it as a stolen lock at the commit's seventh call)."""
    outcome, trace = scripted(
        "location_switch",
        ("merge run1/1", "merge run1/2"),
        [Rule("merge run1/1", waiting_at("merge run1/1", "step folder_built"), "pause:30")],
        {"merge run1/2": paused("merge run1/1")},
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert "merge run1/1: paused 30 s (before: step folder_built)" in trace, trace
    assert "merge run1/1: alter_partition" not in trace and "run1/1: reported FAILED (LockLost" in trace, trace
    assert [s for who, s, _ in world.reports if who.startswith("run9/1")] == [Status.MERGED], trace
    assert world.partition_rows() == world.intent, trace


def test_a_rollback_finishes_the_dead_commit_it_finds_under_its_lock():
    """Found in the first million: run2's job killed with the partition's inputs in the trash and
    its outputs not yet in; a rollback of run1 takes the dead job's lock and finds its journal.
    Refusing and releasing the lock let a TRUNCATE in, after which the next run's replay moved
    run2's outputs in: the truncated rows back. The rollback finishes the dead commit under the
    lock first, so the writer comes in after the partition is whole again."""
    outcome, trace = scripted(
        "in_place",
        ("merge run1/1", "writer append", "merge run2/1", "rollback run1", "writer truncate"),
        [Rule("merge run2/1", waiting_at("merge run2/1", "step inputs_moved"))],
        {
            "writer append": gone("merge run1/1"),
            "merge run2/1": gone("writer append"),
            "rollback run1": gone("merge run2/1"),
            "writer truncate": gone("rollback run1"),
        },
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert "merge run2/1: killed (at: step inputs_moved)" in trace, trace
    assert "rollback run1: took over the lock of merge run2/1" in trace, trace
    assert world.partition_rows() == world.intent and sum(world.intent.values()) == 0, trace


def did(name: str, text: str):
    """Whether the actor's trace holds a line containing ``text``."""
    return lambda world: any(line.startswith(f"{name}: ") and text in line for line in render(world.sched.trace))


def test_a_paused_takeovers_finish_never_undoes_a_later_rollback():
    """Found in the 500,000 of fb40a25 (``--replay 20261265968915``): A switched, moved the old
    files to its trash and wrote its manifest, and was killed before releasing its journal; B took
    the switch over and paused before its finish; a rollback took the lock, switched the partition
    back and put the old files back. B resumed and moved them into the run's trash again: the
    partition read no rows. B's takeover takes the run's trash back as its moving trash, which
    the rollback's takeover renames, so B's late moves fail."""
    outcome, trace = scripted(
        "location_switch",
        ("merge run1/1", "merge run2/1", "rollback run1"),
        [
            Rule("merge run1/1", waiting_at("merge run1/1", ".released")),
            Rule(
                "merge run2/1",
                lambda w: (
                    did("merge run2/1", "renamed folder work/staging")(w)
                    and waiting_at("merge run2/1", "list ", "/t/dt=1")(w)
                ),
                "pause:700",
            ),
        ],
        {"merge run2/1": gone("merge run1/1"), "rollback run1": paused("merge run2/1")},
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert "merge run2/1: paused 700 s (before: list t/dt=1)" in trace, trace
    assert "rollback run1: rolled back run run1" in trace, trace
    assert world.partition_rows() == world.intent and sum(world.intent.values()) == 8, trace


def test_a_journal_write_landing_late_is_written_back_by_the_lock_holder():
    """Found in the 500,000 of fb40a25 (``--replay 20261266048421``): B took a dead job's commit
    over and paused before writing the journal; C took the lock and the commit over; B's write then
    landed over C's journal, and C, finding the journal not its own, stopped with the commit
    unfinished and released the lock; a TRUNCATE came in, and the next run's replay moved the
    old rows back. C holds the lock, so the journal's other owner is a job that lost it: C writes
    its own record back and finishes the commit before any writer comes in."""
    outcome, trace = scripted(
        "in_place",
        ("merge run1/1", "merge run2/1", "merge run1/2", "writer truncate"),
        [
            Rule("merge run1/1", waiting_at("merge run1/1", "step inputs_moved")),
            Rule("merge run2/1", waiting_at("merge run2/1", "write ", "/journal/"), "pause:30"),
            Rule("merge run1/2", waiting_at("merge run1/2", "rename folder ", "/trash/"), "pause:40"),
        ],
        {
            "merge run2/1": gone("merge run1/1"),
            "merge run1/2": paused_or_gone("merge run2/1"),
            "writer truncate": gone("merge run1/2", "merge run2/1"),
        },
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert "merge run2/1: wrote work/journal/" in trace, trace
    # C finished the dead job's commit under its lock, before the TRUNCATE came in.
    assert "merge run1/2: wrote work/manifests/run1/" in trace and "run1/2: reported SKIPPED" not in trace, trace
    assert trace.index("merge run1/2: wrote work/manifests/run1/") < trace.index("writer truncate: truncate done"), (
        trace
    )
    assert world.partition_rows() == world.intent and sum(world.intent.values()) == 0, trace


BEFORE_THE_MARK = ("create exclusive ", ".stopped")


def test_a_stop_mark_landing_late_is_replaced_by_the_holders_own():
    """Found in the 500,000 of 7472795 (``--replay 20261267812343``): a writer replaced an input
    the dead job had moved; B's replay saw it and stopped, but paused before writing its stop mark;
    C took over, saw the same and stopped too, but B's late mark (naming B) was there first, so C's
    exclusive create failed and C's journal had no mark of its own; after a TRUNCATE the next run's
    replay, seeing no mark of C's, moved the merged rows in. C now replaces a mark that is not its
    journal's with its own."""
    outcome, trace = scripted(
        "in_place",
        ("merge run1/1", "writer append_reuse", "merge run1/2", "merge run2/1", "writer truncate"),
        [
            Rule("merge run1/1", waiting_at("merge run1/1", "step inputs_moved")),
            Rule("merge run1/2", waiting_at("merge run1/2", *BEFORE_THE_MARK), "pause:30"),
            Rule("merge run2/1", waiting_at("merge run2/1", *BEFORE_THE_MARK), "pause:30"),
        ],
        {
            "writer append_reuse": gone("merge run1/1"),
            "merge run1/2": gone("writer append_reuse"),
            "merge run2/1": paused_or_gone("merge run1/2"),
            "writer truncate": gone("merge run1/2", "merge run2/1"),
        },
    )
    world = outcome.world
    assert not outcome.violations, trace
    assert "merge run1/2: paused 30 s (before: create exclusive" in trace, trace
    assert "merge run2/1: paused 30 s (before: create exclusive" in trace, trace
    assert world.partition_rows() == world.intent and sum(world.intent.values()) == 0, trace


def test_a_zombie_takeover_taking_the_trash_away_is_not_taken_for_a_writers_delete():
    """Found in the 1,000,000 of 2796cac (``--replay 20261264862692``): A switched, moved the old
    files to the run's trash and paused before its manifest; B took the switch over, renamed the
    staging folder and paused before taking the trash; C took it over from B, finished up to its
    last look at the old folder and paused; B resumed and, taking the trash (the run's trash C's
    finish had just renamed its moving trash back to), renamed it away. C found the old files
    neither in the old folder nor in the trash, took them for a writer's delete and switched the
    partition back to the empty old folder: the next run read no rows and purged the merged copy.
    C now looks at the old folder again while the old files are in its own generation of the moving
    trash, which no earlier holder's takeover renames; the run's trash B takes later holds only
    superseded copies (a rollback of the run then refuses: not in the trash)."""
    outcome, trace = scripted(
        "location_switch",
        ("merge run1/1", "merge run1/2", "merge run2/1"),
        [
            Rule("merge run1/1", waiting_at("merge run1/1", "write ", "/manifests/"), "pause:30"),
            Rule(
                "merge run1/2",
                lambda w: (
                    did("merge run1/2", "renamed folder work/staging")(w)
                    and waiting_at("merge run1/2", "statuses of 2")(w)
                ),
                "pause:30",
            ),
            Rule(  # C renamed its moving trash to the run's trash and is about to look at something again
                "merge run2/1",
                lambda w: did("merge run2/1", ".moving~2 -> ")(w) and waiting_at("merge run2/1", "statuses of")(w),
                "pause:700",
            ),
            Rule("merge run1/1", did("merge run2/1", "paused 700")),
        ],
        {"merge run1/2": paused_or_gone("merge run1/1"), "merge run2/1": paused_or_gone("merge run1/2")},
    )
    world = outcome.world
    assert "merge run2/1: paused 700 s" in trace, trace
    assert "merge run1/2: renamed folder work/trash/" in trace, trace  # B took the run's trash while C paused
    assert not outcome.violations, trace
    assert world.partition_rows() == world.intent and sum(world.intent.values()) == 8, trace
    assert world.location().endswith("/_compacted/dt=1/run1-1"), trace


def test_an_in_place_commit_rereads_the_location_under_its_lock():
    """Finding 5: ALTER TABLE ... SET LOCATION between the plan and the commit."""
    outcome, trace = scripted(
        "in_place",
        ("merge run1/1", "writer set_location"),
        [Rule("merge run1/1", waiting_at("merge run1/1", "lock "), "pause:6")],
        {"writer set_location": paused("merge run1/1")},
    )
    world = outcome.world
    assert not outcome.violations, trace
    first = [status for who, status, _ in world.reports if who.startswith("run1/1")]
    assert first == [Status.SKIPPED], trace
    # The folder the partition left is not touched, and the partition keeps its writer's statistics.
    left = Counter(p.rsplit("/", 1)[1] for p, n in world.fs.children(DEFAULT_LOCATION) if n is not None)
    assert sorted(left) == sorted(INPUT_NAMES), trace
    assert (
        "numFiles" not in world.hms.partitions[("1",)].parameters
        or world.hms.partitions[("1",)].parameters["numFiles"] != "1"
    ), trace


def by_path(world, folder: str) -> Counter:
    """The rows of the data files directly in ``folder``, whether or not a partition reads it."""
    return Counter(
        r
        for p, n in world.fs.children(folder)
        if n is not None and not p.rsplit("/", 1)[1].startswith(("_", "."))
        for r in n.rows
    )


def stale_writer_at(writer: str, point: str):
    """A location switch paused at ``point`` while a writer that looked the location up before
    the switch writes by path (``STALE_WRITERS``); the switch then goes on."""
    return scripted(
        "location_switch",
        ("merge run1/1", f"writer {writer}"),
        [Rule("merge run1/1", waiting_at("merge run1/1", point), "pause:5")],
        {f"writer {writer}": paused("merge run1/1")},
    )


def test_a_by_path_overwrite_right_after_a_switch_is_what_the_partition_reads():
    """Finding 4, second half: a writer that looked the location up before the switch replaces
    the old folder's files by path (Spark's INSERT OVERWRITE, new names) right after the
    alter_partition. The merged copy of the rows it replaced must not be what the partition reads
    while the job reports MERGED (it did, on c386897): the switch is undone, the partition reads
    the old folder as the writer left it, and the job says so."""
    outcome, trace = stale_writer_at("stale_overwrite", "step switched")
    world = outcome.world
    assert not outcome.violations, trace
    assert world.location() == DEFAULT_LOCATION and world.partition_rows() == world.intent, trace
    assert sum(world.intent.values()) == 3, trace
    first = [(status, reason) for who, status, reason in world.reports if who.startswith("run1/1")]
    assert [s for s, _ in first] == [Status.FAILED] and "switched back" in first[0][1], trace


def test_a_by_path_overwrite_while_the_old_files_move_out_is_what_the_partition_reads():
    """The same writer between the finish's moves of the old files to the trash: one is there
    already, the others the writer deleted. The partition reads the writer's files only (the one
    moved before stays in the trash, named in the report); nothing is rolled back on top."""
    outcome, trace = stale_writer_at("stale_overwrite", "/dt=1/000001_0 ->")
    world = outcome.world
    assert not outcome.violations, trace
    assert world.location() == DEFAULT_LOCATION and world.partition_rows() == world.intent, trace
    first = [(status, reason) for who, status, reason in world.reports if who.startswith("run1/1")]
    assert [s for s, _ in first] == [Status.FAILED] and "/trash/" in first[0][1], trace


def test_a_by_path_append_right_after_a_switch_is_moved_where_it_is_read():
    """An append by path into the old folder while its files are all still there is an append:
    the commit moves it into the new folder and reports MERGED, every row read once."""
    outcome, trace = stale_writer_at("stale_append", "step switched")
    world = outcome.world
    assert not outcome.violations, trace
    assert world.location() != DEFAULT_LOCATION and world.partition_rows() == world.intent, trace
    assert [s for who, s, _ in world.reports if who.startswith("run1/1")] == [Status.MERGED], trace


def test_files_arriving_after_the_old_files_left_are_never_read_beside_the_merged_copy():
    """Once every old file is in the trash, a by-path overwrite and an append look the same (new
    names in an emptied folder). Seen by the commit, it reports FAILED saying so; arriving after
    the job (beyond what a location switch supports), the retirement keeps them where they are
    and says so. Neither moves them beside the merged copy (the retirement did on c386897: every
    replaced row read twice). An append that takes an input's freed name (Hive's 000000_0) is one of
    those arrivals too, never an overwrite to switch back for."""
    for kind, seen_by_the_job in itertools.product(("stale_overwrite", "stale_append_reuse"), (True, False)):
        # paused before its journal's release, or after the job
        rules = [Rule("merge run1/1", waiting_at("merge run1/1", ".released"), "pause:5")] if seen_by_the_job else []
        outcome, trace = scripted(
            "location_switch",
            ("merge run1/1", f"writer {kind}", "maintain run8"),
            rules,
            {
                f"writer {kind}": paused("merge run1/1") if seen_by_the_job else gone("merge run1/1"),
                "maintain run8": gone("merge run1/1", f"writer {kind}"),
            },
        )
        world = outcome.world
        merged = world.partition_rows()
        assert world.location() != DEFAULT_LOCATION and max(merged.values()) == 1, trace
        arrived = by_path(world, DEFAULT_LOCATION)  # kept where the writer put them, never beside the copy
        assert arrived and not set(merged) & set(arrived), trace
        assert (arrived if kind == "stale_overwrite" else merged + arrived) == world.intent, trace
        if kind == "stale_append_reuse":  # it did take an input's name
            assert {p.rsplit("/", 1)[1] for p, n in world.fs.children(DEFAULT_LOCATION) if n is not None} <= set(
                INPUT_NAMES
            ), trace
        first = [(status, reason) for who, status, reason in world.reports if who.startswith("run1/1")]
        if seen_by_the_job:
            assert [s for s, _ in first] == [Status.FAILED] and "cannot tell" in first[0][1], trace
        else:
            assert [s for s, _ in first] == [Status.MERGED], trace
            assert "maintain run8: deleted folder work/trash/run1/" in trace, trace  # retired, the files kept


TWINS = int(os.environ.get("SUITE_EXPLORER_TWINS", "16"))


def test_the_double_ends_where_the_real_file_system_does(spark, tmp_path, matrix_rng):
    """A sample of the explored schedules runs again on the local disk through HadoopFS (the JVM
    helper, Hadoop's local file system), replaying the same decisions: both end in the same state
    (every file and its rows, the partition's location, every report), so the in-memory double the
    sample relies on keeps the real file system's semantics."""
    from explorer.real_fs import RealFS
    from explorer.scenario import twin_differences

    seed, rng = matrix_rng
    picked = [seed * 1_000_003 + rng.randrange(1_000_000) for _ in range(TWINS)]
    with world_clock():
        for n, schedule in enumerate(picked):
            memory = run_schedule(schedule)
            root = tmp_path / f"s{n}"
            real = run_schedule(
                None,
                memory.mode,
                memory.cast,
                list(memory.decisions),
                fs_factory=lambda sched, clock: RealFS(sched, clock, spark, root),  # noqa: B023 - run here
            )
            apart = twin_differences(memory, real)
            assert not apart, (
                f"schedule {schedule} (seed {seed}) ends apart on the double and on the disk:\n  "
                + "\n  ".join(apart[:12])
                + "\n on the disk:\n  "
                + "\n  ".join(render(real.trace))
            )
