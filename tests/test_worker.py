"""The consumer on a real server: drain, retry, dead-letter, extend, stop, crash; and the
guarantees of its design -- one I/O owner feeding handler threads from a prefetch buffer,
every held lease extended in one call, idle workers woken instead of polling, one stalled
check per beat across the fleet, nothing held past stop(), nothing lost to a SIGKILL.

Crashes come from the teaching kit's CrashPlan through the Worker's public hooks; the
Worker itself knows no crash points (tests/test_layers.py checks that). No test sleeps to
synchronise or times anything: waits are on events, or on the server's clock, with a
deadline that only turns a hang into a failure."""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import echoq
from echoq import Complete, Extend, Release, scripts
from echoq.effects import Effects
from echoq.limits import WAKE_CAP
from echoq.teaching.contrasts import naive_consumer
from echoq.teaching.faults import CrashMode, CrashPlan
from echoq.worker import (
    LANES,
    SPLIT_MIN,
    Backoff,
    Checkpoint,
    Delivery,
    Worker,
    keyed_consumer,
)
from tests.support.helpers import assert_one_place, expire, wait_for_server_time
from tests.support.servers import fresh_name

FAST = {"beat_ms": 20, "idle_wait_ms": 5}
# The lease of a worker that is made to crash: it outlasts a thread held back for hundreds of
# ms on a loaded machine, so the worker's own beat never reaps its job before the crash.
CRASH_LEASE_MS = 1_000


def test_worker_drains_the_queue_with_one_effect_per_job(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"order {n}" for n in range(30)])
    effects = Effects(queue)
    report = Worker(queue, keyed_consumer(effects), concurrency=3, lease_ms=5_000, **FAST).work(burst=True)
    assert (report.claimed, report.completed, report.retried, report.dead, report.stale) == (30, 30, 0, 0, 0)
    assert not report.abandoned and report.completed == 30
    assert effects.counts() == {job_id: 1 for job_id in ids}
    snap = assert_one_place(queue, set(ids))
    assert snap.counts == {"pending": 0, "active": 0, "scheduled": 0, "dead": 0, "done": 30}


def test_handler_sees_job_id_payload_token_and_attempts(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("hello").job_id
    seen: list[tuple[str, str, int, int]] = []
    Worker(queue, lambda d: seen.append((d.job_id, d.payload, d.token, d.attempts)), **FAST).work(burst=True)
    assert seen == [(job_id, "hello", 1, 1)]


def test_a_failing_handler_is_retried_after_a_growing_backoff(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("flaky").job_id
    lease_ms = 5_000
    claimed_at: list[int] = []

    def flaky(delivery: Delivery) -> None:
        claimed_at.append(delivery.claim.deadline_ms - lease_ms)  # the server's claim time
        if delivery.attempts < 3:
            raise RuntimeError(f"boom {delivery.attempts}")

    worker = Worker(queue, flaky, lease_ms=lease_ms, max_attempts=5, backoff=Backoff(30, 2.0, 1_000), **FAST)
    report = worker.work(burst=True)
    assert (report.completed, report.retried, report.dead) == (1, 2, 0)
    assert report.errors == ["RuntimeError: boom 1", "RuntimeError: boom 2"]
    # The scheduled set holds each retry until its due time on the server's clock.
    assert claimed_at[1] - claimed_at[0] >= 30 and claimed_at[2] - claimed_at[1] >= 60
    assert queue.snapshot().place_of(job_id) is echoq.JobState.DONE


def test_backoff_grows_exponentially_up_to_its_cap() -> None:
    backoff = Backoff(base_ms=100, factor=2.0, cap_ms=500)
    assert [backoff.delay_ms(n) for n in range(1, 6)] == [100, 200, 400, 500, 500]
    assert Backoff(0).delay_ms(4) == 0


def test_a_job_that_always_fails_is_dead_lettered_at_max_attempts(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("poison").job_id

    def always_fails(delivery: Delivery) -> None:
        raise ValueError("bad payload")

    report = Worker(queue, always_fails, max_attempts=3, backoff=Backoff(0), **FAST).work(burst=True)
    assert (report.claimed, report.retried, report.dead, report.completed) == (3, 2, 1, 0)
    job = queue.job(job_id)
    assert job.state is echoq.JobState.DEAD and job.reason == "max_attempts" and job.attempts == 3
    assert job.error == "ValueError: bad payload"


def _crash_and_expire(queue: echoq.Queue, job_id: str, point: Checkpoint, max_stalled: int = 2) -> Worker:
    worker = Worker(
        queue, lambda d: None, lease_ms=CRASH_LEASE_MS, max_stalled=max_stalled, hooks=CrashPlan(point), **FAST
    )
    report = worker.work(burst=True)
    assert report.abandoned_at is point
    snap = queue.snapshot()
    assert list(snap.active) == [job_id]  # leased: the crashed worker left it there
    wait_for_server_time(queue.client, snap.active[job_id] + 1)
    return worker


def test_a_job_that_keeps_killing_its_worker_is_dead_lettered_at_max_stalled(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("kills workers").job_id
    _crash_and_expire(queue, job_id, Checkpoint.MID_JOB)  # stall 1: recovered by the next beat
    _crash_and_expire(queue, job_id, Checkpoint.MID_JOB)  # stall 2: max_stalled=2, the 2nd stall is fatal
    report = Worker(queue, lambda d: None, max_stalled=2, **FAST).work(burst=True)
    assert (report.dead, report.claimed, report.completed) == (1, 0, 0)
    job = queue.job(job_id)
    assert job.state is echoq.JobState.DEAD and job.reason == "stalled" and job.stalled == 2


def test_a_long_job_keeps_its_lease_while_alive(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("long").job_id
    lease_ms = 500
    reaped_while_alive: list[list[str]] = []

    def long_job(delivery: Delivery) -> None:
        # Outlive the first lease by a wide margin, then ask a reaper to sweep.
        wait_for_server_time(queue.client, delivery.claim.deadline_ms + lease_ms // 2)
        reaped_while_alive.append(queue.reap())

    report = Worker(queue, long_job, lease_ms=lease_ms, extend_every_ms=50, **FAST).work(burst=True)
    assert reaped_while_alive == [[]]
    assert report.extended >= 1 and report.completed == 1 and report.stale == 0
    assert queue.snapshot().place_of(job_id) is echoq.JobState.DONE


def test_without_extension_a_long_job_is_reaped_and_its_complete_refused(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("long").job_id
    reaped: list[list[str]] = []

    def long_on_first_try(delivery: Delivery) -> None:
        if delivery.attempts == 1:
            wait_for_server_time(queue.client, delivery.claim.deadline_ms + 1)
            reaped.append(queue.reap())

    # A slow beat, so the only reaper in play is the handler's own sweep.
    worker = Worker(queue, long_on_first_try, lease_ms=30, extend_every_ms=0, beat_ms=60_000, idle_wait_ms=5)
    report = worker.work(burst=True)
    # The fence refuses the first complete; the job, pending again, is delivered once more.
    assert reaped == [[job_id]]
    assert (report.claimed, report.stale, report.completed, report.extended) == (2, 1, 1, 0)


def test_graceful_stop_finishes_the_job_in_hand_and_claims_no_more(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(5)])
    started, release = threading.Event(), threading.Event()

    def slow(delivery: Delivery) -> None:
        started.set()
        assert release.wait(10)

    worker = Worker(queue, slow, lease_ms=5_000, **FAST)
    reports: list[echoq.worker.WorkReport] = []
    runner = threading.Thread(target=lambda: reports.append(worker.work()))
    runner.start()
    assert started.wait(10)
    worker.stop()
    release.set()
    runner.join(10)
    assert not runner.is_alive()
    (report,) = reports
    assert (report.claimed, report.completed) == (1, 1)
    snap = assert_one_place(queue, set(ids))
    assert snap.counts["pending"] == 4 and snap.counts["active"] == 0


@pytest.mark.parametrize("point", list(Checkpoint))
def test_each_fault_point_leaves_the_job_leased_then_reaped_then_redelivered(
    queue: echoq.Queue, point: Checkpoint
) -> None:
    job_id = queue.enqueue("crash me").job_id
    effects = Effects(queue)
    crashing = Worker(queue, keyed_consumer(effects), lease_ms=CRASH_LEASE_MS, hooks=CrashPlan(point), **FAST)
    report = crashing.work(burst=True)
    assert report.abandoned_at is point and report.completed == 0
    snap = assert_one_place(queue, {job_id})
    assert snap.place_of(job_id) is echoq.JobState.ACTIVE and snap.rows[job_id].attempts == 1
    # Only the after_effect crash got as far as the effect.
    assert effects.count(job_id) == (1 if point is Checkpoint.AFTER_EFFECT else 0)

    wait_for_server_time(queue.client, snap.active[job_id] + 1)
    attempts: list[int] = []

    def work(delivery: Delivery) -> str:
        attempts.append(delivery.attempts)
        return "done"

    restarted = Worker(queue, keyed_consumer(effects, work), lease_ms=5_000, max_stalled=2, **FAST)
    report = restarted.work(burst=True)
    assert (report.recovered, report.completed) == (1, 1)
    assert attempts == [2]
    assert effects.count(job_id) == 1  # however often delivered, one effect
    assert assert_one_place(queue, {job_id}).place_of(job_id) is echoq.JobState.DONE


def test_naive_consumer_repeats_the_effect_after_an_after_effect_crash(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("charge").job_id
    effects = Effects(queue)
    Worker(queue, naive_consumer(effects), lease_ms=CRASH_LEASE_MS, hooks=CrashPlan("after_effect"), **FAST).work(
        burst=True
    )
    wait_for_server_time(queue.client, queue.snapshot().active[job_id] + 1)
    report = Worker(queue, naive_consumer(effects), **FAST).work(burst=True)
    assert report.completed == 1 and effects.count(job_id) == 2 and effects.duplicates() == 1


def test_a_simulated_crash_stops_every_thread_without_a_word_to_valkey(queue: echoq.Queue) -> None:
    queue.enqueue_many([f"job {n}" for n in range(10)])
    plan = CrashPlan(Checkpoint.AFTER_CLAIM, times=1)
    report = Worker(queue, lambda d: None, concurrency=3, lease_ms=5_000, hooks=plan, **FAST).work(burst=True)
    assert report.abandoned_at is Checkpoint.AFTER_CLAIM and plan.crashes == 1
    snap = queue.snapshot()
    # Nothing was lost and the crashed job is still leased; other threads stopped too.
    assert snap.counts["done"] == report.completed < 10
    assert sum(snap.counts.values()) == 10 and snap.counts["active"] >= 1


def test_a_thread_still_working_when_its_worker_crashes_does_not_complete(queue: echoq.Queue) -> None:
    slow_id, quick_id = queue.enqueue_many(["slow", "quick"])
    slow_started, crashed = threading.Event(), threading.Event()

    def handler(delivery: Delivery) -> None:
        if delivery.payload == "slow":
            slow_started.set()
            assert crashed.wait(10), "the other thread never crashed"
        else:
            assert slow_started.wait(10), "the slow job never started"
            delivery.checkpoint()  # the quick job's thread crashes here, the slow one is mid-work

    plan = CrashPlan(Checkpoint.MID_JOB, on_crash=lambda point: crashed.set())
    worker = Worker(queue, handler, concurrency=2, lease_ms=5_000, extend_every_ms=0, hooks=plan, **FAST)
    report = worker.work(burst=True)
    assert report.abandoned_at is Checkpoint.MID_JOB and report.completed == 0
    # Both stay leased, as in a killed process: the slow job's thread did not complete it.
    assert set(queue.snapshot().active) == {slow_id, quick_id}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda q: Worker(q, print, concurrency=0), "concurrency"),
        (lambda q: Worker(q, print, lease_ms=-5), "lease_ms"),
        (lambda q: CrashPlan("sideways"), "crash points"),
        (lambda q: CrashPlan("mid_job", mode="maim"), "crash mode"),
        (lambda q: CrashPlan(Checkpoint.MID_JOB, rate=1.5), "crash rate"),
        (lambda q: Worker(q, print, hooks=object()), "hooks"),
        (lambda q: Backoff(factor=0.5), "factor"),
        (lambda q: Worker(q, print, lease_ms=300, extend_every_ms=300), "shorter than lease_ms"),
        (lambda q: Worker(q, print, prefetch=-1), "prefetch"),
        (lambda q: Worker(q, print, concurrency=8, prefetch=995), "prefetch"),
        (lambda q: Worker(q, print, extend_every_ms=0, prefetch=4), "needs lease extension"),
        (lambda q: Worker(q, print, idle_wait_ms=0), "idle_wait_ms"),
    ],
)
def test_bad_options_are_one_line_errors(valkey_client, make, message: str) -> None:
    queue = echoq.Queue("bad-options", valkey_client)
    with pytest.raises(echoq.InvalidArgument, match=message) as caught:
        make(queue)
    assert "\n" not in str(caught.value)


def test_kill_mode_is_a_crash_mode() -> None:
    assert CrashPlan("after_claim", mode="kill").mode is CrashMode.KILL


# -- the scripts the worker runs on -----------------------------------------------------------


def test_extend_many_extends_each_held_lease_and_refuses_a_lost_one_alone(queue: echoq.Queue) -> None:
    queue.enqueue_many(["a", "b", "c"])
    a, b, c = queue.claim_many(3, lease_ms=5_000)
    queue.client.zadd(queue.keys.active, {b.job_id: 0})  # b's lease ran out ...
    assert queue.reap() == [b.job_id]
    b_again = queue.claim(5_000)  # ... and someone else holds it now, under a newer token
    deadline, outcomes = queue.extend_many([a, b, c], lease_ms=10_000)
    assert outcomes == [Extend.EXTENDED, Extend.STALE, Extend.EXTENDED]
    snap = queue.snapshot()
    assert snap.active[a.job_id] == snap.active[c.job_id] == deadline >= snap.now_ms + 9_000
    assert snap.active[b.job_id] == b_again.deadline_ms  # the new holder's lease left alone
    assert queue.complete(b_again) is Complete.COMPLETED
    assert queue.extend_many([b], lease_ms=1_000)[1] == [Extend.GONE]


def test_release_many_gives_held_jobs_back_unstarted_with_their_try(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many(["a", "b", "c"])
    held = queue.claim_many(3, lease_ms=5_000)
    queue.client.delete(queue.keys.wake)
    stale = echoq.Claim(held[2].job_id, "", held[2].token + 1, 1, 0)  # not this job's token
    assert queue.release_many([held[0], held[1], stale]) == [Release.RELEASED, Release.RELEASED, Release.STALE]
    snap = assert_one_place(queue, set(ids))
    assert snap.pending == ids[:2] and list(snap.active) == [ids[2]]
    # A release gives the try back; the token stays, so it is never handed out twice.
    assert [(snap.rows[j].token, snap.rows[j].attempts) for j in ids] == [(1, 0), (1, 0), (1, 1)]
    assert snap.stats["released"] == 2
    assert queue.client.llen(queue.keys.wake) == 2  # idle workers are told
    again = queue.claim(5_000)
    assert (again.job_id, again.token, again.attempts) == (ids[0], 2, 1)  # the token only ever grows


def test_a_refused_batch_call_changes_nothing(queue: echoq.Queue) -> None:
    held = queue.claim_many(1) if queue.enqueue("x") else []
    before = queue.snapshot()
    for call in (
        lambda: scripts.run(queue.client, "extend_many", [queue.keys.active], [0, held[0].job_id, 1]),
        lambda: scripts.run(queue.client, "extend_many", [queue.keys.active, queue.keys.job(held[0].job_id)], [1000]),
        lambda: scripts.run(
            queue.client,
            "release_many",
            [queue.keys.pending, queue.keys.active, queue.keys.stats, queue.keys.job(echoq.new_job_id())],
            [held[0].job_id, 1],
        ),
    ):
        with pytest.raises(echoq.EchoqError):
            call()
    after = queue.snapshot()
    assert (after.active, after.pending, after.stats) == (before.active, before.pending, before.stats)


def test_every_script_that_fills_pending_pushes_a_bounded_wake(queue: echoq.Queue) -> None:
    wake = queue.keys.wake

    def wakes() -> int:
        n = queue.client.llen(wake)
        queue.client.delete(wake)
        return n

    queue.enqueue("now")
    assert wakes() == 1
    queue.enqueue("later", delay_ms=60_000)
    assert wakes() == 0  # nothing claimable yet: no one is woken for it
    queue.enqueue_many(["x"] * 3)
    assert wakes() == 3
    queue.enqueue_many(["y"] * 200)
    assert wakes() == WAKE_CAP  # one per job, up to the bound
    queue.enqueue_many(["z"] * 100)
    queue.enqueue_many(["z"] * 100)
    assert wakes() == WAKE_CAP  # wakes nobody took never pile up past it
    first, second = queue.claim_many(2, lease_ms=5_000)
    assert queue.retry(first, backoff_ms=0).outcome is echoq.Retry.RETRIED
    assert wakes() == 1
    assert queue.retry(second, backoff_ms=60_000).outcome is echoq.Retry.SCHEDULED
    assert wakes() == 0
    expire(queue, *queue.claim_many(3, lease_ms=5))
    assert len(queue.reap()) == 3 and wakes() == 3
    expire(queue, *queue.claim_many(2, lease_ms=5))
    assert len(queue.stalled_check(max_stalled=5).recovered) == 2 and wakes() == 2


def test_wait_for_work_returns_on_a_token_or_at_its_timeout(queue: echoq.Queue) -> None:
    assert queue.wait_for_work(10) is False
    queue.enqueue("x")
    assert queue.wait_for_work(60_000) is True  # the token was there: no wait at all


def test_the_guarded_stalled_check_runs_once_per_window(queue: echoq.Queue) -> None:
    assert queue.stalled_check_locked(every_ms=60_000, holder="a") is not None
    assert queue.stalled_check_locked(every_ms=60_000, holder="b") is None
    assert queue.client.get(queue.keys.stalled_lock) == "a"
    assert 0 < queue.client.pttl(queue.keys.stalled_lock) <= 60_000  # the lock bounds itself
    with pytest.raises(echoq.InvalidArgument, match="every_ms"):
        queue.stalled_check_locked(every_ms=0)


def test_waiting_reads_pending_scheduled_and_the_next_due_time(queue: echoq.Queue) -> None:
    assert queue.waiting() == echoq.Waiting(0, 0, None, 0)
    queue.enqueue("later", delay_ms=60_000)
    queue.enqueue_many(["now", "left by a dead worker", "held"])
    expire(queue, *queue.claim_many(1, lease_ms=1))
    queue.claim(lease_ms=60_000)
    waiting = queue.waiting()
    assert (waiting.pending, waiting.scheduled, waiting.expired) == (1, 1, 1)
    assert 50_000 < waiting.next_due_in_ms <= 60_000


# -- the guarantees of the worker -------------------------------------------------------------


def test_a_prefetched_job_is_never_reaped_while_it_waits(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(4)])
    # Extended every 50 ms, a lease of 1 s outlives the extensions' stalls on a loaded 2-core
    # machine (one of 300 ms ran out once there, and the worker's own beat reaped the job:
    # the queue doing its job, not the buffer's fault).
    lease_ms = 1000
    seen: list[tuple[str, int]] = []
    swept: list[list[str]] = []
    held_while_first_ran: list[int] = []

    def handler(delivery: Delivery) -> None:
        seen.append((delivery.job_id, delivery.attempts))
        if len(seen) == 1:
            held_while_first_ran.append(len(worker.held))
            # The three others wait in the buffer well past the lease they were claimed
            # under; a reaper sweeping now must find none of them expired.
            wait_for_server_time(queue.client, delivery.claim.deadline_ms + 2 * lease_ms)
            swept.append(queue.reap())

    worker = Worker(queue, handler, lease_ms=lease_ms, extend_every_ms=50, prefetch=3, **FAST)
    report = worker.work(burst=True)
    assert held_while_first_ran == [4]  # one running, three prefetched
    assert swept == [[]]
    assert seen == [(job_id, 1) for job_id in ids]  # each delivered once, in order
    assert report.extended >= 3 * 2 and report.completed == 4 and report.stale == 0 and report.lease_lost == 0


def test_quick_jobs_are_batched_and_slow_ones_are_not_hoarded(queue: echoq.Queue) -> None:
    queue.enqueue_many(["quick"] * 200)
    report = Worker(queue, lambda d: None, **FAST).work(burst=True)
    assert report.completed == 200 and report.round_trips <= 100  # more than one job per call

    queue.enqueue_many(["slow"] * 6)
    most_held: list[int] = []
    no_extension = Worker(queue, lambda d: most_held.append(len(no_extension.held)), concurrency=2, extend_every_ms=0)
    assert no_extension.work(burst=True).completed == 6
    assert max(most_held) <= 2  # without extension nothing waits in a buffer: claims are for free slots


def test_a_job_that_blocks_after_quick_ones_does_not_hold_back_the_jobs_behind_it(queue: echoq.Queue) -> None:
    """Quick jobs run one after another in the handler thread that is awake: no other
    thread is woken for them (QUICK_JOB_S). When that thread then meets a job that blocks,
    the job waiting behind it in the buffer is not stuck there: another thread takes it."""
    queue.enqueue_many(["quick"] * 40)
    freed = threading.Event()

    def handler(delivery: Delivery) -> None:
        if delivery.payload == "blocks":
            assert freed.wait(10), "the job behind the blocked one never ran"
        elif delivery.payload == "frees":
            freed.set()

    worker = Worker(queue, handler, concurrency=2, prefetch=8, lease_ms=5_000, beat_ms=60_000, idle_wait_ms=60_000)
    runner = threading.Thread(target=worker.work)
    runner.start()
    try:
        give_up = time.monotonic() + 10
        while not worker.state.idle and time.monotonic() < give_up:
            time.sleep(0.005)  # a poll with a deadline
        assert worker.state.idle and worker.report.completed == 40, "the worker never went idle"
        assert worker.state.quick_jobs  # 40 no-op jobs taught it that jobs are quick
        queue.enqueue_many(["blocks", "frees"])  # one wake, one claim: both land in the buffer
        assert freed.wait(10), "the job behind the blocked one never ran"
    finally:
        worker.stop()
        runner.join(10)
    assert not runner.is_alive() and worker.report.completed == 42 and worker.report.errors == []


def test_stop_mid_batch_completes_or_gives_back_every_job_held(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(20)])
    effects = Effects(queue)
    two_started, release = threading.Barrier(3), threading.Event()
    first_two = iter(range(2))

    def handler(delivery: Delivery) -> None:
        if next(first_two, None) is not None:  # the first two deliveries hold on, mid-batch
            two_started.wait(10)
            assert release.wait(10)
        effects.apply_once(delivery.job_id)

    worker = Worker(queue, handler, concurrency=2, lease_ms=5_000, prefetch=6, **FAST)
    reports: list[echoq.WorkReport] = []
    runner = threading.Thread(target=lambda: reports.append(worker.work()))
    runner.start()
    two_started.wait(10)
    held = {d.job_id for d in worker.held}
    assert len(held) == 8  # two running, six prefetched
    worker.stop()
    release.set()
    runner.join(10)
    assert not runner.is_alive()
    (report,) = reports
    snap = assert_one_place(queue, set(ids))
    assert snap.counts["active"] == 0  # nothing held past the stop
    assert (report.completed, report.released) == (2, 6) and snap.counts["done"] == 2
    released = held - set(snap.done)
    assert len(released) == 6 and released <= set(snap.pending)
    assert all((snap.rows[j].token, snap.rows[j].attempts) == (1, 0) for j in released)  # each got its try back
    # Another worker takes the given-back jobs at once; every job has one effect.
    assert Worker(queue, keyed_consumer(effects), **FAST).work(burst=True).completed == 18
    assert effects.counts() == {job_id: 1 for job_id in ids}


def test_a_give_back_at_stop_never_costs_a_job_one_of_its_tries(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("flaky").job_id
    held = queue.claim_many(1)
    assert queue.release_many(held) == [Release.RELEASED]  # as a stopping worker's buffer would
    tries: list[int] = []

    def fails_once(delivery: Delivery) -> None:
        tries.append((delivery.token, delivery.attempts))
        if len(tries) == 1:
            raise RuntimeError("first try fails")

    report = Worker(queue, fails_once, max_attempts=2, backoff=Backoff(0), **FAST).work(burst=True)
    # Two tries (tokens 2 and 3, after the give-back, as tries 1 and 2); at max_attempts=2
    # the first failure would have been fatal had the give-back counted as a try.
    assert tries == [(2, 1), (3, 2)] and (report.retried, report.dead, report.completed) == (1, 0, 1)
    assert queue.snapshot().place_of(job_id) is echoq.JobState.DONE


def test_a_lost_lease_is_reported_for_that_delivery_alone(queue: echoq.Queue) -> None:
    # The worker holds the job as delivery 1; its lease is lost (swept while a long pause
    # stops extension, say) and the SAME worker claims it again as delivery 2. The refused
    # extension marks delivery 1 only; delivery 2 completes, delivery 1's complete is refused.
    job_id = queue.enqueue("x").job_id
    deliveries: dict[int, Delivery] = {}
    second_done = threading.Event()

    def handler(delivery: Delivery) -> None:
        deliveries[delivery.token] = delivery
        if delivery.token == 1:
            give_up = time.monotonic() + 10
            # Only delivery 1's lease: once reaped, the worker may claim the job again at once,
            # and that lease (delivery 2's) must not be swept too.
            while (row := queue.job(job_id)).state is echoq.JobState.ACTIVE and row.token == 1:
                assert time.monotonic() < give_up, "the lease was never swept"
                queue.client.zadd(queue.keys.active, {job_id: 0}, xx=True)  # the lease runs out ...
                queue.reap()  # ... and a reaper returns the job (retried if an extension got between)
            assert second_done.wait(10), "the job was not delivered again"
        else:
            give_up = time.monotonic() + 10
            while not deliveries[1].lease_lost and time.monotonic() < give_up:  # the next extension
                time.sleep(0.005)  # a poll with a deadline
            second_done.set()

    worker = Worker(queue, handler, concurrency=2, lease_ms=600, extend_every_ms=50, **FAST)
    report = worker.work(burst=True)
    assert deliveries[1].lease_lost and not deliveries[2].lease_lost
    assert (report.claimed, report.completed, report.stale, report.lease_lost) == (2, 1, 1, 1)
    assert queue.snapshot().place_of(job_id) is echoq.JobState.DONE


def test_an_idle_worker_is_woken_by_enqueue_not_by_polling(queue: echoq.Queue) -> None:
    got = threading.Event()
    # It would look again only after a minute: the job can only reach it through the wake.
    worker = Worker(queue, lambda d: got.set(), beat_ms=60_000, idle_wait_ms=60_000)
    runner = threading.Thread(target=worker.work)
    runner.start()
    try:
        give_up = time.monotonic() + 10
        while not worker.state.idle and time.monotonic() < give_up:
            time.sleep(0.005)  # a poll with a deadline
        assert worker.state.idle, "the worker never went idle"
        trips = worker.report.round_trips
        queue.enqueue("wake up")
        assert got.wait(10), "the idle worker did not wake for a new job"
        assert worker.report.round_trips - trips <= 2  # woken once, claimed; no polling in between
    finally:
        worker.stop()
        runner.join(10)
    assert not runner.is_alive() and worker.report.completed == 1


@pytest.mark.parametrize("end", ["stop", "abandon"])
def test_stop_and_abandon_end_an_idle_wait_at_once(queue: echoq.Queue, end: str) -> None:
    # Its beat and its look-again are a minute away: only the halt can end its wait on the wake.
    worker = Worker(queue, lambda d: None, beat_ms=60_000, idle_wait_ms=60_000)
    runner = threading.Thread(target=worker.work)
    runner.start()
    give_up = time.monotonic() + 10
    while not worker.state.idle and time.monotonic() < give_up:
        time.sleep(0.005)  # a poll with a deadline
    assert worker.state.idle, "the worker never went idle"
    getattr(worker, end)()
    runner.join(10)
    assert not runner.is_alive(), f"{end}() did not end the idle wait"
    assert worker.report.abandoned is (end == "abandon")
    # The halt was taken by the wait it ended, or expires by itself (HALT_TTL_MS).
    halts = [k for k in queue.keys_in_use() if ":halt:" in k]
    assert all(0 < queue.client.pttl(k) <= echoq.queue.HALT_TTL_MS for k in halts), halts


def test_a_halt_ends_only_the_wait_it_names(queue: echoq.Queue) -> None:
    mine, other = "a" * 16, "b" * 16
    queue.halt_wait(other)
    assert queue.wait_for_work(20, halt=mine) is False  # timed out: another run's halt is not mine
    assert queue.client.llen(queue.keys.halt(other)) == 1
    assert 0 < queue.client.pttl(queue.keys.halt(other)) <= echoq.queue.HALT_TTL_MS
    queue.enqueue("x")
    queue.halt_wait(mine)  # a halt beside a wake: the halt ends the wait, the wake stays for a claim
    assert queue.wait_for_work(60_000, halt=mine) is False
    assert queue.wait_for_work(60_000, halt=mine) is True
    with pytest.raises(echoq.InvalidArgument, match="run token"):
        queue.halt_wait("not hex")


def test_the_claim_behind_a_wait_runs_however_the_wait_ended(queue: echoq.Queue) -> None:
    run = "c" * 16
    assert queue._wait_then_claim(1, halt=run, count=5, lease_ms=5_000, confirm=True) == (False, [])  # timed out
    first, second = queue.enqueue("a"), queue.enqueue("b")
    woken, claims = queue._wait_then_claim(60_000, halt=run, count=1, lease_ms=5_000, confirm=True)
    assert woken and [c.job_id for c in claims] == [first.job_id]
    queue.halt_wait(run)  # a halt ends the wait before the wakes left; the claim still runs
    woken, claims = queue._wait_then_claim(60_000, halt=run, count=5, lease_ms=5_000, confirm=True)
    assert not woken and [c.job_id for c in claims] == [second.job_id]
    assert queue._wait_then_claim(60_000, halt=run, count=5, lease_ms=5_000, confirm=True) == (True, [])  # a wake left
    queue.client.script_flush()  # as test_queue does: NOSCRIPT behind the wait, the claim runs by EVAL
    third = queue.enqueue("c")
    woken, claims = queue._wait_then_claim(60_000, halt=run, count=5, lease_ms=5_000, confirm=True)
    assert woken and [c.job_id for c in claims] == [third.job_id]


def test_an_idle_worker_wakes_for_a_retry_when_its_backoff_runs_out(queue: echoq.Queue) -> None:
    attempts: list[int] = []

    def fails_once(delivery: Delivery) -> None:
        attempts.append(delivery.attempts)
        if delivery.attempts == 1:
            raise RuntimeError("once")

    queue.enqueue("x")
    worker = Worker(queue, fails_once, backoff=Backoff(50), beat_ms=60_000, idle_wait_ms=60_000)
    report = worker.work(burst=True)  # would hang a minute if it waited for idle_wait_ms
    assert attempts == [1, 2] and report.completed == 1


def test_two_workers_on_one_beat_run_one_stalled_check_between_them(queue: echoq.Queue) -> None:
    crashed = queue.claim_many(1, lease_ms=1) if queue.enqueue("left by a dead worker") else []
    expire(queue, *crashed)
    workers = [Worker(queue, lambda d: None, beat_ms=60_000) for _ in range(2)]
    reports: list[echoq.WorkReport] = []
    threads = [threading.Thread(target=lambda w=w: reports.append(w.work(burst=True))) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert len(reports) == 2
    assert sorted((r.beats, r.beats_skipped) for r in reports) == [(0, 1), (1, 0)]
    assert sum(r.recovered for r in reports) == 1 and sum(r.completed for r in reports) == 1
    # The next beat of the fleet is free to run once the lock, shorter than a beat, is gone.
    assert 0 < queue.client.pttl(queue.keys.stalled_lock) < 60_000


WORKER_SCRIPT = """
import sys, threading, time
import echoq
queue = echoq.Queue(sys.argv[1])
worker = None
first = threading.Lock()
def handler(delivery):
    # Both handlers hold their job; the first says what is held once the buffer is full.
    if first.acquire(blocking=False):
        while len(worker.held) < 10:
            time.sleep(0.005)
        print(" ".join(sorted(d.job_id for d in worker.held)), flush=True)
    threading.Event().wait()
worker = echoq.Worker(queue, handler, concurrency=2, prefetch=8, lease_ms=400)
worker.work()
"""


def test_a_worker_sigkilled_with_a_full_buffer_loses_nothing(valkey_client) -> None:
    queue = echoq.Queue(fresh_name("sigkill"), valkey_client)
    try:
        ids = queue.enqueue_many([f"job {n}" for n in range(30)])
        env = dict(os.environ, VALKEY_URL=echoq.server_url())
        child = subprocess.Popen(
            [sys.executable, "-c", WORKER_SCRIPT, queue.name], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            held = set(child.stdout.readline().split())
        finally:
            child.kill()
            child.wait(10)
        assert child.returncode == -signal.SIGKILL and len(held) == 10  # two running, eight prefetched
        snap = assert_one_place(queue, set(ids))
        assert set(snap.active) == held  # leased, extended by nobody now
        expire(queue, *(echoq.Claim(j, "", 0, 0, deadline) for j, deadline in snap.active.items()))
        effects = Effects(queue)
        report = Worker(queue, keyed_consumer(effects), concurrency=4, **FAST).work(burst=True)
        assert report.recovered == 10 and report.completed == 30
        snap = assert_one_place(queue, set(ids))
        assert snap.counts["done"] == 30 and effects.counts() == {job_id: 1 for job_id in ids}
    finally:
        queue.reset()


def test_abandon_mid_batch_leaves_every_held_job_leased_and_says_nothing_more(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(12)])
    started, release = threading.Event(), threading.Event()

    def handler(delivery: Delivery) -> None:
        started.set()
        release.wait(10)

    worker = Worker(queue, handler, concurrency=2, lease_ms=5_000, prefetch=4, **FAST)
    reports: list[echoq.WorkReport] = []
    runner = threading.Thread(target=lambda: reports.append(worker.work()))
    runner.start()
    assert started.wait(10)
    give_up = time.monotonic() + 10
    while len(worker.held) < 6 and time.monotonic() < give_up:
        time.sleep(0.005)  # a poll with a deadline
    held = {d.job_id for d in worker.held}
    worker.abandon()
    release.set()
    runner.join(10)
    (report,) = reports
    assert report.abandoned and report.completed == 0 and report.released == 0
    snap = assert_one_place(queue, set(ids))
    assert set(snap.active) == held and len(held) == 6  # nothing completed, given back or dropped


def test_wait_for_work_blocks_for_less_than_the_clients_socket_timeout(server_url: str) -> None:
    # redis-py gives up on a reply after socket_timeout; a longer block must end first, quietly.
    if echoq.address.is_cluster_url(server_url):  # the same, through a cluster client
        from redis.cluster import ClusterNode, RedisCluster

        parsed = echoq.address.parse_cluster_url(server_url)
        seeds = [ClusterNode(host, port) for host, port in parsed.seeds]
        client = RedisCluster(startup_nodes=seeds, password=parsed.password, decode_responses=True, socket_timeout=0.5)
    else:
        client = redis.Redis.from_url(server_url, decode_responses=True, socket_timeout=0.5)
    queue = echoq.Queue(fresh_name("blpop"), client)
    try:
        assert queue.wait_for_work(60_000) is False
    finally:
        client.close()


# -- two calls in flight (a worker that may hold LANES * SPLIT_MIN jobs) -----------------------


# These tests fix the prefetch (8 + 32 = two calls' worth): the adaptive one depends on how
# long a handler takes on a busy machine.
# Calls in flight are a single server's: a cluster client routes each call itself, one at a time.
ONE_SERVER = pytest.mark.one_server


@pytest.fixture
def most_in_flight(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The most pipelined calls a worker had in flight at once (the list's one item)."""
    most = [0]
    send, receive = scripts.Pipelined.send, scripts.Pipelined.receive
    in_flight: dict[int, int] = {}  # per Pipelined: calls sent, replies not read

    def counting(self: scripts.Pipelined, keys: list[str], args: list) -> None:
        send(self, keys, args)
        in_flight[id(self)] = in_flight.get(id(self), 0) + 1
        most[0] = max(most[0], in_flight[id(self)])

    def reading(self: scripts.Pipelined) -> object:
        in_flight[id(self)] -= 1
        return receive(self)

    monkeypatch.setattr(scripts.Pipelined, "send", counting)
    monkeypatch.setattr(scripts.Pipelined, "receive", reading)
    return most


def test_the_workers_state_is_a_read_only_view_of_what_it_holds(queue: echoq.Queue) -> None:
    queue.enqueue_many(["a", "b", "c"])
    seen: list[echoq.worker.WorkerState] = []
    worker = Worker(queue, lambda d: seen.append(worker.state), prefetch=2, **FAST)
    worker.work(burst=True)
    # Inside a handler: running, one job handled, and the rest of the claim in the buffer.
    assert seen[0].running and seen[0].handling == 1 and seen[0].prefetched == 2
    after = worker.state
    assert not after.running and (after.handling, after.prefetched, after.finished, after.calls_in_flight) == (0,) * 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.prefetched = 5  # type: ignore[misc]
    assert worker.state == after  # a copy: changing it could change nothing anyway


def test_only_a_worker_that_may_hold_two_calls_worth_of_jobs_pipelines(queue: echoq.Queue) -> None:
    assert LANES * SPLIT_MIN == 32
    if echoq.is_cluster(queue.client):  # a cluster client routes each call itself: never pipelined
        assert not Worker(queue, print, concurrency=8).state.pipelined
        return
    assert Worker(queue, print, concurrency=8).state.pipelined  # 8 slots + 32 prefetched
    assert not Worker(queue, print, concurrency=4).state.pipelined  # 4 + 16: one call at a time
    assert not Worker(queue, print, concurrency=8, extend_every_ms=0).state.pipelined  # no prefetch: 8
    assert Worker(queue, print, concurrency=2, prefetch=30).state.pipelined


def _three_hundred_jobs(queue: echoq.Queue, act_after: Callable[[int], bool], act: Callable[[], object]):
    """300 jobs, their effects ledger, and a handler that applies each job's keyed effect,
    then calls ``act`` after the n-th run when ``act_after(n)``."""
    ids = queue.enqueue_many([f"job {n}" for n in range(300)])
    effects = Effects(queue)
    ran = itertools.count(1)

    def handler(delivery: Delivery) -> None:
        effects.apply_once(delivery.job_id)
        if act_after(next(ran)):
            act()

    return ids, effects, handler


@ONE_SERVER
def test_stop_with_calls_in_flight_completes_or_gives_back_every_job(
    queue: echoq.Queue, most_in_flight: list[int]
) -> None:
    ids, effects, handler = _three_hundred_jobs(queue, lambda n: n == 150, lambda: worker.stop())
    worker = Worker(queue, handler, concurrency=8, prefetch=32, lease_ms=5_000, **FAST)
    report = worker.work()  # not burst: only stop() ends it
    assert most_in_flight[0] == LANES
    snap = assert_one_place(queue, set(ids))
    assert snap.counts["active"] == 0  # nothing held past the stop
    assert report.completed == snap.counts["done"] >= 150 and report.stale == 0
    assert report.completed + snap.counts["pending"] == 300
    # Every job that ran was completed; the rest are pending, and run once each elsewhere.
    assert Worker(queue, keyed_consumer(effects), **FAST).work(burst=True).completed == 300 - report.completed
    assert effects.counts() == {job_id: 1 for job_id in ids}


@ONE_SERVER
def test_abandon_with_calls_in_flight_loses_nothing(queue: echoq.Queue, most_in_flight: list[int]) -> None:
    ids, effects, handler = _three_hundred_jobs(queue, lambda n: n == 150, lambda: worker.abandon())
    worker = Worker(queue, handler, concurrency=8, prefetch=32, lease_ms=1_000, **FAST)
    report = worker.work()
    assert report.abandoned and most_in_flight[0] == LANES
    snap = assert_one_place(queue, set(ids))  # the jobs of the calls in flight too
    # A call in flight may have completed jobs on the server (a killed process's last call
    # can go through too); the report counts only the replies the worker read.
    assert report.completed <= snap.counts["done"] < 300 and snap.counts["active"] > 0
    # What it held (running, prefetched, claimed by a call whose reply it never read) stays
    # leased until the leases run out; then a stalled check returns it.
    expire(queue, *(echoq.Claim(job_id, "", 0, 0, deadline) for job_id, deadline in snap.active.items()))
    assert Worker(queue, keyed_consumer(effects), **FAST).work(burst=True).recovered == snap.counts["active"]
    snap = assert_one_place(queue, set(ids))
    assert snap.counts["done"] == 300 and effects.counts() == {job_id: 1 for job_id in ids}


@ONE_SERVER
def test_a_pipelined_worker_rides_through_a_script_cache_flush(queue: echoq.Queue, most_in_flight: list[int]) -> None:
    """A call in flight when the server forgets the script comes back NOSCRIPT (it did not
    run); it is run again, in order, and nothing is lost or done twice."""
    ids, effects, handler = _three_hundred_jobs(queue, lambda n: n % 60 == 0, queue.client.script_flush)
    report = Worker(queue, handler, concurrency=8, prefetch=32, lease_ms=5_000, **FAST).work(burst=True)
    assert most_in_flight[0] == LANES
    assert (report.completed, report.stale, report.lease_lost) == (300, 0, 0)
    assert effects.counts() == {job_id: 1 for job_id in ids}


@ONE_SERVER
def test_a_pipelined_worker_that_loses_its_connection_pipelines_again_and_its_burst_leaves_nothing_leased(
    queue: echoq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection drops with two calls in flight: whether they ran is unknown. Their
    completions are sent again (the fence refuses the ones that did apply, as gone); once
    the server answers, calls go ahead of their replies again on a new connection. The
    claims of the lost calls hold leases nobody extends: the burst waits for them to run
    out and drains their jobs too, so it returns with nothing it claimed still leased."""
    ids = queue.enqueue_many([f"job {n}" for n in range(600)])
    effects = Effects(queue)
    receive, full = scripts.Pipelined.receive, itertools.count(1)
    receives_after_the_cut = []

    def cut(self: scripts.Pipelined) -> object:
        if receives_after_the_cut:
            receives_after_the_cut.append(self)
        elif worker.state.calls_in_flight == LANES and next(full) == 2:  # both lanes full, once already done
            receives_after_the_cut.append(self)
            self._connection.disconnect()  # as a network fault would, two replies in flight
        return receive(self)

    monkeypatch.setattr(scripts.Pipelined, "receive", cut)
    worker = Worker(queue, keyed_consumer(effects), concurrency=8, prefetch=32, lease_ms=1_000, **FAST)
    report = worker.work(burst=True)
    # 8 to 16 times full in a run of 300 on a quiet machine, fewer under load: 600 jobs, the second time.
    assert receives_after_the_cut, "both lanes were never full twice, so the connection was never cut"
    assert len(receives_after_the_cut) > 1 and worker.state.pipelined  # pipelined again after the cut
    assert report.lost_replies >= 1 and report.reconnected == 0  # the server itself never went away
    snap = assert_one_place(queue, set(ids))
    assert (snap.counts["done"], snap.counts["active"]) == (600, 0)  # nothing it claimed is left leased
    assert effects.counts() == {job_id: 1 for job_id in ids}


# -- a claim whose reply was lost costs no stall ---------------------------------------------


class _RepliesLost(echoq.Queue):
    """The server runs the first ``lose`` claiming calls, but their replies never arrive
    (a cut connection on the way back): the worker sees a lost server and calls again."""

    def __init__(self, queue: echoq.Queue, lose: int) -> None:
        super().__init__(queue.name, queue.client)
        self.lose = lose

    def complete_many_and_claim(self, claims, **kwargs):  # type: ignore[no-untyped-def]
        outcomes, fresh = super().complete_many_and_claim(claims, **kwargs)
        if fresh and self.lose > 0:
            self.lose -= 1
            raise redis.ConnectionError("the reply was lost on the way back")
        return outcomes, fresh


def test_a_lost_claim_reply_spends_no_stall_budget(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"order {n}" for n in range(6)])
    lossy = _RepliesLost(queue, lose=3)
    # max_stalled=1: were a lost reply's stall counted, its jobs would go straight to dead. A
    # lease of 1 s: the claims that did arrive are started well inside it on a loaded machine
    # (one that lapsed before its start would count as unstarted too).
    worker = Worker(lossy, lambda d: None, lease_ms=1_000, max_stalled=1, **FAST)
    first = worker.work(burst=True)
    assert lossy.lose == 0 and first.reconnected == 1  # one outage, ridden out
    wait_for_server_time(queue.client, max(queue.snapshot().active.values(), default=0) + 1)
    second = worker.work(burst=True)  # its first beat finds the lost claims' leases run out
    assert (first.completed + second.completed, first.dead + second.dead) == (6, 0)
    snap = assert_one_place(queue, set(ids))
    assert snap.counts["done"] == 6 and snap.stats.get("stalled", 0) == 0
    assert snap.stats["unstarted"] == 3  # the three claims that never reached the worker


class _HalfCut(echoq.Queue):
    """Every other claiming call runs on the server, but its reply never arrives."""

    def __init__(self, queue: echoq.Queue) -> None:
        super().__init__(queue.name, queue.client)
        self.calls = 0
        self.cut = 0

    def complete_many_and_claim(self, claims, **kwargs):  # type: ignore[no-untyped-def]
        outcomes, fresh = super().complete_many_and_claim(claims, **kwargs)
        if fresh:
            self.calls += 1
            if self.calls % 2:
                self.cut += 1
                raise redis.ConnectionError("the reply was lost on the way back")
        return outcomes, fresh


def test_with_half_the_claim_replies_lost_a_job_dies_only_after_max_attempts_handler_runs(
    queue: echoq.Queue,
) -> None:
    ids = set(queue.enqueue_many([f"order {n}" for n in range(12)]))
    lossy = _HalfCut(queue)
    runs: dict[str, int] = {}
    told: list[tuple[int, int]] = []  # (the try the delivery said it was, the handler run it was)

    def fails_its_first_run(delivery: Delivery) -> None:
        runs[delivery.job_id] = runs.get(delivery.job_id, 0) + 1
        told.append((delivery.attempts, runs[delivery.job_id]))
        if runs[delivery.job_id] == 1:
            raise RuntimeError("the first run of every job fails")

    # max_attempts=2: one failed run is one try. Were a lost claim a try, a job whose claim
    # reply was lost even once would die at its first failure.
    worker = Worker(lossy, fails_its_first_run, lease_ms=300, max_attempts=2, backoff=Backoff(0, 1.0, 0), **FAST)
    # One burst: the claims whose replies were lost hold leases nobody extends; it waits for
    # them to run out, and drains their jobs too.
    report = worker.work(burst=True)
    snap = assert_one_place(queue, ids)
    assert lossy.cut >= 2 and snap.stats["unstarted"] >= 2 and report.lost_replies == lossy.cut
    assert snap.counts["dead"] == 0 and snap.counts["done"] == len(ids)
    assert runs == {job_id: 2 for job_id in ids}
    assert all(said == run for said, run in told), told  # a delivery's attempts counts handler runs


def test_a_confirmed_start_still_counts_its_stall(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("kills its worker after starting").job_id
    started = threading.Event()
    release = threading.Event()

    def handler(delivery: Delivery) -> None:
        started.set()
        release.wait(10)

    worker = Worker(queue, handler, lease_ms=2_000, max_stalled=1, **FAST)
    runner = threading.Thread(target=worker.work, daemon=True)
    runner.start()
    assert started.wait(10)
    row = queue.keys.job(job_id)
    deadline = time.monotonic() + 10
    while queue.client.hexists(row, "confirm"):  # the start is confirmed on the owner's next call
        assert time.monotonic() < deadline, "the start was never confirmed"
        time.sleep(0.005)
    worker.abandon()  # as a SIGKILL: the lease is no longer extended
    release.set()
    runner.join(10)
    lease = queue.snapshot().active[job_id]
    wait_for_server_time(queue.client, lease + 1)
    stalled = queue.stalled_check(max_stalled=1)
    assert stalled.dead == [job_id]
    job = queue.job(job_id)
    assert job.reason == "stalled" and job.stalled == 1 and job.unstarted == 0


# -- typed errors, and a stalled-check lock no worker can hold for long ---------------------


class _NoBeat(echoq.Queue):
    """A queue whose beats always find the lock taken: the worker's first move on the
    server is then its first pipelined send."""

    def stalled_check_locked(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


@ONE_SERVER
def test_a_server_gone_before_the_first_pipelined_send_is_a_typed_error(queue: echoq.Queue) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on: the server is gone
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # No client-side retries: redis-py's own (back-off up to seconds) would only slow the test.
    gone = redis.Redis(port=port, socket_connect_timeout=0.2, decode_responses=True, retry=Retry(NoBackoff(), 0))
    worker = Worker(_NoBeat(queue.name, gone), lambda d: None, concurrency=8, lease_ms=300, **FAST)
    assert worker.state.pipelined
    with pytest.raises(echoq.ServerUnavailable):
        worker.work(burst=True)


@pytest.mark.parametrize("lock", ["an hour long", "without expiry"])
def test_no_lock_holds_back_the_fleets_stalled_check(queue: echoq.Queue, lock: str) -> None:
    job_id = queue.enqueue("its worker was killed").job_id
    claim = queue.claim(lease_ms=200)
    assert claim is not None
    if lock == "an hour long":  # a worker with a very long beat ran this beat's check
        assert queue.stalled_check_locked(every_ms=3_600_000, holder="slow beat") is not None
    else:
        queue.client.set(queue.keys.stalled_lock, "set by hand")
    expire(queue, claim)
    worker = Worker(queue, lambda d: None, **FAST)
    reports: list[echoq.WorkReport] = []
    runner = threading.Thread(target=lambda: reports.append(worker.work(burst=True)), daemon=True)
    runner.start()
    runner.join(10)
    if runner.is_alive():
        worker.stop()
        runner.join(10)
    assert reports and reports[0].completed == 1, "the killed worker's job was never recovered"
    assert queue.snapshot().place_of(job_id) is echoq.JobState.DONE
    # Cut down to this worker's beat: it lasts at most a beat, or is gone already (on a
    # loaded machine a beat may pass before this read; PTTL says 0 in its last millisecond);
    # the lock it found would still be there, with no expiry (-1) or an hour's.
    left = queue.client.pttl(queue.keys.stalled_lock)
    assert left == -2 or 0 <= left <= FAST["beat_ms"], left


# -- a server held by someone's endless script (BUSY) is ridden out like an outage -----------


_R = TypeVar("_R")


class _SeesBusy(echoq.Queue):
    def __init__(self, queue: echoq.Queue) -> None:
        super().__init__(queue.name, queue.client)
        self.busy = threading.Event()

    def _seen(self, call: Callable[[], _R]) -> _R:
        try:
            return call()
        except Exception as exc:
            if "BUSY" in str(exc) or "busy" in str(exc):
                self.busy.set()
            raise

    def _run(self, script, keys, args):  # type: ignore[no-untyped-def]
        return self._seen(lambda: super(_SeesBusy, self)._run(script, keys, args))

    def stalled_check_locked(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return self._seen(lambda: super(_SeesBusy, self).stalled_check_locked(*args, **kwargs))


@ONE_SERVER
def test_the_worker_rides_out_a_server_held_by_a_script(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"order {n}" for n in range(20)])
    settings = queue.client.connection_pool.connection_kwargs
    other = redis.Redis(**{k: settings[k] for k in ("host", "port", "password", "username", "db") if k in settings})
    threshold = other.config_get("busy-reply-threshold")["busy-reply-threshold"]
    other.config_set("busy-reply-threshold", 50)
    looping = redis.Redis(**{k: settings[k] for k in ("host", "port", "password", "username", "db") if k in settings})
    loop = threading.Thread(target=lambda: _ignore(lambda: looping.eval("while true do end", 0)), daemon=True)
    try:
        loop.start()
        deadline = time.monotonic() + 10
        while True:  # the server answers BUSY to everyone else
            try:
                other.ping()
            except redis.ResponseError as exc:
                assert str(exc).startswith("BUSY")
                break
            assert time.monotonic() < deadline, "the server never became busy"
        seen = _SeesBusy(queue)
        worker = Worker(seen, lambda d: None, concurrency=8, lease_ms=10_000, **FAST)
        reports: list[echoq.WorkReport] = []
        failures: list[BaseException] = []

        def run() -> None:
            try:
                reports.append(worker.work(burst=True))
            except BaseException as exc:
                failures.append(exc)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        assert seen.busy.wait(10), "the worker never met the busy server"
        other.script_kill()  # what the workshop's watchdog does
        runner.join(20)
        assert not failures, failures
        assert reports and reports[0].completed == 20 and reports[0].reconnected >= 1
        assert queue.snapshot().counts["done"] == len(ids)
    finally:
        try:
            other.script_kill()
        except redis.ResponseError:
            pass  # no script was running
        loop.join(10)
        other.config_set("busy-reply-threshold", threshold)


def _ignore(call: Callable[[], object]) -> None:
    try:
        call()
    except redis.ResponseError:
        pass  # "Script killed by user with SCRIPT KILL"


def test_a_stop_before_work_starts_ends_that_work_at_once_and_the_next_runs(queue: echoq.Queue) -> None:
    """A thread started to run work() may not have begun when stop() comes: that work() must
    still stop (it returns at once, claiming nothing), and a later work() runs as usual."""
    queue.enqueue_many(["a", "b", "c"])
    worker = echoq.Worker(queue, lambda delivery: None, beat_ms=100)
    worker.stop()
    report = worker.work()
    assert report.claimed == 0 and queue.snapshot().counts["pending"] == 3
    assert worker.work(burst=True).completed == 3


def test_a_burst_returns_while_a_dead_workers_lease_runs_and_drains_its_job_once_it_ran_out(
    queue: echoq.Queue,
) -> None:
    """What docs/worker.md says a burst drains: not a job another worker holds, even one
    whose worker died with its lease still running; that job once its lease has run out."""
    job_id = queue.enqueue("left by a dead worker").job_id
    dead = queue.claim(lease_ms=500)  # claimed by a worker that is never heard from again
    seen: list[str] = []
    early = echoq.Worker(queue, lambda delivery: seen.append(delivery.job_id)).work(burst=True)
    assert early.completed == 0 and seen == [] and job_id in queue.snapshot().active  # it did not wait
    expire(queue, dead)
    late = echoq.Worker(queue, lambda delivery: seen.append(delivery.job_id)).work(burst=True)
    assert late.completed == 1 and seen == [job_id] and queue.snapshot().counts["done"] == 1
