"""The effects ledger, driven by real claims, expiries and reaps."""

from __future__ import annotations

import pytest

import echoq
from echoq.effects import Effect, Effects
from tests.helpers import expire


def redeliver(queue: echoq.Queue, deliveries: int, apply) -> str:
    """Deliver one job `deliveries` times: each worker does the effect, then dies before
    completing; the lease expires and the reaper hands the job to the next worker."""
    job = queue.enqueue("charge card").job_id
    for n in range(1, deliveries + 1):
        claim = queue.claim(lease_ms=5)
        assert claim.job_id == job and claim.attempt == n
        apply(job, f"delivery {n}")
        expire(queue, claim)  # the worker is gone: no complete
        assert queue.reap() == [job]
    return job


@pytest.mark.parametrize("deliveries", [1, 3, 7])
def test_naive_consumer_makes_one_effect_per_delivery(queue: echoq.Queue, deliveries: int) -> None:
    effects = Effects(queue)
    job = redeliver(queue, deliveries, effects.apply_every)
    assert effects.count(job) == deliveries and len(effects.outbox()) == deliveries
    assert effects.duplicates() == deliveries - 1


@pytest.mark.parametrize("deliveries", [1, 3, 7])
def test_keyed_consumer_makes_exactly_one_effect(queue: echoq.Queue, deliveries: int) -> None:
    effects = Effects(queue)
    job = redeliver(queue, deliveries, effects.apply_once)
    assert effects.count(job) == 1 and effects.outbox() == [f"{job} delivery 1"]
    assert effects.duplicates() == 0


def test_apply_once_reports_skips(queue: echoq.Queue) -> None:
    effects = Effects(queue)
    job = echoq.new_job_id()
    assert effects.apply_once(job).outcome is Effect.APPLIED
    assert effects.apply_once(job) == effects.apply_once(job)
    assert effects.apply_once(job).outcome is Effect.SKIPPED and effects.count(job) == 1


def test_ledger_refuses_bad_ids_and_modes(queue: echoq.Queue) -> None:
    effects = Effects(queue)
    with pytest.raises(echoq.InvalidJobId):
        effects.apply_once("order-17")
    k = queue.keys
    with pytest.raises(echoq.InvalidJobId):
        queue._run("effect", [k.effects, k.outbox], ["order-17", "once", ""])
    with pytest.raises(echoq.InvalidArgument, match="mode"):
        queue._run("effect", [k.effects, k.outbox], [echoq.new_job_id(), "twice", ""])
    assert effects.counts() == {} and effects.outbox() == []
