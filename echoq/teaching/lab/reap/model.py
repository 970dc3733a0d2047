"""The Reap lab's model: crashed workers' leases on the server's clock, the stalled check
(recover, or dead-letter at the max_stalled-th stall), and the two-reapers race."""

from __future__ import annotations

from typing import Any

from traitlets import Int, validate

from ....limits import check, whole
from ....queue import Claim, Queue
from ...contrasts import overlapping_sweeps
from ...fast_forward import fast_forward
from ..frames import Lit
from ..model import LabModel, Said
from ..words import fast_forwarded, seconds, where
from . import words

__all__ = ["ReapModel"]


class ReapModel(LabModel):
    """Crashed workers' jobs at their lease deadlines; step the reap; max_stalled; the race."""

    kind = "reap"
    setting_words = words.SETTINGS
    settings = ("max_stalled", "lease_ms", "workers")
    max_stalled = Int(2, help="the stall count at which stalled_check.lua dead-letters a job (the N-th stall is fatal)")
    lease_ms = Int(3_000, help="lease of the first worker; the others get 2x, 3x ... of it")
    workers = Int(3, help="how many jobs 'start workers' enqueues and hands to crashing workers")

    def __init__(self, name: str | None = None, **kw: Any) -> None:
        self.race: dict[str, Any] = {}
        super().__init__(name, **kw)

    @validate("max_stalled")
    def _max_range(self, proposal: dict[str, Any]) -> int:
        return whole("max_stalled", proposal["value"], 1, 10)

    @validate("lease_ms")
    def _lease(self, proposal: dict[str, Any]) -> int:
        return check("lease_ms", proposal["value"])

    @validate("workers")
    def _workers(self, proposal: dict[str, Any]) -> int:
        return whole("workers", proposal["value"], 1, 8)

    def setup(self) -> None:
        self.race = {}

    def state(self) -> dict[str, Any]:
        race = {
            label: {"deliveries": r.deliveries, "duplicates": r.duplicate_deliveries} for label, r in self.race.items()
        }
        return {"race": race}

    def describe(self, snapshot: Any, state: dict[str, Any]) -> str:
        if snapshot is None:
            return ""
        return where(self.keys, snapshot)

    def _claim_staggered(self, queue: Queue, count: int) -> list[Claim]:
        return [c for i in range(count) if (c := queue.claim(lease_ms=self.lease_ms * (i + 1))) is not None]

    # -- moves ------------------------------------------------------------------------------

    def start_workers(self) -> bool:
        """Enqueue jobs and hand each to a worker that crashes at once (staggered leases)."""

        def run() -> Said:
            assert self.queue is not None
            self.queue.enqueue_many([f"job {i}" for i in range(self.workers)])
            self.record("start workers", words.started(self.workers, self.keys("pending")), lit=Lit.moved("enqueue"))
            claims = self._claim_staggered(self.queue, self.workers)
            return words.workers_crashed(len(claims), self.keys("active")), Lit.moved("claim")

        return self.act("start workers", run)

    def claim_again(self) -> bool:
        """Redeliver every pending job to a new worker, which crashes too."""

        def run() -> Said:
            assert self.queue is not None
            pending = self.queue.snapshot(limit=1).counts["pending"]
            claims = self._claim_staggered(self.queue, pending)
            if not claims:
                return words.nothing_pending(self.keys("pending")), Lit.probed("claim")
            return words.claimed_again(len(claims)), Lit.moved("claim")

        return self.act("claim again", run)

    def step_reap(self) -> bool:
        """One stalled_check.lua sweep with the chosen ``max_stalled``."""
        max_stalled = self.max_stalled

        def run() -> Said:
            assert self.queue is not None
            report = self.queue.stalled_check(max_stalled=max_stalled)
            if not report.recovered and not report.dead:
                return words.sweep_nothing(), Lit.probed("sweep")
            lit = Lit.moved(*(name for name, ids in (("reap", report.recovered), ("dead", report.dead)) if ids))
            said = words.sweep(report.recovered, report.dead, self.keys("pending"), self.keys("dead"), max_stalled)
            return said, lit

        return self.act("step the reap", run)

    def fast_forward(self, advance_ms: int | None = 2_000) -> bool:
        """Teaching script: every live lease deadline ``advance_ms`` earlier (None: to now)."""

        def run() -> Said:
            assert self.queue is not None
            _now, moved = fast_forward(self.queue, advance_ms)
            how = "to the server's now" if advance_ms is None else f"{seconds(advance_ms)} earlier"
            return fast_forwarded(moved, how), Lit.moved("fast-forward") if moved else Lit.probed("fast-forward")

        return self.act("fast-forward", run)

    def race_demo(self) -> bool:
        """Two overlapping sweeps around one crashed job: two-step vs atomic, side by side."""

        def run() -> Said:
            assert self.queue is not None
            reports = {}
            for label, racy in (("two-step", True), ("atomic", False)):
                q = Queue(f"{self.name}-{'racy' if racy else 'atomic'}", self.queue.client)
                q.reset()
                reports[label] = overlapping_sweeps(q, racy=racy)
                q.reset()
            self.race = reports
            racy, atomic = reports["two-step"], reports["atomic"]
            said = words.race(
                racy.deliveries, racy.duplicate_deliveries, atomic.deliveries, atomic.duplicate_deliveries
            )
            return said, Lit.moved("race")

        return self.act("race", run)
