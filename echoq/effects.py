"""The effects ledger: a side effect performed once per JOB id, however often a job is delivered.

At-least-once delivery means a handler may run more than once for one job. ``Effects``
runs the stand-in side effect (an append to ``emq:{q}:outbox``) through ``lua/effect.lua``,
which writes the ledger entry in the same atomic step:

* ``apply_once`` -- the idempotent consumer: keyed on the JOB id, later deliveries skip;
* ``apply_every`` -- the naive consumer (a cautionary contrast): one effect per delivery.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from . import scripts
from .ids import check_job_id
from .queue import Queue, _text


class Effect(StrEnum):
    APPLIED = "applied"
    SKIPPED = "skipped"  # the JOB id was in the ledger: nothing ran


@dataclass(frozen=True)
class EffectResult:
    outcome: Effect
    count: int  # how many times this id's effect has run, after this call


class Effects:
    """The effects ledger of one queue (``emq:{q}:effects`` + ``emq:{q}:outbox``)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def _apply(self, job_id: str, mode: str, record: str) -> EffectResult:
        k = self.queue.keys
        reply = scripts.run(self.queue.client, "effect", [k.effects, k.outbox], [check_job_id(job_id), mode, record])
        return EffectResult(Effect(_text(reply[0])), int(reply[1]))

    def apply_once(self, job_id: str, record: str = "") -> EffectResult:
        """The idempotent consumer: run the effect unless this JOB id already ran it."""
        return self._apply(job_id, "once", record)

    def apply_every(self, job_id: str, record: str = "") -> EffectResult:
        """The naive consumer: run the effect on every delivery (a cautionary contrast)."""
        return self._apply(job_id, "every", record)

    def count(self, job_id: str) -> int:
        return int(self.queue.client.hget(self.queue.keys.effects, check_job_id(job_id)) or 0)

    def counts(self) -> dict[str, int]:
        return {_text(k): int(v) for k, v in self.queue.client.hgetall(self.queue.keys.effects).items()}

    def total(self) -> int:
        return sum(self.counts().values())

    def duplicates(self) -> int:
        """Effects beyond the first per JOB id: 0 for an idempotent consumer."""
        return sum(n - 1 for n in self.counts().values() if n > 1)

    def outbox(self) -> list[str]:
        return [_text(x) for x in self.queue.client.lrange(self.queue.keys.outbox, 0, -1)]
