"""Corrupt data, written by something other than echoq: an id with no row, an id in two
sets, a row whose state disagrees with its set. The rule (lua/includes/rows.lua): the row
is the truth and a set entry is its index. No such entry is ever delivered as a ghost, no
script ever writes a row for an id that has none, and each case is counted in stats
'corrupt'. An entry with no row goes to the dead set (no row written), unless the job had
completed; a stray copy of a job that is where its row says is dropped; a row that names
a set its id is not in is dead-lettered with reason 'corrupt', its payload kept. On Valkey
and on Redis 7."""

from __future__ import annotations

import pytest

import echoq
from echoq import Complete, Extend, JobState
from tests.support.helpers import assert_one_place, expire


def stats(queue: echoq.Queue) -> dict[str, int]:
    return queue.snapshot().stats


def partial_rows(queue: echoq.Queue) -> list[str]:
    """Rows without a payload: what the old reap wrote for an id whose row was deleted."""
    return [
        key
        for key in queue.keys_in_use()
        if ":job:" in key and queue.client.type(key) == "hash" and not queue.client.hexists(key, "payload")
    ]


# -- an id with no row -----------------------------------------------------------------------


def test_a_pending_id_with_no_row_is_not_delivered_and_the_next_job_is(queue: echoq.Queue) -> None:
    ghost = echoq.new_job_id()
    queue.client.zadd(queue.keys.pending, {ghost: 0})
    real = queue.enqueue("real").job_id
    assert [c.job_id for c in queue.claim_many(5, lease_ms=60_000)] == [real]
    snap = queue.snapshot()
    assert list(snap.dead) == [ghost] and snap.stats["corrupt"] == 1 and ghost not in snap.rows
    assert queue.job(ghost) is None and partial_rows(queue) == []


@pytest.mark.parametrize("sweep", ["reap", "stalled_check"])
def test_reaping_an_id_whose_row_was_deleted_writes_no_partial_row(queue: echoq.Queue, sweep: str) -> None:
    """The issue's finding: reap HSET a partial row, and the next claim handed the job out
    with payload 'None'. Now: no row is written, nothing goes to pending, nothing is delivered."""
    queue.enqueue("doomed")
    claim = queue.claim(lease_ms=5)
    queue.client.delete(queue.keys.job(claim.job_id))  # something else deleted the row
    expire(queue, claim)
    if sweep == "reap":
        assert queue.reap() == []
    else:
        report = queue.stalled_check()
        assert (report.recovered, report.dead, report.corrupt) == ([], [], 1)
    assert not queue.client.exists(queue.keys.job(claim.job_id)) and partial_rows(queue) == []
    assert queue.claim() is None
    snap = queue.snapshot()
    assert snap.pending == [] and snap.active == {} and list(snap.dead) == [claim.job_id]
    assert snap.stats["corrupt"] == 1 and "reaped" not in snap.stats and "stalled" not in snap.stats


def test_a_due_retry_whose_row_was_deleted_is_not_promoted(queue: echoq.Queue) -> None:
    queue.enqueue("flaky")
    result = queue.retry(queue.claim(), error="boom", backoff_ms=1)
    (scheduled,) = queue.snapshot().scheduled
    queue.client.delete(queue.keys.job(scheduled))
    expire(queue, echoq.Claim(scheduled, "", 1, 1, result.due_ms))
    assert queue.claim() is None
    assert partial_rows(queue) == [] and list(queue.snapshot().dead) == [scheduled]


def test_a_leftover_entry_of_a_completed_job_is_dropped_not_dead_lettered(queue: echoq.Queue) -> None:
    queue.enqueue("done once")
    claim = queue.claim()
    assert queue.complete(claim) is Complete.COMPLETED
    queue.client.zadd(queue.keys.pending, {claim.job_id: 0})  # a stale copy left behind
    assert queue.claim() is None
    snap = queue.snapshot()
    assert snap.dead == {} and list(snap.done) == [claim.job_id] and snap.stats["corrupt"] == 1


def test_members_that_are_not_job_ids_are_dropped_and_never_break_a_read(queue: echoq.Queue) -> None:
    queue.client.zadd(queue.keys.pending, {"hello": 0, b"\xff\xfe": 0})
    queue.client.zadd(queue.keys.active, {b"\xc3": 0})
    queue.client.zadd(queue.keys.dead, {b"\x80oops": 1})
    snap = queue.snapshot()  # decodes: every member comes back as text
    assert sorted(snap.pending) == ["\\255\\254", "hello"] and list(snap.dead) == ["\\128oops"]
    real = queue.enqueue("real").job_id
    assert [c.job_id for c in queue.claim_many(5)] == [real]
    assert queue.reap() == [] and stats(queue)["corrupt"] == 3
    assert queue.snapshot().pending == []


def test_a_row_key_holding_something_else_is_never_delivered(queue: echoq.Queue) -> None:
    job_id = echoq.new_job_id()
    queue.client.set(queue.keys.job(job_id), "not a hash")
    queue.client.zadd(queue.keys.pending, {job_id: 0})
    assert queue.claim() is None
    assert queue.client.get(queue.keys.job(job_id)) == "not a hash"  # untouched
    snap = queue.snapshot()
    assert list(snap.dead) == [job_id] and job_id not in snap.rows and snap.stats["corrupt"] == 1
    assert echoq.Queue(queue.name, queue.client).complete(job_id, 1) is Complete.GONE


# -- an id in two sets ----------------------------------------------------------------------


def test_a_stray_pending_copy_of_a_held_job_is_not_delivered_twice(queue: echoq.Queue) -> None:
    queue.enqueue("charge card")
    held = queue.claim(lease_ms=60_000)
    queue.client.zadd(queue.keys.pending, {held.job_id: 0})  # now in pending AND active
    assert queue.claim() is None  # no second delivery of a job someone holds
    assert queue.complete(held) is Complete.COMPLETED  # the holder is undisturbed
    snap = queue.snapshot()
    assert snap.stats["corrupt"] == 1 and snap.dead == {} and list(snap.done) == [held.job_id]


def test_a_stray_active_copy_of_a_pending_job_is_dropped_by_the_reaper(queue: echoq.Queue) -> None:
    job = queue.enqueue("waiting").job_id
    queue.client.zadd(queue.keys.active, {job: 1})  # an expired lease nobody holds
    assert queue.reap() == []
    claims = queue.claim_many(5, lease_ms=60_000)
    assert [(c.job_id, c.token, c.attempts) for c in claims] == [(job, 1, 1)]  # delivered once, its first try
    assert stats(queue)["corrupt"] == 1 and queue.snapshot().dead == {}
    assert_one_place(queue, {job})


def test_a_stray_dead_copy_never_deletes_a_live_job_when_the_dead_set_is_trimmed(queue: echoq.Queue) -> None:
    small = echoq.Queue(queue.name, queue.client, keep_dead=0)
    live = small.enqueue("live").job_id
    small.client.zadd(small.keys.dead, {live: 1})  # a stray copy in the dead set
    small.enqueue("poison")
    poison = small.claim_many(2, lease_ms=60_000)[1]
    assert small.retry(poison, error="x", max_attempts=1).outcome is echoq.Retry.DEAD  # trims dead to 0
    assert small.snapshot().dead == {} and small.job(live).state is JobState.ACTIVE
    assert small.job(poison.job_id) is None


# -- a row whose state disagrees with its set ------------------------------------------------


@pytest.mark.parametrize("said", ["active", "scheduled", "dead", "frozen", None])
def test_a_pending_entry_whose_row_says_otherwise_is_dead_lettered_with_its_payload(
    queue: echoq.Queue, said: str | None
) -> None:
    job = queue.enqueue("the payload survives").job_id
    row = queue.keys.job(job)
    if said is None:
        queue.client.hdel(row, "state")
    else:
        queue.client.hset(row, "state", said)  # ... but the id is in no set of that name
    behind = queue.enqueue("behind").job_id
    assert [c.job_id for c in queue.claim_many(5, lease_ms=60_000)] == [behind]
    dead = queue.job(job)
    assert dead.state is JobState.DEAD and dead.reason == "corrupt" and dead.payload == "the payload survives"
    assert dead.error == ("the row has no state" if said is None else f"it was in pending but its row said '{said}'")
    assert dead.attempts == 0 and stats(queue)["corrupt"] == 1
    assert_one_place(queue, {job, behind})


@pytest.mark.parametrize("field", ["attempts", "token"])
@pytest.mark.parametrize("value", ["x", "1.5", "-1", "007", "99999999999999999999"])
def test_a_pending_row_whose_token_or_attempts_is_not_a_count_is_dead_lettered_and_the_next_job_delivered(
    queue: echoq.Queue, field: str, value: str
) -> None:
    """The claim mints the token and counts the try with HINCRBY, which would fail the call
    half-way on a field that is not a count: such a row is dead-lettered before it, the
    batch goes on."""
    ahead = queue.enqueue("ahead").job_id
    job = queue.enqueue("the payload survives").job_id
    queue.client.hset(queue.keys.job(job), field, value)
    behind = queue.enqueue("behind").job_id
    assert [c.job_id for c in queue.claim_many(5, lease_ms=60_000)] == [ahead, behind]
    dead = queue.client.hgetall(queue.keys.job(job))
    assert dead["state"] == "dead" and dead["reason"] == "corrupt" and dead["payload"] == "the payload survives"
    assert dead["error"] == "its token or attempts field is not a count: not delivered" and dead[field] == value
    assert stats(queue)["corrupt"] == 1
    assert_one_place(queue, {ahead, job, behind})


def test_trimming_done_keeps_the_ledger_entry_of_a_live_job_with_a_stray_done_entry(queue: echoq.Queue) -> None:
    """One trim forgets a completed id (its ledger entry goes) and a stray done entry of a
    held job (its entry stays: it still protects the job's effect)."""
    small = echoq.Queue(queue.name, queue.client, keep_done=0)
    live = small.enqueue("live").job_id
    held = small.claim(lease_ms=60_000)
    gone = echoq.new_job_id()  # completed long ago: no row, remembered in done
    small.client.hset(small.keys.effects, mapping={gone: 1, live: 1})
    small.client.zadd(small.keys.done, {gone: 1, live: 2})  # live's entry is a stray copy
    small.enqueue("quick")
    assert small.complete(small.claim()) is Complete.COMPLETED  # trims done to 0: three ids at once
    assert small.client.hgetall(small.keys.effects) == {live: "1"}
    assert small.snapshot().counts["done"] == 0
    assert small.complete(held) is Complete.COMPLETED


def test_an_active_entry_whose_row_says_pending_is_not_recovered_twice(queue: echoq.Queue) -> None:
    job = queue.enqueue("x").job_id
    queue.client.zadd(queue.keys.active, {job: 1})
    queue.client.zrem(queue.keys.pending, job)  # in active only, but the row says pending
    report = queue.stalled_check()
    assert report.recovered == [] and report.corrupt == 1
    assert queue.job(job).reason == "corrupt" and queue.job(job).stalled == 0


def test_a_holder_whose_lease_entry_vanished_still_completes_and_extends(queue: echoq.Queue) -> None:
    """The fenced moves trust the row (state active, token matching): a lost active entry
    is written again by extend (a lease nobody can see would never be reaped) and counted."""
    queue.enqueue_many(["a", "b"])
    first, second = queue.claim_many(2, lease_ms=60_000)
    queue.client.zrem(queue.keys.active, first.job_id, second.job_id)
    assert queue.extend(first, lease_ms=30_000) is Extend.EXTENDED
    assert first.job_id in queue.snapshot().active
    assert queue.complete(second) is Complete.COMPLETED
    snap = queue.snapshot()
    assert snap.stats["corrupt"] == 2 and list(snap.done) == [second.job_id]
    assert_one_place(queue, {first.job_id, second.job_id})


def test_after_any_corruption_every_job_is_still_in_one_place(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(10)])
    held = queue.claim_many(4, lease_ms=5)
    queue.client.delete(queue.keys.job(held[0].job_id))
    queue.client.zadd(queue.keys.pending, {held[1].job_id: 0})
    queue.client.hset(queue.keys.job(ids[8]), "state", "scheduled")
    queue.client.zadd(queue.keys.pending, {echoq.new_job_id(): 0})
    expire(queue, *held)
    queue.stalled_check(max_stalled=5)
    delivered = []
    while claims := queue.claim_many(3, lease_ms=60_000):
        delivered += [c.job_id for c in claims]
        queue.complete_many(claims)
    assert len(delivered) == len(set(delivered))  # nothing delivered twice
    assert held[0].job_id not in delivered and ids[8] not in delivered
    assert partial_rows(queue) == []
    survivors = set(ids) - {held[0].job_id}
    snap = assert_one_place(queue, survivors)
    # the row-less id, the row that said scheduled, the made-up id; held[1]'s stray pending
    # copy merged with its recovery (both are pending), so it needed no repair
    assert snap.stats["corrupt"] == 3
