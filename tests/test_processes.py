"""Child processes the checks kill and freeze for real, and the stand-in bank of lesson 03."""

from __future__ import annotations

import os
import time

import pytest

import echoq
from echoq.teaching import processes
from echoq.teaching.bank import Bank, ChargeOutcome, IdempotencyConflict
from tests.support.servers import fresh_name


@pytest.fixture
def queue(valkey_client):
    q = echoq.Queue(fresh_name("proc"), valkey_client)
    yield q
    q.reset()


def claim_then_work(q: echoq.Queue) -> str:
    counted = echoq.Queue(q.name, processes.counting_client(q.client))
    claim = counted.claim(lease_ms=30_000)
    processes.mark("worked")
    counted.complete(claim)
    return claim.job_id


def test_a_child_is_sigkilled_after_the_step_named(queue) -> None:
    job = queue.enqueue("x").job_id
    child = processes.spawn(claim_then_work, queue, kill_at="worked").wait(10)
    assert child.killed and child.steps == ["claim", "worked"] and child.value is None
    assert queue.snapshot().place_of(job) == "active"  # no finally, no complete: killed


def test_a_child_frozen_at_a_step_is_stopped_until_resumed(queue) -> None:
    job = queue.enqueue("x").job_id
    child = processes.spawn(claim_then_work, queue, freeze_at=1).wait_frozen(10)
    assert child.state == "frozen" and child.frozen_at == "claim"
    with open(f"/proc/{child.pid}/stat") as stat:
        assert stat.read().split(") ")[1][0] == "T"  # the kernel says: stopped
    child.resume()
    assert child.wait(10).state == "returned" and child.value == job
    assert child.steps == ["claim", "worked", "complete"]
    assert queue.snapshot().place_of(job) == "done"


def test_what_a_child_raised_comes_back_in_one_line(queue) -> None:
    def boom():
        raise ValueError("bad input\nsecond line")

    child = processes.spawn(boom).wait(10)
    assert child.state == "raised" and child.error == "ValueError: bad input"


def test_a_child_that_hangs_is_killed_and_the_wait_raises() -> None:
    child = processes.spawn(time.sleep, 60)
    with pytest.raises(processes.ChildTimeout, match="did not end within 0.2 s"):
        child.wait(0.2)
    assert child.killed


def test_the_child_memory_is_a_copy_and_its_exit_runs_no_handlers_of_the_parent(valkey_client) -> None:
    seen: set[str] = set()

    def remember() -> int:
        seen.add("in the child")
        return os.getpid()

    child = processes.spawn(remember).wait(10)
    assert child.value != os.getpid() and seen == set()
    assert valkey_client.ping()  # the embedded server outlived the child's exit


@pytest.mark.server
def test_a_counting_client_can_hold_back_one_command() -> None:
    def slow_second_ping(client) -> float:
        processes.delay("PING", 2, 0.3)
        counted = processes.counting_client(client)
        counted.ping()
        started = time.monotonic()
        counted.ping()
        return time.monotonic() - started

    child = processes.spawn(slow_second_ping, echoq.connect()).wait(10)
    assert child.value >= 0.3 and child.steps == ["PING", "PING"]


def test_the_bank_charges_a_key_once_and_refuses_a_key_reused_for_another_payment(valkey_client) -> None:
    bank = Bank(valkey_client, fresh_name("bank"))
    try:
        first = bank.charge("card-1", 500, idempotency_key="order-1")
        again = bank.charge("card-1", 500, idempotency_key="order-1")
        assert (first.outcome, again.outcome, again.number) == (ChargeOutcome.CHARGED, ChargeOutcome.REPLAYED, 1)
        assert bank.charge("card-1", 500).outcome is ChargeOutcome.CHARGED  # no key: charged every time
        with pytest.raises(IdempotencyConflict, match="a key names one payment"):
            bank.charge("card-2", 500, idempotency_key="order-1")
        with pytest.raises(echoq.InvalidArgument, match="cents must be a whole number"):
            bank.charge("card-1", 0)
        assert bank.charges("card-1") == 2 and bank.charges() == 2
        assert [e.key for e in bank.record()] == ["order-1", None]
    finally:
        bank.reset()


def claims(q: echoq.Queue, pause_s: float) -> None:
    counted = echoq.Queue(q.name, processes.counting_client(q.client))
    for _ in range(12):
        counted.claim(lease_ms=1_000)  # the queue is empty: each comes back with nothing
        time.sleep(pause_s)


def test_a_childs_pauses_are_its_own_time_between_a_reply_and_its_next_command(queue) -> None:
    waiting = processes.spawn(claims, queue, 0.01).wait(10)
    spinning = processes.spawn(claims, queue, 0.0).wait(10)
    assert len(waiting.step_times) == len(spinning.step_times) == 12
    assert len(waiting.pauses()) == 11 and min(waiting.pauses()) >= 0.01
    assert len(waiting.pauses(6)) == 5
    # Python's own pace between two claims is microseconds, however long each round trip took.
    assert sorted(spinning.pauses())[5] < 0.002
