"""The effects ledger, driven by real claims, expiries and reaps."""

from __future__ import annotations

import pytest

import echoq
from echoq.effects import Effect, Effects
from tests.support.helpers import expire, redeliver, register_kit_scripts

register_kit_scripts()  # one check below runs the kit's naive_effect


@pytest.mark.parametrize("deliveries", [1, 3, 7])
def test_keyed_consumer_makes_exactly_one_effect(queue: echoq.Queue, deliveries: int) -> None:
    effects = Effects(queue)
    job = redeliver(queue, deliveries, effects.apply_once)
    assert effects.count(job) == 1 and effects.outbox() == [f"{job} delivery 1"]
    assert effects.duplicates() == 0


def test_apply_once_reports_skips(queue: echoq.Queue) -> None:
    effects = Effects(queue)
    job = queue.enqueue("charge card").job_id
    assert effects.apply_once(job).outcome is Effect.APPLIED
    assert effects.apply_once(job) == effects.apply_once(job)
    assert effects.apply_once(job).outcome is Effect.SKIPPED and effects.count(job) == 1


def test_a_stale_worker_that_wakes_after_its_job_was_completed_runs_no_effect(queue: echoq.Queue) -> None:
    """The ledger's protection does not depend on how long it remembers: apply_once runs
    only for a job the queue still holds. Worker A claims and stalls before its effect;
    the job is reaped and worker B does it and completes; the queue then forgets the job
    (keep_done=0 drops it from done, and its ledger entry with it). A wakes up: nothing runs."""
    forgetful = echoq.Queue(queue.name, queue.client, keep_done=0)
    effects = Effects(forgetful)
    job = forgetful.enqueue("charge card").job_id
    stale = forgetful.claim(lease_ms=5)
    expire(forgetful, stale)
    assert forgetful.reap() == [job]
    fresh = forgetful.claim(lease_ms=60_000)
    assert effects.apply_once(job, "B").outcome is Effect.APPLIED
    assert forgetful.complete(fresh) is echoq.Complete.COMPLETED
    assert effects.counts() == {} and forgetful.snapshot().counts["done"] == 0  # forgotten
    late = effects.apply_once(stale.job_id, "A, late")
    assert late.outcome is Effect.GONE and late.count == 0
    assert effects.outbox() == [f"{job} B"] and effects.counts() == {}


def test_the_outbox_keeps_its_newest_records(queue: echoq.Queue) -> None:
    effects = Effects(queue, keep_outbox=3)
    jobs = queue.enqueue_many([f"job {n}" for n in range(5)])
    for n, job in enumerate(jobs):
        effects.apply_once(job, f"record {n}")
    assert effects.outbox() == [f"{job} record {n}" for n, job in list(enumerate(jobs))[2:]]
    assert effects.total() == 5  # the ledger keeps every live job's entry
    with pytest.raises(echoq.InvalidArgument, match="keep_outbox must be a whole number between 1 and"):
        Effects(queue, keep_outbox=0)


def test_ledger_refuses_bad_ids_and_records(queue: echoq.Queue) -> None:
    effects = Effects(queue)
    with pytest.raises(echoq.InvalidJobId):
        effects.apply_once("order-17")
    with pytest.raises(echoq.InvalidArgument, match="record is 4,097 bytes"):
        effects.apply_once(echoq.new_job_id(), "x" * 4097)
    with pytest.raises(echoq.InvalidArgument, match="record has a character UTF-8 cannot encode"):
        effects.apply_once(echoq.new_job_id(), "\ud800")
    k = queue.keys
    job = echoq.new_job_id()
    with pytest.raises(echoq.InvalidJobId):
        queue._run("effect", [k.effects, k.outbox, k.prefix + "job:order-17"], ["order-17", "", 10])
    with pytest.raises(echoq.InvalidArgument, match="record is not UTF-8 text"):
        queue._run("effect", queue.script_keys("effect", job), [job, b"\xff", 10])
    with pytest.raises(echoq.InvalidArgument, match="record is not UTF-8 text"):
        queue._run("teaching/naive_effect", [k.effects, k.outbox], [job, b"\xff", 10])
    assert effects.counts() == {} and effects.outbox() == []
