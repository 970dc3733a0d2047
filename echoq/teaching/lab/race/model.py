"""The race explorer's model: two reapers, each cut into the commands it sends, and one
worker that asks for work; EVERY interleaving of their commands is run, one by one, on the
live server, each from a fresh state: one job whose worker crashed and whose lease ran out.
After each interleaving a last worker asks for work, and the run's outcome is what the
server says: the job delivered once after the crash, duplicated (two workers hold it), or
not delivered: dead-lettered, late (still where the next reap or claim finds it: not lost)
or lost (in no set). No widget and no plot here.

The two-step reaper reads the expired ids, then moves each with separate commands
(``ZRANGEBYSCORE``; ``ZREM``, ``ZADD``, ``HSET``): its interleavings with the other reaper
and the worker include the ones that deliver the job twice. The atomic reaper is one
command, ``reap.lua``: nothing can run between its read and its move, and no interleaving
of it goes wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traitlets import Unicode, validate

from ....errors import InvalidArgument
from ....queue import JobState, Queue
from ...contrasts import racy_reap_read
from ...fast_forward import fast_forward
from ..frames import NO_PATH, Lit
from ..model import LabModel, Said
from . import words
from .facts import Exploration, Run, Step

__all__ = ["COMMANDS", "Exploration", "RaceModel", "Run", "Step", "explore", "interleavings", "run_one"]

COMMANDS: dict[str, tuple[str, ...]] = {
    "two-step": ("ZRANGEBYSCORE", "ZREM", "ZADD", "HSET"),
    "atomic": ("reap.lua",),
}
YOURS = ("read_expired()", "move_back()")  # a learner's two-step reaper, cut at its two calls
REAPERS = (*COMMANDS, "yours")
Mine = tuple[Callable[..., Any], Callable[..., Any]]  # (read_expired, move_back), the learner's
ACTORS = ("A", "B", "W")  # reaper A, reaper B, the worker who asks for work
HOLD_MS = 30_000  # a live worker's lease: it never runs out during a run


def interleavings(reaper: str) -> list[tuple[Step, ...]]:
    """Every order of reaper A's and reaper B's commands (each in its own order) and the
    worker's one claim: (2n + 1)! / (n! n!) of them for n commands per reaper."""
    if reaper not in REAPERS:
        raise InvalidArgument(f"reaper must be one of {', '.join(REAPERS)}, got {reaper!r}")
    cmds = YOURS if reaper == "yours" else COMMANDS[reaper]
    queues = {"A": list(cmds), "B": list(cmds), "W": ["claim.lua"]}
    out: list[tuple[Step, ...]] = []

    def walk(done: tuple[Step, ...], left: dict[str, int]) -> None:
        if not any(left.values()):
            out.append(done)
            return
        for actor in ACTORS:
            if left[actor]:
                command = queues[actor][len(queues[actor]) - left[actor]]
                walk((*done, Step(actor, command)), {**left, actor: left[actor] - 1})

    walk((), {a: len(q) for a, q in queues.items()})
    return out


def setup(queue: Queue) -> str:
    """The fresh state: one job, claimed by a worker that crashed, its lease run out."""
    queue.reset()
    job_id = queue.enqueue("resize photo 3").job_id
    queue.claim(lease_ms=HOLD_MS)
    fast_forward(queue, None)  # its deadline is the server's now: expired, on the server's clock
    return job_id


def step(queue: Queue, s: Step, memory: dict[str, list[str]], mine: Mine | None = None) -> tuple[str, Lit, bool]:
    """Send one command (or make one call of the learner's reaper); returns what it did
    (words), the path it took, and whether it delivered the job to the worker."""
    k = queue.keys
    ids = memory.setdefault(s.actor, [])
    if s.command in YOURS:
        lit = Lit.probed("sweep") if s.command == YOURS[0] else Lit.moved("reap")
        return _yours(queue, s, ids, mine), lit, False
    if s.command == "claim.lua":
        claim = queue.claim(lease_ms=HOLD_MS)
        return (
            words.claimed(s, claim.job_id if claim else None),
            Lit.moved("claim") if claim else Lit.probed("claim"),
            claim is not None,
        )
    if s.command == "reap.lua":
        moved = queue.reap()
        return words.reaped(s, moved), Lit.moved("reap") if moved else Lit.probed("sweep"), False
    if s.command == "ZRANGEBYSCORE":
        ids[:] = racy_reap_read(queue)
        return words.read(s, ids), Lit.probed("sweep"), False
    client = queue.client
    if s.command == "ZREM":
        n = sum(int(client.zrem(k.active, j)) for j in ids)
        return words.sent(s, ids, n, k.active), Lit.moved("sweep") if n else NO_PATH, False
    if s.command == "ZADD":
        n = sum(int(client.zadd(k.pending, {j: 0})) for j in ids)
        return words.sent(s, ids, n, k.pending), Lit.moved("reap") if n else NO_PATH, False
    if s.command == "HSET":
        for j in ids:
            client.hset(k.job(j), "state", JobState.PENDING.value)
        return words.sent(s, ids, len(ids), f"{k.prefix}job:<id>"), NO_PATH, False
    raise InvalidArgument(f"unknown command {s.command!r}")


def _yours(queue: Queue, s: Step, ids: list[str], mine: Mine | None) -> str:
    if mine is None:
        raise InvalidArgument("no reaper of yours to race: give it first (model.use(read_expired, move_back))")
    read_expired, move_back = mine
    try:
        if s.command == YOURS[0]:
            read = read_expired(queue.client, queue.keys) or []
            ids[:] = [x.decode() if isinstance(x, bytes) else str(x) for x in read]
            return words.read(s, ids)
        move_back(queue.client, queue.keys, list(ids))
    except Exception as exc:  # noqa: BLE001 - the learner's code: its error is a line in the readout
        raise InvalidArgument(f"your {s.command} raised {type(exc).__name__}: {exc}") from None
    return words.moved_yours(s, ids)


def run_one(
    queue: Queue, order: tuple[Step, ...], after: Callable[[str, Lit], None] | None = None, mine: Mine | None = None
) -> Run:
    """Run one interleaving from a fresh state; ``after(words, path)`` after each command
    (the replay records a frame there). The last worker asks for work at the end."""
    job_id = setup(queue)
    if after:
        after(words.fresh(job_id), Lit.moved("claim"))
    memory: dict[str, list[str]] = {}
    delivered = 0
    for s in order:
        said, lit, got = step(queue, s, memory, mine)
        delivered += got
        if after:
            after(said, lit)
    place = queue.snapshot(limit=1).place_of(job_id)
    last = queue.claim(lease_ms=HOLD_MS)
    delivered += last is not None and last.job_id == job_id
    run = Run(order, delivered, place.value if place else "nowhere")
    if after:
        after(
            words.last_worker(last.job_id if last else None, run), Lit.moved("claim") if last else Lit.probed("claim")
        )
    return run


def explore(queue: Queue, reaper: str, mine: Mine | None = None) -> Exploration:
    """Run every interleaving of ``reaper`` on ``queue`` (emptied before each, and after);
    ``mine``: the learner's (read_expired, move_back), for the reaper ``"yours"``."""
    result = Exploration(reaper)
    try:
        for order in interleavings(reaper):
            result.runs.append(run_one(queue, order, mine=mine))
    finally:
        queue.reset()
    return result


class RaceModel(LabModel):
    """The race explorer: every interleaving of two reapers and a worker, run on the server;
    any one of them replayed, step by step."""

    kind = "race"
    settings = ("reaper",)
    setting_words = words.SETTINGS
    reaper = Unicode(
        "two-step", help="the reapers that race: 'two-step' (check, then move), 'atomic' (reap.lua), 'yours' (use())"
    )

    def __init__(self, name: str | None = None, **kw: Any) -> None:
        self.explored: dict[str, Exploration] = {}
        self.shown: tuple[str, int] | None = None  # (reaper, interleaving) being replayed
        self._step: dict[str, Any] | None = None  # the replay's step, for the frame being recorded
        self.mine: Mine | None = None  # the learner's two-step reaper, once given
        super().__init__(name, **kw)

    @validate("reaper")
    def _known(self, proposal: dict[str, Any]) -> str:
        if proposal["value"] not in REAPERS:
            raise InvalidArgument(f"reaper must be one of {', '.join(REAPERS)}, got {proposal['value']!r}")
        if proposal["value"] == "yours" and self.mine is None:
            raise InvalidArgument("no reaper of yours to race yet: give it with use(read_expired, move_back)")
        return str(proposal["value"])

    def use(self, read_expired: Callable[..., Any], move_back: Callable[..., Any]) -> None:
        """Race the learner's own two-step reaper (the exercise's two functions), cut at its
        two calls: every interleaving of two of them and a worker's claim. Explore it with
        ``explore("yours")``."""
        if not (callable(read_expired) and callable(move_back)):
            raise InvalidArgument("use(read_expired, move_back) takes your two functions")
        self.mine = (read_expired, move_back)
        self.explored.pop("yours", None)

    def setup(self) -> None:
        self.explored = {}
        self.shown = None

    @property
    def exploration(self) -> Exploration | None:
        return self.explored.get(self.reaper)

    def state(self) -> dict[str, Any]:
        ex = self.exploration
        out: dict[str, Any] = {"reaper": self.reaper, "counts": ex.counts() if ex else None}
        out["total"] = len(ex.runs) if ex else len(interleavings(self.reaper))
        out["step"] = self._step
        return out

    def describe(self, snapshot: Any, state: dict[str, Any]) -> str:
        return ""  # each step says what it did; the counts are in the picture and the readout

    # -- moves ------------------------------------------------------------------------------

    def explore(self, reaper: str | None = None) -> Exploration | None:
        """Run every interleaving of ``reaper`` (default: the one set) on the server."""
        if reaper is not None:
            self.reaper = reaper
        kind = self.reaper

        def run() -> Said:
            assert self.queue is not None
            self._step = None
            self.explored[kind] = explore(self.queue, kind, self.mine)
            return words.explored(self.explored[kind]), Lit.probed("sweep")

        return self.explored.get(kind) if self.act("explore", run) else None

    def replay(self, k: int) -> Run | None:
        """Run interleaving ``k`` again from a fresh state, recording a frame after each
        command (the view then plays them one by one). The run must end as it did."""
        ex = self.exploration
        if ex is None:
            self.say("replay", words.explore_first(self.reaper))
            return None
        if not 0 <= k < len(ex.runs):
            self.say("replay", words.no_such(k, len(ex.runs)))
            return None
        order = ex.runs[k].order
        result: list[Run] = []

        def run() -> Said:
            assert self.queue is not None
            self.shown = (self.reaper, k)
            steps = iter(range(len(order) + 2))

            def after(said: str, lit: Lit) -> None:
                self._step = {"k": k, "n": next(steps), "of": len(order) + 1, "order": [str(s) for s in order]}
                self.record("replay", said, lit=lit)

            result.append(run_one(self.queue, order, after, self.mine))
            self._step = None
            return None

        self.act("replay", run)
        return result[0] if result else None
