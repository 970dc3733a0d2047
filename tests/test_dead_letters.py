"""Dead letters as API: listed with their reason, error and tries (paged), requeued (fresh
tries, first-in first-out place kept, token kept) and purged -- by the library's moves
(lua/requeue_dead.lua, lua/purge_dead.lua) and by ``python -m echoq dead``."""

from __future__ import annotations

import subprocess
import sys

import pytest

import echoq
from echoq import Complete, JobState, Purge, Requeue, scripts
from echoq.queue import DEAD_PAGE_MAX
from tests.support.helpers import assert_one_place, expire, throwaway_env
from tests.support.servers import fresh_name


def _dead(queue: echoq.Queue, payloads: list[str], error: str = "boom") -> list[echoq.Claim]:
    """Enqueue ``payloads`` and dead-letter each after one failed try (max_attempts 1):
    the claims their (now stale) workers held, in order."""
    queue.enqueue_many(payloads)
    claims = [c for start in range(0, len(payloads), 1000) for c in queue.claim_many(min(1000, len(payloads) - start))]
    for claim in claims:
        assert queue.retry(claim, error=f"{error} {claim.payload}", max_attempts=1).outcome is echoq.Retry.DEAD
    return claims


def test_dead_letters_are_listed_with_reason_error_and_tries_in_pages(queue: echoq.Queue) -> None:
    claims = _dead(queue, [f"job {n}" for n in range(5)])
    first = queue.dead_letters(limit=2)
    assert [d.job_id for d in first.letters] == [c.job_id for c in claims[:2]]  # longest dead first
    assert first.total == 5 and first.next_offset == 2
    letter = first.letters[0]
    assert (letter.reason, letter.error, letter.attempts, letter.payload) == ("max_attempts", "boom job 0", 1, "job 0")
    assert letter.died_ms > 0
    rest = queue.dead_letters(first.next_offset, limit=DEAD_PAGE_MAX)
    assert [d.job_id for d in rest.letters] == [c.job_id for c in claims[2:]] and rest.next_offset is None
    with pytest.raises(echoq.InvalidArgument, match="limit must be a whole number between 1 and 1,000"):
        queue.dead_letters(limit=DEAD_PAGE_MAX + 1)


def test_requeue_gives_fresh_tries_at_the_jobs_first_in_first_out_place(queue: echoq.Queue) -> None:
    claims = _dead(queue, ["old one", "old two"])
    younger = queue.enqueue("younger").job_id  # arrived after both: claimed after them
    assert queue.requeue_dead([claims[1].job_id]) == [Requeue.REQUEUED]
    assert queue.requeue_dead([claims[0].job_id, younger, "JOB" + "0" * 26]) == [
        Requeue.REQUEUED,
        Requeue.NOT_DEAD,
        Requeue.GONE,
    ]
    snap = queue.snapshot()
    assert snap.pending == [claims[0].job_id, claims[1].job_id, younger] and snap.counts["dead"] == 0
    assert_one_place(queue, {*[c.job_id for c in claims], younger})
    row = queue.job(claims[0].job_id)
    assert row is not None and row.state is JobState.PENDING and (row.attempts, row.stalled, row.unstarted) == (0, 0, 0)
    assert row.reason is None and row.token == claims[0].token  # the token only ever grows
    assert snap.stats["requeued"] == 2
    # The worker that held it before it died is still fenced off; the next claim is a fresh first try.
    again = queue.claim()
    assert again is not None and again.job_id == claims[0].job_id and again.attempts == 1
    assert again.token == claims[0].token + 1 and queue.complete(claims[0]) is Complete.STALE


def test_requeue_all_and_purge_all_loop_over_more_than_one_call(queue: echoq.Queue) -> None:
    n = DEAD_PAGE_MAX + 5  # more than one script call takes
    _dead(queue, [f"j{i}" for i in range(n)])
    assert queue.requeue_all_dead() == n
    assert queue.snapshot(limit=1).counts == {"pending": n, "active": 0, "scheduled": 0, "dead": 0, "done": 0}
    for claim in queue.claim_many(1000) + queue.claim_many(5):
        queue.retry(claim, error="again", max_attempts=1)  # dead again: a fresh try was one try
    assert queue.purge_all_dead() == n
    assert sorted(queue.keys_in_use()) == sorted([queue.keys.stats, queue.keys.wake])  # every row went


def test_purge_deletes_rows_and_leaves_live_jobs_alone(queue: echoq.Queue) -> None:
    claims = _dead(queue, ["a", "b"])
    live = queue.enqueue("live").job_id
    queue.client.hset(queue.keys.effects, claims[0].job_id, 1)
    stray = "JOB" + "1" * 26
    queue.client.zadd(queue.keys.dead, {stray: 1})  # an entry with no row (something else wrote it)
    assert queue.purge_dead([claims[0].job_id, live, stray, "JOB" + "2" * 26]) == [
        Purge.PURGED,
        Purge.NOT_DEAD,
        Purge.PURGED,
        Purge.GONE,
    ]
    assert queue.job(claims[0].job_id) is None and not queue.client.hexists(queue.keys.effects, claims[0].job_id)
    assert queue.job(live) is not None and queue.snapshot().dead == {
        claims[1].job_id: queue.snapshot().dead[claims[1].job_id]
    }


def test_requeue_and_purge_check_every_id_before_the_first_write(queue: echoq.Queue) -> None:
    claims = _dead(queue, ["a"])
    for move in (queue.requeue_dead, queue.purge_dead):
        with pytest.raises(echoq.InvalidJobId):
            move([claims[0].job_id, "not-an-id"])
        with pytest.raises(echoq.InvalidArgument, match="list of JOB ids"):
            move(claims[0].job_id)
    assert list(queue.snapshot().dead) == [claims[0].job_id]
    # The scripts check their arguments themselves too, before any write.
    k = queue.keys
    for name, keys in (("requeue_dead", [k.pending, k.dead, k.stats]), ("purge_dead", [k.dead, k.stats, k.effects])):
        with pytest.raises(echoq.InvalidArgument, match="give 1..1000 JOB ids"):
            scripts.run(queue.client, name, keys, [])
        with pytest.raises(echoq.InvalidJobId, match="is not a JOB id"):
            scripts.run(queue.client, name, [*keys, k.prefix + "job:x"], ["x"])
        with pytest.raises(echoq.InvalidJobId, match="does not belong to"):
            scripts.run(queue.client, name, [*keys, k.job("JOB" + "3" * 26)], [claims[0].job_id])
    assert list(queue.snapshot().dead) == [claims[0].job_id]


def _echoq(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = throwaway_env() | {"VALKEY_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "echoq", "dead", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_the_dead_command_lists_requeues_and_purges(valkey_client) -> None:  # type: ignore[no-untyped-def]
    queue, server_url = echoq.Queue(fresh_name(), valkey_client), echoq.server_url()
    claims = _dead(queue, ["a", "b", "c"])
    listed = _echoq("list", queue.name, "--limit", "2", url=server_url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith(claims[0].job_id) and "max_attempts  tries 1  boom a" in lines[0]
    assert lines[-1] == f"1..2 of 3 dead in {queue.name}; next page: --offset 2"
    one = _echoq("requeue", queue.name, claims[0].job_id, url=server_url)
    assert one.returncode == 0 and one.stdout.strip() == f"requeued 1 of 1 named in {queue.name}", one
    again = _echoq("requeue", queue.name, claims[0].job_id, url=server_url)
    assert again.returncode == 1 and f"{claims[0].job_id}: not requeued: its job is not dead" in again.stdout
    purged = _echoq("purge", queue.name, "--all", url=server_url)
    assert purged.returncode == 0 and purged.stdout.strip() == f"purged 2 dead letters of {queue.name}", purged
    assert queue.snapshot().counts["dead"] == 0 and queue.snapshot().pending == [claims[0].job_id]
    for bad in (["requeue", queue.name], ["purge", queue.name, "x"]):
        refused = _echoq(*bad, url=server_url)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and refused.stderr.startswith("echoq: ")
    queue.reset()


def test_the_dead_command_refuses_ids_and_all_together_or_neither_before_it_connects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from echoq.__main__ import main

    for argv in (["dead", "purge", "orders", "JOB" + "0" * 26, "--all"], ["dead", "requeue", "orders"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "name JOB ids, or --all (not both, not neither)" in err, err


def test_the_librarys_requeue_and_lesson_07s_reference_leave_the_same_queue(valkey_client) -> None:  # type: ignore[no-untyped-def]
    """Queue.requeue_all_dead and lesson 07's reference requeue_dead
    (echoq/teaching/exercises/requeue/solution.lua) agree: on the exercise's generated queues
    (the differential judge's states and comparison: every set's members and scores, every row
    field, TTLs), and on a real queue where arrival numbers decide the place in line. The only
    keys they may differ in are the library's own: its counters (stats) and the wake it
    pushes for idle workers (a hint, which the lesson's script has no worker to give)."""
    from echoq.teaching.exercises import EXERCISES, differential, fixed_time

    reference = EXERCISES["requeue"].solution
    now = fixed_time.NOW_MS
    for n, state in enumerate(differential.generated(EXERCISES["requeue"].move)):
        lesson, library = (echoq.Queue(fresh_name(), valkey_client) for _ in range(2))
        try:
            for queue in (lesson, library):
                differential._build(queue, state, now)
            before = differential.keyspace(valkey_client, lesson.keys.prefix)
            moved = scripts.run_text(valkey_client, reference, [lesson.keys.dead, lesson.keys.pending], [])
            assert library.requeue_all_dead() == moved, state.describe()
            theirs = differential.keyspace(valkey_client, lesson.keys.prefix)
            mine = differential.keyspace(valkey_client, library.keys.prefix)
            mine.pop("wake", None)
            found = differential.compare(mine, theirs, before, differential._Clock(now))
            assert found is None, f"state {n}: {found[0]}\n{state.describe()}"
        finally:
            lesson.reset()
            library.reset()
    # A real queue: two jobs dead by stalls, one older and one younger job still pending.
    lesson, library = (echoq.Queue(fresh_name(), valkey_client) for _ in range(2))
    try:
        for queue in (lesson, library):
            queue.enqueue("older, still pending")
            claims = queue.claim_many(1, lease_ms=60_000)  # held: it stays out of the way
            queue.enqueue_many(["dies 1", "dies 2"])
            dying = queue.claim_many(2, lease_ms=1)
            queue.enqueue("younger")
            queue.release_many(claims)  # back at its own (first) place
            expire(queue, *dying)
            assert len(queue.stalled_check(max_stalled=1).dead) == 2
        scripts.run_text(valkey_client, reference, [lesson.keys.dead, lesson.keys.pending], [])
        library.requeue_all_dead()
        for queue in (lesson, library):
            scored = queue.client.zrange(queue.keys.pending, 0, -1, withscores=True)
            rows = [queue.job(job_id) for job_id, _score in scored]
            assert [(r.payload, r.attempts, r.stalled, r.token) for r in rows] == [
                ("older, still pending", 0, 0, 1),
                ("dies 1", 0, 0, 1),
                ("dies 2", 0, 0, 1),
                ("younger", 0, 0, 0),
            ]
            assert [score for _id, score in scored] == [1, 2, 3, 4]  # each at its arrival number
    finally:
        lesson.reset()
        library.reset()
