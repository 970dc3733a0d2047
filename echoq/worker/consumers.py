"""The idempotent consumer on the effects ledger."""

from __future__ import annotations

from collections.abc import Callable

from ..effects import EffectResult, Effects
from .delivery import Delivery, Handler


def keyed_consumer(effects: Effects, work: Callable[[Delivery], str | None] | None = None) -> Handler:
    """The idempotent consumer: run ``work``, then the effect once per JOB id (the ledger
    skips it on a redelivery). ``work`` may return the effect's record text."""

    def handle(delivery: Delivery) -> EffectResult:
        record = work(delivery) if work is not None else None
        delivery.checkpoint()  # the work is done, the effect is not
        return effects.apply_once(delivery.job_id, record if record is not None else f"attempt {delivery.attempts}")

    handle.__name__ = "keyed_consumer"
    return handle
