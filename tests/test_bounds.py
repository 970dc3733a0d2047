"""Bounded memory: every key the library writes has a documented bound, and keeps it.

* emq:{q}:done keeps the newest keep_done ids, emq:{q}:dead the newest keep_dead jobs
  (evicting the rest with their rows, counted in stats 'dead_evicted');
* the effects ledger holds one entry per job the queue remembers, and forgets it with the
  job -- which is safe because apply_once runs only while the job's row exists;
* the outbox keeps its newest keep_outbox records.
On Valkey and on Redis 7. (bench/soak.py measures the bytes.)
"""

from __future__ import annotations

import re

import redis

import echoq
from echoq import Retry, Worker, keyed_consumer
from echoq.effects import Effects
from echoq.keyspace import __doc__ as KEYSPACE_DOC
from tests.support.helpers import expire


def sizes(queue: echoq.Queue) -> dict[str, int]:
    """How many members/fields/items each key of the queue holds (rows counted together; a
    string, the stalled-check lock, counts 1)."""
    out: dict[str, int] = {"rows": 0}
    for key in queue.keys_in_use():
        name = key.removeprefix(queue.keys.prefix)
        if name.startswith("job:"):
            out["rows"] += 1
            continue
        kind = queue.client.type(key)
        if kind == "none":  # gone since it was listed (the stalled-check lock runs out)
            continue
        if kind == "string":
            out[name] = 1
            continue
        out[name] = {"zset": queue.client.zcard, "hash": queue.client.hlen, "list": queue.client.llen}[kind](key)
    return out


def test_the_dead_set_keeps_its_newest_jobs_and_counts_the_evicted(queue: echoq.Queue) -> None:
    small = echoq.Queue(queue.name, queue.client, keep_dead=2)
    effects = Effects(small)
    ids = small.enqueue_many([f"poison {n}" for n in range(5)])
    for _ in ids:
        claim = small.claim(lease_ms=60_000)
        effects.apply_once(claim.job_id, "ran before it failed")
        assert small.retry(claim, error="boom", max_attempts=1).outcome is Retry.DEAD
    snap = small.snapshot()
    assert list(snap.dead) == ids[3:] and snap.stats["dead"] == 5 and snap.stats["dead_evicted"] == 3
    assert all(small.job(j) is None for j in ids[:3])  # evicted with their rows ...
    assert set(effects.counts()) == set(ids[3:])  # ... and their ledger entries
    # wake: one wake per job enqueued, nobody waited for them (at most 64, lua/includes/wake.lua)
    assert sizes(small) == {"rows": 2, "dead": 2, "effects": 2, "outbox": 5, "stats": 4, "wake": 5}


def test_every_dead_letter_path_keeps_the_bound(queue: echoq.Queue) -> None:
    small = echoq.Queue(queue.name, queue.client, keep_dead=1)
    first = small.enqueue("stalls").job_id
    claim = small.claim(lease_ms=5)
    expire(small, claim)
    assert small.stalled_check(max_stalled=1).dead == [first]
    small.client.hset(small.keys.job(second := echoq.new_job_id()), mapping={"state": "pending", "payload": b"\xff"})
    small.client.zadd(small.keys.pending, {second: 0})
    assert small.claim() is None  # bad payload: dead-lettered, and the oldest dead job evicted
    assert list(small.snapshot().dead) == [second] and small.job(first) is None
    ghost = echoq.new_job_id()
    small.client.zadd(small.keys.active, {ghost: 1})  # an expired lease with no row
    assert small.reap() == []
    assert list(small.snapshot().dead) == [ghost] and small.job(second) is None
    assert small.snapshot().stats["dead_evicted"] == 2


def test_a_lowered_keep_dead_is_reached_a_thousand_evictions_per_call(queue: echoq.Queue) -> None:
    dead = {echoq.new_job_id(): n for n in range(1_500)}
    queue.client.zadd(queue.keys.dead, dead)
    small = echoq.Queue(queue.name, queue.client, keep_dead=0)
    small.enqueue("one more")
    claim = small.claim()
    assert small.retry(claim, max_attempts=1).outcome is Retry.DEAD
    assert small.snapshot().counts["dead"] == 501  # at most 1000 per call: no call holds the server long
    small.enqueue("and another")
    small.retry(small.claim(), max_attempts=1)
    assert small.snapshot().counts["dead"] == 0


def test_done_keeps_its_newest_ids_and_the_ledger_forgets_with_it(queue: echoq.Queue) -> None:
    small = echoq.Queue(queue.name, queue.client, keep_done=3)
    effects = Effects(small)
    ids = small.enqueue_many([f"job {n}" for n in range(10)])
    for _ in range(5):  # one at a time (complete.lua) ...
        claim = small.claim()
        effects.apply_once(claim.job_id)
        small.complete(claim)
    claims = small.claim_many(5)  # ... and as a batch (complete_many.lua)
    for claim in claims:
        effects.apply_once(claim.job_id)
    small.complete_many(claims)
    snap = small.snapshot()
    assert sorted(snap.done) == sorted(ids[7:]) and set(effects.counts()) == set(ids[7:])
    assert small.enqueue("again", job_id=ids[9]).outcome is echoq.Enqueue.DUPLICATE  # still remembered
    assert small.enqueue("again", job_id=ids[0]).outcome is echoq.Enqueue.ENQUEUED  # forgotten
    # The ledger forgot ids[0]'s effect, and a stale worker's late effect is still refused:
    # the queue holds a NEW job under that id now, whose effect has not run -- so it runs once.
    assert effects.apply_once(ids[0]).outcome is echoq.Effect.APPLIED


def test_the_ledger_keeps_a_live_jobs_entry_however_long_it_lives(queue: echoq.Queue) -> None:
    small = echoq.Queue(queue.name, queue.client, keep_done=0)
    effects = Effects(small)
    slow = small.enqueue("slow").job_id
    claim = small.claim(lease_ms=60_000)
    assert effects.apply_once(slow).outcome is echoq.Effect.APPLIED
    for _ in range(20):  # many other jobs come and go
        small.enqueue("quick")
        small.complete(small.claim())
    assert effects.apply_once(slow).outcome is echoq.Effect.SKIPPED  # still protected
    small.complete(claim)
    assert effects.counts() == {}


def test_a_queue_that_ran_twice_as_many_jobs_holds_no_more(client: redis.Redis) -> None:
    """The soak in miniature: after 2N jobs through the Worker with the keyed consumer,
    every key holds exactly as much as after N."""
    after: list[dict[str, int]] = []
    queue = echoq.Queue(f"mini-soak-{id(client)}", client, keep_done=100, keep_dead=10)
    queue.reset()
    effects = Effects(queue, keep_outbox=100)
    try:
        for jobs in (300, 600):
            queue.enqueue_many([f"job {n}" for n in range(jobs)])
            report = Worker(queue, keyed_consumer(effects), concurrency=2, lease_ms=10_000).work(burst=True)
            assert report.completed == jobs
            held = sizes(queue)
            # The Worker's two keys: wakes nobody waited for (at most WAKE_CAP), and the
            # stalled-check lock while it has not expired (at most one string).
            assert held.pop("wake", 0) <= echoq.limits.WAKE_CAP and held.pop("stalled_lock", 0) <= 1, held
            after.append({k: v for k, v in held.items() if k != "stats"})
        assert after[0] == after[1] == {"rows": 0, "done": 100, "effects": 100, "outbox": 100}
    finally:
        queue.reset()


def test_the_keyspace_table_documents_every_key_a_busy_queue_holds(queue: echoq.Queue) -> None:
    queue.enqueue_many(["a", "b", "c", "d"])
    done = queue.claim()
    Effects(queue).apply_once(done.job_id)
    queue.complete(done)
    queue.retry(queue.claim(), max_attempts=1)
    queue.retry(queue.claim(), backoff_ms=60_000)
    queue.claim(lease_ms=60_000)
    names = {key.removeprefix(queue.keys.prefix) for key in queue.keys_in_use()}
    names = {"job:<id>" if n.startswith("job:") else n for n in names}
    assert names == {"job:<id>", "active", "scheduled", "dead", "done", "stats", "effects", "outbox", "wake"}
    queue.stalled_check_locked(every_ms=60_000)  # a Worker's beat: the lock, which expires by itself
    assert 0 < queue.client.pttl(queue.keys.stalled_lock) <= 60_000
    names.add("stalled_lock")
    documented = set(re.findall(r"``emq:\{q\}:([a-z:<>_]+)``", KEYSPACE_DOC or ""))
    assert names <= documented, names - documented
