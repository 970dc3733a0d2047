"""Validate, then write: a generated table of every script x every numeric argument x every
bad value, on Valkey and on Redis 7. Each bad call must get an error reply AND leave a
DUMP of every key of the queue exactly as it was -- on a queue busy enough that any move
the script went on to make would show (a held job, an expired lease, a due retry, a
pending job, an effect in the ledger).

The numeric arguments come from the scripts' own headers (every ``ARGV`` line with a
``low..high`` range), so a new script, or a new argument, is in the table the day its
header documents it; a meta-test fails when a runnable script has no valid call here.
The same table is run against the Python API, which must refuse the same values before
it sends anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import echoq
from echoq import scripts
from echoq.effects import Effects
from echoq.limits import BOUNDS
from echoq.queue import SCRIPT_KEYS
from echoq.worker import Backoff, Worker
from tests.support.helpers import dump, register_kit_scripts, wait_for_server_time

# -- the scripts' own account of their numeric arguments -------------------------------------

_ARGV = re.compile(r"^-- ARGV\[(\d+)(\.\.)?\]\s+(.*)$")
_RANGE = re.compile(r"(-?\d+)\.\.(\d+)( bytes)?")
# A variadic entry (ARGV[n..]) holds several values; which one of them, in a valid call
# below, its documented range is about.
_VARIADIC = {
    ("complete_many", 7): (8, "token"),
    ("enqueue_many", 3): (4, "payload"),
    ("extend_many", 2): (3, "token"),
    ("release_many", 1): (2, "token"),
}


def documented(name: str) -> list[tuple[int, str, int, int, str]]:
    """(ARGV position, what the header calls it, low, high, 'number' or 'bytes') for every
    ARGV of a script whose header gives a range: a whole number, or a text size in bytes."""
    entries: list[tuple[int, bool, str]] = []
    for line in scripts.raw_source(name).splitlines():
        if not line.startswith("--"):
            break
        match = _ARGV.match(line)
        if match:
            entries.append((int(match[1]), bool(match[2]), match[3]))
        elif entries and re.match(r"^--\s{10,}\S", line):  # a continuation of the entry above
            position, variadic, text = entries[-1]
            entries[-1] = (position, variadic, text + " " + line[2:].strip())
        elif entries:
            entries.append((0, False, ""))  # the ARGV block ended
    found = []
    for position, variadic, text in entries:
        ranges = _RANGE.findall(text)
        if not position or not ranges:
            continue
        low, high, unit = ranges[-1]
        what = re.split(r"\s{2,}", text)[0]
        if variadic:
            position, what = _VARIADIC[(name, position)]
        found.append((position, what, int(low), int(high), "bytes" if unit else "number"))
    return found


def documented_numbers(name: str) -> list[tuple[int, str, int, int]]:
    return [(pos, what, low, high) for pos, what, low, high, kind in documented(name) if kind == "number"]


def documented_texts(name: str) -> list[tuple[int, str, int]]:
    return [(pos, what, high) for pos, what, _low, high, kind in documented(name) if kind == "bytes"]


register_kit_scripts()  # the kit's scripts are checked here too
RUNNABLE = [n for n in scripts.names() if not n.startswith("bench/")]


def valid_calls(q: echoq.Queue, held: echoq.Claim) -> dict[str, tuple[list[str], list[Any]]]:
    """A call of every runnable script that is accepted on a busy queue (see ``busy``)."""
    new = q.new_job_id()
    k = q.keys
    try:  # busy()'s dead job (none on a fresh queue, nor where a test overwrote the dead set)
        dead = [i.decode() if isinstance(i, bytes) else i for i in q.client.zrange(k.dead, 0, 0)] or [new]
    except redis.ResponseError:
        dead = [new]
    return {
        "claim": (q.script_keys("claim"), [60_000, 10, 100]),
        "complete": (q.script_keys("complete", held.job_id), [held.job_id, held.token, 100]),
        "complete_many": (
            q.script_keys("complete_many", held.job_id),
            [100, 60_000, 10, 100, 0, 0, held.job_id, held.token],
        ),
        "effect": (q.script_keys("effect", held.job_id), [held.job_id, "charged", 100]),
        "enqueue": (q.script_keys("enqueue", new), [new, "payload", 0, 0]),
        "enqueue_many": (q.script_keys("enqueue_many", new), [0, 0, new, "payload"]),
        "extend": (q.script_keys("extend", held.job_id), [held.job_id, held.token, 60_000]),
        "extend_many": (q.script_keys("extend_many", held.job_id), [60_000, held.job_id, held.token]),
        "release_many": (q.script_keys("release_many", held.job_id), [held.job_id, held.token]),
        "requeue_dead": (q.script_keys("requeue_dead", *dead), dead),
        "purge_dead": (q.script_keys("purge_dead", *dead), dead),
        "reap": (q.script_keys("reap"), [100, 100]),
        "retry": (q.script_keys("retry", held.job_id), [held.job_id, held.token, "boom", 0, 3, 100]),
        "snapshot": (q.script_keys("snapshot"), [100]),
        "stalled_check": (q.script_keys("stalled_check"), [2, 100, 100]),
        "waiting": (q.script_keys("waiting"), []),
        "teaching/bank_charge": ([k.prefix + "charges", k.prefix + "idempotency"], ["card-1", 500, "key-1"]),
        "teaching/fast_forward": ([k.active], [1_000]),
        "teaching/naive_pop": ([k.pending, k.stats], []),
        "teaching/naive_effect": ([k.effects, k.outbox], [held.job_id, "charged", 100]),
    }


def busy(q: echoq.Queue) -> echoq.Claim:
    """Work for every script: a held job (returned), an expired lease, a dead job, a retry
    whose backoff is due, pending jobs and an effect in the ledger."""
    for i in range(5):
        q.enqueue(f"job {i}")
    held = q.claim(lease_ms=60_000)
    lapsed = q.claim(lease_ms=1)
    q.retry(q.claim(lease_ms=60_000), error="boom", max_attempts=1)  # dead
    retried = q.claim(lease_ms=60_000)
    result = q.retry(retried, error="boom", backoff_ms=1)
    Effects(q).apply_once(lapsed.job_id, "charged")  # held has none yet: effect.lua applies it
    wait_for_server_time(q.client, max(lapsed.deadline_ms, result.due_ms or 0) + 1)
    return held


def bad_values(low: int, high: int) -> list[str]:
    values = ["nan", "inf", "-inf", "-1", "1.5", "x", "", str(high + 1), "1e3", "0x10", " 5", "9" * 30]
    if low - 1 != -1:
        values.append(str(low - 1))
    return values


TABLE = [
    pytest.param(name, position, what, low, high, bad, id=f"{name}-{what.replace(' ', '_')}-{bad or 'empty'}")
    for name in RUNNABLE
    for position, what, low, high in documented_numbers(name)
    for bad in bad_values(low, high)
]


@pytest.mark.server
def test_the_table_covers_every_script_and_every_documented_number() -> None:
    q = echoq.Queue("table-shape", echoq.connect())
    calls = valid_calls(q, echoq.Claim(echoq.new_job_id(), "", 1, 1, 0))
    assert sorted(calls) == sorted(RUNNABLE), "a runnable script has no valid call in tests/test_validation.py"
    numbers = {name: documented_numbers(name) for name in RUNNABLE}
    # Every script that takes a number documents its range; naive_pop, waiting and the dead
    # letters' moves (JOB ids only) take none.
    takes_none = {"teaching/naive_pop", "waiting", "requeue_dead", "purge_dead"}
    assert {n for n, found in numbers.items() if found} == set(RUNNABLE) - takes_none
    assert sum(map(len, numbers.values())) >= 25 and len(TABLE) >= 25 * 12, len(TABLE)
    texts = {name: documented_texts(name) for name in RUNNABLE}
    assert {n for n, found in texts.items() if found} == {
        "enqueue",
        "enqueue_many",
        "retry",
        "effect",
        "teaching/naive_effect",
    }
    for name in RUNNABLE:
        for position, what, *_ in documented(name):
            assert position <= len(calls[name][1]), (name, what, position)


@pytest.mark.parametrize(("name", "position", "what", "low", "high", "bad"), TABLE)
def test_every_script_refuses_every_bad_number_and_changes_nothing(
    queue: echoq.Queue, name: str, position: int, what: str, low: int, high: int, bad: str
) -> None:
    held = busy(queue)
    keys, args = valid_calls(queue, held)[name]
    args[position - 1] = bad
    before = dump(queue)
    with pytest.raises(echoq.InvalidArgument, match=rf"must be a whole number between {low} and {high}, got "):
        scripts.run(queue.client, name, keys, args)
    assert dump(queue) == before


@pytest.mark.parametrize("name", [n for n in RUNNABLE if n not in ("snapshot", "waiting")])  # the two reads
def test_the_valid_calls_do_write(queue: echoq.Queue, name: str) -> None:
    """The control: on the same busy queue, each valid call changes what DUMP shows, so the
    table above would see a write a script made before refusing."""
    held = busy(queue)
    keys, args = valid_calls(queue, held)[name]
    before = dump(queue)
    scripts.run(queue.client, name, keys, args)
    assert dump(queue) != before


def test_the_documented_ranges_are_the_library_bounds() -> None:
    """What a library script's header documents is what limits.BOUNDS (and args.lua) enforce.
    (The kit's bank stand-in has a range of its own, cents, which echoq/teaching/bank.py checks.)"""
    library = [n for n in RUNNABLE if not n.startswith("teaching/")]
    ranges = {(lo, hi) for name in library for _pos, _what, lo, hi in documented_numbers(name)}
    # ... and complete_many's confirm flag, 0 or 1.
    allowed = set(BOUNDS.values()) | {(0, BOUNDS["count"][1]), (0, BOUNDS["lease_ms"][1]), (0, 1)}
    assert ranges <= allowed, ranges - allowed


# -- the Python API refuses the same values, before it sends anything -----------------------

PY_BAD: list[Any] = [math.nan, math.inf, -math.inf, -1, 1.5, "x", "", None, True, 2**70]


def _py_bad(bound: str) -> list[Any]:
    low, high = _COUNT_FROM_0 if bound == "count from 0" else BOUNDS[bound]
    return [*PY_BAD, high + 1, *([low - 1] if low - 1 != -1 else [])]


_COUNT_FROM_0 = (0, BOUNDS["count"][1])  # complete_many_and_claim: count 0 completes and claims nothing


def _api_calls(q: echoq.Queue, held: echoq.Claim) -> dict[str, tuple[str, Callable[[Any], object]]]:
    """Every public entry point that takes a number: (the bound it follows, a call with the value)."""
    client = q.client
    return {
        "Queue(keep_done)": ("keep_done", lambda v: echoq.Queue(q.name, client, keep_done=v)),
        "Queue(keep_dead)": ("keep_dead", lambda v: echoq.Queue(q.name, client, keep_dead=v)),
        "enqueue(delay_ms)": ("delay_ms", lambda v: q.enqueue("x", delay_ms=v)),
        "enqueue_many(delay_ms)": ("delay_ms", lambda v: q.enqueue_many(["x"], delay_ms=v)),
        "claim(lease_ms)": ("lease_ms", lambda v: q.claim(lease_ms=v)),
        "claim_many(count)": ("count", lambda v: q.claim_many(v)),
        "claim_many(lease_ms)": ("lease_ms", lambda v: q.claim_many(1, lease_ms=v)),
        "complete(token)": ("token", lambda v: q.complete(held.job_id, v)),
        "complete_many(token)": (
            "token",
            lambda v: q.complete_many([echoq.Claim(held.job_id, "", v, 1, 0)]),
        ),
        "complete_many_and_claim(count)": ("count from 0", lambda v: q.complete_many_and_claim([held], count=v)),
        "complete_many_and_claim(lease_ms)": (
            "lease_ms",
            lambda v: q.complete_many_and_claim([held], count=1, lease_ms=v),
        ),
        "complete_and_claim(lease_ms)": ("lease_ms", lambda v: q.complete_and_claim(held, lease_ms=v)),
        "complete_and_claim(count)": ("count from 0", lambda v: q.complete_and_claim(held, count=v)),
        "retry(token)": ("token", lambda v: q.retry(held.job_id, v)),
        "retry(backoff_ms)": ("delay_ms", lambda v: q.retry(held, backoff_ms=v)),
        "retry(max_attempts)": ("max_attempts", lambda v: q.retry(held, max_attempts=v)),
        "extend(token)": ("token", lambda v: q.extend(held.job_id, v)),
        "extend(lease_ms)": ("lease_ms", lambda v: q.extend(held, lease_ms=v)),
        "extend_many(token)": ("token", lambda v: q.extend_many([echoq.Claim(held.job_id, "", v, 1, 0)])),
        "extend_many(lease_ms)": ("lease_ms", lambda v: q.extend_many([held], lease_ms=v)),
        "release_many(token)": ("token", lambda v: q.release_many([echoq.Claim(held.job_id, "", v, 1, 0)])),
        "reap_once(limit)": ("limit", lambda v: q.reap_once(limit=v)),
        "reap(limit)": ("limit", lambda v: q.reap(limit=v)),
        "stalled_check(max_stalled)": ("max_stalled", lambda v: q.stalled_check(max_stalled=v)),
        "stalled_check(limit)": ("limit", lambda v: q.stalled_check(limit=v)),
        "stalled_check_locked(max_stalled)": (
            "max_stalled",
            lambda v: q.stalled_check_locked(max_stalled=v, every_ms=1_000),
        ),
        "stalled_check_locked(limit)": ("limit", lambda v: q.stalled_check_locked(limit=v, every_ms=1_000)),
        "snapshot(limit)": ("limit", lambda v: q.snapshot(limit=v)),
        "Effects(keep_outbox)": ("keep_outbox", lambda v: Effects(q, keep_outbox=v)),
        "Worker(lease_ms)": ("lease_ms", lambda v: Worker(q, print, lease_ms=v)),
        "Worker(max_stalled)": ("max_stalled", lambda v: Worker(q, print, max_stalled=v)),
        "Worker(max_attempts)": ("max_attempts", lambda v: Worker(q, print, max_attempts=v)),
        "Backoff(base_ms)": ("delay_ms", lambda v: Backoff(base_ms=v)),
        "Backoff(cap_ms)": ("delay_ms", lambda v: Backoff(cap_ms=v)),
    }


API = sorted(_api_calls(echoq.Queue("api-shape", echoq.connect()), echoq.Claim(echoq.new_job_id(), "", 1, 1, 0)))


@pytest.mark.parametrize("call", API)
def test_the_python_api_refuses_the_same_bad_numbers_before_writing(queue: echoq.Queue, call: str) -> None:
    held = busy(queue)
    bound, run = _api_calls(queue, held)[call]
    before = dump(queue)
    for bad in _py_bad(bound):
        with pytest.raises(echoq.InvalidArgument, match="must be a whole number|pass the Claim") as refused:
            run(bad)
        assert "\n" not in str(refused.value)
    assert dump(queue) == before


def test_keep_done_lots_fails_at_construction_before_anything_is_written(client: redis.Redis) -> None:
    with pytest.raises(echoq.InvalidArgument, match="keep_done must be a whole number between 0 and 1,000,000"):
        echoq.Queue("never-written", client, keep_done="lots")  # type: ignore[arg-type]
    assert not list(client.scan_iter(match="emq:{never-written}:*"))


def test_huge_leases_delays_and_backoffs_are_refused_not_parked_forever(queue: echoq.Queue) -> None:
    """The issue's finding: huge numbers once parked a job forever with a deadline of -2**63."""
    job = queue.enqueue("x").job_id
    for call in (
        lambda: queue.claim(lease_ms=10**19),
        lambda: queue.enqueue("y", delay_ms=10**19),
        lambda: queue._run("claim", queue.script_keys("claim"), ["1" + "0" * 19, 1, 10]),
        lambda: queue._run("claim", queue.script_keys("claim"), ["nan", 1, 10]),
    ):
        with pytest.raises(echoq.InvalidArgument):
            call()
    claim = queue.claim(lease_ms=60_000)
    for backoff in (10**19, "nan", "inf"):
        with pytest.raises(echoq.InvalidArgument):
            queue._run("retry", queue.script_keys("retry", job), [job, claim.token, "e", backoff, 3, 10])
    assert queue.snapshot().active == {job: claim.deadline_ms}


# -- texts: what a script stores and hands back is UTF-8 within its documented size ----------

BAD_TEXTS: list[bytes] = [
    b"\xff\xfe",  # never UTF-8
    b"ok\x80",  # a continuation byte with no lead
    b"\xc0\x80",  # an overlong NUL
    b"\xed\xa0\x80",  # a surrogate
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"\xe2\x82",  # cut short
]

TEXT_TABLE = [
    pytest.param(name, position, what, high, bad, id=f"{name}-{what}-{index}")
    for name in RUNNABLE
    for position, what, high in documented_texts(name)
    for index, bad in enumerate([*BAD_TEXTS, b"a" * (high + 1)])
]


@pytest.mark.parametrize(("name", "position", "what", "high", "bad"), TEXT_TABLE)
def test_every_script_refuses_every_bad_text_and_changes_nothing(
    queue: echoq.Queue, name: str, position: int, what: str, high: int, bad: bytes
) -> None:
    held = busy(queue)
    keys, args = valid_calls(queue, held)[name]
    args[position - 1] = bad
    before = dump(queue)
    expected = f"more than the {high} allowed" if len(bad) > high else "is not UTF-8 text"
    with pytest.raises(echoq.InvalidArgument, match=expected):
        scripts.run(queue.client, name, keys, args)
    assert dump(queue) == before


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=12), st.text(max_size=6).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_the_scripts_utf8_check_is_pythons(queue: echoq.Queue, raw: bytes) -> None:
    """lua/includes/text.lua accepts exactly what Python's strict decoder accepts."""
    try:
        raw.decode("utf-8")
        python_says = True
    except UnicodeDecodeError:
        python_says = False
    job = queue.new_job_id()
    if python_says:
        scripts.run(queue.client, "enqueue", queue.script_keys("enqueue", job), [job, raw, 0, 0])
        assert queue.job(job).payload == raw.decode()
    else:
        with pytest.raises(echoq.InvalidPayload, match="payload is not UTF-8 text"):
            scripts.run(queue.client, "enqueue", queue.script_keys("enqueue", job), [job, raw, 0, 0])
        assert queue.job(job) is None


# -- a queue key of another type is refused before any write ---------------------------------

_KEY_TYPES = {
    "pending": "zset",
    "active": "zset",
    "scheduled": "zset",
    "dead": "zset",
    "done": "zset",
    "stats": "hash",
    "effects": "hash",
    "outbox": "list",
}
_TYPED_CASES = [
    (name, key)
    for name in RUNNABLE
    if not name.startswith("teaching/")
    for key in SCRIPT_KEYS[name]
    if key in _KEY_TYPES
]


@pytest.mark.one_server
@pytest.mark.parametrize(("name", "key"), _TYPED_CASES, ids=[f"{n}-{k}" for n, k in _TYPED_CASES])
def test_every_script_refuses_a_queue_key_of_another_type_and_changes_nothing(
    queue: echoq.Queue, name: str, key: str
) -> None:
    held = busy(queue)
    queue.client.set(getattr(queue.keys, key), "written by something else")  # e.g. a stray SET stats
    keys, args = valid_calls(queue, held)[name]
    before = dump(queue)
    with pytest.raises(echoq.WrongKeyType, match=f"{key} holds a string, not a {_KEY_TYPES[key]}"):
        scripts.run(queue.client, name, keys, args)
    assert dump(queue) == before


def test_a_non_hash_stats_key_and_retry_strand_no_job(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("handler fails").job_id
    claim = queue.claim(lease_ms=60_000)
    queue.client.delete(queue.keys.stats)
    queue.client.rpush(queue.keys.stats, "not a hash")
    with pytest.raises(echoq.WrongKeyType):
        queue.retry(claim, error="boom")
    queue.client.delete(queue.keys.stats)
    assert queue.snapshot().place_of(job_id) is echoq.JobState.ACTIVE  # still held, in one set
