"""The lab's state: what each panel knows about its queue, with no widget in sight.

Each model owns one queue on a real server (its own name, so two panels never disturb
each other). A move is a method that runs real scripts on Valkey and then re-reads the
whole queue with one atomic ``snapshot`` -- so the picture drawn from it can never show a
job in two places. The model says in words what the last move did (``readout``), and
whether the server is there (``connected``); the views in :mod:`echoq.lab.views` only
bind widgets to these traits.

If Valkey goes away, a move does not raise: ``connected`` turns False and ``readout`` says
so in one line; :meth:`LabModel.reconnect` tries again.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import redis
from traitlets import Bool, HasTraits, Int, TraitError, Unicode, observe, validate

from ... import scripts
from ...clock import wait_until_expired
from ...effects import Effects
from ...errors import EchoqError, InvalidArgument, ServerUnavailable
from ...keyspace import Keyspace
from ...queue import Claim, Complete, Queue, Snapshot
from ...server import check, connect, describe_client, redact
from .. import learner
from ..contrasts import OverlapReport, overlapping_sweeps
from ..fast_forward import fast_forward

__all__ = [
    "LabModel",
    "ClaimModel",
    "DeliveryModel",
    "ReapModel",
    "FleetModel",
    "fast_forward",
    "short",
]

_instances = itertools.count(1)
GONE = (ServerUnavailable, redis.ConnectionError, redis.TimeoutError)


def short(job_id: str) -> str:
    """``JOB…WXYZ``: the last four characters are random, so they tell a handful apart."""
    return f"JOB…{job_id[-4:]}"


def seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s"


class LabModel(HasTraits):
    """What every panel shares: a queue, a snapshot, a readout in words, the connection."""

    kind: ClassVar[str] = "lab"

    readout = Unicode("", help="what the last move did and where the jobs are, in words")
    last_move = Unicode("", help="name of the last move run")
    connected = Bool(False, help="False once Valkey went away, until reconnect() succeeds")
    revision = Int(0, help="bumped on every fresh snapshot; views redraw on it")
    clock = Unicode("", help="the lease countdown against the server's clock")

    def __init__(self, name: str | None = None, *, client: redis.Redis | None = None, url: str | None = None) -> None:
        super().__init__()
        # A given name is put in the learner's namespace too: lessons name their panels.
        self.name = learner.queue_name(name or f"lab-{self.kind}-{os.getpid()}-{next(_instances)}")
        self.url = url
        self._given_client = client
        self.queue: Queue | None = None
        self.snapshot: Snapshot | None = None
        self.previous: Snapshot | None = None
        self._fresh = True
        self.busy = False
        self.reconnect()

    # -- connection -----------------------------------------------------------------------

    def keys(self, part: str) -> str:
        """A key of this panel's queue, by its Keyspace name: ``keys('active')``."""
        return getattr(Keyspace(self.name), part)

    def reconnect(self) -> bool:
        """Connect (again): the given client, else ``url``, else :func:`echoq.connect`."""
        try:
            if self._given_client is not None:
                check(self._given_client)
                client = self._given_client
            else:
                client = connect(self.url)
            self.queue = Queue(self.name, client)
            if self._fresh:
                self.queue.reset()
                self.setup()
                self._fresh = False
            self.connected = True
            self.refresh()
        except GONE as exc:
            self._gone(exc)
            return False
        self.last_move = "connect"
        self.readout = f"Connected to Valkey at {describe_client(client)}, queue {self.name!r}. " + self.describe()
        return True

    def _gone(self, exc: BaseException) -> None:
        where = (
            describe_client(self.queue.client)
            if self.queue is not None
            else (redact(self.url) if self.url else "the default server")
        )
        self.connected = False
        self.readout = (
            f"Valkey went away: cannot reach {where} ({type(exc).__name__}). "
            "The buttons are off; press reconnect once the server is back."
        )

    # -- moves ----------------------------------------------------------------------------

    def setup(self) -> None:
        """Runs once, on the first connection, after the panel's queue was emptied."""

    def act(self, move: str, run: Callable[[], str]) -> bool:
        """Run one move; write what it did (or why it was refused) into ``readout``."""
        if not self.connected or self.queue is None:
            self.readout = f"{move}: not connected to Valkey. Press reconnect."
            return False
        self.busy = True  # views hold their redraws until the fresh snapshot is in
        try:
            words = run()
            self.refresh()
        except GONE as exc:
            self._gone(exc)
            return False
        except EchoqError as exc:
            self.last_move = move
            self.readout = f"{move} refused: {exc}"
            return False
        finally:
            self.busy = False
        self.last_move = move
        self.readout = f"{words} {self.describe()}".strip()
        return True

    def refresh(self) -> None:
        assert self.queue is not None
        self.previous, self.snapshot = self.snapshot, self.queue.snapshot()
        self.clock = self.describe_clock()
        self.revision += 1

    def tick(self) -> bool:
        """Re-read the queue (the live countdown calls this on a beat); False if gone."""
        if not self.connected:
            return False
        try:
            self.refresh()
        except GONE as exc:
            self._gone(exc)
            return False
        return True

    def reset(self) -> bool:
        def run() -> str:
            assert self.queue is not None
            gone = self.queue.reset()
            self.setup()
            return f"reset: deleted {gone} keys of queue {self.name!r}."

        return self.act("reset", run)

    # -- words ----------------------------------------------------------------------------

    def describe(self) -> str:
        """Where the jobs are now, naming the keys."""
        snap = self.snapshot
        if snap is None:
            return ""
        parts = []
        for place in ("pending", "active", "dead"):
            members = list(getattr(snap, place))
            n = snap.counts[place]
            if place == "dead" and n == 0:
                continue
            listed = ", ".join(short(j) for j in members[:3]) + (", …" if n > 3 else "")
            parts.append(f"{self.keys(place)} holds {n}" + (f" ({listed})" if n else ""))
        return "Now " + "; ".join(parts) + "."

    def describe_clock(self) -> str:
        snap = self.snapshot
        if snap is None or not snap.active:
            return "no lease is running"
        words = []
        for job_id, deadline in list(snap.active.items())[:3]:
            left = deadline - snap.now_ms
            if left > 0:
                words.append(f"{short(job_id)}: lease ends in {seconds(left)}")
            else:
                words.append(f"{short(job_id)}: lease ran out {seconds(-left)} ago, a reap will take it")
        return "server clock · " + "; ".join(words)


# -- panel 1: the recoverable claim ---------------------------------------------------------

CLAIM_STEPS: dict[str, str | None] = {
    "enqueue": "enqueue",
    "claim": "claim",
    "finish": "complete",
    "crash": None,
    "reap": "reap",
    "fast-forward": "teaching/fast_forward",
}


@dataclass
class ClaimPicture:
    """What the claim diagram draws."""

    queue: str
    pending: list[str]
    active: dict[str, int]  # id -> ms left on its lease (negative: expired)
    done: list[str]
    counts: dict[str, int]
    lit: str
    crash: bool
    held: str | None
    status: str


class ClaimModel(LabModel):
    """One worker, one job at a time: enqueue, claim, finish (or crash), reap."""

    kind = "claim"
    crash = Bool(False, help="when on, 'finish' kills the worker mid-job instead of completing")
    lease_ms = Int(10_000, help="lease of each claim, in milliseconds")
    step = Unicode("claim", help="the step whose path is lit and whose Lua is shown")

    def __init__(self, name: str | None = None, **kw: object) -> None:
        self.held: Claim | None = None
        self._made = 0
        super().__init__(name, **kw)  # type: ignore[arg-type]

    @validate("step")
    def _known_step(self, proposal: dict) -> str:
        if proposal["value"] not in CLAIM_STEPS:
            raise TraitError(f"step must be one of {', '.join(CLAIM_STEPS)}, got {proposal['value']!r}")
        return proposal["value"]

    @validate("lease_ms")
    def _positive_lease(self, proposal: dict) -> int:
        if proposal["value"] <= 0:
            raise TraitError(f"lease_ms must be > 0 milliseconds, got {proposal['value']!r}")
        return proposal["value"]

    def setup(self) -> None:
        self.held = None

    def step_source(self, step: str | None = None) -> str:
        """The exact Lua a step runs, as the server runs it (a crash runs none)."""
        script = CLAIM_STEPS[step or self.step]
        if script is None:
            return (
                "-- A crash runs no script: that is the point. The worker dies between claim.lua and\n"
                f"-- complete.lua, so nothing moves the job: it stays in {self.keys('active')}, scored\n"
                "-- by its lease deadline, until reap.lua finds the lease expired."
            )
        return scripts.expanded(script)

    def enqueue(self) -> bool:
        def run() -> str:
            assert self.queue is not None
            self._made += 1
            job = self.queue.enqueue(f"job {self._made}")
            return f"enqueue.lua added {short(job.job_id)} to {self.keys('pending')}."

        return self.act("enqueue", self._stepping("enqueue", run))

    def claim(self) -> bool:
        def run() -> str:
            assert self.queue is not None
            if self.held is not None:
                return f"The worker already holds {short(self.held.job_id)}: finish it (or crash) first."
            claim = self.queue.claim(lease_ms=self.lease_ms)
            if claim is None:
                return f"claim.lua found {self.keys('pending')} empty: enqueue a job first."
            self.held = claim
            return (
                f"claim.lua moved {short(claim.job_id)} from pending to {self.keys('active')} under a "
                f"{seconds(self.lease_ms)} lease (deadline {claim.deadline_ms} on the server's clock); "
                f"attempt (the fencing token) = {claim.attempt}."
            )

        return self.act("claim", self._stepping("claim", run))

    def finish(self) -> bool:
        def run() -> str:
            assert self.queue is not None
            held = self.held
            if held is None:
                return "The worker holds no job: claim one first."
            self.held = None
            if self.crash:
                return (
                    f"The worker crashed mid-job: no complete ran, so {short(held.job_id)} stays leased "
                    f"in {self.keys('active')} until its lease runs out; then a reap returns it to pending."
                )
            outcome = self.queue.complete(held)
            if outcome is Complete.COMPLETED:
                return (
                    f"complete.lua (attempt {held.attempt}) took {short(held.job_id)} out of {self.keys('active')}: "
                    f"the row is retired, the id remembered in {self.keys('done')}."
                )
            return (
                f"complete.lua refused {short(held.job_id)} as {outcome.value}: attempt {held.attempt} no longer "
                "holds it (the lease ran out and it was reaped). Nothing changed."
            )

        step = "crash" if self.crash else "finish"
        return self.act(step, self._stepping(step, run))

    def _stepping(self, step: str, run: Callable[[], str]) -> Callable[[], str]:
        def lit_then_run() -> str:
            self.step = step  # inside the move, so the picture redraws once, after it
            return run()

        return lit_then_run

    def reap(self) -> bool:
        def run() -> str:
            assert self.queue is not None
            moved = self.queue.reap()
            if moved:
                names = ", ".join(short(j) for j in moved)
                return (
                    f"reap.lua moved {names} from {self.keys('active')} back to {self.keys('pending')}: "
                    "the lease ran out on the server's clock."
                )
            snap = self.queue.snapshot()
            if not snap.active:
                return f"reap.lua found {self.keys('active')} empty: nothing to recover."
            job_id, deadline = next(iter(snap.active.items()))
            return (
                f"reap.lua moved nothing: the lease of {short(job_id)} runs {seconds(deadline - snap.now_ms)} "
                "more on the server's clock. Wait, or fast-forward."
            )

        return self.act("reap", self._stepping("reap", run))

    def fast_forward(self) -> bool:
        def run() -> str:
            assert self.queue is not None
            _now, moved = fast_forward(self.queue)
            return (
                f"fast_forward.lua (a teaching script; the clock is untouched) pulled {moved} lease "
                "deadline(s) to the server's now: the next reap finds them expired."
            )

        return self.act("fast-forward", self._stepping("fast-forward", run))

    def picture(self) -> ClaimPicture:
        snap = self.snapshot
        if snap is None:
            return ClaimPicture(self.name, [], {}, [], {}, self.step, self.crash, None, self.clock)
        return ClaimPicture(
            queue=self.name,
            pending=list(snap.pending),
            active={j: d - snap.now_ms for j, d in snap.active.items()},
            done=list(snap.done),
            counts=dict(snap.counts),
            lit=self.step,
            crash=self.crash,
            held=self.held.job_id if self.held else None,
            status=self.clock,
        )


# -- panel 2: at-least-once delivery, effect-once consumer ---------------------------------


@dataclass
class DeliveryRun:
    consumer: str
    job_id: str
    effects_after: list[int]  # the ledger's count for the job after each delivery
    attempts: list[int]  # the attempt number (fencing token) each delivery got

    @property
    def deliveries(self) -> int:
        return len(self.attempts)

    @property
    def effects(self) -> int:
        return self.effects_after[-1] if self.effects_after else 0


@dataclass
class DeliveryPicture:
    queue: str
    run: DeliveryRun | None
    fence: list[str] = field(default_factory=list)
    fence_step: int = 0


CONSUMERS = ("keyed", "naive")
CRASH_LEASE_MS = 3  # the leases of deliveries that crash: short, so the demo never waits long


class DeliveryModel(LabModel):
    """Redeliver one job N times for real and count its effects in the ledger."""

    kind = "delivery"
    deliveries = Int(3, help="how many times the job is delivered, 1..10")
    consumer = Unicode("keyed", help="'keyed' (effect keyed on the JOB id) or 'naive' (effect per delivery)")
    fence_step = Int(0, help="how far the stale-completion demo has gone, 0..5")

    FENCE_STEPS = 5

    def __init__(self, name: str | None = None, **kw: object) -> None:
        self.run: DeliveryRun | None = None
        self.fence_log: list[str] = []
        self._fence_claims: dict[str, Claim] = {}
        super().__init__(name, **kw)  # type: ignore[arg-type]
        if self.connected:
            self.deliver()

    @validate("deliveries")
    def _deliveries_range(self, proposal: dict) -> int:
        if not 1 <= proposal["value"] <= 10:
            raise TraitError(f"deliveries must be between 1 and 10, got {proposal['value']!r}")
        return proposal["value"]

    @validate("consumer")
    def _known_consumer(self, proposal: dict) -> str:
        if proposal["value"] not in CONSUMERS:
            raise TraitError(f"consumer must be 'keyed' or 'naive', got {proposal['value']!r}")
        return proposal["value"]

    @observe("deliveries", "consumer")
    def _redeliver(self, _change: dict) -> None:
        self.deliver()

    def setup(self) -> None:
        self.run = None

    def deliver(self) -> bool:
        """Deliver one fresh job ``deliveries`` times: each delivery but the last claims
        under a 3 ms lease, performs the effect, and crashes; the lease runs out on the
        server's clock, reap.lua returns the job, and it is claimed again. The last
        delivery completes."""
        n, consumer = self.deliveries, self.consumer

        def run() -> str:
            assert self.queue is not None
            queue = self.queue
            queue.reset()
            effects = Effects(queue)
            apply = effects.apply_once if consumer == "keyed" else effects.apply_every
            job_id = queue.enqueue("charge card 4242 once").job_id
            result = DeliveryRun(consumer, job_id, [], [])
            for delivery in range(1, n + 1):
                last = delivery == n
                claim = queue.claim(lease_ms=30_000 if last else CRASH_LEASE_MS)
                if claim is None:
                    raise InvalidArgument(f"delivery {delivery}: the job was not back in pending")
                result.attempts.append(claim.attempt)
                result.effects_after.append(apply(claim.job_id, f"charge, delivery {delivery}").count)
                if last:
                    queue.complete(claim)
                else:
                    wait_until_expired(queue.client, claim.deadline_ms)  # the worker is dead; its lease runs out
                    queue.reap()
            self.run = result
            how = "keyed on the JOB id" if consumer == "keyed" else "naive: one per delivery"
            return (
                f"Delivered {short(job_id)} {n} time(s) (claim, effect, crash, reap … then complete): "
                f"{self.keys('effects')} counts {result.effects} effect(s), {how}."
            )

        return self.act("deliver", run)

    # The fence, one real step per call.

    def fence_next(self) -> bool:
        step = self.fence_step + 1 if self.fence_step < self.FENCE_STEPS else 1

        def run() -> str:
            assert self.queue is not None
            fq = Queue(f"{self.name}-fence", self.queue.client)
            claims = self._fence_claims
            if step == 1:
                fq.reset()
                self.fence_log = []
                job_id = fq.enqueue("send invoice 7").job_id
                claims["A"] = a = fq.claim(lease_ms=CRASH_LEASE_MS)  # type: ignore[assignment]
                line = (
                    f"1. Worker A claims {short(job_id)}: attempt {a.attempt}, a {CRASH_LEASE_MS} ms lease. A stalls."
                )
            elif step == 2:
                a = claims["A"]
                wait_until_expired(fq.client, a.deadline_ms)
                moved = fq.reap()
                line = f"2. A's lease runs out on the server's clock; reap.lua moves {len(moved)} job back to pending."
            elif step == 3:
                claims["B"] = b = fq.claim(lease_ms=30_000)  # type: ignore[assignment]
                line = f"3. Worker B claims it: attempt {b.attempt}. B holds the job now."
            elif step == 4:
                a = claims["A"]
                outcome = fq.complete(a)
                place = fq.snapshot().place_of(a.job_id)
                line = (
                    f"4. A wakes up and completes with attempt {a.attempt}: {outcome.value.upper()}. "
                    f"Refused, nothing changed: the job is still in emq:{{{fq.name}}}:{place.value if place else '?'}."
                )
            else:
                b = claims["B"]
                outcome = fq.complete(b)
                line = f"5. B completes with attempt {b.attempt}: {outcome.value.upper()}. One finish, by the holder."
            self.fence_log = [*self.fence_log, line]
            self.fence_step = step
            return line

        return self.act("fence", run)

    def picture(self) -> DeliveryPicture:
        return DeliveryPicture(self.name, self.run, list(self.fence_log), self.fence_step)

    def describe(self) -> str:
        return ""


# -- panel 3: stalled recovery ---------------------------------------------------------------


@dataclass
class ReapPicture:
    queue: str
    now_ms: int
    pending: list[str]
    active: dict[str, int]  # id -> deadline - now (ms)
    dead: list[str]
    stalled: dict[str, int]
    moved: dict[str, tuple[str, float]]  # id -> (lane it came from, x it came from) for the animation
    max_stalled: int
    race: dict[str, OverlapReport]


class ReapModel(LabModel):
    """Crashed workers' jobs on a time axis, the reap step, the stalled count, the race."""

    kind = "reap"
    max_stalled = Int(2, help="the stall count at which stalled_check.lua dead-letters a job (the N-th stall is fatal)")
    lease_ms = Int(3_000, help="lease of the first worker; the others get 2x, 3x ... of it")
    workers = Int(3, help="how many jobs 'start workers' claims")

    def __init__(self, name: str | None = None, **kw: object) -> None:
        self.race: dict[str, OverlapReport] = {}
        self.moved: dict[str, tuple[str, float]] = {}
        super().__init__(name, **kw)  # type: ignore[arg-type]

    @validate("max_stalled")
    def _max_range(self, proposal: dict) -> int:
        if not 1 <= proposal["value"] <= 10:
            raise TraitError(f"max_stalled must be between 1 and 10, got {proposal['value']!r}")
        return proposal["value"]

    def setup(self) -> None:
        self.moved = {}

    def _claim_staggered(self, queue: Queue, count: int) -> list[Claim]:
        return [c for i in range(count) if (c := queue.claim(lease_ms=self.lease_ms * (i + 1))) is not None]

    def start_workers(self) -> bool:
        """Enqueue jobs and hand each to a worker that crashes at once (staggered leases)."""

        def run() -> str:
            assert self.queue is not None
            self.moved = {}
            self.queue.enqueue_many([f"job {i}" for i in range(self.workers)])
            claims = self._claim_staggered(self.queue, self.queue.snapshot().counts["pending"])
            return (
                f"{len(claims)} worker(s) claimed a job each into {self.keys('active')} and crashed; each job "
                "sits at its lease deadline on the time axis."
            )

        return self.act("start workers", run)

    def claim_again(self) -> bool:
        """Redeliver every pending job to a new worker, which crashes too."""

        def run() -> str:
            assert self.queue is not None
            self.moved = {}
            pending = self.queue.snapshot().counts["pending"]
            claims = self._claim_staggered(self.queue, pending)
            if not claims:
                return f"{self.keys('pending')} is empty: nothing to claim."
            return f"{len(claims)} job(s) claimed again by new workers, which crashed too."

        return self.act("claim again", run)

    def _lanes(self) -> dict[str, tuple[str, float]]:
        picture = self.picture()
        where: dict[str, tuple[str, float]] = {}
        for lane, xs in (("pending", pending_x(picture.pending)), ("dead", pending_x(picture.dead))):
            where.update({j: (lane, x) for j, x in xs.items()})
        where.update({j: ("active", left / 1000) for j, left in picture.active.items()})
        return where

    def step_reap(self) -> bool:
        """One stalled_check.lua sweep with the chosen ``max_stalled``."""
        max_stalled = self.max_stalled

        def run() -> str:
            assert self.queue is not None
            before = self._lanes()
            report = self.queue.stalled_check(max_stalled=max_stalled)
            self.moved = {j: before[j] for j in report.recovered + report.dead if j in before}
            if not report.recovered and not report.dead:
                return (
                    "stalled_check.lua found no expired lease: every worker's lease still runs. Wait, or fast-forward."
                )
            words = []
            if report.recovered:
                words.append(f"moved {', '.join(short(j) for j in report.recovered)} back to {self.keys('pending')}")
            if report.dead:
                words.append(
                    f"dead-lettered {', '.join(short(j) for j in report.dead)} into {self.keys('dead')} "
                    f"(its stall count reached max_stalled={max_stalled})"
                )
            return f"stalled_check.lua {' and '.join(words)}."

        return self.act("step the reap", run)

    def fast_forward(self, advance_ms: int | None = 2_000) -> bool:
        def run() -> str:
            assert self.queue is not None
            self.moved = {}
            _now, moved = fast_forward(self.queue, advance_ms)
            how = "to the server's now" if advance_ms is None else f"{seconds(advance_ms)} earlier"
            return (
                f"fast_forward.lua (a teaching script; the clock is untouched) moved {moved} lease deadline(s) {how}."
            )

        return self.act("fast-forward", run)

    def race_demo(self) -> bool:
        """Two overlapping sweeps around one crashed job: two-step vs atomic, side by side."""

        def run() -> str:
            assert self.queue is not None
            reports = {}
            for label, racy in (("two-step", True), ("atomic", False)):
                q = Queue(f"{self.name}-{'racy' if racy else 'atomic'}", self.queue.client)
                q.reset()
                reports[label] = overlapping_sweeps(q, racy=racy)
                q.reset()
            self.race = reports
            racy, atomic = reports["two-step"], reports["atomic"]
            return (
                f"Race: two overlapping two-step sweeps (check, then move) gave one crashed job "
                f"{racy.deliveries} deliveries, {racy.duplicate_deliveries} duplicate: two workers hold it at once. "
                f"The atomic reap.lua gave {atomic.deliveries} deliveries, {atomic.duplicate_deliveries} duplicate."
            )

        return self.act("race", run)

    def picture(self) -> ReapPicture:
        snap = self.snapshot
        if snap is None:
            return ReapPicture(self.name, 0, [], {}, [], {}, {}, self.max_stalled, self.race)
        return ReapPicture(
            queue=self.name,
            now_ms=snap.now_ms,
            pending=list(snap.pending),
            active={j: d - snap.now_ms for j, d in snap.active.items()},
            dead=list(snap.dead),
            stalled={j: row.stalled for j, row in snap.rows.items()},
            moved=dict(self.moved),
            max_stalled=self.max_stalled,
            race=dict(self.race),
        )


def pending_x(ids: list[str], start: float = -4.6, gap: float = 0.9) -> dict[str, float]:
    """Where jobs without a deadline sit on the reap lab's axis: in a row, oldest first."""
    return {j: start + i * gap for i, j in enumerate(ids)}


# -- panel 4: the fleet ------------------------------------------------------------------------


@dataclass
class FleetWorker:
    """One lab worker: an in-process :class:`echoq.worker.Worker` on its own thread."""

    slot: int
    worker: Any
    thread: threading.Thread
    stop_signal: threading.Event
    state: str = "working"  # working / killed / stopped / failed
    killed_job: str | None = None

    @property
    def completed(self) -> int:
        return self.worker.report.completed


@dataclass
class FleetPicture:
    queue: str
    times: list[float]
    series: dict[str, list[int]]
    workers: list[tuple[int, str, int, str | None]]  # slot, state, completed, job in hand
    lost: int
    duplicates: int
    rate: int


FLEET_PLACES = ("pending", "active", "done", "dead")


class FleetModel(LabModel):
    """Workers on a beat (stalled check, then drain) consuming one queue; kill and restart
    them; a producer enqueues at ``rate`` jobs per second.

    The workers are threads in this Python process and a kill is SIMULATED: the worker's
    job in hand is abandoned mid-job (no complete, no extend, no retry -- exactly what a
    killed process leaves), and the worker claims nothing more. Real process kills are the
    chaos runner's (``python -m echoq chaos``).
    """

    kind = "fleet"
    rate = Int(0, help="jobs enqueued per second by the producer, 0..50")
    job_ms = Int(150, help="how long each job's work takes, in milliseconds")
    lease_ms = Int(600, help="each claim's lease; a live worker extends it, a killed one cannot")
    beat_ms = Int(200, help="how often each worker runs the stalled check")

    def __init__(self, name: str | None = None, **kw: object) -> None:
        self.fleet: list[FleetWorker] = []
        self.enqueued: set[str] = set()
        self.history_t: list[float] = []
        self.history: dict[str, list[int]] = {p: [] for p in FLEET_PLACES}
        self.lost = 0
        self.duplicates = 0
        self._started = time.monotonic()
        self._producer: threading.Thread | None = None
        self._producing = threading.Event()
        self._lock = threading.Lock()
        super().__init__(name, **kw)  # type: ignore[arg-type]

    @validate("rate")
    def _rate_range(self, proposal: dict) -> int:
        if not 0 <= proposal["value"] <= 50:
            raise TraitError(f"rate must be between 0 and 50 jobs per second, got {proposal['value']!r}")
        return proposal["value"]

    @observe("rate")
    def _rate_changed(self, change: dict) -> None:
        if change["new"] > 0 and (self._producer is None or not self._producer.is_alive()):
            self._producing.clear()
            self._producer = threading.Thread(target=self._produce, daemon=True, name=f"echoq-lab-producer-{self.name}")
            self._producer.start()
        elif change["new"] == 0:
            self._producing.set()

    def _produce(self) -> None:
        while not self._producing.is_set() and self.rate > 0 and self.connected:
            try:
                self._enqueue(1)
            except GONE as exc:
                self._gone(exc)
                return
            self._producing.wait(1 / max(self.rate, 1))  # pacing the producer, not synchronisation

    def _enqueue(self, count: int) -> list[str]:
        assert self.queue is not None
        ids = self.queue.enqueue_many([f"fleet job {len(self.enqueued) + i + 1}" for i in range(count)])
        with self._lock:
            self.enqueued.update(ids)
        return ids

    def add_jobs(self, count: int = 20) -> bool:
        def run() -> str:
            self._enqueue(count)
            return f"enqueued {count} jobs into {self.keys('pending')}."

        return self.act("add jobs", run)

    def _spawn(self, slot: int) -> FleetWorker:
        from ...worker import Worker, keyed_consumer

        assert self.queue is not None
        stop_signal = threading.Event()
        queue = Queue(self.name, self.queue.client)

        def work(_delivery: object) -> None:
            stop_signal.wait(self.job_ms / 1000)  # the job's work; a kill cuts it short

        worker = Worker(
            queue,
            keyed_consumer(Effects(queue), work),
            lease_ms=self.lease_ms,
            beat_ms=self.beat_ms,
            idle_wait_ms=20,
        )
        entry = FleetWorker(slot, worker, threading.Thread(), stop_signal)

        def run() -> None:
            try:
                worker.work()
            except GONE:
                entry.state = "failed"
                return
            if entry.state == "working":
                entry.state = "stopped"

        entry.thread = threading.Thread(target=run, daemon=True, name=f"echoq-lab-worker-{self.name}-{slot}")
        entry.thread.start()
        return entry

    def start(self, workers: int = 3) -> bool:
        def run() -> str:
            self.stop_all(quiet=True)
            self.fleet = [self._spawn(slot) for slot in range(1, workers + 1)]
            return (
                f"started {workers} workers (threads in this kernel), each on a {self.beat_ms} ms beat: "
                "stalled check, then drain; the consumer is keyed on the JOB id."
            )

        return self.act("start", run)

    def kill(self, slot: int) -> bool:
        """Simulated kill: the job in hand is abandoned mid-job; the worker claims no more."""

        def run() -> str:
            entry = self._entry(slot)
            if entry.state != "working":
                return f"worker {slot} is already {entry.state}."
            in_hand = entry.worker.in_flight
            entry.worker.abandon()  # from now on it says nothing more to Valkey: its job stays leased
            entry.state = "killed"
            entry.killed_job = in_hand[0].job_id if in_hand else None
            entry.stop_signal.set()
            where = (
                f"{short(entry.killed_job)} stays leased in {self.keys('active')} until its lease runs out "
                "and a live worker's beat returns it"
                if entry.killed_job
                else "it held no job"
            )
            return f"killed worker {slot} (simulated: a thread cannot be SIGKILLed) mid-job: {where}."

        return self.act(f"kill {slot}", run)

    def restart(self, slot: int) -> bool:
        def run() -> str:
            entry = self._entry(slot)
            if entry.state == "working":
                return f"worker {slot} is still working."
            entry.thread.join(timeout=5)
            self.fleet[self.fleet.index(entry)] = self._spawn(slot)
            return f"restarted worker {slot}: its first beat recovers any expired lease, then it drains."

        return self.act(f"restart {slot}", run)

    def _entry(self, slot: int) -> FleetWorker:
        for entry in self.fleet:
            if entry.slot == slot:
                return entry
        raise InvalidArgument(f"no worker {slot}: start the fleet first (workers are numbered from 1)")

    def stop_all(self, quiet: bool = False) -> None:
        """Stop the producer and every worker gracefully, and wait for their threads."""
        self._producing.set()
        for entry in self.fleet:
            entry.worker.stop()
        for entry in self.fleet:
            entry.thread.join(timeout=10)
            if entry.state == "working":
                entry.state = "stopped"
        if self._producer is not None:
            self._producer.join(timeout=5)

    def refresh(self) -> None:
        super().refresh()
        snap = self.snapshot
        assert snap is not None and self.queue is not None
        with self._lock:
            known = len(self.enqueued)
        placed = sum(snap.counts[p] for p in ("pending", "active", "scheduled", "dead", "done"))
        self.lost = max(0, known - placed)
        self.duplicates = Effects(self.queue).duplicates()
        with self._lock:
            self.history_t.append(time.monotonic() - self._started)
            for place in FLEET_PLACES:
                self.history[place].append(snap.counts[place])
            if len(self.history_t) > 600:  # keep the last few minutes
                self.history_t = self.history_t[-600:]
                self.history = {p: v[-600:] for p, v in self.history.items()}

    def describe_clock(self) -> str:
        return self.describe()

    def describe(self) -> str:
        snap = self.snapshot
        if snap is None:
            return ""
        c = snap.counts
        alive = sum(1 for e in self.fleet if e.state == "working")
        return (
            f"{alive} of {len(self.fleet)} workers alive. {self.keys('pending')} {c['pending']}, "
            f"active {c['active']}, done {c['done']}, dead {c['dead']}. "
            f"Lost: {self.lost}. Duplicate effects: {self.duplicates}."
        )

    def picture(self) -> FleetPicture:
        workers = []
        for e in self.fleet:
            in_hand = e.worker.in_flight
            workers.append((e.slot, e.state, e.completed, in_hand[0].job_id if in_hand else None))
        with self._lock:
            times, series = list(self.history_t), {p: list(v) for p, v in self.history.items()}
        return FleetPicture(
            self.name,
            times,
            series,
            workers,
            self.lost,
            self.duplicates,
            self.rate,
        )
