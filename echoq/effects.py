"""The effects ledger: a side effect performed once per JOB id, however often a job is delivered.

At-least-once delivery means a handler may run more than once for one job. ``Effects``
performs the effect -- a record appended to ``emq:{q}:outbox``, which whatever ships the
records onward reads (a transactional outbox) -- through ``lua/effect.lua``, which writes
the ledger entry in the same atomic step. :meth:`Effects.apply_once` is the idempotent
consumer: keyed on the JOB id, later deliveries skip; and only while the queue still holds
the job (its row exists), so a stale worker that wakes up after the job was completed runs
nothing (``Effect.GONE``). (The naive consumer, one effect per delivery, is the teaching
kit's contrast: :func:`echoq.teaching.contrasts.apply_every`.)

**Bounds.** A ledger entry lives as long as the queue remembers its job: while the job
is live or dead, and after completion while its id is among the newest ``keep_done`` in
``emq:{q}:done``; it goes when the job leaves done or is evicted from the dead set. That
is safe because ``apply_once`` refuses a job with no row. The outbox keeps its newest
``keep_outbox`` records (10,000 by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from . import scripts
from .ids import check_job_id
from .limits import check, text
from .queue import Queue, _text
from .translation import translating

DEFAULT_KEEP_OUTBOX = 10_000


class Effect(StrEnum):
    APPLIED = "applied"
    SKIPPED = "skipped"  # the JOB id was in the ledger: nothing ran
    GONE = "gone"  # apply_once on a job the queue no longer holds (completed, or unknown): nothing ran


@dataclass(frozen=True)
class EffectResult:
    outcome: Effect
    count: int  # how many times this id's effect has run, after this call


class Effects:
    """The effects ledger of one queue (``emq:{q}:effects`` + ``emq:{q}:outbox``)."""

    def __init__(self, queue: Queue, *, keep_outbox: int = DEFAULT_KEEP_OUTBOX) -> None:
        self.queue = queue
        self.keep_outbox = check("keep_outbox", keep_outbox)

    def apply_once(self, job_id: str, record: str = "") -> EffectResult:
        """The idempotent consumer: run the effect unless this JOB id already ran it, and
        only while the queue still holds the job."""
        job_id = check_job_id(job_id)
        record = text("record", record)
        reply = scripts.run(
            self.queue.client, "effect", self.queue.script_keys("effect", job_id), [job_id, record, self.keep_outbox]
        )
        return EffectResult(Effect(_text(reply[0])), int(reply[1]))

    def count(self, job_id: str) -> int:
        key = self.queue.keys.effects
        with translating(self.queue.client, "Effects.count", [key]):
            return int(self.queue.client.hget(key, check_job_id(job_id)) or 0)

    def counts(self) -> dict[str, int]:
        key = self.queue.keys.effects
        with translating(self.queue.client, "Effects.counts", [key]):
            return {_text(k): int(v) for k, v in self.queue.client.hgetall(key).items()}

    def total(self) -> int:
        return sum(self.counts().values())

    def duplicates(self) -> int:
        """Effects beyond the first per JOB id: 0 for an idempotent consumer."""
        return sum(n - 1 for n in self.counts().values() if n > 1)

    def outbox(self) -> list[str]:
        key = self.queue.keys.outbox
        with translating(self.queue.client, "Effects.outbox", [key]):
            return [_text(x) for x in self.queue.client.lrange(key, 0, -1)]
