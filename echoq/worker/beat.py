"""The beat: the fleet's count-thresholded stalled check, at most once per beat between
every worker of a queue (a lock key)."""

from __future__ import annotations

import time

from ..queue import Queue, StalledReport
from .delivery import Life
from .outage import Outages


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
        return stalled
