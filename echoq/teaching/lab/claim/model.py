"""The Claim lab's model: one worker, one job at a time: enqueue, claim, complete (or crash), reap."""

from __future__ import annotations

from typing import Any

from traitlets import Bool, Int, Unicode, validate

from .... import scripts
from ....limits import check
from ....queue import Claim, Complete
from ...fast_forward import fast_forward
from ..frames import Lit
from ..model import LabModel, Said
from ..words import fast_forwarded
from . import words

__all__ = ["ClaimModel", "CLAIM_STEPS"]

# The steps a learner can read the Lua of (a crash runs none).
CLAIM_STEPS: dict[str, str | None] = {
    "enqueue": "enqueue",
    "claim": "claim",
    "complete": "complete",
    "crash": None,
    "reap": "reap",
    "fast-forward": "teaching/fast_forward",
}


class ClaimModel(LabModel):
    """One worker, one job at a time: enqueue, claim, complete (or crash mid-job), reap."""

    kind = "claim"
    setting_words = words.SETTINGS
    settings = ("crash", "lease_ms")
    crash = Bool(False, help="when on, 'complete' kills the worker mid-job instead of completing")
    lease_ms = Int(10_000, help="lease of each claim, in milliseconds")
    step = Unicode("claim", help="the step whose Lua is shown (not part of the picture)")

    def __init__(self, name: str | None = None, **kw: Any) -> None:
        self.held: Claim | None = None
        self.worker = "idle"  # idle / holding / crashed
        self._made = 0
        super().__init__(name, **kw)

    @validate("step")
    def _known_step(self, proposal: dict[str, Any]) -> str:
        from traitlets import TraitError

        if proposal["value"] not in CLAIM_STEPS:
            raise TraitError(f"step must be one of {', '.join(CLAIM_STEPS)}, got {proposal['value']!r}")
        return str(proposal["value"])

    @validate("lease_ms")
    def _lease_in_bounds(self, proposal: dict[str, Any]) -> int:
        return check("lease_ms", proposal["value"])

    def setup(self) -> None:
        self.held = None
        self.worker = "idle"
        self._made = 0

    def state(self) -> dict[str, Any]:
        held = self.held
        return {
            "worker": self.worker,
            "held": {"job_id": held.job_id, "token": held.token, "deadline_ms": held.deadline_ms} if held else None,
        }

    def step_source(self, step: str | None = None) -> str:
        """The exact Lua a step runs, as the server runs it (a crash runs none)."""
        script = CLAIM_STEPS[step or self.step]
        if script is None:
            return words.CRASH_SCRIPT.format(active=self.keys("active"))
        return scripts.expanded(script)

    # -- moves ------------------------------------------------------------------------------

    def enqueue(self) -> bool:
        def run() -> Said:
            assert self.queue is not None
            self.step = "enqueue"
            self._made += 1
            job = self.queue.enqueue(f"job {self._made}")
            return words.enqueued(job.job_id, self.keys("pending"))

        return self.act("enqueue", run)

    def claim(self) -> bool:
        def run() -> Said:
            assert self.queue is not None
            self.step = "claim"
            if self.held is not None:
                return words.still_holding(self.held.job_id), Lit.probed("claim")
            claim = self.queue.claim(lease_ms=self.lease_ms)
            if claim is None:
                return words.empty(self.keys("pending")), Lit.probed("claim")
            self.held, self.worker = claim, "holding"
            return words.claimed(claim.job_id, self.keys("active"), self.lease_ms, claim.deadline_ms, claim.token)

        return self.act("claim", run)

    def complete(self) -> bool:
        """Complete the held job; with ``crash`` on, the worker dies mid-job instead."""

        def run() -> Said:
            assert self.queue is not None
            held = self.held
            self.step = "crash" if self.crash else "complete"
            if held is None:
                return words.nothing_held(), Lit.probed("complete")
            self.held = None
            if self.crash:
                self.worker = "crashed"
                # The words say where the lease stands in the frame's own read: a lease that
                # already ran out is past its deadline, reapable now.
                snap = self.read()
                deadline = snap.active.get(held.job_id)
                left = None if deadline is None else deadline - snap.now_ms
                said = words.crashed(held.job_id, self.keys("active"), left)
                self.record("crash", said, lit=Lit.moved("crash"), snapshot=snap)
                return None
            self.worker = "idle"
            outcome = self.queue.complete(held)
            if outcome is Complete.COMPLETED:
                said = words.completed(held.job_id, held.token, self.keys("active"), self.keys("done"))
                return said, Lit.moved("complete")
            return words.stale(held.job_id, held.token, outcome.value.upper()), Lit.probed("complete")

        return self.act("crash" if self.crash else "complete", run)

    def reap(self) -> bool:
        def run() -> Said:
            assert self.queue is not None
            self.step = "reap"
            moved = self.queue.reap()
            if moved:
                return words.reaped(moved, self.keys("active"), self.keys("pending"))
            snap = self.queue.snapshot(limit=1)
            if not snap.active:
                return words.nothing_to_reap(self.keys("active")), Lit.probed("reap")
            job_id, deadline = next(iter(snap.active.items()))
            return words.reap_too_early(job_id, deadline - snap.now_ms), Lit.probed("reap")

        return self.act("reap", run)

    def fast_forward(self) -> bool:
        """Teaching script: pull every live lease deadline to the server's now."""

        def run() -> Said:
            assert self.queue is not None
            self.step = "fast-forward"
            _now, moved = fast_forward(self.queue)
            path = Lit.moved("fast-forward") if moved else Lit.probed("fast-forward")
            return fast_forwarded(moved, "to the server's now"), path

        return self.act("fast-forward", run)
