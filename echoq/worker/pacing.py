"""How much a worker claims: the prefetch policy (how many jobs it may hold) and the claim
pace (whether the queue looked dry, and when to look again)."""

from __future__ import annotations

import time
from typing import NamedTuple

from ..queue import BATCH

# The prefetch buffer holds at most this many jobs per handler slot (Celery's default
# prefetch multiplier is 4 too): enough to batch quick jobs many to a round trip, few
# enough that a worker never sits on a large share of the queue.
PREFETCH_PER_SLOT = 4
# ... and at most the work the handlers get through in this many round trips (measured),
# so slow jobs are claimed for free slots only and never wait in a buffer for long.
PREFETCH_ROUND_TRIPS = 2.0


class Plan(NamedTuple):
    capacity: int  # the most jobs to hold now: handler slots + prefetch
    low_mark: int  # completions are sent once the buffer is down to this (half the prefetch)


class PrefetchPolicy:
    """The most jobs a worker may hold: its handler slots, plus a prefetch that is fixed
    (``prefetch``) or follows the measured round trip and handler time (none without lease
    extension: a prefetched job waits under a lease only an extension keeps alive)."""

    def __init__(self, concurrency: int, prefetch: int | None, extends: bool) -> None:
        self.concurrency, self.prefetch, self.extends = concurrency, prefetch, extends
        self.trip_s = 0.0  # complete-and-claim round trip (moving average)

    def observe_trip(self, took_s: float, first: bool) -> None:
        self.trip_s = took_s if first else 0.8 * self.trip_s + 0.2 * took_s

    def plan(self, job_s: float | None) -> Plan:
        """The capacity and low mark for handler time ``job_s`` (None: no job timed yet)."""
        c = self.concurrency
        if self.prefetch is not None:
            extra = self.prefetch
        elif not self.extends or job_s is None:
            extra = 0  # no extension, or no job timed yet: claim for free slots only
        else:
            per_slot = PREFETCH_ROUND_TRIPS * self.trip_s / max(job_s, 1e-7)
            extra = min(PREFETCH_PER_SLOT * c, int(c * per_slot))
        extra = min(extra, BATCH - c)
        return Plan(c + extra, extra // 2)

    def most(self) -> int:
        """The most jobs it may ever hold."""
        c = self.concurrency
        if self.prefetch is not None:
            return c + self.prefetch
        return c + (min(PREFETCH_PER_SLOT * c, BATCH - c) if self.extends else 0)


class ClaimPace:
    """Whether to ask for jobs. A claim that came back short makes the worker dry: it asks
    again on a wake, when a job it gave back is pending again, or at ``look_again`` (an
    idle wait later, or when a retry's backoff or a stalled job is due)."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.dry = False
        self.look_again = float("inf")  # time.monotonic() when a dry worker claims anyway

    def look_at(self, when: float) -> None:
        self.look_again = min(self.look_again, when)

    def refresh(self, woken: bool, now: float) -> None:
        if woken or now >= self.look_again:
            self.dry, self.look_again = False, float("inf")

    def ask(self, room: int, completing: bool) -> int:
        # A call that completes jobs claims for free: ask even when the queue looked dry.
        return room if (completing or not self.dry) else 0

    def looked(self, got: int, asked: int) -> None:
        """A claim made whatever ended a wait (behind it, see wake.py): a look, as a wake
        or ``look_again`` followed by a claim would have been."""
        self.dry, self.look_again = False, float("inf")
        self.answered(got, asked)

    def answered(self, got: int, asked: int) -> None:
        if got < asked:
            if not self.dry:
                self.look_again = time.monotonic() + self.idle_s
            self.dry = True
        elif asked:
            self.dry = False
