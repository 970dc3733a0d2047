"""The Delivery lab's model: one job delivered N times for real, its effects counted in the
ledger (naive vs keyed on the JOB id); and the fence, one real step at a time."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from traitlets import Int, Unicode, validate

from ....clock import wait_until_expired
from ....effects import Effect, Effects
from ....errors import EchoqError, InvalidArgument
from ....limits import whole
from ....queue import Claim, Queue
from ...contrasts import apply_every
from ..frames import Lit
from ..model import LabModel, Said
from ..words import refused
from . import words

__all__ = ["DeliveryModel", "DeliveryRun", "CONSUMERS", "CRASH_LEASE_MS"]

CONSUMERS = ("keyed", "naive")
CRASH_LEASE_MS = 3  # the leases of deliveries that crash: short, so the demo never waits long


@dataclass
class DeliveryRun:
    """One finished run: who consumed, which job, each delivery's try and the effects after it."""

    consumer: str
    job_id: str
    attempts: list[int]
    effects_after: list[int]

    @property
    def deliveries(self) -> int:
        return len(self.attempts)

    @property
    def effects(self) -> int:
        return self.effects_after[-1] if self.effects_after else 0


class DeliveryModel(LabModel):
    """Redeliver one job N times for real and count its effects; the fence, step by step."""

    kind = "delivery"
    setting_words = words.SETTINGS
    settings = ("deliveries", "consumer")
    deliveries = Int(3, help="how many times 'deliver' delivers the job, 1..10")
    consumer = Unicode("keyed", help="'keyed' (effect keyed on the JOB id) or 'naive' (an effect per delivery)")

    FENCE_STEPS = 5

    def __init__(self, name: str | None = None, **kw: Any) -> None:
        self.run: DeliveryRun | None = None
        self.fence_log: list[str] = []
        self.fence_step = 0
        self._fence_claims: dict[str, Claim] = {}
        self._scene: dict[str, Any] = {}
        super().__init__(name, **kw)

    @validate("deliveries")
    def _deliveries_range(self, proposal: dict[str, Any]) -> int:
        return whole("deliveries", proposal["value"], 1, 10)

    @validate("consumer")
    def _known_consumer(self, proposal: dict[str, Any]) -> str:
        if proposal["value"] not in CONSUMERS:
            raise InvalidArgument(f"consumer must be 'keyed' or 'naive', got {proposal['value']!r}")
        return str(proposal["value"])

    @property
    def fence_name(self) -> str:
        return f"{self.name}-fence"

    def setup(self) -> None:
        self.run = None
        self.fence_log = []
        self.fence_step = 0
        self._fence_claims = {}
        self._scene = {"scene": "delivery", "queue": self.name}

    def state(self) -> dict[str, Any]:
        return dict(self._scene)

    def describe(self, snapshot: Any, state: dict[str, Any]) -> str:
        return ""  # each step's words say where the job is

    # -- N deliveries of one job ------------------------------------------------------------

    def deliver(self, consumer: str | None = None, deliveries: int | None = None) -> bool:
        """Deliver one fresh job ``deliveries`` times: each delivery but the last claims it
        under a 3 ms lease, runs the effect and crashes; the lease runs out on the server's
        clock, reap.lua returns the job, and it is claimed again. The last one completes.
        Every step is recorded as a frame: the timeline keeps each delivery, and *replay* plays
        them one by one once the picture has jumped to the last."""
        try:  # both checked before either is set: a refused call changes nothing
            if consumer is not None:
                self._known_consumer({"value": consumer})
            if deliveries is not None:
                self._deliveries_range({"value": deliveries})
        except EchoqError as exc:
            self.say("deliver", refused("deliver", exc))
            return False
        self._quiet += 1  # part of this move: recorded in its frames, not as settings of their own
        try:
            if consumer is not None:
                self.consumer = consumer
            if deliveries is not None:
                self.deliveries = deliveries
        finally:
            self._quiet -= 1
        n, how = self.deliveries, self.consumer

        def run() -> Said:
            assert self.queue is not None
            queue = self.queue
            queue.reset()
            effects = Effects(queue)
            apply = effects.apply_once if how == "keyed" else partial(apply_every, effects)
            job_id = queue.enqueue("charge card 4242 once").job_id
            result = DeliveryRun(how, job_id, [], [])
            scene: dict[str, Any] = {"scene": "delivery", "queue": self.name, "job": job_id, "of": n, "workers": []}
            self._scene = scene
            self.record("deliver", words.start(job_id, n, how), lit=Lit.moved("enqueue"))
            for k in range(1, n + 1):
                last = k == n
                claim = queue.claim(lease_ms=30_000 if last else CRASH_LEASE_MS)
                if claim is None:
                    raise InvalidArgument(f"delivery {k}: the job was not back in pending")
                effect = apply(claim.job_id, f"charge, delivery {k}")
                ran = effect.outcome == Effect.APPLIED  # keyed: the ledger skips a JOB id it holds
                count = effect.count
                result.attempts.append(claim.attempts)
                result.effects_after.append(count)
                worker = {"name": f"worker {k}", "token": claim.token, "status": words.hand(ran)}
                self._scene = scene = {**scene, "delivery": k, "workers": [*scene["workers"][-1:], worker]}
                self.record(
                    "deliver",
                    words.claimed(k, n, job_id, claim.token, count, self.keys("effects"), ran),
                    lit=Lit.moved("claim"),
                )
                if last:
                    queue.complete(claim)
                    worker = {**worker, "status": "completed (token matches)"}
                    self._scene = scene = {**scene, "workers": [*scene["workers"][:-1], worker]}
                    self.run = result
                    self.record(
                        "deliver",
                        words.done(n, job_id, result.effects, self.keys("effects"), how),
                        lit=Lit.moved("complete"),
                    )
                else:
                    wait_until_expired(queue.client, claim.deadline_ms)  # the worker is dead; its lease runs out
                    queue.reap()
                    worker = {**worker, "status": words.crashed_hand(ran)}
                    self._scene = scene = {**scene, "workers": [*scene["workers"][:-1], worker]}
                    self.record("deliver", words.crashed(k, job_id, self.keys("pending")), lit=Lit.moved("reap"))
            return None

        return self.act("deliver", run)

    # -- the fence, one real step per call ------------------------------------------------------

    def fence_next(self) -> bool:
        """One step of a stale completion: A claims and stalls, its lease runs out, B claims,
        A's complete is refused by the fence, B completes."""
        step = self.fence_step + 1 if self.fence_step < self.FENCE_STEPS else 1

        def run() -> Said:
            assert self.queue is not None
            fq = Queue(self.fence_name, self.queue.client)
            claims = self._fence_claims
            scene = dict(self._scene) if self._scene.get("scene") == "fence" else {}
            refused = None
            if step == 1:
                fq.reset()
                self.fence_log = []
                job_id = fq.enqueue("send invoice 7").job_id
                a = fq.claim(lease_ms=CRASH_LEASE_MS)
                assert a is not None
                claims.clear()
                claims["A"] = a
                scene = {"scene": "fence", "queue": fq.name, "job": job_id}
                workers = {"A": {"token": a.token, "status": "holds it (3 ms lease), stalls"}}
                line = words.fence_step(1, job_id=job_id, token=a.token, lease_ms=CRASH_LEASE_MS)
                lit = Lit.moved("claim")
            elif step == 2:
                a = claims["A"]
                wait_until_expired(fq.client, a.deadline_ms)
                moved = fq.reap()
                workers = {"A": {"token": a.token, "status": "stalled: thinks it holds it"}}
                line = words.fence_step(2, moved=len(moved))
                lit = Lit.moved("reap")
            elif step == 3:
                b = fq.claim(lease_ms=30_000)
                assert b is not None
                claims["B"] = b
                workers = {
                    "A": {"token": claims["A"].token, "status": "stalled: thinks it holds it"},
                    "B": {"token": b.token, "status": "holds it now"},
                }
                line = words.fence_step(3, token=b.token)
                lit = Lit.moved("claim")
            elif step == 4:
                a, b = claims["A"], claims["B"]
                outcome = fq.complete(a)
                snap = fq.snapshot(limit=10)
                place = snap.place_of(a.job_id)
                row = snap.rows.get(a.job_id)
                refused = {"worker": "A", "token": a.token, "outcome": outcome.value.upper()}
                workers = {
                    "A": {"token": a.token, "status": f"woke up, completed: {outcome.value.upper()}"},
                    "B": {"token": b.token, "status": "holds it now"},
                }
                line = words.fence_step(
                    4,
                    token=a.token,
                    outcome=outcome.value.upper(),
                    row_token=row.token if row else "?",
                    place_key=f"emq:{{{fq.name}}}:{place.value if place else '?'}",
                )
                lit = Lit.moved("fence")
            else:
                b = claims["B"]
                outcome = fq.complete(b)
                workers = {
                    "A": {"token": claims["A"].token, "status": "refused: changed nothing"},
                    "B": {"token": b.token, "status": f"completed: {outcome.value.upper()}"},
                }
                line = words.fence_step(5, token=b.token, outcome=outcome.value.upper())
                lit = Lit.moved("complete")
            self._scene = {**scene, "fence_step": step, "workers": workers, "refused": refused}
            self.fence_log = [*self.fence_log, line]
            self.fence_step = step
            self.record("fence", line, lit=lit, snapshot=fq.snapshot(limit=10))
            return None

        return self.act("fence", run)
