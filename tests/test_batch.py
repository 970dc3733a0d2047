"""The batched path: claim_many + complete_many, each job leased and fenced on its own."""

from __future__ import annotations

import pytest

import echoq
from echoq import Claim, Complete, JobState
from tests.support.helpers import assert_one_place, expire


def test_complete_many_retires_every_held_job(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(7)])
    claims = queue.claim_many(5)
    assert [c.job_id for c in claims] == ids[:5]
    assert queue.complete_many(claims) == [Complete.COMPLETED] * 5
    snap = assert_one_place(queue, set(ids))
    assert snap.counts == {"pending": 2, "active": 0, "scheduled": 0, "dead": 0, "done": 5}
    assert snap.stats["completed"] == 5


def test_complete_many_fences_each_claim_on_its_own(queue: echoq.Queue) -> None:
    """One lost lease is refused; the others in the same pipeline still complete."""
    ids = queue.enqueue_many(["a", "b", "c"])
    first, second, third = queue.claim_many(3, lease_ms=5)
    expire(queue, first, second, third)
    assert sorted(queue.reap()) == sorted(ids)
    again = queue.claim_many(3, lease_ms=60_000)  # someone else holds all three now
    outcomes = queue.complete_many([again[0], second, again[2]])
    assert outcomes == [Complete.COMPLETED, Complete.STALE, Complete.COMPLETED]
    held = queue.job(second.job_id)
    assert held is not None and held.state is JobState.ACTIVE and held.attempts == 2
    assert queue.complete_many([again[0]]) == [Complete.GONE]
    assert_one_place(queue, set(ids))


def test_complete_many_of_nothing_is_nothing(queue: echoq.Queue) -> None:
    assert queue.complete_many([]) == []
    assert list(queue.keys_in_use()) == []


def test_complete_many_refuses_non_claims_and_changes_nothing(queue: echoq.Queue) -> None:
    queue.enqueue("x")
    claim = queue.claim()
    with pytest.raises(echoq.InvalidArgument, match="complete_many takes the Claims"):
        queue.complete_many([claim, claim.job_id])  # type: ignore[list-item]
    held = queue.job(claim.job_id)
    assert held is not None and held.state is JobState.ACTIVE


def test_complete_many_and_claim_finishes_and_claims_in_one_call(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(6)])
    held = queue.claim_many(2)
    outcomes, fresh = queue.complete_many_and_claim(held, count=3, lease_ms=60_000)
    assert outcomes == [Complete.COMPLETED] * 2 and [c.job_id for c in fresh] == ids[2:5]
    assert all((c.token, c.attempts) == (1, 1) for c in fresh)
    snap = assert_one_place(queue, set(ids))
    assert snap.counts["done"] == 2 and snap.counts["active"] == 3 and snap.counts["pending"] == 1
    assert snap.stats["completed"] == 2 and snap.stats["claimed"] == 5


def test_a_stale_completion_in_a_batch_still_claims(queue: echoq.Queue) -> None:
    queue.enqueue_many(["a", "b"])
    lost = queue.claim(lease_ms=5)
    expire(queue, lost)
    queue.reap()
    holder = queue.claim(lease_ms=60_000)
    outcomes, fresh = queue.complete_many_and_claim([lost], count=1)
    assert outcomes == [Complete.STALE] and len(fresh) == 1
    assert queue.complete(holder) is Complete.COMPLETED


def test_batches_above_the_call_limit_are_split(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many(["x"] * 2_500)  # three enqueue_many.lua calls
    assert len(set(ids)) == 2_500 and queue.snapshot(limit=1).counts["pending"] == 2_500
    claims = queue.claim_many(1_000) + queue.claim_many(1_000) + queue.claim_many(500)
    assert queue.complete_many(claims) == [Complete.COMPLETED] * 2_500
    assert queue.snapshot(limit=1).counts["done"] == 2_500


def test_enqueue_many_is_one_script_and_refuses_a_bad_batch_whole(queue: echoq.Queue) -> None:
    """A batch with one bad row key adds nothing at all: every check runs before a write."""
    from echoq import scripts

    k = queue.keys
    good, other = echoq.new_job_id(), echoq.new_job_id()
    with pytest.raises(echoq.InvalidJobId, match="does not belong"):
        scripts.run(
            queue.client,
            "enqueue_many",
            [k.pending, k.scheduled, k.done, k.given, k.stats, k.job(good), k.job(good)],
            [0, 0, good, "a", other, "b"],
        )
    with pytest.raises(echoq.InvalidArgument, match="pairs"):
        keys = [k.pending, k.scheduled, k.done, k.given, k.stats, k.job(good)]
        scripts.run(queue.client, "enqueue_many", keys, [0, 0, good])
    assert list(queue.keys_in_use()) == []


def test_enqueue_many_refuses_an_id_given_twice_as_a_duplicate(queue: echoq.Queue) -> None:
    from echoq import scripts

    k = queue.keys
    job_id = echoq.new_job_id()
    reply = scripts.run(
        queue.client,
        "enqueue_many",
        [k.pending, k.scheduled, k.done, k.given, k.stats, k.job(job_id), k.job(job_id)],
        [0, 0, job_id, "first", job_id, "second"],
    )
    assert reply == ["enqueued", "duplicate"] and queue.job(job_id).payload == "first"


def test_enqueue_many_with_a_delay_schedules_every_job(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many(["a", "b"], delay_ms=60_000)
    snap = queue.snapshot()
    assert sorted(snap.scheduled) == sorted(ids) and snap.counts["pending"] == 0


def test_a_job_given_twice_in_one_batch_is_completed_once(queue: echoq.Queue) -> None:
    """The script completes the batch's jobs together; a second copy of an id finds its row
    already completed ('gone'), whatever token it carries -- as if they ran one by one."""
    queue.enqueue_many(["a", "b"])
    first, second = queue.claim_many(2, lease_ms=60_000)
    later = Claim(first.job_id, first.payload, first.token + 1, first.attempts + 1, first.deadline_ms)
    outcomes = queue.complete_many([first, first, second, later])
    assert outcomes == [Complete.COMPLETED, Complete.GONE, Complete.COMPLETED, Complete.GONE]
    snap = assert_one_place(queue, {first.job_id, second.job_id})
    assert snap.stats["completed"] == 2 and snap.counts["done"] == 2 and "corrupt" not in snap.stats
