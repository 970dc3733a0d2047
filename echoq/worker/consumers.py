"""Idempotent (and naive) consumers on the effects ledger."""

from __future__ import annotations

from collections.abc import Callable

from ..effects import EffectResult, Effects
from .delivery import Delivery, Handler


def _consumer(effects: Effects, once: bool, work: Callable[[Delivery], str | None] | None) -> Handler:
    apply = effects.apply_once if once else effects.apply_every

    def handle(delivery: Delivery) -> EffectResult:
        record = work(delivery) if work is not None else None
        delivery.checkpoint()  # the work is done, the effect is not
        return apply(delivery.job_id, record if record is not None else f"attempt {delivery.attempts}")

    handle.__name__ = "keyed_consumer" if once else "naive_consumer"
    return handle


def keyed_consumer(effects: Effects, work: Callable[[Delivery], str | None] | None = None) -> Handler:
    """The idempotent consumer: run ``work``, then the effect once per JOB id (the ledger
    skips it on a redelivery). ``work`` may return the effect's record text."""
    return _consumer(effects, True, work)


def naive_consumer(effects: Effects, work: Callable[[Delivery], str | None] | None = None) -> Handler:
    """CONTRAST: the same consumer, but the effect runs on every delivery."""
    return _consumer(effects, False, work)
