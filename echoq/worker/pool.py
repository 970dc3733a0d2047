"""The handler pool: ``concurrency`` threads that take jobs from the prefetch buffer, run
the handler on each, and hand the finished ones back to the I/O owner."""

from __future__ import annotations

import threading
import time
from collections import deque

from .delivery import Abandon, Checkpoint, Delivery, Handler, Life

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
# A job still running this long after its handler started is confirmed started on the
# owner's next call (complete_many.lua's `started`), or on a call of its own if none is due
# -- once the owner is awake to see it: at the latest its next beat, since a start does not
# wake it (a wake per start would break the rhythm of a busy owner's calls). From then on
# its stalls count toward max_stalled; until then a stall of it is recovered as
# 'unstarted' (its claim reply may have been lost): see lua/stalled_check.lua. Quicker jobs
# are completed before they would be confirmed, so the busy path sends no confirmation.
CONFIRM_S = 0.01

Finished = tuple[Delivery, Exception | None]  # a delivery that ran, and what its handler raised


class HandlerPool:
    """The buffer of claimed jobs, the jobs running, the jobs finished and not completed,
    and the threads that run them. Its fields are read and written under ``life.lock``."""

    def __init__(self, life: Life, handler: Handler, concurrency: int) -> None:
        self.life, self.handler, self.concurrency = life, handler, concurrency
        self.buffer: deque[Delivery] = deque()  # claimed, not started
        self.busy: set[Delivery] = set()  # a handler is running them
        self.finished: list[Finished] = []  # ran, not yet completed
        self.low_mark = 0  # the owner is woken for completions once the buffer is down to this
        self.stopping = False  # take no more jobs from the buffer
        self.closing = False  # work() is ending: the threads leave
        self.failure: BaseException | None = None  # a handler's KeyboardInterrupt, SystemExit
        self.job_s: float | None = None  # handler time per job (moving average)
        self.last_take = 0.0  # perf_counter() when a handler last took a job from the buffer
        self.stuck = 0  # deliveries in busy that the worker gave up (given_up): their handlers still run
        self.run = 0  # which work() call the threads serve: a thread of an earlier one leaves
        self.exited = 0  # threads of this run that have left
        self._threads: list[threading.Thread] = []

    # -- the owner's side (under life.lock unless said) -------------------------------------

    def start(self) -> None:
        """Empty, then start the threads (not under the lock)."""
        self.buffer.clear()
        self.busy.clear()
        self.finished.clear()
        self.stopping = self.closing = False
        self.failure = None
        self.stuck = self.exited = 0
        self.run += 1
        self._threads = [
            threading.Thread(target=self._thread, args=(self.run,), name=f"echoq-handler-{n}", daemon=True)
            for n in range(self.concurrency)
        ]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        """Let the threads leave once their job is done, and wait for them (not under the lock),
        except those running a job the worker gave up, and any at all after a stop at once
        (``stop(0)``): Python cannot stop a thread, so such a handler runs on (a daemon
        thread) and whatever it returns is dropped."""
        life = self.life
        with life.lock:
            self.closing = True
            life.has_work.notify_all()
            while self.exited < len(self._threads) - self.stuck and not life.hurry:
                life.io_wake.wait()

    def give_up(self, delivery: Delivery) -> None:
        """Under the lock: the worker gives up a delivery whose handler still runs. Its lease
        is not extended again, its start not confirmed, and its thread no longer counts as
        holding a job (a stop, a burst, need not wait for it)."""
        delivery.given_up = delivery.lease_lost = delivery.confirmed = True
        self.stuck += 1

    def feed(self, fresh: list[Delivery]) -> None:
        self.buffer.extend(fresh)
        # Wake one handler; each one that takes a job wakes the next while jobs are left, so
        # threads wake only as fast as they get to run (not all at once to fight over the
        # GIL for a buffer the first may empty alone).
        self.life.has_work.notify()

    def held(self) -> list[Delivery]:
        """Every delivery whose lease is held: running, prefetched, or finished."""
        return [*self.busy, *self.buffer, *(d for d, _ in self.finished)]

    def holding(self) -> int:
        """Jobs claimed and not finished: they count against the room."""
        return len(self.buffer) + len(self.busy)

    def drained(self) -> bool:
        """The buffer is down to its low mark with finished jobs to complete."""
        return bool(self.finished) and len(self.buffer) <= self.low_mark

    def take_finished(self, flush: bool) -> list[Finished]:
        """The finished jobs, once the buffer is down to its low mark (or ``flush``): the
        handlers work through the rest while the call is on the wire (double buffering)."""
        if not self.finished or not (flush or len(self.buffer) <= self.low_mark):
            return []
        finished, self.finished = self.finished, []
        return finished

    def take_unstarted(self) -> list[Delivery]:
        unstarted = list(self.buffer)
        self.buffer.clear()
        return unstarted

    def drop_lost(self) -> None:
        """Someone else holds these now: never start them here."""
        self.buffer = deque(d for d in self.buffer if not d.lease_lost)

    def quick(self) -> bool:
        return self.job_s is not None and self.job_s < QUICK_JOB_S

    def to_confirm(self) -> tuple[list[Delivery], float]:
        """The running deliveries whose start is due to be confirmed, and in how many
        seconds the next one will be (inf: none)."""
        if not self.busy:
            return [], float("inf")
        now = time.perf_counter()
        due: list[Delivery] = []
        next_in = float("inf")
        for delivery in self.busy:
            if delivery.confirmed or not delivery.started_at:
                continue
            left = delivery.started_at + CONFIRM_S - now
            if left <= 0:
                due.append(delivery)
            else:
                next_in = min(next_in, left)
        return due, next_in

    def nudge(self, wait_s: float) -> float:
        """Jobs wait and a handler sleeps: quick jobs wake no other thread, so should the
        awake one be held up (a slow job after quick ones), wake one. The owner's wait."""
        if self.buffer and len(self.busy) < self.concurrency and self.quick():
            if time.perf_counter() - self.last_take >= NUDGE_S:
                self.life.has_work.notify()
            return min(wait_s, NUDGE_S)
        return wait_s

    # -- the handler threads -----------------------------------------------------------------

    def _thread(self, run: int) -> None:
        try:
            self._serve(run)
        finally:
            with self.life.lock:
                if self.run == run:
                    self.exited += 1
                    self.life.io_wake.notify_all()

    def _serve(self, run: int) -> None:
        # A busy worker runs every job through this loop: the names it uses are local.
        life = self.life
        lock, busy, crashed, has_work, clock = life.lock, self.busy, life.crashed, life.has_work, time.perf_counter
        handler, hooks = self.handler, life.hooks
        finished: Finished | None = None
        took = 0.0
        while True:
            with lock:  # one lock hold per job: hand the last one back, take the next
                if finished is not None:
                    if self.run != run:
                        return  # its work() has returned: nobody to hand it to
                    if finished[0].given_up:
                        self.stuck -= 1
                    busy.discard(finished[0])
                    if crashed.is_set():
                        return  # a dead worker completes nothing
                    self.finished.append(finished)
                    finished = None
                    job_s = self.job_s
                    self.job_s = took if job_s is None else 0.8 * job_s + 0.2 * took
                    if life.owner_waiting and len(self.buffer) <= self.low_mark:
                        life.io_wake.notify()
                while not self.buffer or self.stopping:
                    if self.closing or self.stopping or crashed.is_set():
                        return
                    has_work.wait()
                if crashed.is_set():
                    return
                delivery = self.buffer.popleft()
                busy.add(delivery)
                started = self.last_take = delivery.started_at = clock()
                # Jobs left: wake the next thread for them, unless jobs are quick (see QUICK_JOB_S).
                if self.buffer and not self.quick():
                    has_work.notify()
            try:
                if hooks is None:  # the busy path: the handler, with no call around it
                    try:
                        handler(delivery)
                        error = None
                    except Exception as exc:
                        life.check()
                        error = exc
                else:
                    error = self._run(delivery)
            except Abandon:
                return
            except BaseException as exc:  # KeyboardInterrupt, SystemExit: the worker ends
                with lock:
                    if self.run != run:
                        return  # a given-up handler's, after its work() returned
                    self.failure = exc
                    self.stopping = True
                    if delivery.given_up:
                        self.stuck -= 1
                    busy.discard(delivery)
                    life.io_wake.notify_all()
                    has_work.notify_all()
                return
            took = clock() - started
            finished = (delivery, error)

    def _run(self, delivery: Delivery) -> Exception | None:
        """Run one delivery's handler, with its hooks; the exception it raised, if any."""
        life = self.life
        hooks = life.hooks
        if hooks is not None:
            life.reached(delivery, Checkpoint.AFTER_CLAIM)
        try:
            self.handler(delivery)
        except Exception as exc:
            life.check()
            return exc
        if hooks is not None:
            if not delivery.passed_mid_job:
                life.reached(delivery, Checkpoint.MID_JOB)
            life.reached(delivery, Checkpoint.AFTER_EFFECT)
        return None
