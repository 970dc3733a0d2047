"""The cautionary contrasts do the damage they are kept to show, and the real path does not."""

from __future__ import annotations

import threading

import pytest
import redis

import echoq
from echoq.effects import Effect, Effects
from echoq.teaching import contrasts
from tests.support.helpers import assert_one_place, expire, places, redeliver
from tests.support.servers import fresh_name


def test_naive_pop_takes_the_job_out_of_valkey(queue: echoq.Queue) -> None:
    assert contrasts.naive_pop(queue) is None
    first = queue.enqueue("one").job_id
    queue.enqueue("two")
    assert contrasts.naive_pop(queue) == (first, "one")
    snap = queue.snapshot()
    assert snap.place_of(first) is None and queue.job(first) is None
    assert snap.counts["pending"] == 1 and snap.stats["naive_popped"] == 1


def test_naive_pop_of_an_id_whose_row_is_in_another_queue_reads_and_changes_nothing_there(
    client: redis.Redis,
) -> None:
    mine, theirs = echoq.Queue(fresh_name(), client), echoq.Queue(fresh_name("other"), client)
    try:
        stray = theirs.enqueue("elsewhere").job_id
        mine.client.zadd(mine.keys.pending, {stray: 0})
        assert mine.claim() is None  # the stray id is dead-lettered here, its row left alone
        before = {key: client.dump(key) for key in theirs.keys_in_use()}
        assert contrasts.naive_pop(mine) is None
        assert {key: client.dump(key) for key in theirs.keys_in_use()} == before and theirs.job(stray) is not None
    finally:
        mine.reset()
        theirs.reset()


@pytest.mark.parametrize("name", ["a", "Lesson_02-b", "9" * 64])
def test_naive_pop_passes_the_scripts_key_check_for_every_valid_queue_name(client: redis.Redis, name: str) -> None:
    q = echoq.Queue(name, client)
    q.reset()
    try:
        q.enqueue("one")
        assert contrasts.naive_pop(q) is not None
    finally:
        q.reset()


def test_naive_loop_loses_the_job_a_crash_interrupts_and_the_claim_does_not(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(4)])
    effects = Effects(queue)
    # Naive loop: the worker dies while processing the second job it popped. (Its effect is
    # the naive one: apply_once runs only for a job the queue still holds, and the pop
    # already removed it.)
    for n in range(2):
        job_id, _payload = contrasts.naive_pop(queue)
        if n == 0:
            contrasts.apply_every(effects, job_id)
    # A restarted worker drains what is left the naive way.
    while (popped := contrasts.naive_pop(queue)) is not None:
        contrasts.apply_every(effects, popped[0])
    lost = [job_id for job_id in ids if effects.count(job_id) == 0]
    assert lost == [ids[1]]
    assert places(queue.snapshot()) == {}  # and nothing in Valkey remembers it

    # The real path under the same crash: the job stays leased, the reaper returns it.
    queue.reset()
    ids = queue.enqueue_many([f"job {n}" for n in range(4)])
    crashed = queue.claim(lease_ms=5)
    expire(queue, crashed)
    assert queue.reap() == [crashed.job_id]
    done = []
    while (claim := queue.claim()) is not None:
        assert queue.complete(claim) is echoq.Complete.COMPLETED
        done.append(claim.job_id)
    assert sorted(done) == sorted(ids)
    assert_one_place(queue, set(ids))


def test_overlapping_racy_sweeps_deliver_one_crashed_job_twice(queue: echoq.Queue) -> None:
    report = contrasts.overlapping_sweeps(queue, racy=True)
    job = report.job_id
    assert report.first_sweep == [job] and report.second_sweep == [job]  # moved twice
    assert [c.job_id for c in report.claims] == [job, job, job]
    assert report.deliveries == 3 and report.duplicate_deliveries == 1
    b, c = report.live_holders
    assert (b.token, c.token) == (2, 3)
    # B was working the job when sweep 1 took it away; its finish is refused, so B's work
    # is wasted and the job is done again by C.
    assert queue.complete(b) is echoq.Complete.STALE
    assert queue.complete(c) is echoq.Complete.COMPLETED
    assert queue.snapshot().stats["reaped"] == 2


def test_atomic_reap_under_the_same_overlap_delivers_once(queue: echoq.Queue) -> None:
    report = contrasts.overlapping_sweeps(queue, racy=False)
    assert report.second_sweep == [report.job_id] and report.first_sweep == []
    assert report.deliveries == 2 and report.duplicate_deliveries == 0
    (b,) = report.live_holders
    assert queue.complete(b) is echoq.Complete.COMPLETED
    assert queue.snapshot().stats["reaped"] == 1


def test_two_threads_at_a_barrier_both_move_the_same_job(queue: echoq.Queue, server_url: str) -> None:
    job = queue.enqueue("x").job_id
    expire(queue, queue.claim(lease_ms=5))
    barrier = threading.Barrier(2, timeout=10)
    moved: list[list[str]] = []

    def sweep() -> None:
        # Each thread its own connection, as two reaper processes would have.
        q = echoq.Queue(queue.name, echoq.connect(server_url))
        try:
            moved.append(contrasts.racy_reap(q, between=barrier.wait))
        finally:
            q.client.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert moved == [[job], [job]]
    assert queue.snapshot().stats["reaped"] == 2


def test_unfenced_stale_completion_retires_a_job_another_worker_holds(queue: echoq.Queue) -> None:
    report = contrasts.stale_completion(queue, fenced=False)
    assert report.corrupted
    assert report.place_while_held is echoq.JobState.DONE  # gone while B still works it
    assert report.holder_outcome is echoq.Complete.GONE  # B's real finish is refused
    assert report.holder.token == 2


def test_fenced_stale_completion_is_refused_and_changes_nothing(queue: echoq.Queue) -> None:
    report = contrasts.stale_completion(queue, fenced=True)
    assert not report.corrupted
    assert report.stale_outcome is echoq.Complete.STALE
    assert report.place_while_held is echoq.JobState.ACTIVE
    assert report.holder_outcome is echoq.Complete.COMPLETED


# The effect on every delivery: the contrast to the ledger's apply_once (tests/test_effects.py).


@pytest.mark.parametrize("deliveries", [1, 3, 7])
def test_naive_consumer_makes_one_effect_per_delivery(queue: echoq.Queue, deliveries: int) -> None:
    effects = Effects(queue)
    job = redeliver(queue, deliveries, lambda job, record: contrasts.apply_every(effects, job, record))
    assert effects.count(job) == deliveries and len(effects.outbox()) == deliveries
    assert effects.duplicates() == deliveries - 1


def test_the_naive_consumer_runs_whatever_the_queue_holds(queue: echoq.Queue) -> None:
    effects = Effects(queue)
    job = echoq.new_job_id()  # no row: the naive pop-and-process loop deleted it
    first, second = contrasts.apply_every(effects, job), contrasts.apply_every(effects, job)
    assert first.outcome is Effect.APPLIED and second.count == 2
