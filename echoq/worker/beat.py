"""The beat: the fleet's count-thresholded stalled check, at most once per beat between
every worker of a queue (a lock key)."""

from __future__ import annotations

import logging
import time

from ..queue import Queue, StalledReport
from .delivery import Life
from .outage import Outages

log = logging.getLogger(__name__)


class Beat:
    def __init__(
        self, queue: Queue, life: Life, outages: Outages, *, beat_ms: int, max_stalled: int, holder: str
    ) -> None:
        self.queue, self.life, self.outages = queue, life, outages
        self.beat_ms, self.max_stalled, self.holder = beat_ms, max_stalled, holder
        self.next_at = 0.0  # time.monotonic() of the next beat

    def start(self, now: float) -> None:
        self.next_at = now  # check before the first claim: recover what dead workers left

    def tick(self, now: float) -> None:
        """Run the stalled check if a beat is due."""
        if now >= self.next_at:
            self.run()
            self.next_at = time.monotonic() + self.beat_ms / 1000

    def run(self) -> StalledReport | None:
        """One stalled check, unless another worker of the fleet ran one within this beat
        (then None)."""
        life = self.life
        life.check()
        # The lock lasts a little less than a beat, so each worker's next beat finds it
        # gone: one check per beat between them, never a beat without one.
        stalled = self.outages.ride_out(
            self.queue.stalled_check_locked,
            self.max_stalled,
            every_ms=max(1, self.beat_ms - self.beat_ms // 10),
            holder=self.holder,
        )
        with life.lock:
            if stalled is None:
                life.report.beats_skipped += 1
                return None
            life.report.beats += 1
            life.report.recovered += len(stalled.recovered)
            life.report.dead += len(stalled.dead)
            if stalled.recovered:
                life.woken = True  # jobs went back to pending: worth a claim
        if stalled.recovered:
            log.info("stalled check: %d job(s) whose lease ran out back in pending: %s", *_some(stalled.recovered))
        if stalled.dead:
            log.warning(
                "stalled check: %d job(s) dead-lettered, stalled max_stalled=%d times: %s",
                *_some(stalled.dead, self.max_stalled),
            )
        return stalled


def _some(ids: list[str], *between: object) -> tuple[object, ...]:
    """How many ids, then ``between``, then the first few of them (a log line stays short)."""
    shown = ", ".join(ids[:5]) + (f", ... ({len(ids) - 5} more)" if len(ids) > 5 else "")
    return (len(ids), *between, shown)
