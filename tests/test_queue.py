"""Every script, every outcome, against real servers (Valkey, and Redis 7 where installed)."""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Iterator

import pytest
import redis

import echoq
from echoq import Complete, Enqueue, Extend, JobState, Retry, scripts
from echoq.effects import Effects
from echoq.ids import Minter
from echoq.keyspace import Keyspace
from echoq.queue import SCRIPT_KEYS
from tests.support.helpers import assert_one_place, expire, register_kit_scripts, server_now_ms, wait_for_server_time
from tests.support.servers import fresh_name

register_kit_scripts()  # the key checks below cover the kit's scripts too

# -- enqueue -----------------------------------------------------------------------------


def test_enqueue_puts_a_pending_row(queue: echoq.Queue) -> None:
    result = queue.enqueue("hello")
    assert result.outcome is Enqueue.ENQUEUED and echoq.is_job_id(result.job_id)
    job = queue.job(result.job_id)
    assert job is not None and job.state is JobState.PENDING and job.attempts == 0 and job.payload == "hello"
    assert queue.client.zscore(queue.keys.pending, result.job_id) == 1  # its arrival number: the first
    assert queue.snapshot().stats["enqueued"] == 1


def test_enqueue_refuses_a_duplicate_and_changes_nothing(queue: echoq.Queue) -> None:
    first = queue.enqueue("original")
    again = queue.enqueue("impostor", job_id=first.job_id)
    assert again.outcome is Enqueue.DUPLICATE and again.state is JobState.PENDING
    assert queue.job(first.job_id).payload == "original"
    assert queue.snapshot().counts["pending"] == 1 and queue.snapshot().stats["enqueued"] == 1


def test_enqueue_refuses_an_id_that_already_completed(queue: echoq.Queue) -> None:
    first = queue.enqueue("once")
    assert queue.complete(queue.claim()) is Complete.COMPLETED
    again = queue.enqueue("twice", job_id=first.job_id)
    assert again.outcome is Enqueue.DUPLICATE and again.state is JobState.DONE
    assert queue.snapshot().counts["pending"] == 0


def test_enqueue_refuses_unbranded_ids_in_python(queue: echoq.Queue) -> None:
    for bad in ["42", "job01M8VR0VZ392JWZQ00C1WN6N9Y", "JOB01M8VR0VZ392JWZQ00C1WN6N9I", "JOB123", None and "x"]:
        if bad is None:
            continue
        with pytest.raises(echoq.InvalidJobId, match="is not a JOB id"):
            queue.enqueue("x", job_id=bad)
    assert list(queue.keys_in_use()) == []


def test_enqueue_refuses_unbranded_ids_on_the_server(queue: echoq.Queue) -> None:
    """The script checks too: a client that skips the Python check still cannot add one."""
    k = queue.keys
    with pytest.raises(echoq.InvalidJobId, match="not a JOB id"):
        queue._run("enqueue", queue.script_keys("enqueue") + [k.prefix + "job:42"], ["42", "p", 0, 0])
    good = echoq.new_job_id()
    with pytest.raises(echoq.InvalidJobId, match="does not belong"):
        queue._run("enqueue", queue.script_keys("enqueue") + [k.prefix + "job:other"], [good, "p", 0, 0])
    assert list(queue.keys_in_use()) == []


def test_enqueue_with_delay_waits_in_scheduled(queue: echoq.Queue) -> None:
    job = queue.enqueue("later", delay_ms=60_000)
    assert queue.job(job.job_id).state is JobState.SCHEDULED
    assert queue.claim() is None


def test_bad_arguments_are_refused_before_the_server(queue: echoq.Queue) -> None:
    for call in (
        lambda: queue.claim(lease_ms=0),
        lambda: queue.claim(lease_ms=-5),
        lambda: queue.claim_many(0),
        lambda: queue.enqueue("x", delay_ms=-1),
        lambda: queue.reap_once(limit=0),
        lambda: queue.stalled_check(max_stalled=-1),
    ):
        with pytest.raises(echoq.InvalidArgument, match="must be a whole number"):
            call()
    assert list(queue.keys_in_use()) == []


def test_bad_arguments_are_refused_by_the_scripts_too(queue: echoq.Queue) -> None:
    with pytest.raises(echoq.InvalidArgument, match="lease must be"):
        queue._run("claim", queue.script_keys("claim"), [0, 1, 10])
    with pytest.raises(echoq.InvalidArgument, match="count must be"):
        queue._run("claim", queue.script_keys("claim"), [100, 1001, 10])
    with pytest.raises(echoq.InvalidArgument, match="limit must be"):
        queue._run("reap", queue.script_keys("reap"), ["lots", 10])


# -- every key a script touches belongs to the queue its KEYS name -----------------------
#
# No script takes a key prefix in ARGV: a script that must build a key it cannot be handed
# (a popped or moved id's row) reads the prefix off its own KEYS[1], and every other KEYS
# must carry that prefix (lua/includes/queue_keys.lua). A call that mixes two queues, or
# hands a row key that is not its id's row in that queue, is refused with a typed error
# before anything is written.


def _server_state(queue: echoq.Queue) -> dict[str, object]:
    """Every key of a queue with its exact contents (scores and fields included)."""
    client, state = queue.client, {}
    for key in sorted(queue.keys_in_use()):
        kind = client.type(key)
        if kind == "zset":
            state[key] = client.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            state[key] = client.hgetall(key)
        elif kind == "list":
            state[key] = client.lrange(key, 0, -1)
        else:
            state[key] = (kind, client.dump(key))
    return state


def _busy(queue: echoq.Queue) -> echoq.Claim:
    """A queue with work for every script: a held job (returned), an expired lease, a retry
    whose backoff is due, a pending job and an effect in the ledger."""
    for i in range(4):
        queue.enqueue(f"job {i}")
    held = queue.claim(lease_ms=60_000)
    lapsed = queue.claim(lease_ms=1)
    retried = queue.claim(lease_ms=60_000)
    result = queue.retry(retried, error="boom", backoff_ms=1)
    Effects(queue).apply_once(held.job_id, "charged")
    wait_for_server_time(queue.client, max(lapsed.deadline_ms, result.due_ms or 0) + 1)
    return held


@pytest.fixture
def other(client: redis.Redis) -> Iterator[echoq.Queue]:
    q = echoq.Queue(fresh_name("other"), client)
    yield q
    q.reset()


Call = tuple[str, list[str], list[object], type[Exception], str]  # script, KEYS, ARGV, error, message


def _keys(ks: Keyspace, script: str, *rows: str, **swap: str) -> list[str]:
    """A script's KEYS for queue ``ks`` (echoq.queue.SCRIPT_KEYS), with some named keys
    swapped for others, then the given row keys."""
    return [swap.get(name, getattr(ks, name)) for name in SCRIPT_KEYS[script]] + list(rows)


def _mismatched_calls(a: Keyspace, b: Keyspace, ha: echoq.Claim, hb: echoq.Claim, new: str) -> dict[str, Call]:
    """Calls that name queue A in KEYS[1] but also touch queue B (or no queue at all). ``ha``
    and ``hb`` are jobs held in A and in B, ``new`` an id neither has seen."""
    bad_keys, bad_row = echoq.InvalidArgument, echoq.InvalidJobId
    not_a_queue_key = r"KEYS\[1\] \S+ is not a queue key"
    claim_keys = _keys(a, "claim")

    def outside(n: int, queue: Keyspace = a) -> str:  # KEYS[n] is not in KEYS[1]'s queue
        return rf"KEYS\[{n}\] \S+ is not {re.escape(queue.prefix)}"

    return {
        # claim once took the prefix as ARGV[1]: that shape is now simply a bad lease
        "claim old ARGV prefix of B": ("claim", claim_keys, [b.prefix, 60_000, 10], bad_keys, "lease must"),
        "claim B active": ("claim", _keys(a, "claim", active=b.active), [60_000, 10, 100], bad_keys, outside(2)),
        "claim no prefix": (
            "claim",
            [key.removeprefix(a.prefix) for key in claim_keys],
            [60_000, 10, 100],
            bad_keys,
            not_a_queue_key,
        ),
        "claim no hash tag": (
            "claim",
            [key.replace("{" + a.queue + "}", "q") for key in claim_keys],
            [60_000, 10, 100],
            bad_keys,
            not_a_queue_key,
        ),
        "complete_many B scheduled": (
            "complete_many",
            _keys(a, "complete_many", a.job(ha.job_id), scheduled=b.scheduled),
            [100, 60_000, 10, 100, 0, 0, ha.job_id, ha.token],
            bad_keys,
            outside(3),
        ),
        "complete_many B row": (
            "complete_many",
            _keys(a, "complete_many", b.job(hb.job_id)),
            [100, 60_000, 10, 100, 0, 0, hb.job_id, hb.token],
            bad_row,
            "does not belong",
        ),
        "complete_many a row too many": (
            "complete_many",
            _keys(a, "complete_many", a.job(ha.job_id), a.job(new)),
            [100, 60_000, 10, 100, 0, 0, ha.job_id, ha.token],
            bad_keys,
            "expected 8 KEYS",
        ),
        "enqueue_many B row": (
            "enqueue_many",
            _keys(a, "enqueue_many", a.job(new), b.job(new)),
            [0, 0, new, "p", new, "q"],
            bad_row,
            "does not belong",
        ),
        "effect B outbox": (
            "effect",
            _keys(a, "effect", a.job(ha.job_id), outbox=b.outbox),
            [ha.job_id, "r", 10],
            bad_keys,
            outside(2),
        ),
        "effect B row": (
            "effect",
            _keys(a, "effect", b.job(hb.job_id)),
            [hb.job_id, "r", 10],
            bad_row,
            "does not belong",
        ),
        "fast_forward not a queue key": ("teaching/fast_forward", ["active"], [1_000], bad_keys, not_a_queue_key),
        "reap B pending": ("reap", _keys(a, "reap", pending=b.pending), [100, 100], bad_keys, outside(2, b)),
        "stalled_check B dead": (
            "stalled_check",
            _keys(a, "stalled_check", dead=b.dead),
            [1, 100, 100],
            bad_keys,
            outside(4),
        ),
        "stalled_check B effects": (
            "stalled_check",
            _keys(a, "stalled_check", effects=b.effects),
            [1, 100, 100],
            bad_keys,
            outside(7),
        ),
        "snapshot B pending": (
            "snapshot",
            _keys(a, "snapshot", pending=b.pending),
            [100],
            bad_keys,
            outside(2, b),
        ),
        "naive_pop B stats": ("teaching/naive_pop", [a.pending, b.stats], [], bad_keys, outside(2)),
        "enqueue B done": (
            "enqueue",
            _keys(a, "enqueue", a.job(new), done=b.done),
            [new, "p", 0],
            bad_keys,
            outside(3),
        ),
        "enqueue B row": ("enqueue", _keys(a, "enqueue", b.job(new)), [new, "p", 0], bad_row, "does not belong"),
        "complete B row": (
            "complete",
            _keys(a, "complete", b.job(hb.job_id)),
            [hb.job_id, hb.token, 100],
            bad_row,
            "does not belong",
        ),
        # the held row passes the fence; the script would then complete ha and drop `new` from active
        "complete row of another id": (
            "complete",
            _keys(a, "complete", a.job(ha.job_id)),
            [new, ha.token, 100],
            bad_row,
            "does not belong",
        ),
        "complete B done": (
            "complete",
            _keys(a, "complete", a.job(ha.job_id), done=b.done),
            [ha.job_id, ha.token, 100],
            bad_keys,
            outside(2),
        ),
        "retry B row": (
            "retry",
            _keys(a, "retry", b.job(hb.job_id)),
            [hb.job_id, hb.token, "e", 0, 1, 100],
            bad_row,
            "does not belong",
        ),
        "retry B dead": (
            "retry",
            _keys(a, "retry", a.job(ha.job_id), dead=b.dead),
            [ha.job_id, ha.token, "e", 0, 1, 100],
            bad_keys,
            outside(4),
        ),
        "extend B row": (
            "extend",
            _keys(a, "extend", b.job(hb.job_id)),
            [hb.job_id, hb.token, 60_000],
            bad_row,
            "does not belong",
        ),
    }


_placeholder = echoq.Claim(echoq.new_job_id(), "", 1, 1, 0)
MISMATCHED = list(_mismatched_calls(Keyspace("a"), Keyspace("b"), _placeholder, _placeholder, _placeholder.job_id))


@pytest.mark.parametrize("case", MISMATCHED)
def test_a_script_refuses_keys_of_another_queue_and_changes_nothing(
    case: str, queue: echoq.Queue, other: echoq.Queue
) -> None:
    held_a, held_b = _busy(queue), _busy(other)
    calls = _mismatched_calls(queue.keys, other.keys, held_a, held_b, echoq.new_job_id())
    script, keys, args, error, message = calls[case]
    if echoq.is_cluster(queue.client) and len({queue.client.keyslot(k) for k in keys}) > 1:
        # On a cluster, keys of two slots are refused before any script runs (CROSSSLOT).
        error, message = echoq.InvalidArgument, "CROSSSLOT"
    before = _server_state(queue), _server_state(other)
    with pytest.raises(error, match=message):
        scripts.run(queue.client, script, keys, args)
    assert (_server_state(queue), _server_state(other)) == before
    assert not list(queue.client.scan_iter(match="emq:q:*")) and queue.client.exists("pending") == 0


def test_a_popped_ids_row_is_read_in_its_own_queue_only(queue: echoq.Queue, other: echoq.Queue) -> None:
    """The row built for a popped id is KEYS[1]'s queue's, never another queue's: an id
    that has a row only in another queue has no row here (a corrupt entry: dead-lettered
    here, with no row written), and that row is untouched."""
    stray = other.enqueue("elsewhere").job_id
    queue.client.zadd(queue.keys.pending, {stray: 0})
    theirs = _server_state(other)
    assert queue.claim() is None
    snap = queue.snapshot()
    assert snap.stats["corrupt"] == 1 and list(snap.dead) == [stray] and queue.job(stray) is None
    assert _server_state(other) == theirs


@pytest.mark.parametrize("name", ["a", "Lesson_02-b", "9" * 64])
def test_every_valid_queue_name_passes_the_scripts_key_check(client: redis.Redis, name: str) -> None:
    q = echoq.Queue(name, client)
    q.reset()
    try:
        q.enqueue("one")
        q.enqueue("two", delay_ms=1)
        claim = q.claim(lease_ms=1)
        expire(q, claim)
        assert q.reap() == [claim.job_id]
        outcome, more = q.complete_and_claim(q.claim(), count=1)
        assert outcome is Complete.COMPLETED and len(more) == 1
        assert q.extend(more[0]) is Extend.EXTENDED
        assert q.retry(more[0], backoff_ms=0).outcome is Retry.RETRIED
        assert q.stalled_check().recovered == [] and q.snapshot().counts["pending"] == 1
    finally:
        q.reset()


# -- claim -------------------------------------------------------------------------------


def test_claim_takes_the_oldest_and_leases_on_the_server_clock(queue: echoq.Queue) -> None:
    ids = [queue.enqueue(f"job {i}").job_id for i in range(5)]
    before = server_now_ms(queue.client)
    claim = queue.claim(lease_ms=30_000)
    after = server_now_ms(queue.client)
    assert claim.job_id == ids[0] and claim.payload == "job 0" and (claim.token, claim.attempts) == (1, 1)
    assert before + 30_000 <= claim.deadline_ms <= after + 30_000
    assert queue.client.zscore(queue.keys.active, claim.job_id) == claim.deadline_ms
    assert queue.job(claim.job_id).state is JobState.ACTIVE
    assert [c.job_id for c in queue.claim_many(10)] == ids[1:]


def test_claim_on_an_empty_queue_returns_nothing(queue: echoq.Queue) -> None:
    assert queue.claim() is None
    assert queue.claim_many(5) == []


def test_each_claim_bumps_the_token(queue: echoq.Queue) -> None:
    queue.enqueue("again and again")
    tokens = []
    for _ in range(3):
        claim = queue.claim(lease_ms=5)
        tokens.append(claim.token)
        expire(queue, claim)
        assert queue.reap() == [claim.job_id]
    assert tokens == [1, 2, 3]


def test_claim_many_leases_each_job_with_its_own_token(queue: echoq.Queue) -> None:
    queue.enqueue_many(["a", "b", "c"])
    claims = queue.claim_many(2, lease_ms=10_000)
    assert [c.payload for c in claims] == ["a", "b"] and all((c.token, c.attempts) == (1, 1) for c in claims)
    assert queue.snapshot().counts == {"pending": 1, "active": 2, "scheduled": 0, "dead": 0, "done": 0}


# -- complete ----------------------------------------------------------------------------


def test_complete_retires_the_row(queue: echoq.Queue) -> None:
    job = queue.enqueue("x").job_id
    assert queue.complete(queue.claim()) is Complete.COMPLETED
    snap = queue.snapshot()
    assert queue.job(job) is None and job in snap.done and snap.counts["active"] == 0
    assert snap.stats["completed"] == 1


def test_complete_twice_is_gone(queue: echoq.Queue) -> None:
    queue.enqueue("x")
    claim = queue.claim()
    assert queue.complete(claim) is Complete.COMPLETED
    assert queue.complete(claim) is Complete.GONE


def test_a_stale_token_cannot_complete(queue: echoq.Queue) -> None:
    queue.enqueue("contested")
    old = queue.claim(lease_ms=5)
    expire(queue, old)
    queue.reap()
    new = queue.claim(lease_ms=60_000)
    assert new.token == old.token + 1
    before = queue.snapshot()
    assert queue.complete(old) is Complete.STALE
    after = queue.snapshot()
    assert after.active == before.active and after.stats == before.stats
    assert queue.job(new.job_id).state is JobState.ACTIVE
    assert queue.complete(new) is Complete.COMPLETED


def test_a_worker_whose_job_was_reaped_cannot_complete_it(queue: echoq.Queue) -> None:
    """Reaped but not yet claimed again: the token still matches, the lease does not."""
    queue.enqueue("x")
    claim = queue.claim(lease_ms=5)
    expire(queue, claim)
    queue.reap()
    assert queue.complete(claim) is Complete.STALE
    assert queue.job(claim.job_id).state is JobState.PENDING


def test_complete_needs_a_token(queue: echoq.Queue) -> None:
    job = queue.enqueue("x").job_id
    with pytest.raises(echoq.InvalidArgument, match="fencing token"):
        queue.complete(job)
    with pytest.raises(echoq.InvalidJobId):
        queue.complete("not-an-id", 1)


def test_complete_and_claim_is_fenced_and_claims_the_next(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many(["a", "b", "c"])
    first = queue.claim()
    outcome, nxt = queue.complete_and_claim(first, lease_ms=10_000)
    assert outcome is Complete.COMPLETED and [c.job_id for c in nxt] == [ids[1]]
    outcome, more = queue.complete_and_claim(first, count=2)
    assert outcome is Complete.GONE and [c.job_id for c in more] == [ids[2]]
    outcome, none = queue.complete_and_claim(nxt[0], count=0)
    assert outcome is Complete.COMPLETED and none == []
    assert queue.snapshot().counts["active"] == 1


# -- retry -------------------------------------------------------------------------------


def test_retry_without_backoff_goes_straight_back(queue: echoq.Queue) -> None:
    job = queue.enqueue("flaky").job_id
    result = queue.retry(queue.claim(), error="boom", backoff_ms=0)
    assert result.outcome is Retry.RETRIED and result.attempts == 1
    row = queue.job(job)
    assert row.state is JobState.PENDING and row.error == "boom"
    assert queue.claim().token == 2


def test_retry_with_backoff_waits_on_the_server_clock(queue: echoq.Queue) -> None:
    job = queue.enqueue("flaky").job_id
    before = server_now_ms(queue.client)
    # A second of backoff: the claim below must come before the job is due, even when a loaded
    # machine holds this test up for a few hundred ms between the two calls.
    result = queue.retry(queue.claim(), error="boom", backoff_ms=1_000)
    assert result.outcome is Retry.SCHEDULED and result.due_ms >= before + 1_000
    assert queue.job(job).state is JobState.SCHEDULED
    assert queue.claim() is None  # not due yet
    wait_for_server_time(queue.client, result.due_ms)
    again = queue.claim()
    assert again.job_id == job and again.token == 2


def test_retry_dead_letters_at_max_attempts(queue: echoq.Queue) -> None:
    job = queue.enqueue("poison").job_id
    outcomes = [queue.retry(queue.claim(), error=f"fail {n}", max_attempts=3).outcome for n in range(1, 4)]
    assert outcomes == [Retry.RETRIED, Retry.RETRIED, Retry.DEAD]
    row = queue.job(job)
    assert row.state is JobState.DEAD and row.reason == "max_attempts" and row.error == "fail 3"
    snap = queue.snapshot()
    assert job in snap.dead and snap.counts["pending"] == 0 and snap.stats["dead"] == 1


def test_retry_counts_tries_not_tokens_a_release_gives_its_try_back(queue: echoq.Queue) -> None:
    """The token fences; attempts count toward max_attempts. A claim given back unstarted
    leaves the token bumped (never handed out twice) and gives its try back."""
    job = queue.enqueue("given back twice, then fails").job_id
    for _ in range(2):
        assert queue.release_many(queue.claim_many(1)) == [echoq.Release.RELEASED]
    held = queue.claim()
    assert (held.job_id, held.token, held.attempts) == (job, 3, 1)
    assert queue.complete(job, token=2) is Complete.STALE  # an older claim's token is refused
    first = queue.retry(held, error="fail 1", max_attempts=2)
    assert (first.outcome, first.attempts) == (Retry.RETRIED, 1)  # the first of two tries, not the third
    again = queue.claim()
    assert (again.token, again.attempts) == (4, 2)
    last = queue.retry(again, error="fail 2", max_attempts=2)
    assert (last.outcome, last.attempts) == (Retry.DEAD, 2)
    row = queue.job(job)
    assert (row.state, row.token, row.attempts) == (JobState.DEAD, 4, 2)


def test_a_stale_token_cannot_retry(queue: echoq.Queue) -> None:
    queue.enqueue("x")
    old = queue.claim(lease_ms=5)
    expire(queue, old)
    queue.reap()
    new = queue.claim()
    assert queue.retry(old, error="late").outcome is Retry.STALE
    assert queue.job(new.job_id).state is JobState.ACTIVE and queue.job(new.job_id).error is None
    assert queue.complete(new) is Complete.COMPLETED
    assert queue.retry(new).outcome is Retry.GONE


# -- extend ------------------------------------------------------------------------------


def test_extend_pushes_the_deadline(queue: echoq.Queue) -> None:
    queue.enqueue("long job")
    claim = queue.claim(lease_ms=1_000)  # outlasts a loaded machine's pause before the extend
    assert queue.extend(claim, lease_ms=60_000) is Extend.EXTENDED
    wait_for_server_time(queue.client, claim.deadline_ms + 1)
    assert queue.reap() == []  # alive: its lease was pushed out
    assert queue.client.zscore(queue.keys.active, claim.job_id) > claim.deadline_ms


def test_a_stale_token_cannot_extend(queue: echoq.Queue) -> None:
    queue.enqueue("x")
    old = queue.claim(lease_ms=5)
    expire(queue, old)
    queue.reap()
    new = queue.claim(lease_ms=100_000)
    assert queue.extend(old, lease_ms=1) is Extend.STALE
    assert queue.client.zscore(queue.keys.active, new.job_id) == new.deadline_ms
    queue.complete(new)
    assert queue.extend(new) is Extend.GONE


# -- reap --------------------------------------------------------------------------------


def test_reap_moves_only_expired_leases(queue: echoq.Queue) -> None:
    queue.enqueue_many(["short", "long"])
    short = queue.claim(lease_ms=5)
    long = queue.claim(lease_ms=60_000)
    expire(queue, short)
    assert queue.reap() == [short.job_id]
    snap = queue.snapshot()
    assert snap.pending == [short.job_id] and list(snap.active) == [long.job_id]
    assert queue.job(short.job_id).state is JobState.PENDING
    assert snap.stats["reaped"] == 1


def test_reap_judges_expiry_on_the_server_clock(queue: echoq.Queue) -> None:
    """A lease deadline exactly at the server's now counts as expired; one ms later does not."""
    queue.enqueue("x")
    claim = queue.claim(lease_ms=200)
    now, moved = queue.reap_once()
    assert moved == [] and now < claim.deadline_ms
    wait_for_server_time(queue.client, claim.deadline_ms)
    now, moved = queue.reap_once()
    assert moved == [claim.job_id] and now >= claim.deadline_ms


def test_reap_is_bounded_per_call(queue: echoq.Queue) -> None:
    queue.enqueue_many([str(i) for i in range(25)])
    claims = queue.claim_many(25, lease_ms=5)
    expire(queue, *claims)
    _now, first = queue.reap_once(limit=10)
    assert len(first) == 10 and queue.snapshot().counts["active"] == 15
    rest = queue.reap(limit=10)
    assert len(rest) == 15 and queue.snapshot().counts == {
        "pending": 25,
        "active": 0,
        "scheduled": 0,
        "dead": 0,
        "done": 0,
    }


# -- stalled check -----------------------------------------------------------------------


def _stall(queue: echoq.Queue) -> echoq.Claim:
    claim = queue.claim(lease_ms=5)
    expire(queue, claim)
    return claim


def test_the_max_stalled_th_stall_is_fatal(queue: echoq.Queue) -> None:
    """The max_stalled-th stall is fatal: a count below max_stalled is recovered, at or above it dead-lettered.
    Edge 1: with max_stalled=3 the first two stalls are recovered..."""
    job = queue.enqueue("crashes workers").job_id
    for n in (1, 2):
        _stall(queue)
        report = queue.stalled_check(max_stalled=3)
        assert report.recovered == [job] and report.dead == []
        assert queue.job(job).stalled == n and queue.job(job).state is JobState.PENDING
    # ... edge 2: and the third (the count reaches max_stalled) is dead-lettered.
    _stall(queue)
    report = queue.stalled_check(max_stalled=3)
    assert report.recovered == [] and report.dead == [job]
    row = queue.job(job)
    assert row.state is JobState.DEAD and row.reason == "stalled" and row.stalled == 3
    assert "stalled 3 times" in row.error
    snap = queue.snapshot()
    assert job in snap.dead and snap.stats["dead"] == 1 and snap.stats["stalled"] == 3


def test_max_stalled_one_dead_letters_the_first_stall_and_zero_is_refused(queue: echoq.Queue) -> None:
    job = queue.enqueue("x").job_id
    _stall(queue)
    with pytest.raises(echoq.InvalidArgument, match="max_stalled must be a whole number between 1 and 1,000"):
        queue.stalled_check(max_stalled=0)
    assert queue.stalled_check(max_stalled=1).dead == [job]


def test_the_default_max_stalled_recovers_one_stall(queue: echoq.Queue) -> None:
    job = queue.enqueue("x").job_id
    _stall(queue)
    assert queue.stalled_check().recovered == [job]
    _stall(queue)
    assert queue.stalled_check().dead == [job]


def test_stalled_check_leaves_live_leases_alone(queue: echoq.Queue) -> None:
    queue.enqueue_many(["a", "b"])
    stalled = _stall(queue)
    live = queue.claim(lease_ms=60_000)
    report = queue.stalled_check(max_stalled=2)
    assert report.recovered == [stalled.job_id]
    assert list(queue.snapshot().active) == [live.job_id] and queue.job(live.job_id).stalled == 0


def test_stalled_check_is_bounded_per_call_and_loops(queue: echoq.Queue) -> None:
    queue.enqueue_many([str(i) for i in range(12)])
    claims = queue.claim_many(12, lease_ms=5)
    expire(queue, *claims)
    assert len(queue.stalled_check(max_stalled=2, limit=5).recovered) == 12


# -- snapshot, slots, invariant ----------------------------------------------------------


def test_snapshot_reads_everything_at_once(queue: echoq.Queue) -> None:
    ids = queue.enqueue_many(["a", "b", "c", "d"])
    done = queue.claim()
    queue.complete(done)
    leased = queue.claim(lease_ms=60_000)
    dead = queue.claim()
    queue.retry(dead, error="x", max_attempts=1)
    snap = queue.snapshot()
    assert snap.pending == [ids[3]]
    assert snap.active == {leased.job_id: leased.deadline_ms}
    assert list(snap.dead) == [ids[2]] and list(snap.done) == [ids[0]]
    assert snap.counts == {"pending": 1, "active": 1, "scheduled": 0, "dead": 1, "done": 1}
    assert snap.rows[leased.job_id].state == "active" and snap.rows[ids[2]].reason == "max_attempts"
    for job_id in (leased.job_id, ids[2], ids[3]):  # a row as Queue.job reads it, but for what a snapshot skips
        assert snap.rows[job_id] == dataclasses.replace(queue.job(job_id), payload=None, error=None)
    assert snap.now_ms <= server_now_ms(queue.client)
    assert snap.place_of(ids[0]) is JobState.DONE and snap.place_of(ids[3]) is JobState.PENDING


def test_snapshot_lists_are_capped_but_counts_are_exact(queue: echoq.Queue) -> None:
    queue.enqueue_many([str(i) for i in range(30)])
    snap = queue.snapshot(limit=10)
    assert len(snap.pending) == 10 and snap.counts["pending"] == 30


def test_every_key_of_a_queue_is_in_one_slot(queue: echoq.Queue) -> None:
    k = queue.keys
    job = echoq.new_job_id()
    keys = [k.pending, k.active, k.scheduled, k.dead, k.done, k.stats, k.effects, k.outbox, k.job(job)]
    try:
        server = {queue.client.execute_command("CLUSTER", "KEYSLOT", key) for key in keys}
    except redis.ResponseError:  # Redis 7 answers CLUSTER only in cluster mode; Valkey always
        assert queue.client.info("server").get("redis_version", "").startswith("7.")
        return
    assert len(server) == 1


def test_the_invariant_holds_after_a_random_mix_of_moves(queue: echoq.Queue) -> None:
    """Every job in exactly one of pending / active / scheduled / dead, or done."""
    rng = random.Random(20261202)
    known: set[str] = set()
    held: list[echoq.Claim] = []
    for _step in range(300):
        move = rng.choice(["enqueue", "enqueue", "claim", "complete", "stale", "retry", "extend", "expire", "stalled"])
        if move == "enqueue":
            known.add(queue.enqueue(str(_step)).job_id)
        elif move == "claim":
            held += queue.claim_many(rng.randint(1, 3), lease_ms=rng.choice([5, 60_000]))
        elif move in ("complete", "retry", "extend", "stale") and held:
            claim = held.pop(rng.randrange(len(held)))
            if move == "complete":
                queue.complete(claim)
            elif move == "retry":
                queue.retry(claim, error="x", backoff_ms=rng.choice([0, 5]), max_attempts=3)
            elif move == "extend":
                queue.extend(claim, lease_ms=5)
                held.append(claim)
            elif claim.token > 1:  # a token from an earlier delivery (0 is no token at all)
                queue.complete(claim.job_id, claim.token - 1)
        elif move == "expire":
            short = [c for c in held if c.deadline_ms - server_now_ms(queue.client) < 1_000]
            if short:
                expire(queue, *short)
            queue.reap()
        elif move == "stalled":
            queue.stalled_check(max_stalled=1)
        if _step % 10 == 0:
            assert_one_place(queue, known)
    assert_one_place(queue, known)


def test_scripts_survive_a_script_cache_flush(queue: echoq.Queue) -> None:
    """EVALSHA first; after SCRIPT FLUSH (or a restarted server) NOSCRIPT reloads the source."""
    queue.enqueue("before the flush")
    queue.client.script_flush()
    claim = queue.claim()
    assert claim is not None and claim.payload == "before the flush"
    queue.client.script_flush()
    assert queue.complete(claim) is Complete.COMPLETED


@pytest.mark.one_server  # a cluster client routes each call itself: the Worker never pipelines there
def test_pipelined_calls_run_in_order_through_a_script_cache_flush(queue: echoq.Queue) -> None:
    """scripts.Pipelined writes calls ahead of their replies (the Worker's two calls in
    flight). Calls that met a flushed cache come back NOSCRIPT -- they did not run -- and
    are run again, in the order sent; an error reply is the typed error, as from run()."""
    ids = queue.enqueue_many(["a", "b", "c"])
    pipe = scripts.Pipelined(queue.client, "complete_many")
    queue.client.script_flush()
    for _ in ids:
        pipe.send(*queue._complete_many_call([], 1, 60_000))
    claimed = [echoq.Queue._complete_many_reply(pipe.receive())[1] for _ in ids]
    assert [c.job_id for (c,) in claimed] == ids
    keys, args = queue._complete_many_call([], 1, 60_000)
    pipe.send(keys, [args[0], 0, *args[2:]])  # a lease of 0 ms
    pipe.send(keys, args)
    with pytest.raises(echoq.InvalidArgument, match="complete_many: lease must be a whole number between 1"):
        pipe.receive()
    assert pipe.receive() == [[], []]  # the call behind the refused one still ran: nothing left to claim
    held = queue.complete_many([c for (c,) in claimed])
    assert held == [Complete.COMPLETED] * 3
    pipe.send(keys, args)
    pipe.close()  # a reply left unread: the connection is dropped, not handed back mid-reply
    assert queue.snapshot().counts["done"] == 3
    pipe.send(keys, args)  # on a new connection: its reply is this call's, not the one left unread
    assert pipe.receive() == [[], []]


@pytest.mark.parametrize("suffix", ["\n", " ", "x"])
def test_a_job_id_with_anything_after_it_is_refused(queue: echoq.Queue, suffix: str) -> None:
    job_id = queue.new_job_id() + suffix
    assert not echoq.is_job_id(job_id)
    with pytest.raises(echoq.InvalidJobId):
        queue.enqueue("x", job_id=job_id)
    assert queue.snapshot().counts["pending"] == 0


def test_unconfirmed_claims_are_recovered_apart_and_bounded(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("its claim replies never arrive").job_id
    for n in range(1, 51):
        _done, (claim,) = queue.complete_many_and_claim([], count=1, lease_ms=1, confirm=True)
        expire(queue, claim)  # nobody heard of the claim: nobody confirms or extends it
        report = queue.stalled_check(max_stalled=1)
        job = queue.job(job_id)
        assert job.stalled == 0 and job.unstarted == n
        if n < 50:
            assert report.recovered == [job_id] and job.state is echoq.JobState.PENDING
    # The bound: the 50th unconfirmed recovery dead-letters it, so it cannot loop forever.
    assert report.dead == [job_id] and job.state is echoq.JobState.DEAD and job.reason == "unstarted"
    snap = queue.snapshot()
    assert snap.stats["unstarted"] == 50
    assert snap.rows[job_id] == dataclasses.replace(job, payload=None, error=None)  # one dataclass for a row


def test_only_the_stalled_check_gives_an_unconfirmed_claim_its_try_back(queue: echoq.Queue) -> None:
    """A try counts when a handler starts, as far as the stalled check can tell: it gives an
    unconfirmed claim's try back and counts it unstarted (bounded). The bare reaper, with no
    dead-letter floor to stop a job whose claims never start, keeps every try counted."""
    lost = queue.enqueue("reply lost").job_id
    for sweep in ("reap", "stalled_check"):
        _done, (claim,) = queue.complete_many_and_claim([], count=1, lease_ms=200, confirm=True)
        expire(queue, claim)
        swept = queue.reap() if sweep == "reap" else queue.stalled_check(max_stalled=1).recovered
        assert swept == [lost]
        row = queue.job(lost)
        if sweep == "reap":
            assert (row.attempts, row.unstarted, row.token) == (1, 0, 1)  # the try stays counted
        else:
            assert (row.attempts, row.unstarted, row.token) == (1, 1, 2)  # the second try given back
    assert queue.snapshot().stats["unstarted"] == 1 and queue.job(lost).state is JobState.PENDING


def test_a_confirmed_claim_stalls_like_any_claim(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("started, then its worker died").job_id
    _done, (claim,) = queue.complete_many_and_claim([], count=1, lease_ms=200, confirm=True)
    queue.complete_many_and_claim([], count=0, started=[claim])  # the holder confirms the start
    assert not queue.client.hexists(queue.keys.job(job_id), "confirm")
    expire(queue, claim)
    assert queue.stalled_check(max_stalled=1).dead == [job_id]
    assert queue.job(job_id).reason == "stalled"
    # A claim that does not ask for confirmation counts as started at once, as claim.lua's.
    other = queue.enqueue("claimed the plain way").job_id
    _done, (plain,) = queue.complete_many_and_claim([], count=1, lease_ms=1)
    expire(queue, plain)
    assert queue.stalled_check(max_stalled=1).dead == [other]


def test_a_producer_retries_enqueue_many_with_its_own_ids_safely(queue: echoq.Queue) -> None:
    payloads = [f"order {n}" for n in range(1_500)]
    ids = queue.new_job_ids(len(payloads))
    assert len(set(ids)) == 1_500 and ids == sorted(ids)
    # The first call ran its first batch of 1000 and then the reply was lost: call again.
    assert queue.enqueue_many(payloads[:1_000], job_ids=ids[:1_000]) == ids[:1_000]
    claim = queue.claim(lease_ms=60_000)
    assert claim is not None and queue.complete(claim) is Complete.COMPLETED  # one is even done
    assert queue.enqueue_many(payloads, job_ids=ids) == ids  # the same ids back
    snap = assert_one_place(queue, set(ids))
    assert snap.stats["enqueued"] == 1_500  # nothing already there was added again
    assert snap.counts == {"pending": 1_499, "active": 0, "scheduled": 0, "dead": 0, "done": 1}


class _LostAfterWork(echoq.Queue):
    """Its first enqueue_many batch runs on the server; then, before the producer hears back,
    workers complete every job of it, and the reply is lost."""

    def __init__(self, queue: echoq.Queue, *, keep_done: int) -> None:
        super().__init__(queue.name, queue.client, keep_done=keep_done)
        self.lost = False

    def _run(self, name, keys, args):  # type: ignore[no-untyped-def]
        reply = super()._run(name, keys, args)
        if name == "enqueue_many" and not self.lost:
            self.lost = True
            while claims := self.claim_many(1_000, lease_ms=60_000):
                self.complete_many(claims)
            raise echoq.ServerUnavailable("lost Valkey: the reply never came")
        return reply


def test_the_docs_retry_example_never_duplicates_what_completed_meanwhile(queue: echoq.Queue) -> None:
    """docs/limits.md's retry loop, run as written: its first call's batch of 1000 went in and
    all 1000 completed -- far more than keep_done remembers -- before the retry; the retry
    adds only the 500 jobs that never arrived, because the ids it gave are remembered for
    keep_given_ms, not only while done holds them."""
    import textwrap
    import types
    from pathlib import Path

    docs = (Path(__file__).parent.parent / "docs" / "limits.md").read_text()
    section = docs[docs.index("**Retrying an enqueue.**") :]
    example = textwrap.dedent(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    q = _LostAfterWork(queue, keep_done=10)
    slept: list[float] = []
    payloads = [f"order {n}" for n in range(1_500)]
    exec(example, {"q": q, "payloads": payloads, "echoq": echoq, "time": types.SimpleNamespace(sleep=slept.append)})
    assert q.lost and len(slept) == 1  # one lost reply, one retry
    snap = assert_one_place(queue, set(queue.snapshot(limit=2_000).pending) | set(queue.snapshot().done))
    assert snap.stats["enqueued"] == 1_500 and snap.stats["completed"] == 1_000
    assert snap.counts["pending"] == 500 and snap.counts["done"] == 10  # done forgot 990 of them
    # Past the window, an id is forgotten: enqueued again it is a new job.
    short = echoq.Queue(queue.name, queue.client, keep_given_ms=0)
    first = next(iter(snap.done))
    assert short.enqueue("again", job_id=first).outcome is Enqueue.DUPLICATE  # done still holds it
    gone = sorted(set(queue.client.zrange(queue.keys.given, 0, -1)) - set(snap.done) - set(snap.pending))[0]
    assert queue.enqueue("again", job_id=gone).outcome is Enqueue.DUPLICATE  # the record holds it
    assert queue.enqueue("again", job_id=gone).state is None
    assert short.enqueue("again", job_id=gone).outcome is Enqueue.ENQUEUED  # a window of 0: not known


def test_enqueue_many_checks_every_given_id_before_it_writes(queue: echoq.Queue) -> None:
    ids = queue.new_job_ids(1_200)
    for bad, says in (
        (ids[:1_199] + ["not-an-id"], "JOB id"),  # bad in the second batch of 1000
        (ids[:1_199] + [ids[0]], "given twice"),
        (ids[:10], "one id per payload"),
        (ids[:1_199] + [Minter().mint(server_now_ms(queue.client) + 3_600_000)], "ahead"),
    ):
        with pytest.raises((echoq.InvalidArgument, echoq.InvalidJobId, echoq.ClockSkew), match=says):
            queue.enqueue_many(["p"] * 1_200, job_ids=bad)
    assert list(queue.keys_in_use()) == []  # nothing written by any of them


@pytest.mark.server
def test_a_server_at_its_maxmemory_raises_out_of_memory_never_script_failed() -> None:
    """A throwaway server of this test's own, its maxmemory set below what it holds: a move
    that adds (enqueue) and a direct write (the halt's LPUSH) are refused as OutOfMemory in one
    line saying what to do, and nothing of them ran; reads answer, and so does a claim (the
    server refuses only the commands that grow memory, and a claim of a job already there
    adds next to nothing), so a full queue can still drain."""
    from echoq.server import start_server

    server = start_server()
    try:
        q = echoq.Queue(fresh_name(), echoq.connect(server.url))
        kept = q.enqueue("before").job_id
        q.client.config_set("maxmemory-policy", "noeviction")
        q.client.config_set("maxmemory", 1)  # bytes: the server already holds more
        moves = (lambda: q.enqueue("after"), lambda: q.enqueue_many(["a", "b"]), lambda: q.halt_wait("0" * 16))
        for move in moves:
            with pytest.raises(echoq.OutOfMemory) as refused:
                move()
            line = str(refused.value)
            assert "\n" not in line and "out of memory" in line and "maxmemory" in line and "purge" in line, line
            assert not isinstance(refused.value, echoq.ScriptFailed)
        assert q.snapshot().pending == [kept] and q.job(kept).state is JobState.PENDING  # reads answer
        assert q.snapshot().stats["enqueued"] == 1 and not q.client.exists(q.keys.halt("0" * 16))
        assert q.claim().job_id == kept
        q.client.config_set("maxmemory", 0)
        assert q.enqueue("after").outcome is Enqueue.ENQUEUED  # once memory is free, the same call goes through
    finally:
        server.stop()
