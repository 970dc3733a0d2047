"""The consumer: a worker that runs on a beat -- stalled check, then drain.

>>> worker = Worker(queue, handler, concurrency=2, lease_ms=5_000)
>>> report = worker.work(burst=True)          # drain what is there, then return
>>> report.completed, report.retried, report.dead

Each drain thread claims a job under a lease, hands the handler a :class:`Delivery` (JOB
id, payload, attempt number), and then completes the job -- fenced by the claim's attempt --
or, if the handler raised, gives it back through ``retry`` with an exponential backoff,
which dead-letters it once it has used ``max_attempts``. A busy thread finishes one job
and claims the next in one round trip (``complete_and_claim``). While a job runs, a lease
keeper pushes its lease forward every ``extend_every_ms`` with the fenced ``extend``, so a
long job that is alive is never reaped; a job whose extend is refused is marked
``lease_lost`` and no longer extended. Every ``beat_ms`` the worker runs the
count-thresholded stalled check, which returns jobs of dead workers to pending and
dead-letters those that reached ``max_stalled`` stalls.

**Hooks.** ``Worker(..., hooks=h)`` calls ``h.reached(delivery, checkpoint)`` at three
:class:`Checkpoint` s of every delivery: ``after_claim`` (before the handler runs),
``mid_job`` (inside the handler, at :meth:`Delivery.checkpoint`), ``after_effect`` (the
handler returned, the job is not yet completed). Without hooks nothing is called. A hook
may raise :class:`Abandon`: the worker then behaves as a process killed at that moment --
no complete, no retry, no extend, not another word to Valkey -- and ``work`` returns with
``report.abandoned_at`` set. :meth:`Worker.abandon` does the same from any thread. The
teaching kit's fault injection (``echoq.teaching.faults``) is built on these two.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from .effects import EffectResult, Effects
from .errors import InvalidArgument
from .limits import BOUNDS, check, fraction, whole
from .queue import DEFAULT_LEASE_MS, DEFAULT_MAX_STALLED, Claim, Complete, Extend, Queue, Retry, StalledReport

__all__ = [
    "Abandon",
    "Backoff",
    "Checkpoint",
    "Delivery",
    "Handler",
    "Worker",
    "WorkerHooks",
    "WorkReport",
    "keyed_consumer",
    "naive_consumer",
]


class Checkpoint(StrEnum):
    """Moments in one delivery where a worker calls its hooks."""

    AFTER_CLAIM = "after_claim"  # the job is leased; the handler has not started
    MID_JOB = "mid_job"  # inside the handler, before its effect (Delivery.checkpoint)
    AFTER_EFFECT = "after_effect"  # the handler's effect happened; complete has not run


class Abandon(BaseException):
    """Raised by a hook: the worker dies here, as a killed process would.

    A BaseException, so a handler's ``except Exception`` cannot swallow it.
    """

    def __init__(self, at: Checkpoint | None = None) -> None:
        super().__init__(at)
        self.at = at


class WorkerHooks(Protocol):
    """What a worker calls at each :class:`Checkpoint` of a delivery (fault injection, tracing)."""

    def reached(self, delivery: Delivery, checkpoint: Checkpoint) -> None: ...


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (n = attempts used so far): ``min(cap, base * factor**(n-1))`` ms."""

    base_ms: int = 100
    factor: float = 2.0
    cap_ms: int = 30_000

    def __post_init__(self) -> None:
        high = BOUNDS["delay_ms"][1]
        whole("base_ms", self.base_ms, 0, high, unit="of milliseconds")
        whole("cap_ms", self.cap_ms, 0, high, unit="of milliseconds")
        fraction("factor", self.factor, 1.0, 100.0)

    def delay_ms(self, attempt: int) -> int:
        return int(min(self.cap_ms, self.base_ms * self.factor ** min(64, max(0, attempt - 1))))


class Delivery:
    """One delivery of a job to a handler: what it may read, and the mid-job checkpoint."""

    def __init__(self, worker: Worker, claim: Claim) -> None:
        self._worker = worker
        self.claim = claim
        self.lease_lost = False  # set when a lease extension was refused: stop early
        self.passed_mid_job = False

    @property
    def job_id(self) -> str:
        return self.claim.job_id

    @property
    def payload(self) -> str:
        return self.claim.payload

    @property
    def attempt(self) -> int:
        """1 on the first delivery, 2 on the second, ... (the claim's fencing token)."""
        return self.claim.attempt

    def checkpoint(self) -> None:
        """Mark the middle of the job: the work is under way, its effect not yet done.

        Hooks see ``mid_job`` here (for a handler that never calls this, they see it when
        the handler returns). A worker that was abandoned meanwhile unwinds here.
        """
        self.passed_mid_job = True
        self._worker._alive_or_unwind()
        if self._worker.hooks is not None:
            self._worker._reached(self, Checkpoint.MID_JOB)

    def __repr__(self) -> str:
        return f"Delivery({self.job_id}, attempt={self.attempt}, payload={self.payload!r})"


Handler = Callable[[Delivery], Any]


@dataclass
class WorkReport:
    """What one ``work()`` call did."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0  # handler raised; the job went back (now or after a backoff)
    dead: int = 0  # dead-lettered: by retry at max attempts, or by this worker's stalled check
    stale: int = 0  # a completion or retry the fence refused (the lease had been lost)
    recovered: int = 0  # stalled jobs this worker's beat returned to pending
    extended: int = 0  # lease extensions granted
    beats: int = 0
    abandoned: bool = False  # the worker was abandoned (a hook raised Abandon, or abandon())
    abandoned_at: Checkpoint | None = None  # the checkpoint a hook abandoned it at, if any
    errors: list[str] = field(default_factory=list)  # last handler errors (capped)

    @property
    def processed(self) -> int:
        return self.completed


class Worker:
    """Consumes one queue: ``concurrency`` drain threads, a lease keeper and the beat."""

    def __init__(
        self,
        queue: Queue,
        handler: Handler,
        *,
        concurrency: int = 1,
        lease_ms: int = DEFAULT_LEASE_MS,
        extend_every_ms: int | None = None,
        max_stalled: int = DEFAULT_MAX_STALLED,
        max_attempts: int = 3,
        backoff: Backoff | None = None,
        beat_ms: int = 1_000,
        idle_wait_ms: int = 50,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self.queue = queue
        self.handler = handler
        self.concurrency = whole("concurrency", concurrency, 1, 256)
        self.lease_ms = check("lease_ms", lease_ms)
        # 0 turns the keeper off; by default a lease is renewed three times per lease length
        # (a lease under 3 ms is too short to renew and is left to run out).
        self.extend_every_ms = (
            lease_ms // 3
            if extend_every_ms is None
            else whole("extend_every_ms", extend_every_ms, 0, unit="of milliseconds")
        )
        if self.extend_every_ms >= self.lease_ms:
            raise InvalidArgument(
                f"extend_every_ms ({self.extend_every_ms}) must be shorter than lease_ms ({self.lease_ms}), "
                "or the lease runs out between heartbeats; use about lease_ms // 3, or 0 to turn extension off"
            )
        self.max_stalled = check("max_stalled", max_stalled)
        self.max_attempts = check("max_attempts", max_attempts)
        if backoff is not None and not isinstance(backoff, Backoff):
            raise InvalidArgument(f"backoff must be an echoq.Backoff, got {backoff!r}")
        self.backoff = backoff if backoff is not None else Backoff()
        self.beat_ms = whole("beat_ms", beat_ms, 1, 3_600_000, unit="of milliseconds")
        self.idle_wait_ms = whole("idle_wait_ms", idle_wait_ms, 1, 60_000, unit="of milliseconds")
        if hooks is not None and not callable(getattr(hooks, "reached", None)):
            raise InvalidArgument(f"hooks must have a reached(delivery, checkpoint) method, got {hooks!r}")
        self.hooks = hooks
        self.report = WorkReport()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._crashed = threading.Event()  # abandoned: this worker is "dead"
        self._wake = threading.Event()
        self._drained = threading.Event()  # every drain thread has ended: the keeper may go
        self._in_flight: dict[str, tuple[Delivery, float]] = {}
        self._running = False

    # -- control ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop: claim nothing new; jobs in hand finish (or keep their lease)."""
        self._stopping.set()
        self._wake.set()

    def abandon(self) -> None:
        """Die now, as a SIGKILLed process would, from any thread: the jobs in hand are
        neither completed nor given back and their leases are no longer extended, so
        they stay in the active set until a reaper finds them expired. ``work`` returns
        with ``report.abandoned`` set."""
        with self._lock:
            self.report.abandoned = True
        self._crashed.set()
        self._wake.set()

    @property
    def running(self) -> bool:
        return self._running

    @property
    def in_flight(self) -> list[Delivery]:
        with self._lock:
            return [d for d, _ in self._in_flight.values()]

    def work(self, burst: bool = False) -> WorkReport:
        """Run until :meth:`stop` (or, with ``burst``, until nothing is pending or waiting
        out a backoff and this worker's jobs are done). Returns what this call did."""
        if self._running:
            raise InvalidArgument("this worker is already working; call stop() first or start another Worker")
        self._running = True
        self.report = WorkReport()
        self._stopping.clear()
        self._crashed.clear()
        self._wake.clear()
        self._drained.clear()
        failure: list[BaseException] = []
        keeper = threading.Thread(target=self._keep_leases, name="echoq-lease-keeper", daemon=True)
        try:
            self.beat()  # reap before the first claim: recover what dead workers left
            drains = [
                threading.Thread(target=self._drain, args=(burst, failure), name=f"echoq-drain-{n}", daemon=True)
                for n in range(self.concurrency)
            ]
            for t in drains:
                t.start()
            if self.extend_every_ms:
                keeper.start()
            next_beat = time.monotonic() + self.beat_ms / 1000
            while any(t.is_alive() for t in drains):
                self._wake.wait(max(0.0, min(next_beat - time.monotonic(), 0.05)))
                self._wake.clear()
                if time.monotonic() >= next_beat and not self._done():
                    try:
                        self.beat()
                    except Abandon:
                        pass
                    except Exception as exc:  # the server went away: stop the drains, report it
                        failure.append(exc)
                        self.stop()
                    next_beat = time.monotonic() + self.beat_ms / 1000
        finally:
            self._stopping.set()
            self._drained.set()
            if keeper.is_alive():
                keeper.join()
            self._running = False
        if failure:
            raise failure[0]
        return self.report

    def _done(self) -> bool:
        return self._stopping.is_set() or self._crashed.is_set()

    def beat(self) -> StalledReport:
        """One stalled check: recover expired leases, dead-letter repeat stallers."""
        self._alive_or_unwind()
        stalled = self.queue.stalled_check(self.max_stalled)
        with self._lock:
            self.report.beats += 1
            self.report.recovered += len(stalled.recovered)
            self.report.dead += len(stalled.dead)
        return stalled

    # -- the drain -------------------------------------------------------------------------

    def _alive_or_unwind(self) -> None:
        # An abandoned worker is "dead": it must not say another word to Valkey.
        if self._crashed.is_set():
            raise Abandon

    def _reached(self, delivery: Delivery, checkpoint: Checkpoint) -> None:
        self._alive_or_unwind()
        if self.hooks is None:
            return
        try:
            self.hooks.reached(delivery, checkpoint)
        except Abandon as abandon:
            with self._lock:
                self.report.abandoned = True
                self.report.abandoned_at = abandon.at or checkpoint
            self._crashed.set()
            self._wake.set()
            raise

    def _drain(self, burst: bool, failure: list[BaseException]) -> None:
        claim: Claim | None = None
        try:
            while True:
                self._alive_or_unwind()
                if claim is None:
                    if self._stopping.is_set():
                        return
                    claim = self.queue.claim(self.lease_ms)
                    if claim is None:
                        if burst and self._nothing_left():
                            return
                        self._stopping.wait(self.idle_wait_ms / 1000)
                        continue
                    with self._lock:
                        self.report.claimed += 1
                claim = self._process(claim)
        except Abandon:
            return
        except Exception as exc:
            failure.append(exc)
            self.stop()

    def _nothing_left(self) -> bool:
        k = self.queue.keys
        pipe = self.queue.client.pipeline(transaction=False)
        pipe.zcard(k.pending)
        pipe.zcard(k.scheduled)
        pending, scheduled = pipe.execute()
        return pending == 0 and scheduled == 0

    def _process(self, claim: Claim) -> Claim | None:
        """Run one job to its end; returns the next claim when the finish fetched one."""
        delivery = Delivery(self, claim)
        if self.hooks is not None:
            self._reached(delivery, Checkpoint.AFTER_CLAIM)
        with self._lock:
            self._in_flight[claim.job_id] = (delivery, time.monotonic())
        try:
            try:
                self.handler(delivery)
            except Abandon:
                raise
            except Exception as exc:
                self._alive_or_unwind()
                self._give_back(delivery, exc)
                return None
            if self.hooks is not None:
                if not delivery.passed_mid_job:
                    self._reached(delivery, Checkpoint.MID_JOB)
                self._reached(delivery, Checkpoint.AFTER_EFFECT)
        finally:
            with self._lock:
                self._forget(delivery)
        self._alive_or_unwind()  # a worker abandoned while the handler ran must not complete
        if self._stopping.is_set():
            outcome, claims = self.queue.complete(claim), []
        else:
            outcome, claims = self.queue.complete_and_claim(claim, lease_ms=self.lease_ms)
        with self._lock:
            if outcome is Complete.COMPLETED:
                self.report.completed += 1
            else:
                self.report.stale += 1
            self.report.claimed += len(claims)
        return claims[0] if claims else None

    def _give_back(self, delivery: Delivery, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"[:500]
        result = self.queue.retry(
            delivery.claim,
            error=error,
            backoff_ms=self.backoff.delay_ms(delivery.attempt),
            max_attempts=self.max_attempts,
        )
        with self._lock:
            self.report.errors = (self.report.errors + [error])[-20:]
            if result.outcome in (Retry.RETRIED, Retry.SCHEDULED):
                self.report.retried += 1
            elif result.outcome is Retry.DEAD:
                self.report.dead += 1
            else:
                self.report.stale += 1
        self._wake.set()

    # -- the lease keeper --------------------------------------------------------------------

    def _keep_leases(self) -> None:
        every = self.extend_every_ms / 1000
        tick = max(0.002, every / 4)
        while not self._drained.is_set():
            if self._crashed.is_set():
                return  # a dead worker sends no heartbeat: its leases must run out
            now = time.monotonic()
            with self._lock:
                due = [(d, since) for d, since in self._in_flight.values() if now - since >= every]
            for delivery, _since in due:
                try:
                    outcome = self.queue.extend(delivery.claim, lease_ms=self.lease_ms)
                except Exception:
                    continue  # the drain thread will meet the same failure and report it
                with self._lock:
                    if outcome is Extend.EXTENDED:
                        self.report.extended += 1
                        # The handler may have finished meanwhile, and the same JOB id may be
                        # in flight again under a newer delivery: touch only our own entry.
                        if self._holds(delivery):
                            self._in_flight[delivery.job_id] = (delivery, time.monotonic())
                    else:
                        delivery.lease_lost = True
                        self._forget(delivery)
            self._drained.wait(tick)

    def _holds(self, delivery: Delivery) -> bool:
        entry = self._in_flight.get(delivery.job_id)
        return entry is not None and entry[0] is delivery

    def _forget(self, delivery: Delivery) -> None:
        if self._holds(delivery):
            del self._in_flight[delivery.job_id]


# -- idempotent (and naive) consumers on the effects ledger ------------------------------------


def _consumer(effects: Effects, once: bool, work: Callable[[Delivery], str | None] | None) -> Handler:
    apply = effects.apply_once if once else effects.apply_every

    def handle(delivery: Delivery) -> EffectResult:
        record = work(delivery) if work is not None else None
        delivery.checkpoint()  # the work is done, the effect is not
        return apply(delivery.job_id, record if record is not None else f"attempt {delivery.attempt}")

    handle.__name__ = "keyed_consumer" if once else "naive_consumer"
    return handle


def keyed_consumer(effects: Effects, work: Callable[[Delivery], str | None] | None = None) -> Handler:
    """The idempotent consumer: run ``work``, then the effect once per JOB id (the ledger
    skips it on a redelivery). ``work`` may return the effect's record text."""
    return _consumer(effects, True, work)


def naive_consumer(effects: Effects, work: Callable[[Delivery], str | None] | None = None) -> Handler:
    """CONTRAST: the same consumer, but the effect runs on every delivery."""
    return _consumer(effects, False, work)
