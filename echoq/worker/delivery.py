"""What a handler is given (:class:`Delivery`), the hooks that watch it, and the state every
part of one worker shares (:class:`Life`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from ..queue import Claim


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


@dataclass
class WorkReport:
    """What one ``work()`` call did."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0  # handler raised; the job went back (now or after a backoff)
    dead: int = 0  # dead-lettered: by retry at max attempts, or by this worker's stalled check
    stale: int = 0  # a completion, retry or give-back the fence refused (the lease had been lost)
    recovered: int = 0  # stalled jobs this worker's beats returned to pending
    extended: int = 0  # lease extensions granted (one per held job per extension)
    beats: int = 0  # stalled checks this worker ran
    abandoned: bool = False  # the worker was abandoned (a hook raised Abandon, or abandon())
    abandoned_at: Checkpoint | None = None  # the checkpoint a hook abandoned it at, if any
    errors: list[str] = field(default_factory=list)  # last handler errors (capped)
    released: int = 0  # prefetched jobs given back unstarted at stop()
    lease_lost: int = 0  # lease extensions refused: those deliveries were no longer this worker's
    beats_skipped: int = 0  # beats whose stalled check another worker of the fleet had run
    round_trips: int = 0  # complete-and-claim calls (jobs per call = (completed + stale) / this)
    reconnected: int = 0  # times the server stopped answering and the worker carried on once it did
    unreplicated: int = 0  # completions applied on the master that no replica confirmed (durability on)
    lost_replies: int = 0  # claiming calls whose reply never came: what they claimed was leased to nobody
    timed_out: int = 0  # handlers still running at timeout_ms: their jobs went back through retry
    given_up: int = 0  # handlers still running when a stop's grace period ended: their jobs given back


class Life:
    """What every part of one worker shares: one lock and the two conditions on it (handler
    threads wait on ``has_work``, the I/O owner on ``io_wake``), the report of the current
    ``work()`` call, the hooks, and whether the worker is dead (abandoned).

    A dead worker must not say another word to Valkey: every part calls :meth:`check`
    before a move, and it raises :class:`Abandon` once the worker is dead."""

    def __init__(self, hooks: WorkerHooks | None) -> None:
        self.hooks = hooks
        self.lock = threading.RLock()  # re-entrant: stop() may run in a signal handler
        self.has_work = threading.Condition(self.lock)
        self.io_wake = threading.Condition(self.lock)
        self.crashed = threading.Event()
        self.hurry = False  # a stop at once (a second signal): a lost server is not waited for
        self.report = WorkReport()
        self.owner_waiting = False  # the I/O owner sleeps on io_wake
        self.woken = False  # work may be pending (a wake, a recovery): worth a claim
        # When (the server's clock, ms) every lease taken by a claim whose reply was lost has
        # run out: a burst does not end before then, so it drains what it claimed unheard too.
        # The lost call ran, if at all, before anything the server answers after the loss, so
        # the first server time heard after it, plus the lease, bounds those leases; until
        # one is heard, the lease is noted in unheard_lease_ms. (The worker's own clock would
        # not do: a loaded server may run the lost call later than the worker notices the loss.)
        self.unheard_until_ms = 0
        self.unheard_lease_ms = 0

    def check(self) -> None:
        if self.crashed.is_set():
            raise Abandon

    def unheard(self, lease_ms: int) -> None:
        """A claiming call's reply was lost: it may have leased jobs to nobody, for at most
        ``lease_ms`` after it ran."""
        with self.lock:
            self.report.lost_replies += 1
            self.unheard_lease_ms = max(self.unheard_lease_ms, lease_ms)

    def heard(self, server_now_ms: int) -> None:
        """The server answered at ``server_now_ms`` (its clock): any claim whose reply was lost
        before ran earlier, so its leases end by then plus their lease."""
        with self.lock:
            if self.unheard_lease_ms:
                self.unheard_until_ms = max(self.unheard_until_ms, server_now_ms + self.unheard_lease_ms)
                self.unheard_lease_ms = 0

    def rouse(self) -> None:
        """Wake the owner and every handler thread to look at the state again."""
        with self.lock:
            self.io_wake.notify_all()
            self.has_work.notify_all()

    def die(self) -> None:
        """Abandoned: from now on nothing this worker does reaches Valkey."""
        self.report.abandoned = True
        self.crashed.set()
        self.rouse()

    def reached(self, delivery: Delivery, checkpoint: Checkpoint) -> None:
        """Call the hooks at ``checkpoint``; a hook that raises Abandon kills the worker."""
        self.check()
        if self.hooks is None:
            return
        try:
            self.hooks.reached(delivery, checkpoint)
        except Abandon as abandon:
            with self.lock:
                self.report.abandoned_at = abandon.at or checkpoint
            self.die()
            raise


class Delivery:
    """One delivery of a job to a handler: what it may read, and the mid-job checkpoint."""

    def __init__(self, life: Life, claim: Claim) -> None:
        self._life = life
        self.claim = claim
        # Set when a lease extension was refused, or the worker gave the job up (given_up):
        # the job is no longer this handler's; stop early if you can.
        self.lease_lost = False
        self.passed_mid_job = False
        self.started_at = 0.0  # perf_counter() when a handler took it; 0.0 until then
        self.confirmed = False  # its start was sent to the server (complete_many.lua's `started`)
        # The worker gave this job up while its handler still ran (timeout_ms, or a stop's
        # grace period ended): whatever the handler does now, its completion is fenced off.
        self.given_up = False

    @property
    def job_id(self) -> str:
        return self.claim.job_id

    @property
    def payload(self) -> str:
        return self.claim.payload

    @property
    def token(self) -> int:
        """The claim's fencing token: a new one on every delivery, never handed out twice."""
        return self.claim.token

    @property
    def attempts(self) -> int:
        """The tries of this job so far, this one included: 1 on the first delivery. A claim
        a stopping worker gave back unstarted gave its try back."""
        return self.claim.attempts

    def checkpoint(self) -> None:
        """Mark the middle of the job: the work is under way, its effect not yet done.

        Hooks see ``mid_job`` here (for a handler that never calls this, they see it when
        the handler returns). A worker that was abandoned meanwhile unwinds here.
        """
        self.passed_mid_job = True
        self._life.check()
        if self._life.hooks is not None:
            self._life.reached(self, Checkpoint.MID_JOB)

    def __repr__(self) -> str:
        return f"Delivery({self.job_id}, token={self.token}, attempts={self.attempts}, payload={self.payload!r})"


Handler = Callable[[Delivery], Any]
