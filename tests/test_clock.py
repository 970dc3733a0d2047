"""Clocks: a JOB id carries the millisecond it was minted at, but pending jobs are claimed in
the order they reached the server (their arrival numbers), so a producer whose own clock is
a day fast or slow neither starves nor jumps ahead, whoever minted its ids.
``Queue.enqueue`` mints on the SERVER's clock (TIME once, then this machine's monotonic
clock); every script refuses an id minted more than 60 s ahead of the server's clock
(ClockSkew), whoever minted it. On Valkey and on Redis 7."""

from __future__ import annotations

import time

import pytest

import echoq
from echoq import ids
from echoq.clock import ServerClock, server_now_ms
from echoq.limits import CLOCK_AHEAD_MS

DAY_MS = 86_400_000


def id_minted_at(ms: int) -> str:
    return ids.Minter(lambda: ms).mint()


@pytest.fixture
def skewed(monkeypatch: pytest.MonkeyPatch):
    """Set this machine's wall clock off by a number of ms (the server's is untouched). The
    process's id minter is swapped for a fresh one meanwhile: once it has minted an id a
    day ahead it keeps counting from there, and later tests must not inherit that."""
    monkeypatch.setattr(ids, "_local", ids.Minter())

    def skew(offset_ms: int) -> None:
        real = time.time_ns
        monkeypatch.setattr(ids.time, "time_ns", lambda: real() + offset_ms * 1_000_000)

    return skew


def test_an_id_minted_a_day_ahead_is_refused_and_nothing_is_written(queue: echoq.Queue) -> None:
    future = id_minted_at(server_now_ms(queue.client) + DAY_MS)
    with pytest.raises(echoq.ClockSkew, match=r"was minted 86\d{6} ms ahead of the server clock") as refused:
        queue.enqueue("from the future", job_id=future)
    assert "60000 ms allowed" in str(refused.value) and "\n" not in str(refused.value)
    fine = id_minted_at(server_now_ms(queue.client))
    with pytest.raises(echoq.ClockSkew):  # one such id refuses a whole batch
        queue._run("enqueue_many", queue.script_keys("enqueue_many", fine, future), [0, 0, fine, "a", future, "b"])
    assert list(queue.keys_in_use()) == []


def test_the_tolerance_is_sixty_seconds(queue: echoq.Queue) -> None:
    now = server_now_ms(queue.client)
    assert queue.enqueue("within", job_id=id_minted_at(now + CLOCK_AHEAD_MS - 1_000)).outcome is echoq.Enqueue.ENQUEUED
    with pytest.raises(echoq.ClockSkew):
        queue.enqueue("beyond", job_id=id_minted_at(now + CLOCK_AHEAD_MS + 1_000))


def test_a_producer_a_day_fast_neither_starves_nor_is_refused(queue: echoq.Queue, skewed) -> None:
    """The issue's finding: a job from a producer a day fast was not among the first 1,000
    claims. Queue.enqueue mints on the server's clock: it is claimed in its turn."""
    before = queue.enqueue_many([f"before {n}" for n in range(500)])
    skewed(+DAY_MS)
    assert echoq.new_job_id() > id_minted_at(server_now_ms(queue.client) + DAY_MS - 60_000)  # the local clock IS off
    fast = echoq.Queue(queue.name, queue.client)  # a producer on the fast machine
    theirs = fast.enqueue("from the fast producer").job_id
    skewed(0)
    after = queue.enqueue_many([f"after {n}" for n in range(500)])
    claimed = [c.job_id for c in queue.claim_many(1_000)] + [c.job_id for c in queue.claim_many(1_000)]
    assert claimed == [*before, theirs, *after]
    with pytest.raises(echoq.ClockSkew):  # an id it minted itself, on its own clock, is refused
        skewed(+DAY_MS)
        fast.enqueue("own id", job_id=echoq.new_job_id())


def test_a_producer_a_day_slow_does_not_jump_ahead(queue: echoq.Queue, skewed) -> None:
    first = queue.enqueue("first").job_id
    skewed(-DAY_MS)
    slow = echoq.Queue(queue.name, queue.client).enqueue("from the slow producer").job_id
    skewed(0)
    last = queue.enqueue("last").job_id
    assert [c.job_id for c in queue.claim_many(3)] == [first, slow, last]


def test_ids_a_producer_a_day_slow_minted_itself_wait_their_turn_by_arrival(queue: echoq.Queue, skewed) -> None:
    """The ids may carry the producer's time; the order may not: a producer whose clock is a
    day slow mints ids that sort before every other id, and they are claimed after the
    1,000 jobs that reached the server before them, and before those that came after."""
    before = queue.enqueue_many([f"before {n}" for n in range(1_000)])
    skewed(-DAY_MS)
    theirs = [echoq.new_job_id() for _ in range(3)]  # a retry-safe producer mints its own ids
    skewed(0)
    assert max(theirs) < min(before)  # they carry the slow clock: by id, they would go first
    assert ids.minted_ms(theirs[0]) < server_now_ms(queue.client) - DAY_MS + 60_000
    assert queue.enqueue_many(["slow 0", "slow 1"], job_ids=theirs[:2]) == theirs[:2]
    assert queue.enqueue("slow 2", job_id=theirs[2]).outcome is echoq.Enqueue.ENQUEUED
    after = queue.enqueue_many(["after"])
    claimed = queue.claim_many(1_000) + queue.claim_many(1_000)
    assert [c.job_id for c in claimed] == [*before, *theirs, *after]
    # A job given back goes back to its place: ahead of the jobs that arrived after it.
    assert queue.release_many([claimed[1_000], claimed[-1]]) == [echoq.Release.RELEASED] * 2
    assert [c.job_id for c in queue.claim_many(2)] == [theirs[0], after[0]]


def test_ids_minted_on_the_server_clock_follow_it_and_keep_mint_order(queue: echoq.Queue, skewed) -> None:
    skewed(-DAY_MS)
    clock = ServerClock(refresh_s=0.05)
    minted = [clock.mint(queue.client) for _ in range(2_000)]
    assert minted == sorted(minted) and len(set(minted)) == len(minted)
    now = server_now_ms(queue.client)
    assert abs(ids.minted_ms(minted[-1]) - now) < 1_000
    assert abs(clock.now_ms(queue.client) - server_now_ms(queue.client)) < 1_000


def test_minted_ms_reads_the_id_back() -> None:
    assert ids.minted_ms(id_minted_at(1_700_000_000_123)) == 1_700_000_000_123
    with pytest.raises(echoq.InvalidJobId):
        ids.minted_ms("JOB-nope")


def test_python_and_lua_agree_on_the_tolerance() -> None:
    import re

    from echoq import scripts

    text = scripts.expanded("enqueue")  # job_id.lua inlined, CLOCK_AHEAD_MS written in by the registry
    assert re.search(r"^local CLOCK_AHEAD_MS = (\d+)$", text, re.M)[1] == str(CLOCK_AHEAD_MS)
