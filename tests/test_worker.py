"""The consumer loop on a real server: drain, retry, dead-letter, extend, stop, crash.

Crashes come from the teaching kit's CrashPlan through the Worker's public hooks; the
Worker itself knows no crash points (tests/test_layers.py checks that)."""

from __future__ import annotations

import threading

import pytest

import echoq
from echoq.effects import Effects
from echoq.teaching.faults import CrashMode, CrashPlan
from echoq.worker import (
    Backoff,
    Checkpoint,
    Delivery,
    Worker,
    keyed_consumer,
    naive_consumer,
)
from tests.helpers import assert_one_place, wait_for_server_time

FAST = {"beat_ms": 20, "idle_wait_ms": 5}


def test_worker_drains_the_queue_with_one_effect_per_job(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many([f"order {n}" for n in range(30)])
    effects = Effects(queue)
    report = Worker(queue, keyed_consumer(effects), concurrency=3, lease_ms=5_000, **FAST).work(burst=True)
    assert (report.claimed, report.completed, report.retried, report.dead, report.stale) == (30, 30, 0, 0, 0)
    assert not report.abandoned and report.processed == 30
    assert effects.counts() == {job_id: 1 for job_id in ids}
    snap = assert_one_place(queue, set(ids))
    assert snap.counts == {"pending": 0, "active": 0, "scheduled": 0, "dead": 0, "done": 30}


def test_handler_sees_job_id_payload_and_attempt(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("hello").job_id
    seen: list[tuple[str, str, int]] = []
    Worker(queue, lambda d: seen.append((d.job_id, d.payload, d.attempt)), **FAST).work(burst=True)
    assert seen == [(job_id, "hello", 1)]


def test_a_failing_handler_is_retried_after_a_growing_backoff(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("flaky").job_id
    lease_ms = 5_000
    claimed_at: list[int] = []

    def flaky(delivery: Delivery) -> None:
        claimed_at.append(delivery.claim.deadline_ms - lease_ms)  # the server's claim time
        if delivery.attempt < 3:
            raise RuntimeError(f"boom {delivery.attempt}")

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
    # The lease outlasts a slow thread on a loaded machine, so no beat reaps before the crash.
    worker = Worker(queue, lambda d: None, lease_ms=200, max_stalled=max_stalled, hooks=CrashPlan(point), **FAST)
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


def test_without_extension_a_long_job_is_reaped_and_its_finish_refused(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("long").job_id
    reaped: list[list[str]] = []

    def long_on_first_try(delivery: Delivery) -> None:
        if delivery.attempt == 1:
            wait_for_server_time(queue.client, delivery.claim.deadline_ms + 1)
            reaped.append(queue.reap())

    # A slow beat, so the only reaper in play is the handler's own sweep.
    worker = Worker(queue, long_on_first_try, lease_ms=30, extend_every_ms=0, beat_ms=60_000, idle_wait_ms=5)
    report = worker.work(burst=True)
    # The fence refuses the first finish; the job, pending again, is delivered once more.
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
    crashing = Worker(queue, keyed_consumer(effects), lease_ms=200, hooks=CrashPlan(point), **FAST)
    report = crashing.work(burst=True)
    assert report.abandoned_at is point and report.completed == 0
    snap = assert_one_place(queue, {job_id})
    assert snap.place_of(job_id) is echoq.JobState.ACTIVE and snap.rows[job_id].attempts == 1
    # Only the after_effect crash got as far as the effect.
    assert effects.count(job_id) == (1 if point is Checkpoint.AFTER_EFFECT else 0)

    wait_for_server_time(queue.client, snap.active[job_id] + 1)
    attempts: list[int] = []

    def work(delivery: Delivery) -> str:
        attempts.append(delivery.attempt)
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
    Worker(queue, naive_consumer(effects), lease_ms=200, hooks=CrashPlan("after_effect"), **FAST).work(burst=True)
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


def test_the_lease_keeper_touches_only_its_own_delivery_of_a_job(queue: echoq.Queue) -> None:
    # The keeper extends delivery A; meanwhile A's handler finished and the same JOB id went
    # into flight again as delivery B. The keeper must neither drop nor overwrite B.
    queue.enqueue("x")
    worker = Worker(queue, print, lease_ms=5_000, extend_every_ms=1, **FAST)
    first = Delivery(worker, queue.claim(5_000))
    second = Delivery(worker, first.claim)
    real_extend = queue.extend

    def extend_while_redelivered(claim, *, lease_ms):
        worker._in_flight[claim.job_id] = (second, float("inf"))  # B: not due for a heartbeat
        worker._drained.set()  # one pass of the keeper is enough
        return real_extend(claim, lease_ms=lease_ms)

    queue.extend = extend_while_redelivered  # a real extend on the server, with the race forced
    worker._in_flight[first.job_id] = (first, 0.0)
    worker._keep_leases()
    assert worker._in_flight[first.job_id] == (second, float("inf"))


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
    ],
)
def test_bad_options_are_one_line_errors(valkey_client, make, message: str) -> None:
    queue = echoq.Queue("bad-options", valkey_client)
    with pytest.raises(echoq.InvalidArgument, match=message) as caught:
        make(queue)
    assert "\n" not in str(caught.value)


def test_kill_mode_is_a_crash_mode() -> None:
    assert CrashPlan("after_claim", mode="kill").mode is CrashMode.KILL
