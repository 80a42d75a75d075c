"""One schedule: a partition of small files, the actors that act on it, the writers' intent, and
the invariants checked after every report and at the end.

The actors run the real code of the merge job's commit side: ``Preparer._recover`` (the replay of
an interrupted commit, under the lock), ``Finisher.finish`` (the lock, the state read, the
journaled in-place commit or the location switch, the statistics), ``recovery.maintain`` (orphans
of other runs, the purge and ``retire``), ``rollback.rollback_run``. Only what needs Spark is
stood in for: the merge job's staging writes one output holding its inputs' rows, and the rows
in a folder are counted from the files' rows (``partition_rows``).

The rows are tracked logically: every data file holds a tuple of row ids, every writer's rows
are new ids, and the intent (what the partition must hold by its writers' doing) is updated at
each writer's step: an append adds its rows, an overwrite replaces them, a drop removes the
partition. A merge and a rollback never change it."""

from __future__ import annotations

import contextlib
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from explorer.scheduler import Actor, Decision, Scheduler, ScheduleTooLong
from explorer.world import Clock, MemoryFS, MemoryMetastore, Partition
from hive_compaction.commit import in_place, location_switch, recovery, rollback, steps, work_area
from hive_compaction.commit.record import StagedOutput
from hive_compaction.commit.rollback import RollbackError, rollback_run
from hive_compaction.commit.work_area import WorkArea
from hive_compaction.merge import committers, finish, prepare
from hive_compaction.merge.finish import Finisher
from hive_compaction.merge.grouping import Engine, Group, Work
from hive_compaction.merge.prepare import Preparer
from hive_compaction.merge.step_times import StepTimes
from hive_compaction.model.batch import PartitionTask
from hive_compaction.model.results import PartitionResult, Status
from hive_compaction.storage import hadoop_fs, metastore_lock
from hive_compaction.storage.listing import MERGED_PREFIX, data_files
from hive_compaction.storage.metastore_lock import LockTimeout
from hive_compaction.storage.paths import partition_id

DB, NAME = "db", "t"
TABLE = f"{DB}.{NAME}"
TABLE_LOCATION = "file:///w/db.db/t"
PARTITION, VALUES = "dt=1", ("1",)
DEFAULT_LOCATION = f"{TABLE_LOCATION}/{PARTITION}"
WORK_DIR = "file:///w/work/db.t"
PID = partition_id(TABLE, PARTITION)
INPUT_NAMES = tuple(f"00000{i}_0" for i in range(4))

WRITERS = (
    "append",
    "append_reuse",
    "overwrite",
    "overwrite_reuse",
    "truncate",
    "drop",
    "drop_recreate",
    "set_location",
)
# Writers that take no Metastore lock (Spark's inserts), where the mode claims to be safe with them:
# in place, the commit's checks must see what they did. The others (Hive's DDL and, for a
# location switch, every writer: that mode is for tables whose writers go through the Metastore)
# wait for the partition's lock.
LOCKLESS = {"in_place": {"append", "append_reuse", "overwrite", "overwrite_reuse"}, "location_switch": set()}
# Writers by path that looked the partition's location up when the schedule began (before any
# switch) and write there without a lock: outside a location switch's contract (its writers go
# through the Metastore), so only written schedules cast them; what the tool does with their
# files is what those tests check. ``stale_append_reuse`` is Hive's INSERT INTO, which takes an
# input's name (000000_0) once the folder no longer holds it.
STALE_WRITERS = ("stale_append", "stale_append_reuse", "stale_overwrite")
MODES = ("in_place", "location_switch")

# The modules whose clock is the world's while a schedule runs.
_TIMED = (
    in_place,
    location_switch,
    work_area,
    rollback,
    recovery,
    metastore_lock,
    finish,
    committers,
    prepare,
    hadoop_fs,
)


class World:
    """The state of one schedule, its actors' reports and the violations found."""

    def __init__(self, sched: Scheduler, clock: Clock, mode: str, fs_factory=None):
        self.sched, self.clock, self.mode = sched, clock, mode
        self.fs = (fs_factory or MemoryFS)(sched, clock)
        self.hms = MemoryMetastore(sched, clock, TABLE, TABLE_LOCATION)
        sched.on_resume = self.hms.heartbeat
        self.intent: Counter | None = Counter()
        self.left_by_writers: set[str] = set()  # folders a writer moved its partition away from
        self.writes = 0  # writers' statements so far
        self.reports: list[tuple[str, Status, str]] = []
        self.violations: list[str] = []
        self._rows = (f"r{n}" for n in itertools.count())
        self._names = (f"part-{n:05d}-w" for n in itertools.count())
        self.fs.mkdirs(DEFAULT_LOCATION)
        for name in INPUT_NAMES:
            self.fs.put(f"{DEFAULT_LOCATION}/{name}", self.new_rows(2))
        self.intent = Counter(self.fs.rows_under(DEFAULT_LOCATION))
        self.hms.partitions[VALUES] = Partition(DEFAULT_LOCATION, {"numFiles": "4"})

    def new_rows(self, n: int) -> tuple[str, ...]:
        return tuple(next(self._rows) for _ in range(n))

    # -- what is where --
    def location(self) -> str | None:
        p = self.hms.partitions.get(VALUES)
        return None if p is None else p.location

    def partition_rows(self) -> Counter:
        loc = self.location()
        return Counter(self.fs.rows_under(loc)) if loc else Counter()

    def rows_of(self, files) -> int:
        return sum(len(self.fs.files[f.path.rstrip("/")].rows) for f in files if f.path.rstrip("/") in self.fs.files)

    def commit_in_flight(self) -> bool:
        return WorkArea(WORK_DIR).journal(PID) in self.fs.files

    def violated(self, kind: str, what: str) -> None:
        """``kind``: the invariant, in words that do not vary between schedules."""
        self.violations.append(Violation(kind, what))
        self.sched.trace.append(f"VIOLATED ({kind}): {what}")

    # -- the invariants --
    def check_rows(self, who: str, claim: str) -> None:
        """The partition holds exactly its writers' intent (``claim``: what made it a must)."""
        if self.intent is None:
            if self.location() is not None:
                self.violated(
                    f"{claim.split()[0]} {claim.split()[1]}: a dropped partition exists",
                    f"{who} {claim}: the partition exists, yet its last writer dropped it",
                )
            return
        if self.location() is None:
            self.violated(
                f"{claim.split()[0]} {claim.split()[1]}: the partition is gone",
                f"{who} {claim}: the partition is gone, yet its writers' rows are {sum(self.intent.values())}",
            )
            return
        here = self.partition_rows()
        if here != self.intent:
            self.violated(
                f"{claim.split()[0]} {claim.split()[1]}: rows {_how(here, self.intent)}",
                f"{who} {claim}: {_rows_text(here)} where {_rows_text(self.intent)} belong"
                f"{_difference(here, self.intent)}",
            )

    def check_snapshot(self, who: str) -> None:
        here = self.partition_rows()
        twice = sorted(r for r, n in here.items() if n > 1)
        if twice:
            self.violated("a reader saw a row twice", f"{who}: a reader saw row(s) {twice[:4]} twice")

    def report(self, who: str, result: PartitionResult, writes_before: int | None = None) -> None:
        """An actor's result; a success must be true now, unless another commit is in flight or
        a writer wrote since the actor began committing (the end checks what lasts)."""
        status = result.status
        self.reports.append((who, status, result.reason))
        self.sched.trace.append(
            f"{who}: reported {status.value.upper()}" + (f" ({result.reason[:160]})" if result.reason else "")
        )
        quiet = writes_before is None or writes_before == self.writes
        if status in (Status.MERGED, Status.NOTHING_TO_DO) and quiet and not self.commit_in_flight():
            self.check_rows(who, f"reported {status.value.upper()}")
            if status is Status.MERGED and self.location() and result.location.rstrip("/") != self.location():
                self.violated(
                    "reported MERGED: at a folder the partition does not read",
                    f"{who} reported MERGED at {result.location}, but the partition reads {self.location()}",
                )

    def check_end(self) -> None:
        """After the settling run: nothing doubled or brought back, the Metastore never names a
        missing folder, a dropped partition's folder never comes back, and rows the partition
        misses are where a FAILED report said they are (in the work area)."""
        for a in self.sched.actors:
            if a.error is not None:
                self.violated(
                    f"crashed: {type(a.error).__name__}", f"{a.name} crashed: {type(a.error).__name__}: {a.error}"
                )
        loc = self.location()
        if loc is not None and loc not in self.fs.dirs:
            self.violated("the Metastore names a missing folder", f"the Metastore names {loc}, which does not exist")
        if self.intent is None:
            stray = [] if DEFAULT_LOCATION in self.left_by_writers else self.fs.rows_under(DEFAULT_LOCATION)
            if stray:
                self.violated(
                    "a dropped partition's rows are back at its default path",
                    f"the partition was dropped, yet {DEFAULT_LOCATION} holds {len(stray)} rows again "
                    "(MSCK REPAIR would register them)",
                )
            return
        here = self.partition_rows()
        extra = here - self.intent
        missing = self.intent - here
        if extra:
            self.violated(
                "at the end: rows extra",
                f"at the end: {_rows_text(here)} where {_rows_text(self.intent)} "
                f"belong{_difference(here, self.intent)}",
            )
        if missing:
            # Missing rows are parked for a person to decide only while the runs keep failing: the
            # settling run must report the partition FAILED, not an earlier run alone.
            failed = [r for r in self.reports if r[1] is Status.FAILED and r[0].startswith(SETTLING_RUN)]
            loc = self.location()
            kept = Counter(r for p, n in self.fs.files.items() if not (loc and p.startswith(loc + "/")) for r in n.rows)
            if not failed:
                self.violated(
                    "at the end: rows missing, no FAILED",
                    f"at the end: {sum(missing.values())} row(s) missing and the next run did not report "
                    "the partition FAILED",
                )
            elif missing - kept:
                self.violated("at the end: rows lost", f"at the end: row(s) {sorted(missing - kept)[:4]} are nowhere")


@dataclass(frozen=True)
class Violation:
    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


def _how(here: Counter, want: Counter) -> str:
    return " and ".join(x for x, c in (("extra", here - want), ("missing", want - here)) if c)


def _rows_text(c: Counter) -> str:
    return f"{sum(c.values())} rows"


def _difference(here: Counter, want: Counter) -> str:
    extra, missing = here - want, want - here
    parts = ([f"extra {sorted(extra)[:4]}"] if extra else []) + ([f"missing {sorted(missing)[:4]}"] if missing else [])
    return f" ({'; '.join(parts)})" if parts else ""


def task_at(world: World, location: str) -> PartitionTask:
    return PartitionTask(
        database=DB,
        table=NAME,
        partition=PARTITION,
        values=VALUES,
        location=location,
        table_location=TABLE_LOCATION,
        storage_format="orc",
        work_dir=WORK_DIR,
        target_file_size=1 << 20,
        small_file_limit=1 << 19,
        min_small_files=2,
        merge_mode="copy",
        commit_mode=world.mode,
        lock_wait_seconds=30,
    )


# -- the actors' programs --
def merge_job(world: World, run: str, attempt: str):
    """A merge job's work on the partition: plan (the Metastore's location), replay a journal
    left behind, list, stage one output of every file's rows, commit (``Finisher.finish``)."""

    def program():
        fs, owner, writes = world.fs, f"{run}/{attempt}", world.writes
        location = world.hms.location(TABLE, VALUES)
        if location is None:
            world.sched.note("planned nothing: no partition")
            return
        task, area = task_at(world, location), WorkArea(WORK_DIR)
        preparer = Preparer(None, fs, world.hms, run, attempt, owner, dry_run=False)
        got = preparer._recover(task, area, PID)
        if isinstance(got, PartitionResult):
            return world.report(owner, got, writes)
        files, folders = data_files(fs.list(task.location))
        result = PartitionResult(
            TABLE,
            PARTITION,
            task.location,
            Status.NOTHING_TO_DO,
            files_before=len(files),
            files_after=len(files),
            listed=True,
        )
        if folders or len(files) < 2:
            return world.report(owner, result, writes)
        staging = f"{area.staging(run, PID)}/{attempt}"
        rows: list[str] = []
        for f in files:  # the job reads every input (a file gone since the listing fails it)
            fs.sched.point("read {}", f.path)
            node = fs.files.get(f.path)
            if node is None:
                result.status, result.reason = Status.FAILED, f"{f.path} vanished while it was read"
                return world.report(owner, result)
            rows += node.rows
        name = f"{MERGED_PREFIX}{run}-{attempt}-0"
        fs.write_data(f"{staging}/{name}", tuple(rows))
        staged = [StagedOutput(f"{staging}/{name}", name, fs.files[f"{staging}/{name}"].size)]
        work = Work(
            task,
            PID,
            area,
            result,
            files,
            {},
            [Group(Engine.COPY, files, staged, rows=len(rows))],
            "zlib",
            world.clock.monotonic(),
            staging=staging,
        )
        world.report(owner, Finisher(None, fs, world.hms, run, attempt, owner, StepTimes()).finish(work), writes)

    return program


def maintain_job(world: World, run: str, days: float = 0.0):
    """A later run's merge job looking after the work area: orphaned journals of other runs (of
    partitions it does not plan itself), the purge of expired runs (``days`` later) and the
    retirement of switched-away folders."""

    def program():
        if days:
            world.sched.sleep(days * 86400)
        location = world.location()
        area = {"table": TABLE, "table_location": TABLE_LOCATION, "work_dir": WORK_DIR, "trash_retention_days": 1}
        planned = [task_at(world, location)] if location else []
        for result in recovery.maintain(world.fs, run, f"{run}/1", [area], planned, world.hms):
            world.report(f"{run}/1 (maintain)", result)

    return program


def next_run(world: World, run: str):
    """The next run's merge job: it looks after the work area, then merges the partition."""
    maintain, merge = maintain_job(world, run), merge_job(world, run, "1")

    def program():
        maintain()
        merge()

    return program


def rollback_job(world: World, run: str):
    def program():
        try:
            rollback_run(world.fs, WorkArea(WORK_DIR), run, TABLE_LOCATION, metastore=world.hms)
        except RollbackError as e:
            world.sched.note("rollback refused: {}", str(e)[:160])
            return
        world.sched.note("rolled back run {}", run)
        if not world.commit_in_flight():
            world.check_rows("rollback", f"rolled back run {run}")

    return program


def writer(world: World, kind: str):
    """One writer's statement, in one step: it changes the partition and the intent (under the
    partition's Metastore lock unless it is ``LOCKLESS`` in the world's mode, or ``STALE_WRITERS``:
    by path, at the location it had when the writer was cast)."""
    looked_up, how = world.location(), kind.removeprefix("stale_")

    def program():
        if kind in LOCKLESS[world.mode] or kind in STALE_WRITERS:
            return write()
        try:
            with world.hms.lock(TABLE, PARTITION, 600, writer=True):
                write()
        except LockTimeout:
            world.sched.note("{}: gave up waiting for the lock", kind)

    def write():
        world.sched.point("writer: {}", kind)
        world.writes += 1
        fs, hms, loc = world.fs, world.hms, looked_up if kind in STALE_WRITERS else world.location()
        if loc is None and how != "drop_recreate":
            world.sched.note("{}: no partition, nothing written", kind)
            return
        rows = world.new_rows(3)
        if how in ("append", "append_reuse"):
            free = [n for n in INPUT_NAMES if f"{loc}/{n}" not in fs.files] if how == "append_reuse" else []
            name = free[0] if free else next(world._names)
            fs.put(f"{loc}/{name}", rows)
            world.intent.update(rows)
        elif how in ("overwrite", "overwrite_reuse", "truncate"):
            for p, n in fs.children(loc):
                if n is not None and not p.rsplit("/", 1)[1].startswith(("_", ".")):
                    fs.drop_file(p)
            if how == "truncate":
                rows = ()
            else:
                fs.put(f"{loc}/{INPUT_NAMES[0] if how == 'overwrite_reuse' else next(world._names)}", rows)
            world.intent = Counter(rows)
        elif how in ("drop", "drop_recreate"):
            if loc is not None:
                del hms.partitions[VALUES]
                fs.remove_tree(loc)
                world.intent = None
            if how == "drop_recreate":  # then INSERT INTO: the partition again, at its default path
                fs.put(f"{DEFAULT_LOCATION}/{next(world._names)}", rows)
                hms.partitions[VALUES] = Partition(DEFAULT_LOCATION, created=int(world.clock.now) + 1)
                # What another writer left at the default path is read again: that writer's doing.
                left = DEFAULT_LOCATION in world.left_by_writers
                world.intent = Counter(fs.rows_under(DEFAULT_LOCATION)) if left else Counter(rows)
        elif how == "set_location":  # ALTER TABLE ... PARTITION ... SET LOCATION to a folder with its own rows
            moved = f"{TABLE_LOCATION}/dt=1-moved"
            if moved != loc:
                world.left_by_writers.add(loc)
                fs.put(f"{moved}/{next(world._names)}", rows)
                hms.partitions[VALUES].location = moved
                world.intent = Counter(fs.rows_under(moved))
        world.sched.note(
            "{} done: the partition's writers' rows are now {}",
            kind,
            "none (dropped)" if world.intent is None else sum(world.intent.values()),
        )

    return program


def reader(world: World, n: int):
    def program():
        world.sched.point("reader: list the partition")
        world.check_snapshot(f"reader {n}")

    return program


@dataclass
class Outcome:
    seed: int | None
    mode: str
    cast: tuple[str, ...]
    decisions: list[Decision]
    trace: list[str]
    violations: list[Violation] = field(default_factory=list)
    beyond_lease: list[str] = field(default_factory=list)  # what no lease fences happened (world.MemoryMetastore)
    world: World | None = None


def cast_for(rng: random.Random) -> tuple[str, ...]:
    """Who acts in a schedule: the first attempt, and a draw of a retry, the next run, writers,
    readers, a rollback and a purge."""
    cast = ["merge run1/1"]
    if rng.random() < 0.6:
        cast.append("merge run1/2")
    if rng.random() < 0.5:
        cast.append("merge run2/1")
    cast += [f"writer {k}" for k in rng.sample(WRITERS, rng.choice((0, 1, 1, 2)))]
    if rng.random() < 0.5:
        cast.append("reader 1")
    if rng.random() < 0.25:
        cast.append("rollback run1")
    if rng.random() < 0.25:
        cast.append("maintain run8")
    return tuple(cast)


def _actors(world: World, cast: tuple[str, ...]) -> list[Actor]:
    actors = []
    for n, who in enumerate(cast):
        kind, arg = who.split(" ", 1)
        if kind == "merge":
            run, attempt = arg.split("/")
            program = merge_job(world, run, attempt)
            start = {"run1/1": 0.0, "run1/2": 1.0}.get(arg, 3.0)
            actors.append(Actor(who, program, start_after=start))
        elif kind == "writer":
            actors.append(Actor(who, writer(world, arg), killable=False, pausable=False, start_after=0.5 * n))
        elif kind == "reader":
            actors.append(Actor(who, reader(world, n), killable=False, pausable=False, start_after=0.3 * n))
        elif kind == "rollback":
            actors.append(Actor(who, rollback_job(world, arg), start_after=2.0))
        elif kind == "maintain":
            actors.append(Actor(who, maintain_job(world, arg, days=2.0), start_after=2.0))
    return actors


@contextlib.contextmanager
def world_clock():
    """The commit modules read time from the world's clock while schedules run (each schedule's:
    ``run_schedule`` sets it), and every protocol step the code reports (``commit.steps``) is a
    line of the trace and a scheduling point: an actor may be killed or paused right at it."""

    class Proxy:
        def time(self):
            return _CLOCK[0].time()

        def monotonic(self):
            return _CLOCK[0].monotonic()

        def sleep(self, seconds):
            _CLOCK[0].sleep(seconds)

    proxy, saved = Proxy(), [(m, m.time) for m in _TIMED]
    rows_saved = (finish.partition_rows, committers.partition_rows, prepare.partition_rows)
    counting = lambda spark, fmt, files, footers=None: CURRENT[0].rows_of(files)
    for m in _TIMED:
        m.time = proxy
    finish.partition_rows = committers.partition_rows = prepare.partition_rows = counting
    steps.observe_all(_at_step)
    try:
        yield
    finally:
        steps.stop_observing(_at_step)
        for m, t in saved:
            m.time = t
        finish.partition_rows, committers.partition_rows, prepare.partition_rows = rows_saved


def _at_step(step: steps.Step, label: str) -> None:
    sched = CURRENT[0].sched
    sched.note("reached {}", step.value)
    sched.point("step {}", step.value)


CURRENT: list[World] = []


@dataclass
class Rule:
    """A step of a written schedule (``Script``): once ``when(world)`` holds, ``actor``
    (its cast name) is killed, or paused for ``action`` ("pause:<seconds>")."""

    actor: str
    when: Callable[[World], bool]
    action: str = "kill"
    done: bool = False


class Script:
    """A schedule written by hand: the actors take their steps in cast order (the first ready one
    whose ``starts`` condition holds), and each ``Rule`` fires once, when its condition holds."""

    def __init__(self, rules: list[Rule], starts: dict[str, Callable[[World], bool]] | None = None):
        self.rules, self.starts = rules, starts or {}
        self.world: World | None = None
        self.order: list[str] = []

    def __call__(self, ready: list[Actor]) -> Decision:
        names = [a.name for a in ready]
        for rule in self.rules:
            if (
                not rule.done
                and rule.actor in names
                and ready[names.index(rule.actor)].glet is not None
                and rule.when(self.world)
            ):
                rule.done = True
                return Decision(names.index(rule.actor), rule.action)
        for who in self.order:
            if who in names and self.starts.get(who, lambda w: True)(self.world):
                return Decision(names.index(who))
        return Decision(0, "pause:1")  # every ready actor waits for its start: a second passes


def run_schedule(
    seed: int | None = None,
    mode: str | None = None,
    cast: tuple[str, ...] | None = None,
    decisions: list[Decision] | None = None,
    kill_rate: float = 0.03,
    pause_rate: float = 0.03,
    script: Script | None = None,
    fs_factory=None,
) -> Outcome:
    """One schedule, drawn from ``seed``, replayed from ``decisions`` or written as a ``script``
    (with its ``mode`` and ``cast``). Call inside ``world_clock``."""
    rng = random.Random(seed)
    mode = mode or rng.choice(MODES)
    cast = cast or cast_for(rng)
    clock = Clock()
    sched = Scheduler(clock, rng, decisions, kill_rate, pause_rate, policy=script)
    world = World(sched, clock, mode, fs_factory)
    if script is not None:
        script.world, script.order = world, list(cast)
    CURRENT[:] = [world]
    _CLOCK[0] = clock
    try:
        sched.run(_actors(world, cast))
        # The next run, a while later, with nothing in its way: it repairs what can be repaired.
        settle = Scheduler(clock, None, [])
        settle.trace, world.sched = sched.trace, settle
        world.fs.sched = world.hms.sched = settle
        settle.on_resume = world.hms.heartbeat
        clock.sleeper = settle.sleep
        settle.run([Actor(f"merge {SETTLING_RUN}/1", next_run(world, SETTLING_RUN), start_after=ORPHAN_WAIT)])
        world.check_end()
    except ScheduleTooLong as e:
        world.violated("the schedule did not end", str(e))
    return Outcome(seed, mode, cast, sched.decisions, sched.trace, world.violations, world.hms.beyond_lease, world)


SETTLING_RUN = "run9"
# The settling run starts once every journal left behind is an orphan's.
ORPHAN_WAIT = in_place.ORPHAN_AGE_SECONDS + 60
_CLOCK: list[Clock] = [Clock()]


def end_state(world: World) -> dict:
    """What a schedule left, to compare two runs of it: every file (its rows, or that it is a
    record), the partition's location, and each actor's reports."""
    files = {
        _released(p): ("rows", tuple(sorted(n.rows))) if n.text is None else ("record",)
        for p, n in world.fs.files.items()
        if not p.rsplit("/", 1)[1].endswith(".crc")
    }
    return {
        "files": files,
        "location": world.location(),
        "reports": [(who, status.value) for who, status, _ in world.reports],
        "violations": sorted(v.kind for v in world.violations),
    }


def _released(path: str) -> str:
    """A released journal's name without its random part (work_area.release_journal)."""
    folder, name = path.rsplit("/", 1)
    return f"{folder}/{name.rsplit('.', 2)[0]}.<released>" if name.endswith(".released") else path


def twin_differences(a: Outcome, b: Outcome) -> list[str]:
    """How two runs of one schedule (on the double and on the real file system) ended apart."""
    sa, sb = end_state(a.world), end_state(b.world)
    out = [f"{k}: {sa[k]!r} != {sb[k]!r}" for k in ("location", "reports", "violations") if sa[k] != sb[k]]
    fa, fb = sa["files"], sb["files"]
    out += [f"{p}: {fa.get(p)} != {fb.get(p)}" for p in sorted(set(fa) | set(fb)) if fa.get(p) != fb.get(p)]
    return out
