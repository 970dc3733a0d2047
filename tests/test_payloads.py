"""Payloads are text: UTF-8 of at most 1 MiB, refused at enqueue with a typed error and
nothing written; and a job that another program wrote with a payload the library would
have refused never reaches a handler -- it is dead-lettered with a reason on its first
claim, and the jobs behind it go on. On Valkey and on Redis 7."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis

import echoq
from echoq import JobState, Worker, keyed_consumer
from echoq.effects import Effects

MAX = echoq.BOUNDS["payload_bytes"][1]


def foreign_job(queue: echoq.Queue, payload: bytes | None, *, state: str = "pending") -> str:
    """A job written by something other than echoq: its row and pending entry set by hand."""
    job_id = echoq.new_job_id()
    row = {"state": state, "attempts": 0, "stalled": 0}
    if payload is not None:
        row["payload"] = payload
    queue.client.hset(queue.keys.job(job_id), mapping=row)
    queue.client.zadd(queue.keys.pending, {job_id: 0})
    return job_id


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xff\xfe", r"payload is not UTF-8 text \(byte 0xff at 0\)"),
        (b"ok \xed\xa0\x80", "payload is not UTF-8 text"),
        ("\ud800", "payload has a character UTF-8 cannot encode"),
        ("x" * (MAX + 1), "payload is 1,048,577 bytes of UTF-8, more than the 1,048,576 allowed"),
        ("é" * (MAX // 2 + 1), "more than the 1,048,576 allowed"),
        (42, "payload must be str"),
        ({"order": 17}, r"payload must be str .* \(json.dumps\)"),
        (None, "payload must be str"),
    ],
    ids=["ff-fe", "surrogate-bytes", "lone-surrogate", "1MiB+1", "1MiB+1-in-2-byte-chars", "int", "dict", "none"],
)
def test_enqueue_refuses_a_payload_that_is_not_text_and_writes_nothing(
    queue: echoq.Queue, payload: object, message: str
) -> None:
    with pytest.raises(echoq.InvalidPayload, match=message) as refused:
        queue.enqueue(payload)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value)
    with pytest.raises(echoq.InvalidPayload):
        queue.enqueue_many(["fine", payload, "fine too"])  # type: ignore[list-item]
    assert list(queue.keys_in_use()) == []


def test_a_bad_payload_in_a_big_batch_refuses_every_chunk_before_the_first_is_sent(queue: echoq.Queue) -> None:
    payloads: list[str | bytes] = [f"job {n}" for n in range(2_500)]
    payloads[2_400] = b"\xff"
    with pytest.raises(echoq.InvalidPayload):
        queue.enqueue_many(payloads)
    assert list(queue.keys_in_use()) == []


def test_text_payloads_round_trip_exactly(queue: echoq.Queue) -> None:
    samples = ["", "plain", "é ü ß", "日本語", "emoji \U0001f680", "nul \x00 inside", "x" * MAX]
    for sample in samples:
        queue.enqueue(sample)
    queue.enqueue("bytes that are UTF-8: ü".encode())
    got = [c.payload for c in queue.claim_many(len(samples) + 1, lease_ms=60_000)]
    assert got == [*samples, "bytes that are UTF-8: ü"]
    assert all(isinstance(p, str) for p in got)


def test_a_foreign_non_utf8_payload_is_dead_lettered_on_its_first_claim_and_the_next_job_is_claimed(
    queue: echoq.Queue,
) -> None:
    bad = foreign_job(queue, b"\xff\xfe poison")
    good = queue.enqueue("fine").job_id
    claims = queue.claim_many(5, lease_ms=60_000)
    assert [c.job_id for c in claims] == [good]  # the bad one was never handed out
    job = queue.job(bad)
    assert job.state is JobState.DEAD and job.reason == "bad_payload" and job.attempts == 0
    assert job.error == "payload is not UTF-8 text: not delivered"
    assert job.payload == b"\xff\xfe poison"  # kept, byte for byte, for a person to look at
    snap = queue.snapshot()
    assert list(snap.dead) == [bad] and snap.stats["bad_payload"] == 1 and snap.stats["dead"] == 1


def test_a_foreign_oversized_payload_and_a_row_without_payload_are_dead_lettered_too(queue: echoq.Queue) -> None:
    big = foreign_job(queue, b"x" * (MAX + 1))
    partial = foreign_job(queue, None)  # the partial row an old reap used to leave behind
    good = queue.enqueue("fine").job_id
    assert [c.job_id for c in queue.claim_many(5, lease_ms=60_000)] == [good]
    assert queue.job(big).reason == "bad_payload" and "1048577 bytes" in queue.job(big).error
    assert queue.job(partial).reason == "corrupt" and queue.job(partial).error.startswith("the row has no payload")
    assert queue.job(partial).payload is None


def test_a_worker_meets_no_bad_payload_and_the_jobs_behind_go_on(queue: echoq.Queue) -> None:
    bad = foreign_job(queue, b"\xff\xfe")
    ids = queue.enqueue_many([f"job {n}" for n in range(20)])
    effects = Effects(queue)
    seen: list[str] = []

    def work(delivery: echoq.Delivery) -> str:
        seen.append(delivery.payload)
        return "done"

    report = Worker(queue, keyed_consumer(effects, work), concurrency=2, lease_ms=10_000).work(burst=True)
    assert report.completed == 20 and report.errors == [] and not report.abandoned
    assert sorted(seen) == sorted(f"job {n}" for n in range(20))
    assert set(effects.counts()) == set(ids)
    assert queue.job(bad).reason == "bad_payload" and queue.snapshot().counts["dead"] == 1


def test_a_worker_process_dead_letters_a_poison_payload_the_first_time_without_a_traceback(
    client: redis.Redis, server_url: str
) -> None:
    """The issue's finding: two CLI workers died with 111- and 77-line tracebacks before a
    third dead-lettered the job, and the 20 jobs behind it waited. Now one worker, one pass."""
    queue = echoq.Queue(f"poison-{os.getpid()}", client)
    queue.reset()
    try:
        bad = foreign_job(queue, b"\xff\xfe\x00 not text")
        queue.enqueue_many([f"job {n}" for n in range(20)])
        env = dict(os.environ, VALKEY_URL=server_url)
        result = subprocess.run(
            [sys.executable, "-m", "echoq.teaching", "worker", "--queue", queue.name, "--burst", "--lease-ms", "10000"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0 and result.stderr == "", result.stderr
        report = json.loads(result.stdout)
        assert report["completed"] == 20 and report["claimed"] == 20
        snap = queue.snapshot()
        assert list(snap.dead) == [bad] and queue.job(bad).reason == "bad_payload"
        assert snap.counts["done"] == 20 and snap.stats["claimed"] == 20  # the bad job: never claimed
    finally:
        queue.reset()
