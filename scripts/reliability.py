"""Reliability figures: kill the merge job with SIGKILL at every step of the commit protocol,
let the next DAG run repair it, and check every row.

    python scripts/reliability.py [--formats ORC PARQUET] [--partitions 2] [--files 4] [--rows 250]
    python scripts/reliability.py --every-call 40   # a kill before each of the commit's first 40
                                                       # storage operations, formats alternating
    python scripts/reliability.py --every-call 34 --storage-errors   # that call fails instead: the
                                                       # partition must read every row right after it
    python scripts/reliability.py --adversaries     # other actors at every step instead of kills
    python scripts/reliability.py --adversaries --every-call 27   # writers and a DROP PARTITION
                                                       # before each of the commit's storage operations
    python scripts/reliability.py --adversaries --every-call 23 --actors all   # every actor there
    python scripts/reliability.py --adversaries --in-chunk   # each case second of a commit chunk
                                                       # of three under one lock; all three checked
    python scripts/reliability.py --adversaries --commit-mode location_switch
    exports=$(python scripts/wheel_sweeps.py) && eval "$exports" && python scripts/reliability.py --installed ...
                                                       # against the built wheel, installed (make test-exhaustive)

For each format and kill point, a table is made, its merge job is killed at that point (through
the test-only kill hook, not by timing), then one real DAG run over all the tables must finish
every interrupted commit. Prints: kill points tried, runs, partitions and rows checked, rows
lost, rows duplicated, leftovers (anything but data files in a partition folder, journals,
staging). Exit code 1 if anything was lost, duplicated or left over.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import wheel_sweeps

if wheel_sweeps.installed() is None:  # else the built wheel, installed (make test-exhaustive; --installed)
    sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "plugins"))

import hive_compaction
from fault_hooks import FAIL_AT_CALL_ENV, KILL_AT_CALL_ENV, KILL_POINTS, SWITCH_POINTS
from harness import ROOT, Stack
from hive_compaction.storage.paths import partition_id, run_tag
from hive_metastores import HOUSEKEEPING, RELEASES, HiveMetastoreServer
from metastore_proxy import MetastoreProxy
from thrift_stack import ThriftStack


def statistics_wrong(part: dict, rows: int) -> str | None:
    """What in a partition's Metastore statistics differs from its disk (``stack.snapshot``'s
    entry and the rows read back), or None; numRows may be absent."""
    if (part["hms_num_files"], part["hms_total_size"]) == (str(part["num_files"]), str(part["bytes"])) and part[
        "hms_num_rows"
    ] in (None, str(rows)):
        return None
    return (
        f"Metastore statistics differ from the disk (numFiles/totalSize/numRows {part['hms_num_files']}/"
        f"{part['hms_total_size']}/{part['hms_num_rows']}, disk {part['num_files']}/{part['bytes']}/{rows})"
    )


def lost_and_duplicated(before: list, after: list) -> tuple[int, int]:
    """How many of ``before``'s rows ``after`` is missing, and how many it has beyond them (a row
    may appear several times in either)."""
    old, new = Counter(before), Counter(after)
    return sum((old - new).values()), sum((new - old).values())


def kill_matrix(
    stack: Stack,
    work: Path,
    formats=("ORC", "PARQUET"),
    points=KILL_POINTS,
    partitions: int = 3,
    files: int = 4,
    rows: int = 250,
    db: str = "reliability",
    alternate: bool = False,
) -> dict:
    """Every kill point for every format, or with ``alternate`` each point once, the formats taking
    turns (the commit moves files whatever their format: half the jobs, every point still killed).

    A point ``fail:<n>``: the n-th storage call fails instead of the job being killed (an error
    such as a NameNode failover or a full disk raises); the job goes on, and the partition must
    read exactly its rows right after it (a first pass puts back what it moved; past the commit
    point the merged file holds them), before any later run repairs anything."""
    dates = [f"2026-04-{d:02d}" for d in range(1, partitions + 1)]
    # The second: of three partitions on two driver threads the first two commit under one
    # Metastore lock (a commit chunk), so the victim is killed holding a chunk's lock, after the
    # chunk's first partition committed and before its statistics were written.
    victim = dates[min(1, partitions - 1)]
    pairs = (
        [(formats[i % len(formats)], point) for i, point in enumerate(points)]
        if alternate
        else [(fmt, point) for fmt in formats for point in points]
    )
    tables = {(fmt, point): f"k_{fmt.lower()}_{point.replace(':', '')}" for fmt, point in pairs}
    number = lambda point: point.partition(":")[2]  # of "call:<n>", "fail:<n>"
    for (fmt, _), table in tables.items():
        stack.make_table(db, table, fmt, dates, files=files, rows=rows)
    before = {t: stack.rows(db, t) for t in tables.values()}
    figures = {
        "kill_points_tried": 0,
        "runs": 0,
        "partitions_checked": 0,
        "rows_checked": 0,
        "rows_lost": 0,
        "rows_duplicated": 0,
        "leftovers": 0,
        "kills_not_reached": 0,
        "calls_past_the_commit": [],
        "temporary_files_left": 0,
        "recovery_run": None,
        "problems": [],
        "rows_wrong_right_after": 0,
    }
    for (_fmt, point), table in tables.items():
        cfg = stack.write_config(work / f"{table}.yaml", [{"name": f"{db}.{table}"}])
        planned = stack.plan_batches(cfg, run_id=f"killed-{table}")
        storage_error = point.startswith(FAIL)
        if storage_error:
            kill, said = (
                {FAIL_AT_CALL_ENV: f"{number(point)}:dt={victim}"},
                f"test storage fault at {CALL}{number(point)} ",
            )
        elif point.startswith(CALL):
            kill, said = {KILL_AT_CALL_ENV: f"{number(point)}:dt={victim}"}, f"test kill point {point} reached"
        else:
            kill, said = {"HIVE_COMPACTION_TEST_KILL_AT": f"{point}:dt={victim}"}, f"test kill point {point} reached"
        p = stack.spark_submit(planned["spark_args"][0]["application_args"][1], **kill)
        figures["kill_points_tried"] += 1
        figures["runs"] += 1
        if said not in p.stdout + p.stderr and point.startswith((CALL, FAIL)) and p.returncode == 0:
            figures["calls_past_the_commit"].append(int(number(point)))  # the job made fewer calls
        elif said not in p.stdout + p.stderr or (p.returncode == 0 and not storage_error):
            figures["kills_not_reached"] += 1
            figures["problems"].append(f"{table}: the {'fault' if storage_error else 'kill'} at {point} did not happen")
        elif storage_error and stack.rows(db, table) != before[table]:
            figures["rows_wrong_right_after"] += 1
            figures["problems"].append(
                f"{table}: right after the storage error at {point} the table does not read its rows"
            )

    cfg = stack.write_config(work / "all.yaml", [{"name": f"{db}.{t}"} for t in tables.values()])
    run = stack.run_dag(cfg)
    figures["runs"] += 1
    figures["recovery_run"] = run.state
    if run.state != "success":  # say why, so a failure in CI can be diagnosed from its output
        figures["problems"] += [
            line.strip()[:400]
            for line in run.log.splitlines()
            if re.search(r"FAILED |ERROR hive_compaction|Error: |Exception: ", line)
        ][-20:]
    for table in tables.values():
        after = stack.rows(db, table)
        for name in sorted(set(before[table]) | set(after)):
            lost, dup = lost_and_duplicated(before[table].get(name, []), after.get(name, []))
            figures["partitions_checked"] += 1
            figures["rows_checked"] += len(before[table].get(name, []))
            figures["rows_lost"] += lost
            figures["rows_duplicated"] += dup
        snap = stack.snapshot(db, table)
        for name, part in snap.items():
            folder = stack.partition_location(db, table, name)
            extra = [
                f.name
                for f in folder.iterdir()
                if f.name not in part["files"]
                and not (f.name.startswith(".") and f.name.endswith(".crc") and f.name[1:-4] in part["files"])
            ]
            if extra:
                figures["leftovers"] += len(extra)
                figures["problems"].append(f"{table}/{name}: leftovers {extra}")
            wrong = statistics_wrong(part, len(after.get(name, [])))
            if wrong:
                figures["problems"].append(f"{table}/{name}: {wrong}")
        # Staging outside the partitions may keep a killed attempt's files until the trash retention
        # purges them; an unfinished journal would be a real leftover.
        area = stack.work_area(db, table)
        journals = (
            [f.name for f in (area / "journal").glob("*") if not f.name.startswith(".")]
            if (area / "journal").exists()
            else []
        )
        figures["leftovers"] += len(journals)
        if journals:
            figures["problems"].append(f"{table}: journal folder holds {journals}")
        # A job killed between publishing a journal and deleting its hidden temporary name leaves
        # that name (a link to the same bytes): harmless, removed by the purge after the retention.
        figures["temporary_files_left"] += len(list((area / "journal").glob(".*.tmp")))
    past = figures["calls_past_the_commit"]
    reached = [int(number(p)) for _, p in pairs if p.startswith((CALL, FAIL)) and int(number(p)) not in past]
    if past and reached and min(past) < max(reached):
        figures["problems"].append(f"kills at storage calls {sorted(past)} not reached, but later ones were")
    return figures


ACTOR_LOCK_WAIT_SECONDS = 3
CALL = "call:"  # a kill point "call:<n>": before the commit's n-th storage operation
FAIL = "fail:"  # "fail:<n>": the commit's n-th storage operation fails


# Other actors at a commit step, and what the partition must hold once the next run is done.
# "rival": another run's merge job; "retry": this run's job for the partition started again
# (Airflow retrying a task whose first attempt is still running).
JOB_ACTORS = ("rival", "retry", "rollback", "purge")
# Writers: "add" a file under a new name; "insert_reuse" an INSERT INTO taking an input's name
# when it is free (Hive's 000000_0); "overwrite" an INSERT OVERWRITE reusing the inputs' names (as
# Hive does), "overwrite_new" one under new names (Spark's part-<uuid>); "drop" a DROP PARTITION.
WRITERS = ("add", "insert_reuse", "overwrite", "overwrite_new", "drop")
# "steal": the paused job's Metastore lock released by someone else (as a job that took it for a
# dead one's would), the job then paused past its next heartbeat.
# The Metastore's faults, as the paused job sees them through a proxy (scripts/metastore_proxy.py):
# "hang", nothing gets through while the same run's retry runs (the retry finds the lock silent,
# takes it for a dead job's and takes the partition over: an Airflow retry beside a live zombie
# attempt); "restart", every connection cut and new ones refused for RESTART_SECONDS.
METASTORE_FAULTS = ("hang", "restart")
METASTORE_RUN = "adv-run-metastore"  # the runs of their cases' jobs: <this>-<case number>
RESTART_SECONDS = 3
ADVERSARIES = WRITERS + ("steal",) + METASTORE_FAULTS + JOB_ACTORS
# With commit_mode location_switch, also a reader that lists at the step and reads after the run:
# it must get exactly the rows before (or after; here they are the same rows).
SWITCH_ADVERSARIES = ADVERSARIES + ("read",)
# After a switch's commit point, a writer by path writes into the retired folder: an append right
# after the switch is moved into the new folder by the commit ("switched"), an overwrite there
# undoes the switch, and a file that arrives once the old files left is kept there, never read
# (tests/test_schedule_explorer.py shows each); one that arrives after the job's last look is not
# seen at all. Those are that mode's documented limits (docs/safety.md), not tried here.
SWITCH_UNSUPPORTED = {("switched", a) for a in WRITERS if a not in ("add", "insert_reuse")} | {
    ("manifest_written", a) for a in WRITERS
}


def switch_case_allowed(point: str, actor: str) -> bool:
    """Whether a location switch's sample may pair them: a storage call's position may lie past
    the switch's commit point, so only the jobs and the reader act there (as in the sweep)."""
    return (point, actor) not in SWITCH_UNSUPPORTED and not (point.startswith(CALL) and actor in WRITERS)


JOB_ACTORS_PER_JOB = 4

# The steps other actors act at: the kill points and, after the last check before the outputs
# move in, "outputs_moving".
ADVERSARY_POINTS = KILL_POINTS[:4] + ("outputs_moving",) + KILL_POINTS[4:]

# Storage operations one commit of the matrices' partitions makes: in place, the listing the
# journal records, the staging folder's trash made before it, the journal released by an
# identity-checked move, the trash renamed to the run's; a location switch, its old files moved
# to the trash after the switch. As the every-call sweeps of the ORC and Parquet tables count them
# (2026-12-03: call 34 past the in-place commit, 33 past the switch); a sampled "call:<n>" past a
# commit's last is reported as such.
COMMIT_CALLS = {"in_place": 33, "location_switch": 32}
SEED_ENV = "SUITE_MATRIX_SEED"


def matrix_seed() -> int:
    """The sample's seed: ``SUITE_MATRIX_SEED`` to replay a run, else a new one each run."""
    return int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**31))


def call_sample(commit_mode: str, rng: random.Random, prefix: str = CALL) -> tuple[str, ...]:
    """One storage-call position from each third of a commit (its journal's publication and the
    first moves; the moves; the last moves, manifest and clean-up), drawn at random."""
    n = COMMIT_CALLS[commit_mode]
    thirds = [range(1 + n * k // 3, 1 + n * (k + 1) // 3) for k in range(3)]
    return tuple(f"{prefix}{rng.choice(third)}" for third in thirds)


def covering_sample(
    points,
    actors,
    rng: random.Random,
    allowed=lambda point, actor: True,
    fillers=WRITERS + ("steal", "restart", "read"),
) -> list[tuple[str, str]]:
    """A random list of (step, actor) cases, as short as can be, in which every step and every
    actor appears at least once, and every pair is ``allowed``: each actor (the most restricted
    first) at a step not yet covered where it may act, then each step left with an actor drawn
    from the ``fillers`` allowed there (cheap ones: a job actor is a spark-submit of its own)."""
    steps, acts = list(points), list(actors)
    rng.shuffle(steps)
    rng.shuffle(acts)
    acts.sort(key=lambda a: sum(1 for p in steps if allowed(p, a)))
    uncovered, pairs = list(steps), []
    for actor in acts:
        options = [p for p in uncovered if allowed(p, actor)] or [p for p in steps if allowed(p, actor)]
        if not options:
            raise ValueError(f"the actor {actor} may act at none of {steps}")
        point = rng.choice(options)
        pairs.append((point, actor))
        if point in uncovered:
            uncovered.remove(point)
    for point in uncovered:
        choices = [a for a in fillers if a in actors and allowed(point, a)] or [a for a in actors if allowed(point, a)]
        if not choices:
            raise ValueError(f"no actor may act at {point}")
        pairs.append((point, rng.choice(choices)))
    rng.shuffle(pairs)
    return pairs


def _tag(point: str) -> str:
    """A step's name as a table name, run id or file name take it ("call:7" -> "call7")."""
    return point.replace(":", "")


def adversary_matrix(
    stack: Stack,
    work: Path,
    points=KILL_POINTS,
    adversaries=ADVERSARIES,
    rows: int = 120,
    db: str = "adversaries",
    commit_mode: str = "in_place",
    skip: frozenset = frozenset(),
    cases: list[tuple[str, str]] | None = None,
    in_chunk: bool = False,
) -> dict:
    """At each commit step, pause the merge job (the test hook) while another actor acts on its
    partition: a writer adding a file, a writer overwriting the partition reusing the inputs'
    names, a DROP PARTITION, a second committer (another run's merge job), a rollback of the
    running commit, a purge by another run's job with every folder aged past the retention. Then
    one DAG run of the date, and every row checked against what the actor left: nothing lost,
    nothing duplicated, no dropped folder re-created, no journal left, statistics = disk. ORC and
    Parquet alternate across the cases. ``skip``: (step, actor) pairs not tried (printed "-");
    ``cases``: the (step, actor) pairs to try (a sample), instead of every step with every actor.
    Every case is a table of its own, and one merge job pauses each at its own step. ``in_chunk``:
    each table has a partition on either side of the acted-on one, so that it commits second of
    a commit chunk of three (one Metastore lock for all), and their rows are checked too."""
    dt = "2026-04-01"
    dates = [NEIGHBOURS[0], dt, NEIGHBOURS[1]] if in_chunk else [dt]
    formats = ("ORC", "PARQUET")
    for fmt in formats:
        stack.make_table(db, f"src_{fmt.lower()}", fmt, [dt], files=1, rows=17)
        stack.make_table(db, f"writer_{fmt.lower()}", fmt, [dt], files=4, rows=60)
    if cases is None:
        cases = [
            (point, adv)
            for point in points
            for adv in adversaries
            if (commit_mode != "location_switch" or (point, adv) not in SWITCH_UNSUPPORTED) and (point, adv) not in skip
        ]
    else:
        points, adversaries = list(dict.fromkeys(p for p, _ in cases)), list(dict.fromkeys(a for _, a in cases))
    cases = {(point, adv): (f"{adv}_{_tag(point)}", formats[k % 2]) for k, (point, adv) in enumerate(cases)}
    # Merge jobs that pause their cases, each with at most JOB_ACTORS_PER_JOB job actors (each a
    # spark-submit run inside the paused job, one after another), each a run of its own.
    # Each case of the Metastore's faults pauses a job of its own, which alone talks to the proxy: a
    # hang or restart fails every lock of the job that meets it, so two such cases in one job would
    # stop each other's commits before their steps.
    run_of, job, in_job = {}, 0, 0
    for k, key in enumerate(cases):
        if key[1] in METASTORE_FAULTS:
            run_of[key] = f"{METASTORE_RUN}-{k}"
            continue
        if key[1] in JOB_ACTORS:
            if in_job == JOB_ACTORS_PER_JOB:
                job, in_job = job + 1, 0
            in_job += 1
        run_of[key] = f"adv-run-{job}"
    mode = {"commit_mode": commit_mode}
    readers: dict[str, Path] = {}
    neighbours: dict[str, dict[str, list]] = {}  # in_chunk: table -> the other partitions' rows before
    expected, figures = (
        {},
        {
            "cases": 0,
            "rows_checked": 0,
            "rows_lost": 0,
            "rows_duplicated": 0,
            "folders_recreated": 0,
            "msck_changed": 0,
            "journals_left": 0,
            "statistics_wrong": 0,
            "not_reached": 0,
            "failed_reported": 0,
            "false_successes": 0,
            "problems": [],
            "matrix": {point: {} for point in points},
        },
    )  # rows in step order
    log_path = work / "adversaries.log"
    proxy = MetastoreProxy(stack.port).start() if any(a in METASTORE_FAULTS for _, a in cases) else None
    try:
        status = _pause_and_act(
            stack, work, cases, run_of, mode, readers, expected, proxy, db, dt, dates, rows, log_path, neighbours
        )
    finally:
        if proxy:
            proxy.stop()
    figures = _check_cases(
        stack,
        work,
        cases,
        run_of,
        mode,
        readers,
        expected,
        status,
        figures,
        points,
        adversaries,
        skip,
        commit_mode,
        db,
        dt,
        log_path,
    )
    _check_neighbours(stack, cases, neighbours, figures, db)
    return figures


# in_chunk: the partitions either side of the acted-on one (adversary_matrix's dt) in each case's table.
NEIGHBOURS = ("2026-03-31", "2026-04-02")


def _check_neighbours(stack: Stack, cases: dict, neighbours: dict, figures: dict, db: str) -> None:
    """The other partitions of each case's commit chunk hold exactly their rows before, whatever
    the actor did to the one beside them."""
    for (point, adv), (table, fmt) in cases.items():
        if not neighbours.get(table):  # without --in-chunk: nothing beside the acted-on partition
            continue
        after = stack.rows(db, table)
        for dt, before in neighbours[table].items():
            lost, dup = lost_and_duplicated(before, after.get(f"dt={dt}", []))
            figures["rows_checked"] += len(before)
            figures["rows_lost"] += lost
            figures["rows_duplicated"] += dup
            if lost or dup:
                figures["problems"].append(
                    f"{table} ({fmt}, {adv} at {point}): its neighbour dt={dt} lost {lost} row(s), {dup} duplicated"
                )
                figures["matrix"].setdefault(point, {})[adv] = f"neighbour dt={dt}: {lost} lost, {dup} duplicated"


def _pause_and_act(
    stack: Stack,
    work: Path,
    cases: dict,
    run_of: dict,
    mode: dict,
    readers: dict,
    expected: dict,
    proxy,
    db: str,
    dt: str,
    dates: list[str],
    rows: int,
    log_path: Path,
    neighbours: dict,
) -> dict:
    """Each case's table (a partition of each of ``dates``), and its actor's action at its step
    on the partition of ``dt``; then each run's job, paused at its cases' steps while their
    actors act. What the jobs reported of that partition, by table."""
    actions = {}
    for (point, adv), (table, fmt) in cases.items():
        run_id = run_of[(point, adv)]
        stack.make_table(db, table, fmt, dates, files=4, rows=rows)
        folder = stack.partition_location(db, table, f"dt={dt}")
        table_rows = stack.rows(db, table)
        before = table_rows.get(f"dt={dt}", [])
        neighbours[table] = {d: table_rows.get(f"dt={d}", []) for d in dates if d != dt}
        # The actors' own jobs (rival, retry, purge) are planned from this config. The paused job
        # holds the partition's lock for as long as its actor runs, so an actor job waiting for
        # that lock can only time out: a short wait tries the same thing as the default minute.
        cfg = stack.write_config(
            work / f"{table}.yaml", [{"name": f"{db}.{table}", **mode, "lock_wait_seconds": ACTOR_LOCK_WAIT_SECONDS}]
        )
        f = fmt.lower()
        inputs = sorted(p.name for p in folder.iterdir() if not p.name.startswith((".", "_")))
        if adv in ("add", "insert_reuse"):
            source = next(
                p
                for p in stack.partition_location(db, f"src_{f}", f"dt={dt}").iterdir()
                if not p.name.startswith((".", "_"))
            )
            # INSERT INTO takes an input's name if it is free by then, else the next one (Hive: _copy_1)
            names = [f"part-late.{f}"] if adv == "add" else [inputs[0], f"{inputs[0]}_copy_1"]
            actions[str(folder)] = {"action": "add", "source": str(source), "names": names}
            expected[table] = sorted(before + stack.rows(db, f"src_{f}")[f"dt={dt}"])
        elif adv in ("overwrite", "overwrite_new"):
            writer = sorted(
                str(p)
                for p in stack.partition_location(db, f"writer_{f}", f"dt={dt}").iterdir()
                if not p.name.startswith((".", "_"))
            )
            names = (
                inputs if adv == "overwrite" else [f"part-{k:05d}-{uuid.uuid4()}.c000.{f}" for k in range(len(writer))]
            )
            actions[str(folder)] = {"action": "overwrite", "names": names, "sources": writer}
            expected[table] = stack.rows(db, f"writer_{f}")[f"dt={dt}"]
        elif adv == "steal":
            actions[str(folder)] = {"action": "steal", "db": db, "table": table, "partition": f"dt={dt}"}
            expected[table] = before
        elif adv == "drop":
            actions[str(folder)] = {"action": "drop", "db": db, "table": table, "partition": f"dt={dt}"}
            expected[table] = None
        elif adv == "read":
            readers[table] = work / f"{table}.listed.json"
            actions[str(folder)] = {
                "action": "read",
                "db": db,
                "table": table,
                "partition": f"dt={dt}",
                "out": str(readers[table]),
            }
            expected[table] = before
        elif adv == "restart":
            actions[str(folder)] = {
                "action": "metastore",
                "fault": "restart",
                "seconds": RESTART_SECONDS,
                "control": proxy.control_port,
            }
            expected[table] = before
        elif adv == "hang":
            retry = stack.plan_batches(cfg, run_id=run_id)
            actions[str(folder)] = {
                "action": "metastore",
                "fault": "hang",
                "control": proxy.control_port,
                "argv": stack.spark_submit_cmd(retry["spark_args"][0]["application_args"][1]),
            }
            expected[table] = before
        else:
            rival = stack.plan_batches(cfg, run_id=run_id if adv == "retry" else f"rival-{table}")
            argv = stack.spark_submit_cmd(rival["spark_args"][0]["application_args"][1])
            if adv == "rollback":
                argv = stack.rollback_cmd(f"{db}.{table}", run_id, cfg)
            elif adv == "purge":  # every folder of the work area older than any retention, then a rival's job
                area = stack.work_area(db, table)
                age = (
                    f"import os,time; t=time.time()-40*86400; "
                    f"[os.utime(os.path.join(d,n),(t,t)) for d,ds,fs in os.walk({str(area)!r}) for n in ds+fs]"
                )
                argv = ["bash", "-c", f"{sys.executable} -c {json.dumps(age)} && " + " ".join(map(shlex.quote, argv))]
            actions[str(folder)] = {"action": "command", "argv": argv, "label": adv}
            expected[table] = before
    # Each job pauses every partition of its cases at that case's step (the fault hook's entries).
    # The actions go in a file: with every actor at every call they hold hundreds of rival jobs'
    # batches, past what one environment variable may hold (128 KiB on Linux).
    plan = work / "adversary_actions.json"
    plan.write_text(json.dumps(actions))
    status = {}
    for run_id in dict.fromkeys(run_of.values()):
        mine = [(key, cases[key][0]) for key in cases if run_of[key] == run_id]
        cfg = stack.write_config(
            work / f"{run_id}.yaml", [{"name": f"{db}.{t}", "trash_retention_days": 1, **mode} for _, t in mine]
        )
        steps = ";".join(f"{point}:{db}.{table}/dt={dt}" for (point, _), table in mine)
        through = {"spark.hadoop.hive.metastore.uris": proxy.uris} if proxy and run_id.startswith(METASTORE_RUN) else {}
        for spark_args in stack.plan_batches(cfg, run_id=run_id)["spark_args"]:
            stack.spark_submit(
                spark_args["application_args"][1],
                config_path=cfg,
                conf=through,
                HIVE_COMPACTION_TEST_HOOK_AT=steps,
                HIVE_COMPACTION_TEST_HOOK_CMD=f"{shlex.quote(sys.executable)} {ROOT / 'scripts' / 'adversaries.py'}",
                HIVE_COMPACTION_ADVERSARIES=str(plan),
                HIVE_COMPACTION_ADVERSARY_LOG=str(log_path),
                HIVE_METASTORE_PORT=str(stack.port),
            )
        # What the paused job said of each partition: a writer it cannot tell from an overwrite
        # fails the partition, saying what is where (issue 29), and is never a success.
        status.update(
            {r["table"].split(".", 1)[1]: r for r in stack.results(cfg, run_id) if r["partition"] == f"dt={dt}"}
        )
    return status


def _check_cases(
    stack: Stack,
    work: Path,
    cases: dict,
    run_of: dict,
    mode: dict,
    readers: dict,
    expected: dict,
    status: dict,
    figures: dict,
    points,
    adversaries,
    skip,
    commit_mode: str,
    db: str,
    dt: str,
    log_path: Path,
) -> dict:
    """One DAG run of the date, then every case's rows, statistics, folders and journals checked."""
    acted = (
        Counter(json.loads(line)["folder"] for line in log_path.read_text().splitlines())
        if log_path.exists()
        else Counter()
    )
    warehouse = Path(str(stack.metastore.state)) / "warehouse" / f"{db}.db"
    # A storage call past the commit's last (no actor of that step ran): not a case, said as such;
    # only the calls after every reached one may be past it.
    past = sorted(
        {
            int(p[len(CALL) :])
            for p in points
            if p.startswith(CALL)
            and not any(acted[str(warehouse / t / f"dt={dt}")] for (q, _), (t, _) in cases.items() if q == p)
        }
    )
    reached = [int(p[len(CALL) :]) for p in points if p.startswith(CALL) and int(p[len(CALL) :]) not in past]
    figures["calls_past_the_commit"] = past
    if past and reached and min(past) < max(reached):
        figures["problems"].append(f"no actor ran at storage calls {past}, but at later ones")
    elif past:
        for key in [k for k in cases if k[0].startswith(CALL) and int(k[0][len(CALL) :]) in past]:
            figures["matrix"].setdefault(key[0], {})[key[1]] = "past"
            del cases[key]
    cfg = stack.write_config(work / "adv-all.yaml", [{"name": f"{db}.{t}", **mode} for t, _ in cases.values()])
    run = stack.run_dag(cfg, conf={"partition_date": dt})
    # A partition whose commit stopped for a person (a writer's file it cannot account for, its
    # old rows parked: a mark beside its journal) fails every run until the person decides; the
    # recovery run succeeds but for those.
    failures = [line for line in run.log.splitlines() if re.search(r"\bFAILED \S+\.\S+ ", line)]
    only_stopped = bool(failures) and all("until a person decides" in line for line in failures)
    figures["recovery_run"] = "success" if run.state == "success" or only_stopped else run.state
    figures["stopped_for_a_person"] = len(failures) if only_stopped else 0
    # How long readers listing a partition could miss rows, per commit of that run (in place)
    windows = [int(w) for w in re.findall(r"reader window (\d+) ms", run.log)]
    figures["reader_window_ms"] = {"commits": len(windows), "max": max(windows, default=None)}
    if figures["recovery_run"] != "success":
        figures["problems"] += [
            line.strip()[:400]
            for line in run.log.splitlines()
            if re.search(r"FAILED |ERROR hive_compaction|Error: |Exception: ", line)
        ][-20:]
    for (point, adv), (table, fmt) in cases.items():
        figures["cases"] += 1
        folder = warehouse / table / f"dt={dt}"
        if acted[str(folder)] != 1:
            figures["not_reached"] += 1
            figures["problems"].append(f"{table}: the {adv} actor ran {acted[str(folder)]} time(s) at {point}")
        after = stack.rows(db, table).get(f"dt={dt}")
        problems = []
        if expected[table] is None:  # dropped: gone from the Metastore, its folder never re-created
            if folder.exists():
                figures["folders_recreated"] += 1
                problems.append("dropped partition's folder re-created")
            if after:
                problems.append(f"dropped partition has {len(after)} row(s)")
        else:
            reported = status.get(table, {})
            parked = []
            if reported.get("status") == "failed":
                figures["failed_reported"] += 1
                # stopped past its first move: the old rows wait in the trash for a person
                if adv in ("add", "insert_reuse"):
                    # This partition's trash only (with --in-chunk its neighbours' replaced inputs are there too)
                    parked = _trash_rows(
                        stack,
                        stack.work_area(db, table)
                        / "trash"
                        / run_tag(run_of[(point, adv)])
                        / partition_id(f"{db}.{table}", f"dt={dt}"),
                        fmt,
                        dt,
                    )
            lost, dup = lost_and_duplicated(expected[table], (after or []) + parked)
            if (lost or dup) and reported.get("status") in ("merged", "skipped", "nothing_to_do"):
                figures["false_successes"] += 1
                problems.append(f"the job reported {reported['status']} while rows differ")
            figures["rows_checked"] += len(expected[table])
            figures["rows_lost"] += lost
            figures["rows_duplicated"] += dup
            if lost or dup:
                said = f"{reported.get('status')}: {reported.get('reason') or ''}".rstrip(": ")
                problems.append(f"{lost} row(s) lost, {dup} duplicated (the job said {said[:400]})")
            if table in readers:  # listed at the step, read now: exactly the rows before, or (its files gone
                # to the trash after a switch) a query that fails and is retried: never a mix
                listed = json.loads(readers[table].read_text()) if readers[table].exists() else []
                whole = all(Path(f).exists() for f in listed)
                seen = _file_rows(stack, [f"file://{f}" for f in listed], fmt, dt) if whole else expected[table]
                if seen != expected[table]:
                    problems.append(
                        f"a reader that listed at {point} read {len(seen)} row(s), not the "
                        f"{len(expected[table])} before"
                    )
            part = stack.snapshot(db, table).get(f"dt={dt}")
            # A partition stopped for a person keeps the statistics its writer left (no run merges it);
            # and a run that failed for one leaves the refresh of the others to the next run that succeeds.
            refreshed = figures.get("stopped_for_a_person", 0) == 0
            wrong = statistics_wrong(part, len(after or [])) if part and refreshed else None
            if wrong:
                figures["statistics_wrong"] += 1
                problems.append(wrong)
        # MSCK REPAIR must find nothing to add (no re-created or stray folder) and change no row.
        stack.msck_repair(db, table)
        if stack.rows(db, table).get(f"dt={dt}") != after:
            figures["msck_changed"] += 1
            problems.append("MSCK REPAIR TABLE changed the table")
        journal_folder = stack.work_area(db, table) / "journal"
        stopped = {j.name[: -len(".stopped")] for j in journal_folder.glob("*.stopped")}
        # a stopped one waits for a person
        journals = [j for j in journal_folder.glob("*.json") if j.stem not in stopped]
        figures["journals_left"] += len(journals)
        if journals:
            problems.append(f"journal(s) left: {[j.name for j in journals]}")
        cell = "reported" if status.get(table, {}).get("status") == "failed" else "ok"
        figures["matrix"].setdefault(point, {})[adv] = cell if not problems else "; ".join(problems)
        figures["problems"] += [f"{table} ({fmt}, {adv} at {point}): {p}" for p in problems]
    for point, adv in (SWITCH_UNSUPPORTED if commit_mode == "location_switch" else set()) | set(skip):
        if point in points and adv in adversaries:
            figures["matrix"].setdefault(point, {})[adv] = "n/a" if (point, adv) not in skip else "-"
    return figures


def _trash_rows(stack: Stack, trash: Path, fmt: str, dt: str) -> list[str]:
    """Every row of the data files a table's trash holds."""
    return _file_rows(
        stack,
        sorted(
            f"file://{f}"
            for f in trash.rglob("*")
            if f.is_file() and not f.name.startswith((".", "_")) and not f.name.endswith(".json")
        ),
        fmt,
        dt,
    )


def _file_rows(stack: Stack, files: list[str], fmt: str, dt: str) -> list[str]:
    """Every row of these data files of partition ``dt``, as ``Stack.rows`` gives them."""
    from pyspark.sql.functions import lit

    if not files:
        return []
    rows = stack.spark.read.format(fmt.lower()).load(files).withColumn("dt", lit(dt)).collect()
    return sorted(repr(tuple(r)) for r in rows)


def print_matrix(figures: dict) -> None:
    advs = [a for a in SWITCH_ADVERSARIES if any(a in row for row in figures["matrix"].values())]
    print(f"{'step':<18}" + "".join(f"{a:>10}" for a in advs))
    for point, row in figures["matrix"].items():
        cells = (row.get(a, "-") for a in advs)
        print(
            f"{point:<18}"
            + "".join(f"{(c if c in ('ok', 'reported', 'n/a', '-', 'past') else 'FAIL'):>10}" for c in cells)
        )


def _actors(ap, named: str, switch: bool, every_call: bool) -> tuple[str, ...]:
    """The actors ``--actors`` names: a storage call's position may lie past a switch's commit
    point, where writers by path are that mode's documented limit."""
    everyone = SWITCH_ADVERSARIES if switch else ADVERSARIES
    actors = {
        "writers": WRITERS,
        "all": tuple(a for a in everyone if not (switch and every_call and a in WRITERS)),
    }.get(named) or tuple(named.split(","))
    unknown = set(actors) - set(everyone)
    if unknown:
        ap.error(f"--actors: unknown actor(s) {sorted(unknown)}; choose from {everyone}")
    return actors


def check_imports(stack: Stack, seen: dict) -> None:
    """Against the installed wheel: each merge job this script submits must say it ran the
    installed copy (the fault hooks' line, scripts/fault_injection/sitecustomize.py, printed by
    its driver and its Python workers), each DAG run must submit the installed copy's merge job
    (its plan and tasks import the package in the Airflow process) and name nothing of plugins/.
    What does not is counted in ``seen["problems"]``."""
    submit, run_dag = stack.spark_submit, stack.run_dag
    job = str(wheel_sweeps.package_dir() / "jobs" / "compact_partitions.py")
    checkout = str(ROOT / "plugins" / "hive_compaction")

    def spark_submit(*args, **kwargs):
        p = submit(*args, **kwargs)
        wrapped = wheel_sweeps.WRAPPED.findall(p.stdout + p.stderr)
        stray = sorted({f for f in wrapped if wheel_sweeps.outside(f)})
        seen["jobs"] += 1
        if not wrapped or stray:
            seen["problems"].append(
                f"a merge job ran hive_compaction from {stray or 'an unknown place'}, not {wheel_sweeps.installed()}"
            )
        return p

    def dag(*args, **kwargs):
        run = run_dag(*args, **kwargs)
        seen["dag_runs"] += 1
        if job not in run.log or checkout in run.log:
            seen["problems"].append(
                f"DAG run {run.run_id or '?'}: did not submit {job}"
                if job not in run.log
                else f"DAG run {run.run_id}: its log names {checkout}"
            )
        return run

    stack.spark_submit, stack.run_dag = spark_submit, dag


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--installed",
        action="store_true",
        help="run against the built wheel installed unmodified (make test-exhaustive): needs the "
        "environment `python scripts/wheel_sweeps.py` prints; checks that this script and every "
        "job and DAG run import hive_compaction from it",
    )
    ap.add_argument("--formats", nargs="+", default=["ORC", "PARQUET"])
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rows", type=int, default=250)
    ap.add_argument(
        "--every-call",
        type=int,
        metavar="N",
        help="kill before each of the commit's storage operations 1..N instead of at its steps "
        "(those past the commit's last are reported as such); with --adversaries: a writer "
        "adding a file, one overwriting, a DROP PARTITION there",
    )
    ap.add_argument(
        "--storage-errors", action="store_true", help="with --every-call: that storage call fails instead of a kill"
    )
    ap.add_argument(
        "--adversaries",
        action="store_true",
        help="instead of kills: other actors at every commit step (adversary_matrix)",
    )
    ap.add_argument(
        "--in-chunk",
        action="store_true",
        help="with --adversaries: each case's partition commits second of a commit chunk of three "
        "(one Metastore lock), and the other two are checked too",
    )
    ap.add_argument(
        "--actors",
        default=None,
        help="with --adversaries: 'writers' (the writers and DROP PARTITION, fast; the default with "
        "--every-call), 'all' (the jobs too: a spark-submit each, about 40 s per storage call; "
        "the default at the named steps) or names, comma-separated, of "
        f"{','.join(SWITCH_ADVERSARIES)}",
    )
    ap.add_argument(
        "--metastore",
        choices=["2.3", *RELEASES],
        default="2.3",
        help="the Hive Metastore the tables live in: the pyspark wheel's 2.3 (on Derby), or a real "
        "3.1 / 4.0 server on PostgreSQL whose housekeeping expires dead lock holders itself "
        "(make jars fetches them)",
    )
    ap.add_argument(
        "--commit-mode",
        choices=["in_place", "location_switch"],
        default="in_place",
        help="with --adversaries: the tables' commit_mode (location_switch adds a reader)",
    )
    args = ap.parse_args()
    site = wheel_sweeps.installed()
    print(
        f"hive_compaction {hive_compaction.__version__} from {hive_compaction.__file__} "
        f"({f'the wheel installed in {site}' if site else 'the checkout'})",
        flush=True,
    )
    if args.installed and site is None:
        ap.error(
            f"--installed: {wheel_sweeps.INSTALLED_ENV} is not set "
            '(exports=$(python scripts/wheel_sweeps.py) && eval "$exports")'
        )
    if wheel_sweeps.outside(hive_compaction.__file__):
        ap.error(f"hive_compaction is imported from {hive_compaction.__file__}, not from {site}")
    imports = {"jobs": 0, "dag_runs": 0, "problems": []}
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        # Hive 4 no longer serves the calls Spark's Hive 2.3 client sends: its tables through Thrift.
        kind = ThriftStack if args.metastore.startswith("4.") else Stack
        stack = (
            Stack(Path(tmp))
            if args.metastore == "2.3"
            else kind(
                Path(tmp),
                use_postgres=True,
                metastore=lambda pg: HiveMetastoreServer(args.metastore, Path(tmp) / "hms", pg, settings=HOUSEKEEPING),
            )
        )
        stack.start()
        if site:
            check_imports(stack, imports)
        try:
            switch = args.commit_mode == "location_switch"
            if args.adversaries and args.every_call:
                # Before each storage operation of the commit. A location switch's writers by path and
                # DROP PARTITION after its commit point are that mode's documented limits: its sweep
                # has the jobs and the reader.
                actors = _actors(ap, args.actors or "writers", switch, every_call=True)
                f = adversary_matrix(
                    stack,
                    Path(tmp),
                    [f"{CALL}{n}" for n in range(1, args.every_call + 1)],
                    actors,
                    args.rows,
                    commit_mode=args.commit_mode,
                    in_chunk=args.in_chunk,
                )
            elif args.adversaries:
                f = adversary_matrix(
                    stack,
                    Path(tmp),
                    SWITCH_POINTS if switch else ADVERSARY_POINTS,
                    _actors(ap, args.actors or "all", switch, every_call=False),
                    args.rows,
                    commit_mode=args.commit_mode,
                    in_chunk=args.in_chunk,
                )
            elif args.every_call:
                prefix = FAIL if args.storage_errors else CALL
                f = kill_matrix(
                    stack,
                    Path(tmp),
                    args.formats,
                    [f"{prefix}{n}" for n in range(1, args.every_call + 1)],
                    args.partitions,
                    args.files,
                    args.rows,
                    alternate=True,
                )
            else:
                f = kill_matrix(stack, Path(tmp), args.formats, KILL_POINTS, args.partitions, args.files, args.rows)
        finally:
            stack.stop()
    if site:
        print(
            f"imports checked: {imports['jobs']} merge job(s) and {imports['dag_runs']} DAG run(s) against "
            f"the wheel in {site}; {len(imports['problems'])} ran something else"
        )
        f["problems"] += imports["problems"]
    if args.adversaries:
        print_matrix(f)
        for problem in f["problems"]:
            print(f"problem: {problem}")
        print(json.dumps({k: v for k, v in f.items() if k != "matrix"}))
        return 0 if not f["problems"] and f["recovery_run"] == "success" else 1
    for key in (
        "kill_points_tried",
        "runs",
        "partitions_checked",
        "rows_checked",
        "rows_lost",
        "rows_duplicated",
        "leftovers",
        "kills_not_reached",
        "temporary_files_left",
        "rows_wrong_right_after",
        "recovery_run",
    ):
        print(f"{key:>20}: {f[key]}")
    if f["calls_past_the_commit"]:
        print(
            f"{'storage calls':>20}: the commit made {min(f['calls_past_the_commit']) - 1}; "
            "a kill before each was tried"
        )
    for problem in f["problems"]:
        print(f"problem: {problem}")
    print(json.dumps(f))
    ok = f["recovery_run"] == "success" and not (
        f["rows_lost"] or f["rows_duplicated"] or f["leftovers"] or f["kills_not_reached"] or f["problems"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
