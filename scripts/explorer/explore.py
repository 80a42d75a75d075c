"""Explore many schedules from a seed; shrink each kind of violation to a short schedule and print
it as steps a person can read.

    python scripts/explorer/explore.py --schedules 20000 [--seed N] [--mode in_place|location_switch]
    python scripts/explorer/explore.py --replay SEED   # one schedule, its whole trace

Exit status 1 when a schedule violated an invariant."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass, field

sys.path[:0] = [
    os.path.join(os.path.dirname(__file__), ".."),
    os.path.join(os.path.dirname(__file__), "..", "..", "plugins"),
]

from explorer.scenario import Outcome, run_schedule, world_clock
from explorer.scheduler import Decision, render


@dataclass
class Figures:
    seed: int
    schedules: int = 0
    violating: int = 0
    steps: int = 0
    seconds: float = 0.0
    by_kind: dict[str, Outcome] = field(default_factory=dict)  # the first schedule of each kind
    counts: dict[str, int] = field(default_factory=dict)
    # Schedules in which something no lease fences happened (a writer took a paused job's lock, a
    # Metastore write landed after its job's lock was taken), and of those, the ones violating.
    beyond_lease: int = 0
    beyond_lease_violating: int = 0
    beyond_lease_kinds: dict[str, int] = field(default_factory=dict)
    beyond_lease_seeds: list[int] = field(default_factory=list)


def kind_of(violation) -> str:
    return violation.kind


def explore(schedules: int, seed: int, mode: str | None = None, deadline: float | None = None) -> Figures:
    figures = Figures(seed)
    started = time.monotonic()
    with world_clock():
        for i in range(schedules):
            if deadline is not None and time.monotonic() > deadline:
                break
            outcome = run_schedule(seed * 1_000_003 + i, mode)
            figures.schedules += 1
            figures.steps += len(outcome.decisions)
            if outcome.beyond_lease:
                figures.beyond_lease += 1
                if outcome.violations:
                    figures.beyond_lease_violating += 1
                    for v in outcome.violations:
                        figures.beyond_lease_kinds[v.kind] = figures.beyond_lease_kinds.get(v.kind, 0) + 1
                    figures.beyond_lease_seeds.append(outcome.seed)
            elif outcome.violations:
                figures.violating += 1
                for v in outcome.violations:
                    k = kind_of(v)
                    figures.counts[k] = figures.counts.get(k, 0) + 1
                    figures.by_kind.setdefault(k, outcome)
    figures.seconds = time.monotonic() - started
    return figures


def shrink(outcome: Outcome) -> Outcome:
    """A shorter schedule with a violation of the same kind: actors left out, kills and pauses
    turned into plain steps, the decisions cut short (past their end the first ready actor steps)."""
    kinds = {kind_of(v) for v in outcome.violations}

    def fails(cast, decisions) -> Outcome | None:
        with world_clock():
            again = run_schedule(None, outcome.mode, cast, decisions)
        if outcome.beyond_lease == [] and again.beyond_lease:
            return None  # the shrunk schedule must stay within the lease, as the one it shrinks
        return again if kinds & {kind_of(v) for v in again.violations} else None

    best = fails(outcome.cast, outcome.decisions) or outcome
    for who in list(best.cast)[1:]:
        cast = tuple(c for c in best.cast if c != who)
        best = fails(cast, best.decisions) or best
    for n, d in enumerate(best.decisions):
        if n < len(best.decisions) and d.action != "step":
            best = fails(best.cast, best.decisions[:n] + [Decision(d.pick)] + best.decisions[n + 1 :]) or best
    cut = len(best.decisions)
    while cut > 1:
        cut //= 2
        shorter = fails(best.cast, best.decisions[: len(best.decisions) - cut])
        if shorter is not None:
            best = shorter
    return best


def print_figures(figures: Figures, show: int = 3) -> None:
    rate = figures.schedules / figures.seconds if figures.seconds else 0
    print(
        f"schedule explorer: seed {figures.seed}: {figures.schedules} schedules, {figures.steps} steps, "
        f"{figures.seconds:.1f} s ({rate:.0f} schedules/s); {figures.violating} violated an invariant"
    )
    print(
        f"  beyond the lease (a writer took a paused job's lock, or a Metastore call landed after its job's lock "
        f"was taken): {figures.beyond_lease} schedules, {figures.beyond_lease_violating} of them violating "
        f"({', '.join(f'{n} x {k}' for k, n in sorted(figures.beyond_lease_kinds.items())) or 'none'}"
        f"{'; replay: --replay ' + str(figures.beyond_lease_seeds[0]) if figures.beyond_lease_seeds else ''})"
    )
    for n, (k, outcome) in enumerate(sorted(figures.by_kind.items(), key=lambda kv: -figures.counts[kv[0]])):
        print(f"  {figures.counts[k]:6d} x {k}")
        if n < show:
            small = shrink(outcome)
            print(f"    shrunk ({small.mode}, cast {', '.join(small.cast)}; replay: --replay {outcome.seed}):")
            for line in render(small.trace):
                print(f"      {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--mode", choices=("in_place", "location_switch"))
    parser.add_argument("--replay", type=int, help="run the schedule of this seed and print its trace")
    parser.add_argument("--show", type=int, default=3, help="how many kinds of violation to shrink and print")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)
    if args.replay is not None:
        with world_clock():
            outcome = run_schedule(args.replay, args.mode)
        print(f"{outcome.mode}, cast {', '.join(outcome.cast)}")
        print("\n".join(render(outcome.trace)))
        return 1 if outcome.violations else 0
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    figures = explore(args.schedules, seed, args.mode)
    print_figures(figures, args.show)
    return 1 if figures.violating else 0


if __name__ == "__main__":
    sys.exit(main())
