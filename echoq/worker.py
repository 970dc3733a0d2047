"""The consumer: one I/O owner on a beat, feeding a pool of handler threads.

>>> worker = Worker(queue, handler, concurrency=8, lease_ms=5_000)
>>> report = worker.work(burst=True)          # drain what is there, then return
>>> report.completed, report.retried, report.dead

The design is the one serious consumers use (dramatiq's consumer thread feeding worker
threads; BullMQ's single ``extendLocks`` call, stalled-check guard key and blocking wait):

* **One I/O owner.** The thread that calls :meth:`Worker.work` makes every move on Valkey.
  In ONE call (``complete_many.lua``) it completes the jobs the handlers have finished --
  each fenced by its own attempt -- and claims as many new ones as there are free handler
  slots plus a prefetch buffer. ``concurrency`` handler threads take jobs from the buffer,
  call the handler with a :class:`Delivery` (JOB id, payload, attempt) and hand the
  finished job back. The owner sends its call once the buffer is down to half its
  prefetch (its low mark), so the handlers work through the other half while the call is
  on the wire, and whatever they finish meanwhile goes into the next call: a busy worker
  sends big batches, a quiet one small ones. A handler that raised gives its job back
  through ``retry`` with an exponential :class:`Backoff`, which dead-letters it after
  ``max_attempts``.
* **Two calls in flight.** A worker that may hold enough jobs for two calls of
  ``SPLIT_MIN`` (concurrency 8 with the default prefetch) writes its next call before it
  reads the reply to the one before, on one connection (RESP pipelining), each call
  claiming half of what it may hold: the server runs one call while the handlers work
  through the jobs of the other. It never sleeps with a call in flight, so claimed jobs
  never wait unread while their leases run. Smaller workers send one call at a time.
* **Threads wake for work that needs them.** A handler thread that takes a job wakes the
  next sleeping one while jobs are left -- unless jobs are quick (under ``QUICK_JOB_S`` of
  handler time, a moving average): then the awake thread runs them one after another, as
  fast as the GIL would let several threads take turns, without a thread wake-up per job.
  Should it meet a slow job meanwhile, the owner wakes another thread for the jobs waiting
  behind it within ``NUDGE_S``.
* **Prefetch.** By default the buffer holds at most ``PREFETCH_PER_SLOT`` jobs per handler
  slot, and no more than the handlers get through in about two round trips, so quick jobs
  are batched and slow ones are not hoarded (a slow job is claimed only for a free slot).
* **Leases.** Every ``extend_every_ms`` one ``extend_many`` call renews the lease of every
  job held: the running ones AND the prefetched ones waiting in the buffer, so a job that
  waits is never reaped. A refused renewal (the lease was lost) marks that delivery alone
  ``lease_lost``; if it had not started, it is dropped unstarted.
* **Idle without polling.** When a claim comes back short, a listener thread blocks on
  ``emq:{q}:wake`` (the scripts that fill pending push to it) for up to ``idle_wait_ms``,
  and the owner sleeps until a wake, a finished job, a lease tick, a beat, or the due
  time of the earliest retry waiting out its backoff.
* **The beat.** Every ``beat_ms`` the owner runs the count-thresholded stalled check --
  unless another worker of the fleet ran it within this beat (a guard key set with
  ``SET NX PX``): one check per beat across the fleet, not one per worker. A guard found
  lasting longer than this worker's beat (or with no expiry) is cut down to it, so no
  worker's long beat pauses the fleet's checks.
* **Confirmed starts.** A claim's reply can be lost on its way back. The worker's claims
  count as unstarted until a later call confirms that a handler started the job (a job
  still running ``CONFIRM_S`` after its start rides on the next call, or on one of its own
  if none is due, at the latest on the owner's next beat): a stalled check recovers an
  unconfirmed claim without counting a stall (``lua/stalled_check.lua``: 'unstarted',
  bounded apart). A worker with hooks claims jobs as started at once.
* **Stop and crash.** :meth:`Worker.stop` claims nothing more, gives the unstarted
  prefetched jobs back (``release_many.lua``) and lets the running ones finish and
  complete: nothing is held past the stop. A worker that is killed holds leases that
  nobody renews; they run out and the stalled check returns the jobs (or, at their
  ``max_stalled``-th stall, dead-letters them). Nothing is lost either way.

**A lost server.** When Valkey stops answering (a cluster master killed and its replica
not yet promoted, a server restarting) or answers BUSY (a script held past the server's
busy limit: :class:`~echoq.errors.ServerBusy`), the owner repeats the move that failed, backing off
from 10 ms to 200 ms, until the server answers -- a cluster client finds the promoted
replica by itself -- or one lease time (at least a second) has passed since the first
failure; only then does ``work`` raise :class:`~echoq.errors.ServerUnavailable`.
``report.reconnected`` counts the outages it rode out. Every error out of ``work`` is an
:class:`~echoq.errors.EchoqError` (or a handler's own ``BaseException``). On a queue with the durability
option, a completion or retry that no replica confirmed in time (``NotReplicated``) still
happened on the master: it counts, ``report.unreplicated`` says how many, and the worker
carries on (a shard has no replica right after a failover until one catches up).

**Hooks.** ``Worker(..., hooks=h)`` calls ``h.reached(delivery, checkpoint)`` at three
:class:`Checkpoint` s of every delivery: ``after_claim`` (the handler thread took the job;
the handler has not started), ``mid_job`` (inside the handler, at
:meth:`Delivery.checkpoint`), ``after_effect`` (the handler returned, the job is not yet
completed). Without hooks nothing is called. A hook may raise :class:`Abandon`: the worker
then behaves as a process killed at that moment -- nothing completed, given back or
extended after it, no move on Valkey at all -- and ``work`` returns with
``report.abandoned_at`` set. :meth:`Worker.abandon` does the same from any thread. The
teaching kit's fault injection (``echoq.teaching.faults``) is built on these two.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import redis
from redis.exceptions import RedisClusterException

from . import scripts
from .effects import EffectResult, Effects
from .errors import InvalidArgument, NotReplicated, ServerUnavailable
from .limits import BOUNDS, check, fraction, whole
from .queue import (
    BATCH,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_STALLED,
    Claim,
    Complete,
    Extend,
    Queue,
    Release,
    Retry,
    RetryResult,
    StalledReport,
    _only_claims,
    _text,
)

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
    "PREFETCH_PER_SLOT",
]

# The prefetch buffer holds at most this many jobs per handler slot (Celery's default
# prefetch multiplier is 4 too): enough to batch quick jobs many to a round trip, few
# enough that a worker never sits on a large share of the queue.
PREFETCH_PER_SLOT = 4
# ... and at most the work the handlers get through in this many round trips (measured),
# so slow jobs are claimed for free slots only and never wait in a buffer for long.
PREFETCH_ROUND_TRIPS = 2.0
MAX_CONCURRENCY = 256
# A job quicker than this (the handler's own time, moving average) is quicker than waking
# another thread to run it: the handler thread that is awake takes the next one itself,
# and the others sleep. Waking one thread per job made quick jobs pay a futex wake and a
# GIL hand-off each (about 7 µs of CPU per job at concurrency 8, measured), for nothing:
# under the GIL the threads would only take turns. Slower jobs (I/O) wake one thread per
# job waiting, as many as there are free slots.
QUICK_JOB_S = 50e-6
# ... and should the awake thread meet a slow job while others wait in the buffer, the I/O
# owner wakes another handler once no job has been taken for this long.
NUDGE_S = 0.005
# A worker that may hold at least LANES * SPLIT_MIN jobs keeps up to LANES complete-and-
# claim calls in flight on its connection (RESP pipelining), each claiming at most 1/LANES
# of what it may hold, and a call after the first carrying SPLIT_MIN jobs (completed +
# claimed) at least: the server runs one call while this process hands out and finishes
# the jobs of the one before, instead of each waiting for the other. A smaller worker
# sends one call at a time: split further, a call's fixed cost (about 100 µs of CPU on
# each side, measured) would be shared by too few jobs.
SPLIT_MIN = 16
LANES = 2
# A job still running this long after its handler started is confirmed started on the
# owner's next call (complete_many.lua's `started`), or on a call of its own if none is due
# -- once the owner is awake to see it: at the latest its next beat, since a start does not
# wake it (a wake per start would break the rhythm of a busy owner's calls). From then on
# its stalls count toward max_stalled; until then a stall of it is recovered as
# 'unstarted' (its claim reply may have been lost): see lua/stalled_check.lua. Quicker jobs
# are completed before they would be confirmed, so the busy path sends no confirmation.
CONFIRM_S = 0.01
_worker_numbers = itertools.count(1)


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
        self.lease_lost = False  # set when a lease renewal was refused: stop early if you can
        self.passed_mid_job = False
        self.started_at = 0.0  # perf_counter() when a handler took it; 0.0 until then
        self.confirmed = False  # its start was sent to the server (complete_many.lua's `started`)

    @property
    def job_id(self) -> str:
        return self.claim.job_id

    @property
    def payload(self) -> str:
        return self.claim.payload

    @property
    def attempt(self) -> int:
        """The claim's fencing token: 1 on the first delivery, 2 on the second, ... (a claim
        a stopping worker gave back unstarted counts too; see ``Queue.released``)."""
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
_T = TypeVar("_T")
# What a server that stopped answering raises: through the registry (one line), or from a
# plain command (a cluster's slot without a master raises ClusterDownError, or no node).
_LOST_SERVER = (
    ServerUnavailable,
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterError,
    RedisClusterException,
)


@dataclass
class WorkReport:
    """What one ``work()`` call did."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0  # handler raised; the job went back (now or after a backoff)
    dead: int = 0  # dead-lettered: by retry at max attempts, or by this worker's stalled check
    stale: int = 0  # a completion, retry or give-back the fence refused (the lease had been lost)
    recovered: int = 0  # stalled jobs this worker's beats returned to pending
    extended: int = 0  # lease renewals granted (one per held job per tick)
    beats: int = 0  # stalled checks this worker ran
    abandoned: bool = False  # the worker was abandoned (a hook raised Abandon, or abandon())
    abandoned_at: Checkpoint | None = None  # the checkpoint a hook abandoned it at, if any
    errors: list[str] = field(default_factory=list)  # last handler errors (capped)
    released: int = 0  # prefetched jobs given back unstarted at stop()
    lease_lost: int = 0  # lease renewals refused: those deliveries were no longer this worker's
    beats_skipped: int = 0  # beats whose stalled check another worker of the fleet had run
    round_trips: int = 0  # complete-and-claim calls (jobs per call = (completed + stale) / this)
    reconnected: int = 0  # times the server stopped answering and the worker carried on once it did
    unreplicated: int = 0  # finishes applied on the master that no replica confirmed (durability on)

    @property
    def processed(self) -> int:
        return self.completed


class Worker:
    """Consumes one queue: an I/O owner (the thread in :meth:`work`), ``concurrency``
    handler threads fed from a prefetch buffer, a wake listener, and the beat."""

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
        idle_wait_ms: int = 1_000,
        hooks: WorkerHooks | None = None,
        prefetch: int | None = None,
    ) -> None:
        self.queue = queue
        self.handler = handler
        self.concurrency = whole("concurrency", concurrency, 1, MAX_CONCURRENCY)
        self.lease_ms = check("lease_ms", lease_ms)
        # 0 turns renewal off; by default a lease is renewed three times per lease length
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
        self.idle_wait_ms = whole("idle_wait_ms", idle_wait_ms, 1, 3_600_000, unit="of milliseconds")
        if hooks is not None and not callable(getattr(hooks, "reached", None)):
            raise InvalidArgument(f"hooks must have a reached(delivery, checkpoint) method, got {hooks!r}")
        self.hooks = hooks
        # A prefetched job waits under a lease only renewal keeps alive: without renewal,
        # claim for free slots only.
        if prefetch is not None:
            whole("prefetch", prefetch, 0, BATCH - self.concurrency)
            if prefetch and not self.extend_every_ms:
                raise InvalidArgument(
                    f"prefetch={prefetch} needs lease renewal (extend_every_ms > 0): a prefetched job waits "
                    "under its lease and would be reaped; use prefetch=0, or leave extend_every_ms at its default"
                )
        self.prefetch = prefetch
        # Claims count as unstarted until the handler's start is confirmed (CONFIRM_S). A worker
        # with hooks (fault injection) claims them as started at once: a hook that abandons it
        # plays a process killed inside the handler, whose stall must count at once.
        self._confirm = hooks is None
        self.name = f"worker-{next(_worker_numbers)}@{queue.name}"
        # How long a lost server is waited for before work() gives up (see _ride_out).
        self._reconnect_s = max(self.lease_ms, 1_000) / 1000
        self.report = WorkReport()

        self._lock = threading.RLock()  # re-entrant: stop() may run in a signal handler
        self._has_work = threading.Condition(self._lock)  # handler threads wait here
        self._io_wake = threading.Condition(self._lock)  # the I/O owner waits here
        self._crashed = threading.Event()  # abandoned: this worker is "dead"
        self._listening = threading.Event()  # the owner wants to hear of new work
        self._stopping = False
        self._closing = False  # work() is ending: handler threads leave
        self._io_waiting = False
        self._low_mark = 0  # the owner sends completions once the buffer is down to this
        self._capacity = 0  # the most jobs it may hold now: handler slots + prefetch
        self._pipe: scripts.Pipelined | None = None  # calls in flight (see LANES), when pipelined
        self._sent: deque[tuple[list[Delivery], int, float]] = deque()  # (done, asked, sent at) per call in flight
        self._asked = 0  # jobs the calls in flight claim: they count against the room
        self._woken = False
        self._buffer: deque[Delivery] = deque()  # claimed, not started
        self._busy: set[Delivery] = set()  # a handler is running them
        self._finished: list[tuple[Delivery, Exception | None]] = []  # ran, not yet completed
        self._handler_failure: BaseException | None = None
        self._job_s: float | None = None  # handler time per job (moving average)
        self._last_take = 0.0  # perf_counter() when a handler last took a job from the buffer
        self._trip_s = 0.0  # complete-and-claim round trip (moving average)
        self._run_id = 0
        self._listener_run = -1
        self._running = False

    # -- control ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop: claim nothing new, give back the prefetched jobs not started, let
        the running ones finish and complete. ``work`` returns holding nothing."""
        self._stopping = True
        self._rouse()

    def abandon(self) -> None:
        """Die now, as a SIGKILLed process would, from any thread: the jobs held are neither
        completed nor given back and their leases are no longer renewed, so they stay in
        the active set until a stalled check finds them expired. ``work`` returns with
        ``report.abandoned`` set."""
        self.report.abandoned = True
        self._crashed.set()
        self._rouse()

    def _rouse(self) -> None:
        with self._lock:
            self._io_wake.notify_all()
            self._has_work.notify_all()

    @property
    def running(self) -> bool:
        return self._running

    @property
    def in_flight(self) -> list[Delivery]:
        """The deliveries a handler is running now."""
        with self._lock:
            return list(self._busy)

    @property
    def held(self) -> list[Delivery]:
        """Every delivery whose lease this worker holds: running, prefetched, or finished
        and about to be completed."""
        with self._lock:
            return [*self._busy, *self._buffer, *(d for d, _ in self._finished)]

    def work(self, burst: bool = False) -> WorkReport:
        """Run until :meth:`stop` (or, with ``burst``, until nothing is pending or waiting
        out a backoff and this worker holds nothing). Returns what this call did."""
        if self._running:
            raise InvalidArgument("this worker is already working; call stop() first or start another Worker")
        self._running = True
        self.report = WorkReport()
        self._stopping = self._closing = self._woken = False
        self._crashed.clear()
        self._listening.clear()
        self._buffer.clear()
        self._busy.clear()
        self._finished.clear()
        self._handler_failure = None
        self._sent.clear()
        self._asked = 0
        self._pipe = scripts.Pipelined(self.queue.client, "complete_many") if self._pipelined() else None
        self._run_id += 1
        handlers = [
            threading.Thread(target=self._handle_jobs, name=f"echoq-handler-{n}", daemon=True)
            for n in range(self.concurrency)
        ]
        failure: BaseException | None = None
        try:
            for thread in handlers:
                thread.start()
            self._conduct(burst)
        except Abandon:
            pass
        except BaseException as exc:  # the server went away, or the owner was interrupted
            failure = exc
        finally:
            with self._lock:
                self._closing = True
                self._run_id += 1  # the listener leaves after its current wait
                self._listening.set()
                self._has_work.notify_all()
            for thread in handlers:
                thread.join()
            if self._pipe is not None:
                self._pipe.close()  # replies left unread (an abandoned worker): the connection is dropped
                self._pipe = None
            self._running = False
        failure = failure or self._handler_failure
        if failure is not None:
            # Every error out of work() is typed: a client error that escaped a move's own
            # translation (a connection lost outside one) becomes the EchoqError it means.
            typed = scripts.typed(self.queue.client, failure, f"Worker.work on {self.queue.name!r}")
            if typed is not failure:
                raise typed from None
            raise failure
        return self.report

    def beat(self) -> StalledReport | None:
        """One stalled check -- recover expired leases, dead-letter repeat stallers -- unless
        another worker of the fleet ran one within this beat (then None)."""
        self._alive_or_unwind()
        # The guard lasts a little less than a beat, so each worker's next beat finds it
        # gone: one check per beat between them, never a beat without one.
        stalled = self._ride_out(
            self.queue.stalled_check_guarded,
            self.max_stalled,
            every_ms=max(1, self.beat_ms - self.beat_ms // 10),
            holder=self.name,
        )
        with self._lock:
            if stalled is None:
                self.report.beats_skipped += 1
                return None
            self.report.beats += 1
            self.report.recovered += len(stalled.recovered)
            self.report.dead += len(stalled.dead)
        if stalled.recovered:
            self._woken = True  # jobs went back to pending: worth a claim
        return stalled

    # -- the I/O owner -----------------------------------------------------------------------

    def _conduct(self, burst: bool) -> None:
        beat_s = self.beat_ms / 1000
        tick_s = self.extend_every_ms / 1000
        idle_s = self.idle_wait_ms / 1000
        now = time.monotonic()
        next_beat = now  # reap before the first claim: recover what dead workers left
        next_tick = now + tick_s if tick_s else float("inf")
        dry = False  # the last claim came back short: claim again on a wake, or later
        look_again = float("inf")  # when a dry worker claims again anyway
        lock = self._lock
        while True:
            if self._crashed.is_set():
                return
            now = time.monotonic()
            if now >= next_beat:
                self.beat()
                now = time.monotonic()
                next_beat = now + beat_s
            with lock:
                stopping = self._stopping
                room = 0 if stopping else self._room()
                pipelining = self._pipe is not None and self._capacity >= LANES * SPLIT_MIN
                finished: list[tuple[Delivery, Exception | None]] = []
                # Completions wait until the buffer is down to its low mark: the handlers
                # work through the rest while this call is on the wire (double buffering).
                # Pipelined, they go as soon as they fill a call with the room to claim:
                # the server runs it while the handlers work through the buffer.
                if self._finished and (
                    len(self._buffer) <= self._low_mark
                    or stopping
                    or now >= next_tick
                    or (pipelining and len(self._finished) + room >= SPLIT_MIN)
                ):
                    finished, self._finished = self._finished, []
                unstarted: list[Delivery] = []
                if stopping and self._buffer:
                    unstarted = list(self._buffer)
                    self._buffer.clear()
                woken, self._woken = self._woken, False
                holding = bool(self._buffer or self._busy or self._sent)
                starting, confirm_in = self._to_confirm()
            self._alive_or_unwind()
            if unstarted:
                self._give_back_unstarted(unstarted)
            if now >= next_tick:
                self._renew()
                next_tick = time.monotonic() + tick_s
            done: list[Delivery] = []
            for delivery, error in finished:
                if error is None:
                    done.append(delivery)
                else:
                    backoff_s = self._give_back(delivery, error)
                    if backoff_s is None:
                        dry = False  # back in pending now: claim it
                    else:
                        look_again = min(look_again, time.monotonic() + backoff_s)
            if woken or now >= look_again:
                dry, look_again = False, float("inf")
            # A call that completes jobs claims for free: ask even when the queue looked dry.
            ask = room if (done or not dry) else 0
            if pipelining:
                ask = min(ask, self._capacity // LANES)  # room for the next call in flight
            if self._sent and not done and ask < SPLIT_MIN:
                ask = 0  # a call after the first carries SPLIT_MIN jobs at least
            if done or ask or self._sent or starting:
                if self._pipe is None:
                    got = self._complete_and_claim(done, ask, starting)
                else:
                    try:
                        if done or ask or starting:
                            self._send(done, ask, starting)
                        # Read a reply once LANES calls are in flight, or when there is
                        # nothing more to send: claimed jobs never wait unread (their leases
                        # would run on with nobody renewing them), and the owner never
                        # sleeps with a call in flight.
                        if not (done or ask) or len(self._sent) >= LANES:
                            got, ask = self._receive()
                        else:
                            got = ask
                    except ServerUnavailable:
                        got = ask = 0
                        self._stop_pipelining(done)
                if got < ask:
                    if not dry:
                        look_again = time.monotonic() + idle_s
                    dry = True
                elif ask:
                    dry = False
                continue
            if stopping and not holding:
                return
            if dry and room and not holding:
                waiting = self._ride_out(self.queue.waiting)
                if waiting.pending:
                    dry = False
                    continue
                if burst and not waiting.scheduled:
                    if not waiting.expired:
                        return
                    # Jobs of a dead worker wait for a stalled check (another worker ran
                    # this beat's): drain them too, after the next beat.
                    look_again = min(look_again, next_beat)
                if waiting.next_due_in_ms is not None:
                    look_again = min(look_again, time.monotonic() + waiting.next_due_in_ms / 1000)
            self._listen(dry and room > 0)
            deadline = min(next_beat, next_tick, look_again, time.monotonic() + confirm_in)
            with lock:
                if (
                    (self._finished and len(self._buffer) <= self._low_mark)
                    or self._woken
                    or self._stopping != stopping
                    or self._crashed.is_set()
                ):
                    continue
                wait_s = max(0.0, deadline - time.monotonic())
                if self._buffer and len(self._busy) < self.concurrency and self._quick_jobs():
                    # Jobs wait and a handler sleeps: quick jobs wake no other thread, so
                    # should the awake one be held up (a slow job after quick ones), wake one.
                    if time.perf_counter() - self._last_take >= NUDGE_S:
                        self._has_work.notify()
                    wait_s = min(wait_s, NUDGE_S)
                self._io_waiting = True
                self._io_wake.wait(wait_s)
                self._io_waiting = False

    def _to_confirm(self) -> tuple[list[Delivery], float]:
        """Under the lock: the running deliveries whose start is due to be confirmed, and in
        how many seconds the next one will be (inf: none)."""
        if not self._confirm or not self._busy:
            return [], float("inf")
        now = time.perf_counter()
        due: list[Delivery] = []
        next_in = float("inf")
        for delivery in self._busy:
            if delivery.confirmed or not delivery.started_at:
                continue
            left = delivery.started_at + CONFIRM_S - now
            if left <= 0:
                due.append(delivery)
            else:
                next_in = min(next_in, left)
        return due, next_in

    def _quick_jobs(self) -> bool:
        return self._job_s is not None and self._job_s < QUICK_JOB_S

    def _room(self) -> int:
        """How many more jobs to claim now: free slots plus what the buffer may prefetch."""
        c = self.concurrency
        if self.prefetch is not None:
            extra = self.prefetch
        elif not self.extend_every_ms or self._job_s is None:
            extra = 0  # no renewal, or no job timed yet: claim for free slots only
        else:
            per_slot = PREFETCH_ROUND_TRIPS * self._trip_s / max(self._job_s, 1e-7)
            extra = min(PREFETCH_PER_SLOT * c, int(c * per_slot))
        extra = min(extra, BATCH - c)
        self._low_mark = extra // 2
        self._capacity = c + extra
        return max(0, c + extra - len(self._buffer) - len(self._busy) - self._asked)

    def _pipelined(self) -> bool:
        """Whether this worker may hold enough jobs for LANES calls in flight (SPLIT_MIN),
        on one connection to one server (a plain client)."""
        if not isinstance(self.queue.client, redis.Redis) or self.queue.durability is not None:
            return False  # a cluster client, or waits for replicas on the write's own connection
        c = self.concurrency
        if self.prefetch is not None:
            most = c + self.prefetch
        else:
            most = c + (min(PREFETCH_PER_SLOT * c, BATCH - c) if self.extend_every_ms else 0)
        return most >= LANES * SPLIT_MIN

    def _stop_pipelining(self, unsent: list[Delivery]) -> None:
        """The connection of the calls in flight was lost: go on one call at a time.

        Whether a call in flight ran is unknown. Its completions are sent again (with
        ``unsent``, the ones being written when it failed): the fence answers ``gone`` for one
        that did apply, so none is lost and none is done twice. Its claims, if it ran, hold
        leases nobody renews: they run out and the jobs are reaped, as a dead worker's are."""
        assert self._pipe is not None
        with self._lock:
            in_flight = [d for done, _ask, _sent in self._sent for d in done]
            self._sent.clear()
            self._asked = 0
            for delivery in self._busy:  # a confirmation in flight may not have run: send it again
                delivery.confirmed = False
        self._pipe.close()
        self._pipe = None
        again = in_flight + [d for d in unsent if d not in in_flight]
        if again:
            self._complete_and_claim(again, 0)

    def _send(self, done: list[Delivery], ask: int, starting: list[Delivery]) -> None:
        """Pipelined: write one complete-and-claim call; its reply is read by _receive."""
        assert self._pipe is not None
        self._alive_or_unwind()
        claims = [d.claim for d in done]
        started = [d.claim for d in starting]
        _only_claims(claims, "complete_many")
        _only_claims(started, "complete_many")
        keys, args = self.queue._complete_many_call(claims, ask, self.lease_ms, confirm=self._confirm, started=started)
        self._pipe.send(keys, args)
        for delivery in starting:
            delivery.confirmed = True
        with self._lock:
            self._sent.append((done, ask, time.perf_counter()))
            self._asked += ask

    def _receive(self) -> tuple[int, int]:
        """Pipelined: read the oldest call's reply and feed the buffer: (claimed, asked)."""
        assert self._pipe is not None
        reply = self._pipe.receive()
        outcomes, claims = self.queue._complete_many_reply(reply)
        with self._lock:
            _done, ask, sent = self._sent.popleft()
            self._asked -= ask
        self._feed(outcomes, claims, time.perf_counter() - sent)
        return len(claims), ask

    def _complete_and_claim(self, done: list[Delivery], ask: int, starting: Sequence[Delivery] = ()) -> int:
        """One call: complete ``done`` (each fenced), confirm the start of ``starting`` and
        claim up to ``ask``; feeds the buffer."""
        started = time.perf_counter()
        try:
            outcomes, claims = self._ride_out(
                self.queue.complete_many_and_claim,
                [d.claim for d in done],
                count=ask,
                lease_ms=self.lease_ms,
                confirm=self._confirm,
                started=[d.claim for d in starting],
            )
        except NotReplicated as unconfirmed:  # it happened on the master: see _ride_out
            with self._lock:
                self.report.unreplicated += len(done)
            outcomes, claims = self.queue._complete_many_reply(unconfirmed.reply)
        for delivery in starting:
            delivery.confirmed = True
        self._feed(outcomes, claims, time.perf_counter() - started)
        return len(claims)

    def _feed(self, outcomes: list[Complete], claims: list[Claim], took: float) -> None:
        """Count a call's outcomes and put the jobs it claimed into the buffer."""
        fresh = [Delivery(self, claim) for claim in claims]
        completed = outcomes.count(Complete.COMPLETED)
        with self._lock:
            self._trip_s = took if not self.report.round_trips else 0.8 * self._trip_s + 0.2 * took
            report = self.report
            report.round_trips += 1
            report.completed += completed
            report.stale += len(outcomes) - completed
            report.claimed += len(claims)
            if fresh and not self._crashed.is_set():
                self._buffer.extend(fresh)
                # Wake one handler; each one that takes a job wakes the next while jobs are
                # left, so threads wake only as fast as they get to run (not all at once to
                # fight over the GIL for a buffer the first may empty alone).
                self._has_work.notify()

    def _renew(self) -> None:
        """One extend_many call for every lease held: running, prefetched and finished."""
        with self._lock:
            held = [d for d in (*self._busy, *self._buffer, *(d for d, _ in self._finished)) if not d.lease_lost]
        if not held:
            return
        self._alive_or_unwind()
        _deadline, outcomes = self._ride_out(self.queue.extend_many, [d.claim for d in held], lease_ms=self.lease_ms)
        with self._lock:
            lost = False
            for delivery, outcome in zip(held, outcomes, strict=True):
                if outcome is Extend.EXTENDED:
                    self.report.extended += 1
                else:
                    delivery.lease_lost = True
                    self.report.lease_lost += 1
                    lost = True
            if lost:  # someone else holds these now: never start them here
                self._buffer = deque(d for d in self._buffer if not d.lease_lost)

    def _give_back_unstarted(self, deliveries: list[Delivery]) -> None:
        self._alive_or_unwind()
        outcomes = self._ride_out(self.queue.release_many, [d.claim for d in deliveries])
        with self._lock:
            released = sum(1 for outcome in outcomes if outcome is Release.RELEASED)
            self.report.released += released
            self.report.stale += len(outcomes) - released

    def _give_back(self, delivery: Delivery, exc: Exception) -> float | None:
        """Retry a job whose handler raised; returns its backoff in seconds, None if it is
        pending again now (or dead, or refused)."""
        self._alive_or_unwind()
        error = f"{type(exc).__name__}: {exc}"[:500]
        # Claims given back unstarted (release_many) moved attempts on without a try.
        released = self._ride_out(self.queue.released, delivery.job_id) if delivery.attempt > 1 else 0
        tries = delivery.attempt - released
        try:
            result = self._ride_out(
                self.queue.retry,
                delivery.claim,
                error=error,
                backoff_ms=self.backoff.delay_ms(tries),
                max_attempts=min(BOUNDS["max_attempts"][1], self.max_attempts + released),
            )
        except NotReplicated as unconfirmed:  # given back on the master: see _ride_out
            with self._lock:
                self.report.unreplicated += 1
            result = RetryResult(Retry(_text(unconfirmed.reply[0])))
        with self._lock:
            self.report.errors = (self.report.errors + [error])[-20:]
            if result.outcome in (Retry.RETRIED, Retry.SCHEDULED):
                self.report.retried += 1
            elif result.outcome is Retry.DEAD:
                self.report.dead += 1
            else:
                self.report.stale += 1
        if result.outcome is Retry.SCHEDULED:
            return self.backoff.delay_ms(tries) / 1000
        return None

    # -- riding out a lost server (a restart, a cluster failover) -----------------------------

    def _ride_out(self, move: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run a queue move; while the server does not answer, run it again (10 ms back-off,
        doubling to 200 ms) until it does or ``_reconnect_s`` has passed since the first
        failure, then raise the last failure as a one-line ServerUnavailable.

        Running a move again is safe: a claim whose reply was lost leaves a lease that runs
        out and is reaped; a completion, renewal, give-back or retry that did apply answers
        gone or stale the second time (the fence); a sweep finds nothing left to move.
        """
        first_failure: float | None = None
        pause = 0.01
        while True:
            try:
                result = move(*args, **kwargs)
            except _LOST_SERVER as exc:
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                if now - first_failure >= self._reconnect_s:
                    if isinstance(exc, ServerUnavailable):
                        raise
                    from .scripts import lost_server

                    raise lost_server(self.queue.client, exc) from None
                self._crashed.wait(pause)  # an abandoned worker stops waiting at once
                self._alive_or_unwind()
                pause = min(0.2, pause * 2)
                continue
            except Exception:
                if first_failure is not None:  # the server answered (NotReplicated, say): back
                    with self._lock:
                        self.report.reconnected += 1
                raise
            if first_failure is not None:
                with self._lock:
                    self.report.reconnected += 1
            return result

    # -- the wake listener -------------------------------------------------------------------

    def _listen(self, on: bool) -> None:
        if not on:
            self._listening.clear()
            return
        if self._listener_run != self._run_id:  # one listener per work() call, started when first needed
            self._listener_run = self._run_id
            threading.Thread(
                target=self._listen_for_work, args=(self._run_id,), name="echoq-wake-listener", daemon=True
            ).start()
        self._listening.set()

    def _listen_for_work(self, run_id: int) -> None:
        # Blocks on its own pooled connection; the owner never waits on the network for it.
        while self._run_id == run_id:
            if not self._listening.wait(self.idle_wait_ms / 1000) or self._run_id != run_id:
                continue
            if self._crashed.is_set():
                return
            try:
                woken = self.queue.wait_for_work(self.idle_wait_ms)
            except Exception:
                # The owner meets the same failure on its next call: it rides it out (a
                # failover) or reports it and ends this run. Listen again meanwhile.
                time.sleep(min(0.2, self.idle_wait_ms / 1000))
                continue
            if self._run_id != run_id or self._crashed.is_set():
                return
            if woken:
                with self._lock:
                    self._woken = True
                    if self._io_waiting:
                        self._io_wake.notify()

    # -- the handler threads -----------------------------------------------------------------

    def _handle_jobs(self) -> None:
        # A busy worker runs every job through this loop: the names it uses are local.
        lock, busy, crashed, has_work = self._lock, self._busy, self._crashed, self._has_work
        handler, hooks, clock = self.handler, self.hooks, time.perf_counter
        finished: tuple[Delivery, Exception | None] | None = None
        took = 0.0
        while True:
            with lock:  # one lock hold per job: hand the last one back, take the next
                if finished is not None:
                    busy.discard(finished[0])
                    if crashed.is_set():
                        return  # a dead worker completes nothing
                    self._finished.append(finished)
                    finished = None
                    job_s = self._job_s
                    self._job_s = took if job_s is None else 0.8 * job_s + 0.2 * took
                    if self._io_waiting and len(self._buffer) <= self._low_mark:
                        self._io_wake.notify()
                while not self._buffer or self._stopping:
                    if self._closing or self._stopping or crashed.is_set():
                        return
                    has_work.wait()
                if crashed.is_set():
                    return
                delivery = self._buffer.popleft()
                busy.add(delivery)
                started = self._last_take = delivery.started_at = clock()
                # Jobs left: wake the next thread for them, unless jobs are quick (see QUICK_JOB_S).
                if self._buffer and not self._quick_jobs():
                    has_work.notify()
            try:
                if hooks is None:
                    try:
                        handler(delivery)
                        error = None
                    except Exception as exc:
                        self._alive_or_unwind()
                        error = exc
                else:
                    error = self._run(delivery)
            except Abandon:
                return
            except BaseException as exc:  # KeyboardInterrupt, SystemExit: the worker ends
                with lock:
                    self._handler_failure = exc
                    self._stopping = True
                    busy.discard(delivery)
                    self._io_wake.notify_all()
                    has_work.notify_all()
                return
            took = clock() - started
            finished = (delivery, error)

    def _run(self, delivery: Delivery) -> Exception | None:
        """Run one delivery's handler, with its hooks; the exception it raised, if any."""
        if self.hooks is not None:
            self._reached(delivery, Checkpoint.AFTER_CLAIM)
        try:
            self.handler(delivery)
        except Exception as exc:
            self._alive_or_unwind()
            return exc
        if self.hooks is not None:
            if not delivery.passed_mid_job:
                self._reached(delivery, Checkpoint.MID_JOB)
            self._reached(delivery, Checkpoint.AFTER_EFFECT)
        return None

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
            self._rouse()
            raise


# -- the idempotent consumer on the effects ledger ---------------------------------------------


def keyed_consumer(effects: Effects, work: Callable[[Delivery], str | None] | None = None) -> Handler:
    """The idempotent consumer: run ``work``, then the effect once per JOB id (the ledger
    skips it on a redelivery). ``work`` may return the effect's record text."""

    def handle(delivery: Delivery) -> EffectResult:
        record = work(delivery) if work is not None else None
        delivery.checkpoint()  # the work is done, the effect is not
        return effects.apply_once(delivery.job_id, record if record is not None else f"attempt {delivery.attempt}")

    handle.__name__ = "keyed_consumer"
    return handle
