"""Where a job's CPU goes, thread by thread, between the lines of its log: for profiling a merge
job's driver (its JVM's JIT compilers, the JVM threads running our py4j calls, the executors' task
threads in ``local`` mode, our Python), as in docs/performance.md's "where a cold driver's CPU goes".

    .venv/bin/python benchmarks/thread_cpu.py sample OUT.jsonl [--match compact_partitions.py ...] [--seconds 600]
                                                 [--until-gone]
    .venv/bin/python benchmarks/thread_cpu.py report OUT.jsonl JOB.log [--marks REGEX] [--json PATH]

``sample`` records, every ``--period`` seconds, the CPU time (user + system, from ``/proc``) of
every thread of each process whose command line contains one of ``--match`` (by default the merge
job's: its driver JVM and its Python; ``naive_coalesce.py`` is ``merge_speed.py``'s loop), and of
each process as a whole (threads that ended included), until ``--seconds`` pass (``--until-gone``:
or they have all ended); it waits for such a process to appear. Start it, then the job (e.g.
``merge_speed.py --only auto --logs DIR``). ``report`` splits the CPU between the job log's lines
that match ``--marks`` (by default the merge job's phase lines; their times are read as this
machine's local time, as the job writes them) by kind of thread, then each process's whole CPU
(a log without such lines, e.g. the loop's, gives the latter only). Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import datetime

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MARKS = (
    r"Spark ready|prepared \d+ partition|Spark SQL session made|read the schema|the first merge began|"
    r"rewrote \d+ group|copy-merged|driver memory"
)
_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ hive_compaction: (.*)")
ENDED = "threads that ended"
RESCAN = 1.0  # seconds between two looks for new matching processes


def kind_of(process: str, thread: str) -> str:
    """What a thread does, from its process's kind and the thread's name (``/proc/.../comm``)."""
    if process != "java":
        return "the Python driver" if process == "python" else process
    if thread.startswith(("C1 CompilerThre", "C2 CompilerThre")):
        return "JIT compilers"
    if thread.startswith(("GC Thread", "G1 ", "VM Thread", "VM Periodic")):
        return "GC and VM"
    if thread.startswith("Executor task"):
        return "executor tasks"
    if thread.startswith("Thread-"):  # py4j's threads serving the Python driver's calls
        return "JVM threads of our py4j calls"
    return "other JVM threads"


def _cpu(stat: str) -> tuple[str, int]:
    """A /proc stat line's command name and its user + system ticks."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return stat[stat.index("(") + 1 : stat.rindex(")")], int(fields[11]) + int(fields[12])


def _processes(matches: list[str]) -> dict[str, tuple[str, str]]:
    """pid -> (kind of program, the first of ``matches`` in its command line)."""
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and pid != str(os.getpid()):
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            match = next((m for m in matches if any(m.encode() in part for part in cmd)), None)
            if match is not None:
                program = os.path.basename(cmd[0].decode(errors="replace"))
                kind = "java" if program == "java" else "python" if program.startswith("python") else program
                found[pid] = (kind, match)
    return found


def sample(out: str, matches: list[str], seconds: float, period: float, until_gone: bool = False) -> int:
    """Sample until ``seconds`` pass (or, ``until_gone``, the matching processes have all ended);
    the number of samples that found a matching process."""
    taken, found, scanned = 0, {}, 0.0
    end = time.time() + seconds
    with open(out, "w") as f:
        while time.time() < end:
            at = time.time()
            if at - scanned >= RESCAN:  # reading every process's command line costs the sampler most of its CPU
                found, scanned = _processes(matches), at
            record = {"t": at, "processes": {}}
            for pid, (kind, match) in found.items():
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                    _, total = _cpu(open(f"/proc/{pid}/stat").read())
                except OSError:
                    continue
                threads = {}
                for tid in tids:
                    try:
                        threads[tid] = _cpu(open(f"/proc/{pid}/task/{tid}/stat").read())
                    except OSError:  # ended meanwhile
                        continue
                record["processes"][pid] = {"kind": kind, "match": match, "total": total, "threads": threads}
            if record["processes"]:
                f.write(json.dumps(record) + "\n")
                f.flush()
                taken += 1
            elif taken and until_gone:
                break
            time.sleep(max(0.0, period - (time.time() - at)))
    return taken


def marks(log_text: str, pattern: str) -> list[tuple[float, str]]:
    """(time, text) of the job's log lines matching ``pattern``."""
    out = []
    for line in log_text.splitlines():
        m = _LINE.search(line)
        if m and re.search(pattern, m.group(2)):
            out.append((datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), m.group(2)))
    return out


def _at(samples: list[dict], t: float) -> dict:
    """The last sample taken at or before ``t`` (an empty one before the first)."""
    last = {"processes": {}}
    for s in samples:
        if s["t"] > t:
            break
        last = s
    return last


def report(samples: list[dict], log_marks: list[tuple[float, str]]) -> list[dict]:
    """Per interval between consecutive marks: its wall seconds and CPU seconds by kind of thread
    (CPU of threads that ended within it: ``ENDED``)."""
    rows = []
    for (t0, _), (t1, label) in zip(log_marks, log_marks[1:]):
        a, b = _at(samples, t0)["processes"], _at(samples, t1)["processes"]
        by: dict[str, float] = {}
        for pid, p in b.items():
            before = a.get(pid, {"total": 0, "threads": {}})
            for tid, (name, ticks) in p["threads"].items():
                kind = kind_of(p["kind"], name)
                by[kind] = by.get(kind, 0) + (ticks - before["threads"].get(tid, (name, 0))[1]) / TICKS
            seen = sum(t - before["threads"].get(tid, ("", 0))[1] for tid, (_, t) in p["threads"].items())
            by[ENDED] = by.get(ENDED, 0) + (p["total"] - before["total"] - seen) / TICKS
        rows.append(
            {
                "to": label[:70],
                "wall": round(t1 - t0, 3),
                "cpu": round(sum(by.values()), 2),
                "by_kind": {k: round(v, 2) for k, v in sorted(by.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.01},
            }
        )
    return rows


def whole(samples: list[dict]) -> dict[str, dict[str, float]]:
    """Each sampled process's CPU over its life up to its last sample, by kind of thread: each
    thread's last figure seen (a thread that ended counts what it had when last sampled; the
    process's CPU beyond those: ``ENDED``), under the match that found the process."""
    last: dict[str, dict] = {}
    seen: dict[str, dict[str, tuple[str, int]]] = {}  # pid -> tid -> (name, ticks when last seen)
    for s in samples:
        for pid, p in s["processes"].items():
            last[pid] = p
            seen.setdefault(pid, {}).update(p["threads"])
    out: dict[str, dict[str, float]] = {}
    for pid, p in sorted(last.items()):
        by = out.setdefault(f"{p.get('match', '?')} ({p['kind']} {pid})", {})
        for name, ticks in seen[pid].values():
            kind = kind_of(p["kind"], name)
            by[kind] = by.get(kind, 0) + ticks / TICKS
        by[ENDED] = (p["total"] - sum(t for _, t in seen[pid].values())) / TICKS
    return {
        k: {kind: round(v, 2) for kind, v in sorted(by.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.01}
        for k, by in out.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="record the matching processes' threads' CPU")
    s.add_argument("out")
    s.add_argument(
        "--match",
        nargs="+",
        default=["compact_partitions.py"],
        help="parts of the processes' command lines (e.g. naive_coalesce.py too, merge_speed.py's loop)",
    )
    s.add_argument("--seconds", type=float, default=600.0)
    s.add_argument("--period", type=float, default=0.05)
    s.add_argument("--until-gone", action="store_true", help="stop when the matching processes have all ended")
    r = sub.add_parser("report", help="the CPU between the log's lines, by kind of thread")
    r.add_argument("samples")
    r.add_argument("log")
    r.add_argument("--marks", default=MARKS, help="a regular expression for the log lines that split the time")
    r.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    if args.command == "sample":
        taken = sample(args.out, args.match, args.seconds, args.period, args.until_gone)
        print(f"{taken} sample(s) of processes matching {' or '.join(args.match)} in {args.out}")
        return 0 if taken else 1
    samples = [json.loads(line) for line in open(args.samples)]
    rows = report(samples, marks(open(args.log, errors="replace").read(), args.marks))
    for row in rows:
        print(
            f"{row['wall']:7.2f} s wall, {row['cpu']:6.2f} s CPU ({row['cpu'] / max(row['wall'], 1e-3):.2f} cores)"
            f" -> {row['to']}"
        )
        for kind, seconds in row["by_kind"].items():
            print(f"           {seconds:6.2f}  {kind}")
    lives = whole(samples)
    for process, by in lives.items():
        print(f"the whole of {process}: {sum(by.values()):.2f} s CPU")
        for kind, seconds in by.items():
            print(f"           {seconds:6.2f}  {kind}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"intervals": rows, "processes": lives}, f, indent=1)
    return 0 if samples else 1


if __name__ == "__main__":
    sys.exit(main())
