"""Lesson 04: the stall count with the seed's threshold, and a two-step reaper raced.

**the stall count.** The learner's Lua sweep (KEYS active, pending, dead; ARGV max_stalled)
must add one to a stalled job's count and compare the NEW count: below max_stalled the job
is recovered, at or above it the job is dead-lettered. The check plays a poison job: every
worker that claims it is a child process SIGKILLed right after its claim; after each
kill the lease runs out and the learner's sweep runs. Seeded trials over several
max_stalled values; a live worker's long lease sits beside it all the time. The verdict:
at which stall the job reached emq:{q}:dead, and what every set and row say after each sweep.

**the two-step reaper.** The learner writes ``read_expired(r, keys)`` and
``move_back(r, keys, ids)`` with separate commands, races two of them on two connections
(reaper 1 frozen between its read and its move while reaper 2 runs and worker B claims)
and counts the duplicate deliveries it caused. The check verifies the reaper alone (on the
server's clock, a clock an hour fast included), replays the race, and compares the count.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ... import scripts
from ...queue import Queue
from .. import processes
from ..fast_forward import fast_forward
from .core import Exercise, Misconception, Run, check_runner, register
from .differential import Move, State, contract_step, states

POISON_LEASE_MS = 5_000
LIVE_LEASE_MS = 86_400_000

# -- the stall count -----------------------------------------------------------------------------

_HEAD = """\
-- KEYS[1] = emq:{q}:active   KEYS[2] = emq:{q}:pending   KEYS[3] = emq:{q}:dead
-- ARGV[1] = max_stalled: the stall count that is fatal
local prefix = string.sub(KEYS[1], 1, -7)  -- 'emq:{q}:active' minus 'active'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_stalled = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(expired) do
  local row = prefix .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
"""

STALL_STUB = (
    _HEAD
    + """\
  -- TODO: count this stall on the row; then, by the seed's rule, a count below max_stalled
  --       is recovered (as below) and a count at or above it is dead-lettered:
  --       ZADD it to KEYS[3] scored by now, and HSET the row's state to 'dead'
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', row, 'state', 'pending')
end
return expired
"""
)

_DECIDE = """\
  local stalled = redis.call('HINCRBY', row, 'stalled', 1)
  if stalled >= max_stalled then
    redis.call('ZADD', KEYS[3], now, id)
    redis.call('HSET', row, 'state', 'dead')
  else
    redis.call('ZADD', KEYS[2], 0, id)
    redis.call('HSET', row, 'state', 'pending')
  end
end
return expired
"""

STALL_SOLUTION = _HEAD + _DECIDE


def _stall_variant(decide: str, head: str = _HEAD) -> str:
    return head + decide


STALL_ALTERNATIVES = [
    _HEAD
    + """\
  local count = tonumber(redis.call('HGET', row, 'stalled') or '0') + 1
  redis.call('HSET', row, 'stalled', count)
  if count < max_stalled then
    redis.call('ZADD', KEYS[2], 0, id)
    redis.call('HSET', row, 'state', 'pending')
  else
    redis.call('HSET', row, 'state', 'dead', 'reason', 'stalled ' .. count .. ' times')
    redis.call('ZADD', KEYS[3], now, id)
  end
end
return {}
""",
    """\
local prefix = KEYS[1]:gsub('active$', '')
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local recovered, dead = {}, {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE')) do
  local row = prefix .. 'job:' .. id
  local n = redis.call('HINCRBY', row, 'stalled', 1)
  redis.call('ZREM', KEYS[1], id)
  local fatal = n >= tonumber(ARGV[1])
  redis.call('ZADD', fatal and KEYS[3] or KEYS[2], fatal and now or 0, id)
  redis.call('HSET', row, 'state', fatal and 'dead' or 'pending')
  table.insert(fatal and dead or recovered, id)
end
return {recovered, dead}
""",
]

STALL_MISCONCEPTIONS = [
    Misconception(
        "stall-never-counted",
        "stalls never counted",
        "A poison job killed {kills} workers in a row and was recovered every time; its row's stalled field "
        "stayed {count}: nothing kept the count where the next sweep could read it, so nothing will ever stop it.",
        "Each sweep is a new script run: a Lua variable starts afresh every time.",
        "HINCRBY the row's 'stalled' field by 1 for each stalled job; it returns the new count.",
        example=_stall_variant(_DECIDE.replace("redis.call('HINCRBY', row, 'stalled', 1)", "1")),
    ),
    Misconception(
        "never-dead-letters",
        "no dead letter",
        "A poison job killed {kills} workers in a row (its stalled count reached {count}, max_stalled {max}) and "
        "was recovered every time: it would kill workers forever.",
        "The count is there; what should happen when it reaches max_stalled?",
        "When the new count is at or above max_stalled, ZADD the id to KEYS[3] and mark the row 'dead' instead of "
        "recovering it.",
        example=_stall_variant(
            "  redis.call('HINCRBY', row, 'stalled', 1)\n"
            "  redis.call('ZADD', KEYS[2], 0, id)\n"
            "  redis.call('HSET', row, 'state', 'pending')\nend\nreturn expired\n"
        ),
    ),
    Misconception(
        "one-stall-late",
        "one stall late",
        "With max_stalled = {max} the poison job was dead-lettered at stall {stall}, one late: the seed's rule "
        "makes stall {max} fatal (BullMQ's maxStalledCount = {forgiven} forgives {forgiven}).",
        "Is the count you compare the one before this stall, or after it? And is equal fatal?",
        "Compare the value HINCRBY returns (this stall included) with max_stalled, and dead-letter when it is >=.",
        example=_stall_variant(_DECIDE.replace("stalled >= max_stalled", "stalled > max_stalled")),
    ),
    Misconception(
        "one-stall-early",
        "one stall early",
        "With max_stalled = {max} the poison job was dead-lettered at stall {stall}, too early: stalls below "
        "max_stalled are recovered; stall {max} is the fatal one.",
        "Count the stalls forgiven: with max_stalled = 2, how many are there?",
        "Recover while the new count is below max_stalled; dead-letter at or above it, without subtracting one.",
        example=_stall_variant(_DECIDE.replace("stalled >= max_stalled", "stalled >= max_stalled - 1")),
    ),
    Misconception(
        "dead-in-two-places",
        "dead and somewhere else",
        "The dead-lettered job was in {places} at once. A job is in exactly one place at every instant.",
        "Follow one id through your branch: which sets does it end in?",
        "When you dead-letter a job, do not also ZADD it back to pending.",
        example=_stall_variant(
            _DECIDE.replace(
                "  if stalled >= max_stalled then\n",
                "  redis.call('ZADD', KEYS[2], 0, id)\n  if stalled >= max_stalled then\n",
            )
        ),
    ),
    Misconception(
        "dead-row-not-marked",
        "dead, but the row disagrees",
        "The poison job sits in emq:{{q}}:dead but its row says state={state!r}: a person looking at the job, or "
        "a script fencing it, believes it is somewhere it is not.",
        "The row says where the job is.",
        "HSET the row's state to 'dead' when you dead-letter it.",
        example=_stall_variant(_DECIDE.replace("    redis.call('HSET', row, 'state', 'dead')\n", "")),
    ),
    Misconception(
        "recovered-row-not-pending",
        "recovered, but the row disagrees",
        "The recovered job is back in emq:{{q}}:pending but its row says state={state!r}.",
        "The row says where the job is.",
        "HSET the row's state to 'pending' when you recover it.",
        example=_stall_variant(_DECIDE.replace("    redis.call('HSET', row, 'state', 'pending')\n", "")),
    ),
    Misconception(
        "counts-live-leases",
        "counts a live lease as a stall",
        "A worker that is alive, its lease running for {left} more, had its job counted as stalled by your sweep "
        "({what}).",
        "Which members of the active set are stalled? Only those whose deadline has come.",
        "Select with ZRANGEBYSCORE from -inf to the server's now.",
        example=STALL_SOLUTION.replace("'-inf', now)", "'-inf', '+inf')"),
    ),
]

STALL = register(
    Exercise(
        key="stall",
        lesson="04",
        title="the stall count",
        kind="lua",
        names=(),
        stub=STALL_STUB,
        solution=STALL_SOLUTION,
        alternatives=STALL_ALTERNATIVES,
        misconceptions=STALL_MISCONCEPTIONS,
    )
)


def _poisoned_worker(queue: Queue) -> None:
    """In a child: claim (the real script); the job kills the process (kill_at='claim')."""
    Queue(queue.name, processes.counting_client(queue.client)).claim(lease_ms=POISON_LEASE_MS)


def _sweep_in_child(source: str, queue: Queue, max_stalled: int) -> None:
    k = queue.keys
    client = processes.counting_client(queue.client)
    scripts.run_text(client, source, [k.active, k.pending, k.dead], [max_stalled], name="your sweep")


def _sweep(run: Run, source: str, queue: Queue, max_stalled: int) -> None:
    """Run the learner's sweep (in a child: a script that never ends must not hang the check)."""
    child = run.waited("runs", "Your sweep", processes.spawn(_sweep_in_child, source, queue, max_stalled), 15)
    if child.error is not None:
        run.code_failed("runs", "Your sweep", child)


@check_runner(STALL)
def check_stall_count(run: Run, source: str, *, seed: int = 4, trials: tuple[int, ...] = (1, 2, 3)) -> None:
    """A poison job kills every worker that claims it; the learner's sweep runs after each
    kill. For each max_stalled in ``trials`` (in a seeded order) the job must reach the dead
    set at exactly its max_stalled-th stall; a live lease beside it must never be touched."""
    if not isinstance(source, str) or not source.strip():
        run.fail("runs", "not-yet", what="Pass your sweep script (the string my_sweep).")
    order = list(trials)
    random.Random(seed).shuffle(order)
    for max_stalled in order:
        queue = run.queue(f"-m{max_stalled}")
        poison, live = queue.enqueue_many(["a file that crashes the parser", "a long report"])
        for stall in range(1, max_stalled + 2):
            child = processes.spawn(_poisoned_worker, queue, kill_at="claim", name="a worker")
            run.waited("runs", "A worker", child, 15)
            if stall == 1:
                alive = queue.claim(lease_ms=LIVE_LEASE_MS)  # the live worker's long job
                assert alive is not None and alive.job_id == live
            fast_forward(queue, POISON_LEASE_MS)  # the killed worker's lease runs out; the live one's does not
            _sweep(run, source, queue, max_stalled)
            snap = queue.snapshot()
            live_row = queue.job(live)
            if live not in snap.active or (live_row and live_row.stalled):
                left = (
                    f"{(snap.active.get(live, 0) - snap.now_ms) / 3_600_000:.0f} h" if live in snap.active else "hours"
                )
                run.fail("live", "counts-live-leases", left=left, what=_places(snap, live, queue))
            row = queue.job(poison)
            places = [p for p in ("pending", "active", "dead") if poison in getattr(snap, p)]
            if "dead" in places:
                if len(places) > 1:
                    run.fail("dead", "dead-in-two-places", places=" and ".join(places))
                if row is None or row.state.value != "dead":
                    run.fail("dead", "dead-row-not-marked", state=row.state.value if row else None)
                if stall < max_stalled:
                    run.fail("threshold", "one-stall-early", max=max_stalled, stall=stall)
                if stall > max_stalled:
                    run.fail("threshold", "one-stall-late", max=max_stalled, stall=stall, forgiven=max_stalled - 1)
                break
            if places == ["pending"] and row is not None and row.state.value != "pending":
                run.fail("recover", "recovered-row-not-pending", state=row.state.value)
            if not places:
                run.fail(
                    "recover",
                    "not-yet",
                    what=f"After your sweep the stalled job was in no set at all (stall {stall}): it is lost. "
                    "Put it back in pending, or in the dead set.",
                )
            if places == ["active"]:
                run.fail(
                    "recover",
                    "not-yet",
                    what="Your sweep left an expired lease in the active set: sweep every member whose deadline "
                    "is at or before the server's now.",
                )
        else:
            count = row.stalled if row else 0
            if count == 0:
                run.fail("threshold", "stall-never-counted", kills=max_stalled + 1, count=count)
            run.fail("threshold", "never-dead-letters", kills=max_stalled + 1, count=count, max=max_stalled)
    run.good("live", "A live worker's lease was never touched by any sweep.")
    run.good("dead", "The dead-lettered job was in emq:{q}:dead only, its row saying 'dead'.")
    shown = ", ".join(f"{m} -> dead at stall {m}" for m in sorted(order))
    run.good("threshold", f"Poison jobs, every worker SIGKILLed after its claim: max_stalled {shown}.")

    # The whole contract: the sweep against the reference sweep on generated queues.
    contract_step(run, STALL_MOVE, source, what="Your sweep")


def _stall_states(rng: random.Random, size: int) -> State:
    state = states(rng, size + 1, places=("active", "active", "active", "pending", "dead", "done"))
    return replace(state, params=(("max_stalled", rng.choice((1, 2, 3, 5))),))


STALL_MOVE = Move(
    keys=("active", "pending", "dead"), argv=lambda state: [state.param("max_stalled")], generate=_stall_states
)


def _places(snap: Any, job: str, queue: Queue) -> str:
    where = [p for p in ("pending", "active", "dead") if job in getattr(snap, p)]
    row = queue.job(job)
    return f"it is now in {' and '.join(where) or 'no set'}, stalled count {row.stalled if row else '?'}"


# -- the two-step reaper, raced --------------------------------------------------------------

TWO_STEP_STUB = '''\
def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    return []  # TODO

def move_back(r, keys, ids) -> None:
    """Step 2: move each id from keys.active to keys.pending (score 0) and mark its row pending."""
    pass  # TODO: with separate commands -- this is the two-step reaper, the contrast
'''

TWO_STEP_SOLUTION = '''\
def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return r.zrangebyscore(keys.active, "-inf", now)

def move_back(r, keys, ids) -> None:
    """Step 2: move each id from keys.active to keys.pending (score 0) and mark its row pending."""
    for job_id in ids:
        r.zrem(keys.active, job_id)
        r.zadd(keys.pending, {job_id: 0})
        r.hset(keys.job(job_id), "state", "pending")

duplicates = 1  # the race gave one crashed job to two live workers, B and C
'''

_READ = '''\
def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return r.zrangebyscore(keys.active, "-inf", now)
'''

TWO_STEP_ALTERNATIVES = [
    """\
def read_expired(r, keys):
    now_s, now_us = r.time()
    now = now_s * 1000 + now_us / 1000
    return [i for i, deadline in r.zrange(keys.active, 0, -1, withscores=True) if deadline <= now]

def move_back(r, keys, ids):
    for i in ids:
        with r.pipeline() as p:  # one MULTI per id: each move is atomic, the read-then-move is not
            p.zrem(keys.active, i).zadd(keys.pending, {i: 0}).hset(keys.job(i), "state", "pending").execute()

duplicates = 2 - 1
""",
    """\
def read_expired(r, keys):
    t = r.time()
    return list(r.zrange(keys.active, "-inf", t[0] * 1000 + t[1] // 1000, byscore=True))

def move_back(r, keys, ids):
    if ids:
        r.zrem(keys.active, *ids)
        r.zadd(keys.pending, dict.fromkeys(ids, 0))
        for i in ids:
            r.hset(keys.job(i), mapping={"state": "pending"})

duplicates = 1
""",
]


def _two_step_variant(read: str | None = None, move: str | None = None, duplicates: str = "1") -> str:
    text = TWO_STEP_SOLUTION
    if read is not None:
        text = text.replace(_READ, read)
    if move is not None:
        start = text.index("def move_back")
        end = text.index("duplicates =")
        text = text[:start] + move + "\n" + text[end:]
    return text.replace(
        "duplicates = 1  # the race gave one crashed job to two live workers, B and C", f"duplicates = {duplicates}"
    )


TWO_STEP_MISCONCEPTIONS = [
    Misconception(
        "reads-every-lease",
        "every lease looks expired",
        "Step 1 returned {job}, whose worker is alive: its lease runs for {left} more. Moving it would hand a "
        "live worker's job to another.",
        "Which deadlines have come? Compare each with the server's now.",
        "ZRANGEBYSCORE keys.active from -inf to now, where now comes from the server's TIME.",
        example=_two_step_variant(read="def read_expired(r, keys):\n    return r.zrange(keys.active, 0, -1)\n"),
    ),
    Misconception(
        "reads-worker-clock",
        "the reaper's own clock",
        "Run on a machine whose clock is an hour fast, step 1 returned {job}, whose lease runs for {left} more on "
        "the server's clock: your reaper judged the lease by its own clock.",
        "The deadline was written with the server's clock. Which clock must judge it?",
        "Ask the server: r.time() returns (seconds, microseconds).",
        example=_two_step_variant(
            read=(
                "import time\n\ndef read_expired(r, keys):\n"
                '    return r.zrangebyscore(keys.active, "-inf", int(time.time() * 1000))\n'
            )
        ),
    ),
    Misconception(
        "moves-without-removing",
        "copied, not moved",
        "After step 2 the job was in {places}: a job in two places is claimed twice.",
        "A move takes the id out of one set as it puts it in the other.",
        "ZREM it from keys.active too.",
        example=_two_step_variant(
            move=(
                "def move_back(r, keys, ids):\n    for job_id in ids:\n"
                "        r.zadd(keys.pending, {job_id: 0})\n"
                '        r.hset(keys.job(job_id), "state", "pending")\n'
            )
        ),
    ),
    Misconception(
        "removes-without-adding",
        "taken out, put nowhere",
        "After step 2 the job was in no set: the reaper lost the very job it was meant to save.",
        "Where must the job be after the reap?",
        "ZADD it to keys.pending with score 0.",
        example=_two_step_variant(
            move=(
                "def move_back(r, keys, ids):\n    for job_id in ids:\n"
                "        r.zrem(keys.active, job_id)\n"
                '        r.hset(keys.job(job_id), "state", "pending")\n'
            )
        ),
    ),
    Misconception(
        "row-not-pending",
        "moved, but the row disagrees",
        "After step 2 the job was in pending but its row said state={state!r}.",
        "The row says where the job is.",
        "HSET keys.job(id) state pending.",
        example=_two_step_variant(
            move=(
                "def move_back(r, keys, ids):\n    for job_id in ids:\n"
                "        r.zrem(keys.active, job_id)\n"
                "        r.zadd(keys.pending, {job_id: 0})\n"
            )
        ),
    ),
    Misconception(
        "counts-deliveries-not-duplicates",
        "deliveries counted, not duplicates",
        "You counted {answer}; the race handed the crashed job to {holders} live workers after the crash. One "
        "crash should cost one redelivery: the duplicates are the deliveries beyond that one.",
        "Who should get the job after a crash? One worker. How many more did?",
        "duplicates = live holders after the crash - 1.",
        example=_two_step_variant(duplicates="2"),
    ),
    Misconception(
        "recheck-still-races",
        "a re-check narrows the gap, does not close it",
        "Raced as in the lesson (reaper 1 paused between its two functions) your reaper gave no duplicate; but "
        "with reaper 2 and a claim run between its command {k} and the next, the job went to {holders} live workers.",
        "A check and a move in separate commands can always be split by another client.",
        "Only one script (or a WATCH/MULTI transaction) makes read-and-move one step. Here, write the plain "
        "two steps and count what the race does.",
        example=_two_step_variant(
            move=(
                "def move_back(r, keys, ids):\n"
                "    seconds, micros = r.time()\n"
                "    now = seconds * 1000 + micros // 1000\n"
                "    for job_id in ids:\n"
                "        deadline = r.zscore(keys.active, job_id)\n"
                "        if deadline is not None and deadline <= now:  # still expired?\n"
                "            r.zrem(keys.active, job_id)\n"
                "            r.zadd(keys.pending, {job_id: 0})\n"
                '            r.hset(keys.job(job_id), "state", "pending")\n'
            ),
            duplicates="0",
        ),
    ),
]

TWO_STEP = register(
    Exercise(
        key="two_step",
        lesson="04",
        title="a two-step reaper, raced",
        kind="python",
        names=("read_expired", "move_back", "duplicates"),
        stub=TWO_STEP_STUB,
        solution=TWO_STEP_SOLUTION,
        alternatives=TWO_STEP_ALTERNATIVES,
        misconceptions=TWO_STEP_MISCONCEPTIONS,
    )
)

Reader = Callable[[Any, Any], list[str]]
Mover = Callable[[Any, Any, list[str]], object]


def _skew_clock(seconds: float, fn: Callable[..., Any]) -> None:
    """In a child: make this process's wall clock run ``seconds`` fast (time.time, time_ns,
    datetime.now), including names the learner's module imported from them."""
    import datetime as dt
    import time

    real_time, real_ns, real_dt = time.time, time.time_ns, dt.datetime

    class Fast(real_dt):  # type: ignore[misc, valid-type]
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real_dt.now(tz) + dt.timedelta(seconds=seconds)

        @classmethod
        def utcnow(cls) -> Any:
            return real_dt.utcnow() + dt.timedelta(seconds=seconds)

    time.time = lambda: real_time() + seconds  # type: ignore[assignment]
    time.time_ns = lambda: real_ns() + int(seconds * 1e9)  # type: ignore[assignment]
    dt.datetime = Fast  # type: ignore[misc]
    names = getattr(fn, "__globals__", {})
    for name, value in list(names.items()):
        if value is real_time:
            names[name] = time.time
        elif value is real_ns:
            names[name] = time.time_ns
        elif value is real_dt:
            names[name] = Fast


def _read_in_child(read_expired: Reader, queue: Queue, skew_s: float) -> list[str]:
    if skew_s:
        _skew_clock(skew_s, read_expired)
    return [str(i) for i in (read_expired(processes.counting_client(queue.client), queue.keys) or [])]


def _move_in_child(move_back: Mover, queue: Queue, ids: list[str]) -> None:
    move_back(processes.counting_client(queue.client), queue.keys, ids)


def _reap_in_child(read_expired: Reader, move_back: Mover, queue: Queue) -> list[str]:
    r = processes.counting_client(queue.client)
    ids = [str(i) for i in (read_expired(r, queue.keys) or [])]
    processes.mark("read")
    move_back(r, queue.keys, ids)
    return ids


def race(
    read_expired: Reader, move_back: Mover, queue: Queue, *, pause_after: processes.StepAt = "read"
) -> dict[str, Any]:
    """The overlap of lesson 04, played with real processes and connections:

    worker A claims a job and is SIGKILLed; its lease runs out. Reaper 1 (a child process)
    runs ``read_expired`` and freezes after step ``pause_after`` (by default: between its read
    and its move). Reaper 2 (another child, its own connection) reaps from start to end;
    worker B claims the job. Reaper 1 resumes and finishes; worker C asks for a job.
    Returns the live holders after the crash (B's and C's claims, when they got one).
    """
    job = queue.enqueue("overlapping sweeps").job_id
    a = processes.spawn(_claim_and_die, queue, kill_at="claim", name="worker A")
    a.wait(15)
    fast_forward(queue)  # A is dead: its lease runs out
    one = processes.spawn(_reap_in_child, read_expired, move_back, queue, freeze_at=pause_after, name="reaper 1")
    one.wait_frozen(15)
    two = processes.spawn(_reap_in_child, read_expired, move_back, queue, name="reaper 2").wait(15)
    b = queue.claim(lease_ms=30_000)
    one.resume()
    one.wait(15)
    c = queue.claim(lease_ms=30_000)
    holders = [x for x in (b, c) if x is not None and x.job_id == job]
    return {"job": job, "holders": holders, "reapers": (one, two), "frozen": one.frozen_at}


def _claim_and_die(queue: Queue) -> None:
    Queue(queue.name, processes.counting_client(queue.client)).claim(lease_ms=POISON_LEASE_MS)


@check_runner(TWO_STEP)
def check_two_step_reaper(run: Run, read_expired: Reader, move_back: Mover, duplicates: object = None) -> None:
    """Check the learner's two-step reaper alone (server clock, a fast clock), replay the
    race of the lesson, and compare ``duplicates`` with what it caused."""
    if not callable(read_expired) or not callable(move_back):
        run.fail("runs", "not-yet", what="Pass your two functions: read_expired and move_back.")

    # 1. Alone: one dead worker's expired lease, one live worker's running lease.
    queue = run.queue()
    dead, live = queue.enqueue_many(["crashed", "alive"])
    run.waited("runs", "A worker", processes.spawn(_claim_and_die, queue, kill_at="claim"), 15)
    queue.claim(lease_ms=60_000)  # the live worker
    fast_forward(queue, POISON_LEASE_MS)
    left = f"{(queue.client.zscore(queue.keys.active, live) - queue.snapshot().now_ms) / 1000:.0f} s"
    for skew in (0.0, 3600.0):
        child = run.waited("runs", "Your read_expired", processes.spawn(_read_in_child, read_expired, queue, skew), 15)
        if child.error is not None:
            run.code_failed("runs", "Your read_expired", child)
        ids = child.value or []
        if live in ids:
            run.fail("read", "reads-worker-clock" if skew else "reads-every-lease", job=live, left=left)
        if dead not in ids:
            run.fail(
                "read",
                "not-yet",
                what=f"Step 1 returned {ids}; the lease of {dead} had run out on the server's clock.",
            )
    run.good(
        "read", "Step 1 returned the expired lease only, judged on the server's clock (even from a clock an hour fast)."
    )
    child = run.waited("runs", "Your move_back", processes.spawn(_move_in_child, move_back, queue, [dead]), 15)
    if child.error is not None:
        run.code_failed("runs", "Your move_back", child)
    snap = queue.snapshot()
    places = [p for p in ("pending", "active") if dead in getattr(snap, p)]
    if len(places) == 2:
        run.fail("move", "moves-without-removing", places="pending and active")
    if not places:
        run.fail("move", "removes-without-adding")
    if places == ["active"]:
        run.fail(
            "move", "not-yet", what="After step 2 the expired job was still in the active set: move it to pending."
        )
    row = queue.job(dead)
    if row is None or row.state.value != "pending":
        run.fail("move", "row-not-pending", state=row.state.value if row else None)
    if live not in snap.active:
        run.fail("move", "not-yet", what="Step 2 moved the live worker's job too: move only the ids it is given.")
    run.good("move", "Step 2 moved the expired job to pending and marked its row; the live lease stayed.")

    # 2. The race of the lesson: reaper 1 frozen between its read and its move.
    scene = race(read_expired, move_back, run.queue("-race"))
    for reaper in scene["reapers"]:
        if reaper.error is not None:
            run.code_failed("runs", f"Your reaper ({reaper.name})", reaper)
    holders = len(scene["holders"])
    caused = max(0, holders - 1)
    atomic = race_atomic(run.queue("-atomic"))
    if caused == 0:
        # No duplicate in that interleaving: try every other point reaper 1 can be paused at.
        steps = scene["reapers"][0].steps
        for k in range(1, len(steps) + 1):
            other = race(read_expired, move_back, run.queue(f"-k{k}"), pause_after=k)
            if len(other["holders"]) > 1:
                run.fail("race", "recheck-still-races", k=k, holders=len(other["holders"]))
        run.note("Your reaper gave no job to two workers at any point of the race: it acts as one atomic step.")
    run.good(
        "race",
        f"Raced as in the lesson (reaper 1 frozen between read and move), your two-step reaper handed the crashed "
        f"job to {holders} live workers: {caused} duplicate. The atomic reap.lua in the same race: {atomic}.",
    )
    if duplicates is None:
        run.fail(
            "count",
            "not-yet",
            what="Now count: set duplicates to the number of duplicate deliveries the race caused.",
        )
    if duplicates != caused:
        if isinstance(duplicates, int) and duplicates in (holders, holders + 1) and duplicates > caused:
            run.fail("count", "counts-deliveries-not-duplicates", answer=duplicates, holders=holders)
        run.fail("count", "not-yet", what=f"You counted {duplicates!r}; the race caused {caused} duplicate(s).")
    run.good("count", f"You counted the {caused} duplicate your reaper caused.")


def race_atomic(queue: Queue) -> int:
    """The same scene with the atomic reap.lua for both sweeps: duplicate deliveries (0)."""
    job = queue.enqueue("overlapping sweeps").job_id
    processes.spawn(_claim_and_die, queue, kill_at="claim").wait(15)
    fast_forward(queue)
    queue.reap()  # reaper 2, whole (an atomic sweep has no middle to be frozen in)
    b = queue.claim(lease_ms=30_000)
    queue.reap()  # reaper 1: its read and its move are one step, after B's claim
    c = queue.claim(lease_ms=30_000)
    return max(0, len([x for x in (b, c) if x is not None and x.job_id == job]) - 1)
