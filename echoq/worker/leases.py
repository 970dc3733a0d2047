"""The lease keeper: the moves a worker makes on the jobs it holds, apart from completing
them -- extending their leases, giving back the unstarted ones, retrying failed ones."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import NotReplicated
from ..limits import BOUNDS, fraction, whole
from ..queue import Extend, Queue, Release, Retry, RetryResult, _text
from .delivery import Delivery, Life
from .outage import Outages

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (n = tries so far): ``min(cap, base * factor**(n-1))`` ms."""

    base_ms: int = 100
    factor: float = 2.0
    cap_ms: int = 30_000

    def __post_init__(self) -> None:
        high = BOUNDS["delay_ms"][1]
        whole("base_ms", self.base_ms, 0, high, unit="of milliseconds")
        whole("cap_ms", self.cap_ms, 0, high, unit="of milliseconds")
        fraction("factor", self.factor, 1.0, 100.0)

    def delay_ms(self, attempts: int) -> int:
        return int(min(self.cap_ms, self.base_ms * self.factor ** min(64, max(0, attempts - 1))))


class LeaseKeeper:
    """Extends every lease held once per ``extend_every_ms`` (0: never), gives back the jobs
    a stopping worker had not started, and retries the jobs whose handler raised."""

    def __init__(
        self,
        queue: Queue,
        life: Life,
        outages: Outages,
        *,
        lease_ms: int,
        extend_every_ms: int,
        backoff: Backoff,
        max_attempts: int,
    ) -> None:
        self.queue, self.life, self.outages = queue, life, outages
        self.lease_ms, self.backoff, self.max_attempts = lease_ms, backoff, max_attempts
        self.every_s = extend_every_ms / 1000
        self.next_at = float("inf")  # time.monotonic() of the next extension

    def start(self, now: float) -> None:
        self.next_at = now + self.every_s if self.every_s else float("inf")

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def extend(self, held: Sequence[Delivery]) -> bool:
        """One extend_many call for the leases of ``held`` (those not lost already); a
        refused one marks its delivery ``lease_lost``. True when a lease was lost."""
        held = [d for d in held if not d.lease_lost]
        lost = False
        if held:
            lost = self._extend(held)
        self.next_at = time.monotonic() + self.every_s
        return lost

    def _extend(self, held: list[Delivery]) -> bool:
        life = self.life
        life.check()
        _deadline, outcomes = self.outages.ride_out(
            self.queue.extend_many, [d.claim for d in held], lease_ms=self.lease_ms
        )
        lost = False
        with life.lock:
            for delivery, outcome in zip(held, outcomes, strict=True):
                if outcome is Extend.EXTENDED:
                    life.report.extended += 1
                else:
                    delivery.lease_lost = True
                    life.report.lease_lost += 1
                    lost = True
                    log.warning(
                        "%s: lease lost (extension refused: %s); another worker may hold it", delivery.job_id, outcome
                    )
        return lost

    def release(self, deliveries: list[Delivery], *, running: bool = False) -> None:
        """Give jobs back to pending: each gets its try back. Unstarted ones (a stopping
        worker's buffer), or with ``running`` the ones whose handler still ran when a stop's
        grace period ended (given up: their completion is fenced off)."""
        self.life.check()
        outcomes = self.outages.ride_out(self.queue.release_many, [d.claim for d in deliveries])
        with self.life.lock:
            released = sum(1 for outcome in outcomes if outcome is Release.RELEASED)
            report = self.life.report
            if running:
                report.given_up += released
            else:
                report.released += released
            report.stale += len(outcomes) - released
        if running:
            for delivery, outcome in zip(deliveries, outcomes, strict=True):
                log.warning(
                    "%s: handler still running when the grace period ended; %s (try given back)",
                    delivery.job_id,
                    "given back to pending" if outcome is Release.RELEASED else f"refused by the fence ({outcome})",
                )
        elif released and log.isEnabledFor(logging.INFO):
            log.info("gave back %d claimed job(s) not started (their tries given back)", released)

    def retry(self, delivery: Delivery, exc: Exception | str) -> float | None:
        """Retry a job whose handler raised (or, given text, a job given up for that reason);
        returns its backoff in seconds, None if it is pending again now (or dead, or refused)."""
        life = self.life
        life.check()
        error = (exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}")[:500]
        if isinstance(exc, BaseException):
            log.error(
                "%s: the handler raised (try %d of %d)",
                delivery.job_id,
                delivery.attempts,
                self.max_attempts,
                exc_info=exc,
            )
        backoff_ms = self.backoff.delay_ms(delivery.attempts)
        try:
            result = self.outages.ride_out(
                self.queue.retry, delivery.claim, error=error, backoff_ms=backoff_ms, max_attempts=self.max_attempts
            )
        except NotReplicated as unconfirmed:  # given back on the master: see Outages.ride_out
            with life.lock:
                life.report.unreplicated += 1
            result = RetryResult(Retry(_text(unconfirmed.reply[0])))
        with life.lock:
            report = life.report
            report.errors = (report.errors + [error])[-20:]
            if result.outcome in (Retry.RETRIED, Retry.SCHEDULED):
                report.retried += 1
            elif result.outcome is Retry.DEAD:
                report.dead += 1
            else:
                report.stale += 1
        outcome = result.outcome
        if outcome is Retry.SCHEDULED:
            log.warning("%s: retried (try %d failed); back in %d ms", delivery.job_id, delivery.attempts, backoff_ms)
        elif outcome is Retry.RETRIED:
            log.warning("%s: retried (try %d failed); pending again now", delivery.job_id, delivery.attempts)
        elif outcome is Retry.DEAD:
            log.warning(
                "%s: dead-lettered after %d tries (max_attempts %d): %s",
                delivery.job_id,
                delivery.attempts,
                self.max_attempts,
                error,
            )
        else:
            log.warning(
                "%s: retry refused by the fence (%s): the job is no longer this worker's", delivery.job_id, outcome
            )
        return backoff_ms / 1000 if outcome is Retry.SCHEDULED else None
