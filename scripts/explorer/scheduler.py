"""A deterministic scheduler of actors (greenlets) over the explorer's world: before every
storage or Metastore call an actor hands control back, and the scheduler picks who takes the next
step, and whether that actor is killed (its process gone: nothing it does afterwards happens) or
paused (no step, no heartbeat, for a while of virtual time: a stalled connection, a GC pause,
SIGSTOP). Every decision is one entry of a list, drawn from a seeded random generator or
replayed from a list, so a schedule is replayed exactly and can be shrunk by editing the list."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import greenlet

from explorer.world import Clock, Killed, short

# How long a pause lasts (virtual seconds): the lock's heartbeats are lost (LOST_AFTER), the
# lock may be taken over (DEAD_AFTER), the journal becomes an orphan's (ORPHAN_AGE_SECONDS).
PAUSES = (6.0, 30.0, 700.0)


@dataclass
class Actor:
    name: str
    program: Callable[[], None]
    killable: bool = True
    pausable: bool = True
    start_after: float = 0.0  # virtual seconds from the schedule's start
    killed: bool = False
    done: bool = False
    wake_at: float = 0.0
    locks: list = field(default_factory=list)
    glet: greenlet.greenlet | None = None
    error: BaseException | None = None


@dataclass(frozen=True)
class Decision:
    """One step of a schedule: which ready actor (an index into them, by name order) and what."""

    pick: int
    action: str = "step"  # "step", "kill" or "pause:<seconds>"


_STEPS = tuple(Decision(n) for n in range(16))


class ScheduleTooLong(RuntimeError):
    pass


class Scheduler:
    def __init__(
        self,
        clock: Clock,
        rng: random.Random | None,
        decisions: list[Decision] | None = None,
        kill_rate: float = 0.0,
        pause_rate: float = 0.0,
        max_steps: int = 3000,
        policy=None,
    ):
        self.clock, self.rng, self.policy = clock, rng, policy
        self.replay = list(decisions) if decisions is not None else None
        self.kill_rate, self.pause_rate, self.max_steps = kill_rate, pause_rate, max_steps
        self.decisions: list[Decision] = []
        self.trace: list = []  # lines, or (actor, template, arguments) to format when printed
        self.current: Actor | None = None
        self.actors: list[Actor] = []
        self.on_resume: Callable[[Actor], None] = lambda actor: None
        self._main = None
        self._last: dict[str, str] = {}
        clock.sleeper = self.sleep

    def note(self, template: str, *args) -> None:
        """A line of the trace, formatted only if it is printed (``render``)."""
        self.trace.append((self.current.name if self.current else "-", template, args))

    def point(self, what: str, *args) -> None:
        """Called by the world before each call (``what`` formatted with ``args``, when printed):
        control goes back to the scheduler."""
        actor = self.current
        if actor is None:  # the world set up or checked outside any actor
            return
        if actor.killed:
            raise Killed()
        self._last[actor.name] = (what, args)
        self._main.switch()
        if actor.killed:
            raise Killed()
        self.on_resume(actor)

    def sleep(self, seconds: float) -> None:
        actor = self.current
        if actor is None:
            self.clock.now += seconds
            return
        actor.wake_at = self.clock.now + seconds
        self.point("sleep {:g} s", seconds)

    def _decide(self, ready: list[Actor]) -> Decision:
        if self.policy is not None:
            return self.policy(ready)
        if self.replay is not None:
            d = self.replay.pop(0) if self.replay else Decision(0)
            return Decision(d.pick % len(ready), d.action)
        rand = self.rng.random
        pick = int(rand() * len(ready))
        actor, r = ready[pick], rand()
        if actor.glet is not None and actor.killable and r < self.kill_rate:
            return Decision(pick, "kill")
        if actor.glet is not None and actor.pausable and r < self.kill_rate + self.pause_rate:
            return Decision(pick, f"pause:{PAUSES[int(rand() * len(PAUSES))]:g}")
        return _STEPS[pick] if pick < len(_STEPS) else Decision(pick)

    def run(self, actors: list[Actor]) -> None:
        actors = self.actors = sorted(actors, key=lambda a: a.name)
        self._main = greenlet.getcurrent()
        start = self.clock.now
        for a in actors:
            a.wake_at = start + a.start_after
        steps = 0
        while True:
            now = self.clock.now
            ready = [a for a in actors if not a.done and a.wake_at <= now]
            if not ready:
                alive = [a for a in actors if not a.done]
                if not alive:
                    return
                self.clock.now = min(a.wake_at for a in alive)
                continue
            steps += 1
            if steps > self.max_steps:
                raise ScheduleTooLong(f"more than {self.max_steps} steps")
            d = self._decide(ready)
            actor = ready[d.pick]
            if d.action == "kill" and actor.glet is None:  # a replayed list edited by the shrinker
                d = Decision(d.pick)
            self.decisions.append(d)
            if d.action == "kill":
                self.trace.append((actor.name, "killed (at: {})", (self._before(actor),)))
                actor.killed = True
                self._enter(actor, lambda: actor.glet.throw(Killed()))  # noqa: B023 - called right away
                continue
            if d.action.startswith("pause:"):
                seconds = float(d.action.split(":", 1)[1])
                self.trace.append((actor.name, "paused {:g} s (before: {})", (seconds, self._before(actor))))
                actor.wake_at = self.clock.now + seconds
                continue
            if actor.glet is None:
                actor.glet = greenlet.greenlet(self._body(actor))
            self._enter(actor, actor.glet.switch)
            self.clock.now += Clock.STEP

    def _before(self, actor: Actor) -> str:
        what, args = self._last.get(actor.name, ("start", ()))
        return what.format(*args)

    def _enter(self, actor: Actor, how) -> None:
        self.current = actor
        try:
            how()
        finally:
            self.current = None

    def _body(self, actor: Actor):
        def body():
            try:
                actor.program()
            except Killed:
                pass
            except BaseException as e:  # noqa: BLE001 - kept for the invariants, which report it
                actor.error = e
            finally:
                actor.done = True

        return body


def render(trace: list) -> list[str]:
    """The trace's lines as a person reads them."""
    return [short(line if isinstance(line, str) else f"{line[0]}: {line[1].format(*line[2])}") for line in trace]
