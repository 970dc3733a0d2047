"""The batched path: claim_many + complete_many, each job leased and fenced on its own."""

from __future__ import annotations

import pytest

import echoq
from echoq import Complete, JobState
from tests.helpers import assert_one_place, expire


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
