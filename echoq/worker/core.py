"""The Worker: the I/O owner's loop, which puts the named parts together."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import redis

from .. import translation
from ..errors import InvalidArgument
from ..limits import check, whole
from ..queue import BATCH, DEFAULT_LEASE_MS, DEFAULT_MAX_STALLED, Claim, Complete, Queue, StalledReport
from .beat import Beat
from .calls import LANES, SPLIT_MIN, OneCall, PipelinedCalls
from .delivery import Abandon, Delivery, Handler, Life, WorkerHooks, WorkReport
from .leases import Backoff, LeaseKeeper
from .outage import Outages
from .pacing import ClaimPace, PrefetchPolicy
from .pool import Finished, HandlerPool
from .signals import StopOnSignals, signal_name
from .wake import ARM_S, Waker

MAX_CONCURRENCY = 256
# How long a stop waits for the handlers running to finish before it gives their jobs back.
DEFAULT_GRACE_MS = 10_000
# The longest handler time limit (timeout_ms) and grace period: a day, as a lease.
MAX_TIMEOUT_MS = 86_400_000
log = logging.getLogger(__name__)
_worker_numbers = itertools.count(1)


@dataclass(frozen=True)
class WorkerState:
    """What a worker is doing, read at one instant (:attr:`Worker.state`)."""

    running: bool  # inside work()
    idle: bool  # its last claim came back short: it waits for a wake
    pipelined: bool  # its calls go ahead of their replies (LANES in flight); False: one at a time
    calls_in_flight: int  # complete-and-claim calls sent whose replies are not read yet
    prefetched: int  # claimed jobs waiting in the buffer
    handling: int  # jobs a handler is running
    finished: int  # jobs run and not yet completed
    quick_jobs: bool  # handler time per job is under QUICK_JOB_S (no thread is woken per job)


class _Step(NamedTuple):
    """What the owner does in one turn of its loop, read under the lock."""

    stopping: bool
    capacity: int  # the most jobs to hold now
    room: int  # how many more to claim
    finished: list[Finished]  # to complete or retry
    unstarted: list[Delivery]  # to give back (stopping)
    woken: bool  # work may be pending
    holding: bool  # jobs claimed and not finished, or calls in flight
    starting: list[Delivery]  # starts to confirm
    confirm_in: float  # seconds until the next start is due to be confirmed
    timed_out: list[Delivery]  # handlers past timeout_ms: give their jobs up through retry
    overdue: list[Delivery]  # handlers still running at the end of a stop's grace period: give back
    due_in: float  # seconds until a handler's time limit or the grace period ends (inf: none)


class Worker:
    """Consumes one queue: an I/O owner (the thread in :meth:`work`), ``concurrency``
    handler threads fed from a prefetch buffer, the wait for a wake, and the beat."""

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
        timeout_ms: int | None = None,
        grace_ms: int = DEFAULT_GRACE_MS,
    ) -> None:
        if not callable(handler):
            raise InvalidArgument(f"handler must be callable, a function that takes a Delivery; got {handler!r:.60}")
        self.queue = queue
        self.handler = handler
        self.concurrency = whole("concurrency", concurrency, 1, MAX_CONCURRENCY)
        self.lease_ms = check("lease_ms", lease_ms)
        self.extend_every_ms = _extend_every(self.lease_ms, extend_every_ms)
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
        self.prefetch = _prefetch(prefetch, self.concurrency, self.extend_every_ms)
        # None: no time limit. Past it the job is given up through retry (see work()).
        self.timeout_ms = (
            None if timeout_ms is None else whole("timeout_ms", timeout_ms, 1, MAX_TIMEOUT_MS, unit="of milliseconds")
        )
        self.grace_ms = whole("grace_ms", grace_ms, 0, MAX_TIMEOUT_MS, unit="of milliseconds")
        self.name = f"worker-{next(_worker_numbers)}@{queue.name}"
        # Claims count as unstarted until the handler's start is confirmed (CONFIRM_S). A worker
        # with hooks (fault injection) claims them as started at once: a hook that abandons it
        # plays a process killed inside the handler, whose stall must count at once.
        self._confirm = hooks is None
        self._running = False
        self._stop_pending = False  # stop() came while no work() ran: the next one stops at once
        self._grace_at = float("inf")  # time.monotonic() when a stop gives back what still runs
        self._stop_reason = "stop()"  # what asked for the stop, for the log

        life = self._life = Life(hooks)
        # A lost server is waited for one lease time (at least a second) before work() gives up.
        outages = self._outages = Outages(life, queue.client, max(self.lease_ms, 1_000) / 1000)
        self._policy = PrefetchPolicy(self.concurrency, self.prefetch, extends=bool(self.extend_every_ms))
        self._pool = HandlerPool(life, handler, self.concurrency)
        self._leases = LeaseKeeper(
            queue,
            life,
            outages,
            lease_ms=self.lease_ms,
            extend_every_ms=self.extend_every_ms,
            backoff=self.backoff,
            max_attempts=self.max_attempts,
        )
        self._beat = Beat(queue, life, outages, beat_ms=self.beat_ms, max_stalled=self.max_stalled, holder=self.name)
        self._waker = Waker(
            queue, life, outages, idle_wait_ms=self.idle_wait_ms, lease_ms=self.lease_ms, confirm=self._confirm
        )
        self._listen_from: float | None = None  # when the owner first wanted a wake while holding jobs
        self._calls = self._transport()

    # -- control and what may be read ---------------------------------------------------------

    def stop(self, grace_ms: int | None = None) -> None:
        """Graceful stop: claim nothing new, give back at once the prefetched jobs not started
        (each gets its try back), let the running ones finish and complete within
        ``grace_ms`` (default: the worker's ``grace_ms``), and give back the jobs whose
        handler still runs then (``release_many.lua``: pending again at once, for another
        worker, their try given back; whatever the handler does later is fenced off).
        ``work`` returns holding nothing. ``stop(0)`` gives back at once what still runs. A
        later call may shorten the grace period, never lengthen it.

        Python cannot stop a thread: a handler given back runs on in its (daemon) thread
        until it returns, and what it returns is dropped.

        An idle worker blocked on the wake is woken by a push to its halt key
        (``emq:{q}:halt:<run>``), so ``work`` returns within a few round trips (what the
        claim behind the wait took is given back); should the server not take the push, at
        its next beat (``beat_ms``).

        Called while no ``work`` runs -- before it starts, as with a thread about to call it --
        it applies to the next ``work``, which then returns at once; a ``work`` that ended
        clears it, so the one after that runs as usual."""
        grace_s = (self.grace_ms if grace_ms is None else whole("grace_ms", grace_ms, 0, MAX_TIMEOUT_MS)) / 1000
        life = self._life
        with life.lock:
            self._stop_pending = True
            self._pool.stopping = True
            self._grace_at = min(self._grace_at, time.monotonic() + grace_s)
            if not grace_s:
                life.hurry = True
        life.rouse()
        self._waker.halt()

    def _stop_on_signal(self, signum: int, at_once: bool) -> None:
        """Called by a signal handler (:class:`~echoq.worker.signals.StopOnSignals`)."""
        self._stop_reason = f"{signal_name(signum)}, a second signal" if at_once else signal_name(signum)
        self.stop(0 if at_once else None)

    def abandon(self) -> None:
        """Die now, as a SIGKILLed process would, from any thread: the jobs held are neither
        completed nor given back and their leases are no longer extended, so they stay in
        the active set until a stalled check finds them expired. ``work`` returns with
        ``report.abandoned`` set. An idle worker's wait on the wake is ended as by
        :meth:`stop` (a push to its own halt key); the claim written behind that wait still
        runs, and whatever it claimed stays leased, as the claims of a process killed just
        after it sent them do."""
        self._life.die()
        self._waker.halt()

    @property
    def report(self) -> WorkReport:
        """What the current (or last) ``work()`` call did."""
        return self._life.report

    @property
    def running(self) -> bool:
        return self._running

    @property
    def in_flight(self) -> list[Delivery]:
        """The deliveries a handler is running now."""
        with self._life.lock:
            return list(self._pool.busy)

    @property
    def held(self) -> list[Delivery]:
        """Every delivery whose lease this worker holds: running, prefetched, or finished
        and about to be completed."""
        with self._life.lock:
            return self._pool.held()

    @property
    def state(self) -> WorkerState:
        """What this worker is doing now, read under its lock (a copy: changing it changes
        nothing)."""
        pool, calls = self._pool, self._calls
        with self._life.lock:
            return WorkerState(
                running=self._running,
                idle=self._waker.idle,
                pipelined=calls.pipelined,
                calls_in_flight=calls.in_flight,
                prefetched=len(pool.buffer),
                handling=len(pool.busy),
                finished=len(pool.finished),
                quick_jobs=pool.quick(),
            )

    def work(self, burst: bool = False) -> WorkReport:
        """Run until :meth:`stop` (or, with ``burst``, until nothing is pending or waiting
        out a backoff, this worker holds nothing, and nothing it claimed is still leased:
        the jobs of a claim whose reply was lost are drained once their leases run out).
        A job another worker holds is not waited for, even one whose worker died: a burst
        returns while its lease runs, and drains it once the lease has run out.
        Returns what this call did.

        Called in the main thread, it handles SIGINT and SIGTERM while it runs (the handlers
        found are put back when it returns): the first calls :meth:`stop`, a second
        ``stop(0)``. In another thread it installs nothing: wire :meth:`stop` to your own
        signals.

        With ``timeout_ms``, a handler still running that long after it started has its job
        given up: the lease is no longer extended, the job goes back through ``retry`` (with
        the error ``timeout: ...``, counted toward ``max_attempts``), and when the handler
        does return, its completion is refused by the fence (``report.stale``)."""
        if self._running:
            raise InvalidArgument("this worker is already working; call stop() first or start another Worker")
        signals = StopOnSignals([self])
        self._running = True
        if log.isEnabledFor(logging.INFO):
            log.info(
                "%s started%s: concurrency %d, lease %d ms, %s, grace %d ms",
                self.name,
                " (burst)" if burst else "",
                self.concurrency,
                self.lease_ms,
                "no time limit" if self.timeout_ms is None else f"time limit {self.timeout_ms} ms",
                self.grace_ms,
            )
        life = self._life
        life.report = WorkReport()
        life.woken = False
        life.unheard_until_ms = life.unheard_lease_ms = 0
        life.crashed.clear()
        self._waker.begin()
        self._listen_from = None
        self._calls = self._transport()
        failure: BaseException | None = None
        try:
            signals.install()
            self._pool.start()
            with life.lock:
                self._pool.stopping = self._stop_pending  # a stop() that came before this work()
            self._conduct(burst)
        except Abandon:
            pass
        except BaseException as exc:  # the server went away, or the owner was interrupted
            failure = exc
        finally:
            self._waker.end()
            self._pool.close()
            self._calls.close()
            signals.restore()
            with life.lock:
                self._stop_pending = False
                self._grace_at = float("inf")
                life.hurry = False
            self._stop_reason = "stop()"
            self._running = False
        failure = failure or self._pool.failure
        if log.isEnabledFor(logging.INFO):
            report = life.report
            log.info(
                "%s stopped%s: %d completed, %d retried, %d dead-lettered, %d given back unstarted, "
                "%d given back running, %d timed out",
                self.name,
                "" if failure is None else f" by {type(failure).__name__}",
                report.completed,
                report.retried,
                report.dead,
                report.released,
                report.given_up,
                report.timed_out,
            )
        if failure is not None:
            # Every error out of work() is typed: a client error that escaped a move's own
            # translation (a connection lost outside one) becomes the EchoqError it means.
            typed = translation.typed(self.queue.client, failure, f"Worker.work on {self.queue.name!r}")
            if typed is not failure:
                raise typed from None
            raise failure
        return life.report

    def beat(self) -> StalledReport | None:
        """One stalled check -- recover expired leases, dead-letter repeat stallers -- unless
        another worker of the fleet ran one within this beat (then None)."""
        return self._beat.run()

    # -- the I/O owner -----------------------------------------------------------------------

    def _conduct(self, burst: bool) -> None:
        """The owner's loop. Each turn: the beat if due; what to send, read under the lock;
        give back the unstarted (stopping), extend the leases (due), retry the failed; then
        one exchange of calls -- or, with nothing to send, return (stopped, or drained in a
        burst) or sleep until something is due."""
        life, pool, calls, leases, beat = self._life, self._pool, self._calls, self._leases, self._beat
        pace = ClaimPace(self.idle_wait_ms / 1000)
        beat.start(time.monotonic())
        leases.start(time.monotonic())
        announced = hurried = False  # the stop, and a stop at once, in the log
        while not life.crashed.is_set():
            beat.tick(time.monotonic())
            now = time.monotonic()
            with life.lock:
                step = self._next_step(now)
            life.check()
            if step.stopping and not announced:
                announced = True
                self._announce_stop(step)
            if life.hurry and not hurried:
                hurried = True
                log.info("%s stopping at once (%s): giving back what still runs", self.name, self._stop_reason)
            if step.unstarted:
                leases.release(step.unstarted)
            if step.timed_out or step.overdue:
                self._give_up(step, pace)
            if leases.due(now) and leases.extend(self.held):
                with life.lock:
                    pool.drop_lost()
            done = self._settle(step.finished, pace)
            pace.refresh(step.woken, now)
            ask = calls.shape(pace.ask(step.room, bool(done)), bool(done), step.capacity)
            if done or ask or calls.in_flight or step.starting:
                pace.answered(*calls.exchange(done, ask, step.starting))
                continue
            if step.stopping and not step.holding:
                return
            if pace.dry and step.room and not step.holding:
                waiting = self._outages.ride_out(self.queue.waiting)
                if waiting.pending:
                    pace.dry = False
                    continue
                if burst and not waiting.scheduled:
                    life.heard(waiting.now_ms)
                    unheard_left_s = (life.unheard_until_ms - waiting.now_ms) / 1000
                    if not waiting.expired and unheard_left_s <= 0:
                        return  # drained: nothing this worker claimed is still leased
                    if waiting.expired:
                        # Jobs of a dead worker wait for a stalled check (another worker ran
                        # this beat's): drain them too, after the next beat.
                        pace.look_at(beat.next_at)
                    else:
                        # Claims whose replies were lost hold leases nobody extends: once
                        # they run out, a stalled check returns their jobs, and this burst
                        # drains them too.
                        pace.look_at(time.monotonic() + unheard_left_s)
                if waiting.next_due_in_ms is not None:
                    pace.look_at(time.monotonic() + waiting.next_due_in_ms / 1000)
            deadline = min(
                beat.next_at, leases.next_at, pace.look_again, time.monotonic() + min(step.confirm_in, step.due_in)
            )
            sleep_until = self._await_wake(pace, step, deadline)
            if sleep_until is not None:
                self._sleep(sleep_until, step)

    def _next_step(self, now: float) -> _Step:
        """Under the lock: what this turn of the owner's loop sends."""
        pool, calls = self._pool, self._calls
        stopping = pool.stopping
        capacity, pool.low_mark = self._policy.plan(pool.job_s)
        # Every thread running a job given up (timeout_ms): a job claimed now would wait for a
        # thread that may never come back, so claim none, and give the buffer back.
        stuck = pool.stuck >= self.concurrency
        room = 0 if stopping or stuck else max(0, capacity - pool.holding() - calls.asked)
        # Completions wait until the buffer is down to its low mark (pool.take_finished).
        # Pipelined, they go as soon as they fill a call with the room to claim: the server
        # runs it while the handlers work through the buffer.
        flush = (
            stopping or self._leases.due(now) or (calls.pipelining(capacity) and len(pool.finished) + room >= SPLIT_MIN)
        )
        finished = pool.take_finished(flush)
        unstarted = pool.take_unstarted() if (stopping or stuck) and pool.buffer else []
        woken, self._life.woken = self._life.woken, False
        # A handler the worker gave up holds nothing: a stop or a burst does not wait for it.
        holding = bool(pool.buffer or len(pool.busy) > pool.stuck or calls.in_flight)
        starting, confirm_in = pool.to_confirm() if self._confirm else ([], float("inf"))
        timed_out: list[Delivery] = []
        overdue: list[Delivery] = []
        due_in = float("inf")
        if len(pool.busy) > pool.stuck and (self.timeout_ms is not None or stopping):
            timed_out, overdue, due_in = self._past_due(now)
        return _Step(
            stopping,
            capacity,
            room,
            finished,
            unstarted,
            woken,
            holding,
            starting,
            confirm_in,
            timed_out,
            overdue,
            due_in,
        )

    def _past_due(self, now: float) -> tuple[list[Delivery], list[Delivery], float]:
        """Under the lock: the running handlers past ``timeout_ms``, those still running at the
        end of a stop's grace period (each given up now), and the seconds until the next
        such moment."""
        pool = self._pool
        timed_out: list[Delivery] = []
        overdue: list[Delivery] = []
        due_in = float("inf")
        if pool.stopping:
            due_in = self._grace_at - now
        clock = time.perf_counter()
        limit_s = None if self.timeout_ms is None else self.timeout_ms / 1000
        for delivery in pool.busy:
            if delivery.given_up:
                continue
            if limit_s is not None:
                left = delivery.started_at + limit_s - clock
                if left <= 0:
                    timed_out.append(delivery)
                    continue
                due_in = min(due_in, left)
            if pool.stopping and self._grace_at <= now:
                overdue.append(delivery)
        for delivery in (*timed_out, *overdue):
            pool.give_up(delivery)
        return timed_out, overdue, max(0.0, due_in)

    def _give_up(self, step: _Step, pace: ClaimPace) -> None:
        """Give up the jobs whose handler is past its time limit (through retry, counted as a
        try) or still running at the end of a stop's grace period (given back, the try too)."""
        leases = self._leases
        for delivery in step.timed_out:
            log.warning(
                "%s: the handler is still running after timeout_ms=%d; giving the job up",
                delivery.job_id,
                self.timeout_ms,
            )
            with self._life.lock:
                self._life.report.timed_out += 1
            backoff_s = leases.retry(delivery, f"timeout: the handler ran past timeout_ms={self.timeout_ms}")
            if backoff_s is None:
                pace.dry = False
            else:
                pace.look_at(time.monotonic() + backoff_s)
        if step.overdue:
            leases.release(step.overdue, running=True)

    def _announce_stop(self, step: _Step) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        pool = self._pool
        with self._life.lock:
            running = len(pool.busy) - pool.stuck
            grace_s = max(0.0, self._grace_at - time.monotonic())
        log.info(
            "%s stopping (%s): claiming nothing more; %d handler(s) running, given %.1f s to finish; "
            "%d claimed job(s) not started go back now",
            self.name,
            self._stop_reason,
            running,
            grace_s,
            len(step.unstarted),
        )

    def _settle(self, finished: list[Finished], pace: ClaimPace) -> list[Delivery]:
        """Retry the jobs whose handler raised; the others are to be completed."""
        done: list[Delivery] = []
        for delivery, error in finished:
            if error is None:
                done.append(delivery)
                continue
            backoff_s = self._leases.retry(delivery, error)
            if backoff_s is None:
                pace.dry = False  # back in pending now: claim it
            else:
                pace.look_at(time.monotonic() + backoff_s)
        return done

    def _await_wake(self, pace: ClaimPace, step: _Step, deadline: float) -> float | None:
        """How the owner waits until ``deadline``. A dry worker with room waits for a wake:
        holding nothing, on the wake itself, its claim behind the wait (None: that wait and
        claim are over); holding jobs, it sleeps on its handlers while the listener waits
        on the wake for it, from ARM_S after it began to hold them. Returns when to wake
        from that sleep."""
        waker, life = self._waker, self._life
        if not (pace.dry and step.room > 0) or step.stopping:
            self._listen_from = None
            with life.lock:
                waker.listen(False)
            return deadline
        if not step.holding:
            self._listen_from = None
            pool = self._pool
            started = time.perf_counter()
            waited = waker.wait(deadline, lambda: not (life.woken or pool.stopping or life.crashed.is_set()), step.room)
            if waited is None:  # the listener's wait is in flight: the wake comes through it
                return deadline
            woken, claims = waited
            if claims is not None:
                # The claim behind the wait: a look at pending, timed mostly by the wait.
                self._on_reply((), [], claims, time.perf_counter() - started, timed=False)
                pace.looked(len(claims), step.room)
                if claims:
                    # Sleep at once: a handler thread needs the GIL to start the job, and
                    # gets it when the owner sleeps, not a turn of the loop later. Its end
                    # wakes the owner; a job still running ARM_S later gets the turn
                    # (confirm its start, arm the listener) then.
                    self._listen_from = time.monotonic()
                    return min(deadline, self._listen_from + ARM_S)
            elif woken:
                with life.lock:
                    life.woken = True
            return None
        now = time.monotonic()
        if self._listen_from is None:
            self._listen_from = now
        arm_at = self._listen_from + ARM_S
        with life.lock:
            waker.listen(now >= arm_at)
        return deadline if now >= arm_at else min(deadline, arm_at)

    def _sleep(self, deadline: float, step: _Step) -> None:
        """Wait for a finished job, a wake, a stop or death, at most until ``deadline``."""
        life, pool = self._life, self._pool
        with life.lock:
            if pool.drained() or life.woken or pool.stopping != step.stopping or life.crashed.is_set():
                return
            wait_s = pool.nudge(max(0.0, deadline - time.monotonic()))
            life.owner_waiting = True
            life.io_wake.wait(wait_s)
            life.owner_waiting = False

    def _on_reply(
        self,
        done: Sequence[Delivery],
        outcomes: list[Complete],
        claims: list[Claim],
        took_s: float,
        *,
        timed: bool = True,
    ) -> None:
        """Count a call's outcomes and put the jobs it claimed into the buffer."""
        life = self._life
        fresh = [Delivery(life, claim) for claim in claims]
        completed = outcomes.count(Complete.COMPLETED)
        if completed != len(outcomes):
            _refused(done, outcomes)
        with life.lock:
            if claims and life.unheard_lease_ms:  # a claim's deadline: the server's now when it ran, plus the lease
                life.heard(max(claim.deadline_ms for claim in claims) - self.lease_ms)
            report = life.report
            if timed:
                self._policy.observe_trip(took_s, first=not report.round_trips)
            report.round_trips += 1
            report.completed += completed
            report.stale += len(outcomes) - completed
            report.claimed += len(claims)
            if fresh and not life.crashed.is_set():
                self._pool.feed(fresh)

    def _transport(self) -> OneCall:
        """Pipelined calls for a worker that may hold enough jobs for LANES calls in flight
        (SPLIT_MIN each), on one connection to one server (a plain client); else one call
        at a time (a cluster client, or a write that waits for replicas on its connection)."""
        kinds = {"lease_ms": self.lease_ms, "confirm": self._confirm, "on_reply": self._on_reply}
        plain = isinstance(self.queue.client, redis.Redis) and self.queue.durability is None
        if plain and self._policy.most() >= LANES * SPLIT_MIN:
            return PipelinedCalls(self.queue, self._life, self._outages, **kinds)
        return OneCall(self.queue, self._life, self._outages, **kinds)


def _refused(done: Sequence[Delivery], outcomes: list[Complete]) -> None:
    """Say which completions the fence refused: a handler that finished after its job was
    given up or its lease lost. (``gone`` for a job not known to be lost is a completion
    sent again after a lost connection that had applied the first time: nothing to say.)"""
    for delivery, outcome in zip(done, outcomes, strict=True):
        if outcome is Complete.STALE or (outcome is Complete.GONE and delivery.lease_lost):
            log.warning(
                "%s: completion refused by the fence (%s): the handler finished after %s",
                delivery.job_id,
                outcome,
                "the job was given up" if delivery.given_up else "its lease was lost",
            )
        elif outcome is Complete.GONE:
            log.debug("%s: completion answered gone (sent again after a lost connection)", delivery.job_id)


def _extend_every(lease_ms: int, extend_every_ms: int | None) -> int:
    """0 turns extension off; by default a lease is extended three times per lease length
    (a lease under 3 ms is too short to extend and is left to run out)."""
    every = (
        lease_ms // 3
        if extend_every_ms is None
        else whole("extend_every_ms", extend_every_ms, 0, unit="of milliseconds")
    )
    if every >= lease_ms:
        raise InvalidArgument(
            f"extend_every_ms ({every}) must be shorter than lease_ms ({lease_ms}), or the lease runs out "
            "between extensions; use about lease_ms // 3, or 0 to turn extension off"
        )
    return every


def _prefetch(prefetch: int | None, concurrency: int, extend_every_ms: int) -> int | None:
    """A prefetched job waits under a lease only extension keeps alive: without extension,
    claim for free slots only."""
    if prefetch is not None:
        whole("prefetch", prefetch, 0, BATCH - concurrency)
        if prefetch and not extend_every_ms:
            raise InvalidArgument(
                f"prefetch={prefetch} needs lease extension (extend_every_ms > 0): a prefetched job waits "
                "under its lease and would be reaped; use prefetch=0, or leave extend_every_ms at its default"
            )
    return prefetch


__all__ = ["MAX_CONCURRENCY", "Worker", "WorkerState"]
