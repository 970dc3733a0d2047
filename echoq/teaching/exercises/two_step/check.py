"""Lesson 04: a two-step reaper, raced.

The learner writes ``read_expired(r, keys)`` and
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

from echoq.ids import new_job_id
from echoq.queue import Queue, _text
from echoq.teaching import processes
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register, row_state, skew_clock
from echoq.teaching.exercises.differential import Move, State, contract_step, crash_harm, states
from echoq.teaching.fast_forward import fast_forward

POISON_LEASE_MS = 5_000  # the lease of the crashed worker's claim
MANY_EXPIRED = 1_500  # leases run out at once (more than a capped read of 1,000 returns)

TWO_STEP_MISCONCEPTIONS = [
    Misconception(
        "reads-every-lease",
        "every lease looks expired",
        "Step 1 returned {job}, whose worker is alive: its lease runs for {left} more. Moving it would hand a "
        "live worker's job to another.",
        "Which deadlines have come? Compare each with the server's now.",
        "ZRANGEBYSCORE keys.active from -inf to now, where now comes from the server's TIME.",
        signature=lambda e: e["job"] in e["returned"] and not e["skew"],
    ),
    Misconception(
        "reads-worker-clock",
        "the reaper's own clock",
        "Run on a machine whose clock is an hour fast, step 1 returned {job}, whose lease runs for {left} more on "
        "the server's clock: your reaper judged the lease by its own clock.",
        "The deadline was written with the server's clock. Which clock must judge it?",
        "Ask the server: r.time() returns (seconds, microseconds).",
        # the live lease returned from the fast clock only: on the server's clock step 1 left it
        signature=lambda e: e["job"] in e["returned"] and e["skew"] and e["job"] not in e["on_server_clock"],
    ),
    Misconception(
        "moves-without-removing",
        "copied, not moved",
        "After step 2 {job} was in {places}: a job in two places is claimed twice.",
        "A move takes the id out of one set as it puts it in the other.",
        "ZREM it from keys.active too.",
        signature=lambda e: {"pending", "active"} <= set(e["after"]),
    ),
    Misconception(
        "removes-without-adding",
        "taken out, put nowhere",
        "After step 2 {job} was in no set: the reaper lost the very job it was meant to save.",
        "Where must the job be after the reap?",
        "ZADD it to keys.pending at its arrival number: the row keeps it (HGET keys.job(id) arrival).",
        signature=lambda e: not e["after"],
    ),
    Misconception(
        "row-not-pending",
        "moved, but the row disagrees",
        "After step 2 {job} was in pending but its row said state={state!r}.",
        "The row says where the job is.",
        "HSET keys.job(id) state pending.",
        signature=lambda e: "pending" in e["after"] and e["state"] != "pending",
    ),
    Misconception(
        "counts-deliveries-not-duplicates",
        "deliveries counted, not duplicates",
        "You counted {answer}; the race handed the crashed job to {holders} live workers after the crash. One "
        "crash should cost one redelivery: the duplicates are the deliveries beyond that one.",
        "Who should get the job after a crash? One worker. How many more did?",
        "duplicates = live holders after the crash - 1.",
        signature=lambda e: e["answer"] in (e["holders"], e["holders"] + 1) and e["answer"] > e["holders"] - 1,
    ),
    Misconception(
        "recheck-still-races",
        "a re-check narrows the gap, does not close it",
        "Raced as in the lesson (reaper 1 paused between its two functions) your reaper gave no duplicate; but "
        "with reaper 2 and a claim run between its command {k} and the next, the job went to {holders} live workers.",
        "A check and a move in separate commands can always be split by another client.",
        "Only one script (or a WATCH/MULTI transaction) makes read-and-move one step. Here, write the plain "
        "two steps and count what the race does.",
        signature=lambda e: e["in_the_lessons_race"] <= 1 and e["holders"] > 1,
    ),
]


TWO_STEP = register(
    load(
        __file__,
        key="two_step",
        lesson="04",
        title="a two-step reaper, raced",
        kind="python",
        names=("read_expired", "move_back", "duplicates"),
        misconceptions=TWO_STEP_MISCONCEPTIONS,
    )
)


Reader = Callable[[Any, Any], list[str]]


Mover = Callable[[Any, Any, list[str]], object]


def _read_in_child(read_expired: Reader, queue: Queue, skew_s: float, edge: str | None = None) -> dict[str, Any]:
    """Step 1 in a child. With ``edge``: the moment the learner's code has the server's TIME,
    that job's lease deadline is set to exactly that millisecond (the check's own write, on
    its own connection), so "at or before now" is tested at "at"."""
    if skew_s:
        skew_clock(skew_s, read_expired)
    client = processes.counting_client(queue.client)
    planted: list[int] = []
    if edge is not None:
        send = client.execute_command

        def execute_command(*args: Any, **options: Any) -> Any:
            reply = send(*args, **options)
            if not planted and args and str(args[0]).upper() == "TIME":
                seconds, micros = (int(x) for x in reply)
                planted.append(seconds * 1000 + micros // 1000)
                queue.client.zadd(queue.keys.active, {edge: planted[0]})
            return reply

        client.execute_command = execute_command  # type: ignore[method-assign]
    ids = [str(_text(i)) for i in (read_expired(client, queue.keys) or [])]
    return {"ids": ids, "edge_at": planted[0] if planted else None}


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
    dead, live, edge = queue.enqueue_many(["crashed", "alive", "due this very millisecond"])
    run.waited("runs", "A worker", processes.spawn(_claim_and_die, queue, kill_at="claim"), 15)
    queue.claim_many(2, lease_ms=60_000)  # the live worker, and the job whose deadline will be exactly now
    fast_forward(queue, POISON_LEASE_MS)
    left = f"{(queue.client.zscore(queue.keys.active, live) - queue.snapshot().now_ms) / 1000:.0f} s"
    edge_seen = False
    on_server_clock: list[str] = []
    for skew in (0.0, 3600.0):
        child = run.waited(
            "runs",
            "Your read_expired",
            processes.spawn(_read_in_child, read_expired, queue, skew, None if skew else edge),
            15,
        )
        if child.error is not None:
            run.code_failed("runs", "Your read_expired", child)
        ids = (child.value or {}).get("ids", [])
        on_server_clock = on_server_clock if skew else ids
        if live in ids:
            run.fail(
                "read",
                "reads-worker-clock" if skew else "reads-every-lease",
                job=live,
                left=left,
                returned=ids,
                skew=skew,
                on_server_clock=on_server_clock,
                held=f"Step 1 returned {live}, whose lease runs for {left} more on the server's clock.",
            )
        if dead not in ids:
            run.fail(
                "read",
                "not-yet",
                what=f"Step 1 returned {ids}; the lease of {dead} had run out on the server's clock.",
            )
        if not skew and (child.value or {}).get("edge_at") is not None:
            if edge not in ids:
                run.fail(
                    "read",
                    "not-yet",
                    what="Step 1 left out a job whose lease deadline was exactly the server's now (the millisecond "
                    "your code read from TIME): the exercise asks for deadlines at or before now, and a lease ends "
                    "at its deadline. Does your range include its upper end?",
                )
            edge_seen = True
    # Many leases run out at once: step 1 must return every one (a capped read leaves some).
    many = run.queue("-many")
    now = many.snapshot(limit=1).now_ms
    expired = {new_job_id(): now - 10_000 - n for n in range(MANY_EXPIRED)}
    many.client.zadd(many.keys.active, expired)
    child = run.waited("runs", "Your read_expired", processes.spawn(_read_in_child, read_expired, many, 0.0), 15)
    if child.error is not None:
        run.code_failed("runs", "Your read_expired", child)
    got = set((child.value or {}).get("ids", []))
    if got != set(expired):
        run.fail(
            "read",
            "not-yet",
            what=f"Of {MANY_EXPIRED:,} leases that had run out, step 1 returned {len(got & set(expired)):,}: does your "
            "read of the active set return every expired lease?",
        )
    exact = ", a deadline exactly at the server's now included" if edge_seen else ""
    run.good(
        "read",
        f"Step 1 returned the expired leases only{exact}, judged on the server's clock (even from a clock an hour "
        f"fast), and all {MANY_EXPIRED:,} of a queue where that many had run out at once.",
    )
    run.at(queue)  # step 2 acts on the first queue again
    child = run.waited("runs", "Your move_back", processes.spawn(_move_in_child, move_back, queue, [dead]), 15)
    if child.error is not None:
        run.code_failed("runs", "Your move_back", child)
    snap = queue.snapshot()
    places = [p for p in ("pending", "active") if dead in getattr(snap, p)]
    after = [p for p in ("pending", "active", "scheduled", "dead") if dead in getattr(snap, p)]
    run.saw(after=after)
    if len(places) == 2:
        run.fail("move", "moves-without-removing", job=dead, places=" and ".join(after))
    if not places:
        run.fail(
            "move",
            "removes-without-adding",
            job=dead,
            held=f"After step 2 {dead} was in {' and '.join(after) or 'no set'}, not in pending.",
        )
    if places == ["active"]:
        run.fail(
            "move", "not-yet", what="After step 2 the expired job was still in the active set: move it to pending."
        )
    score = queue.client.zscore(queue.keys.pending, dead)
    arrival = queue.client.hget(queue.keys.job(dead), "arrival")
    arrival = int(arrival) if arrival is not None else 0
    if score != arrival:
        run.fail(
            "move",
            "not-yet",
            what=f"After step 2 the expired job was in pending with score {score:g}; its row keeps its arrival "
            f"number, {arrival}. Pending is first in, first out: each job is scored by the order it reached the "
            "server, and a job put back (as reap.lua does) goes back to its own arrival number, ahead of every "
            "job that arrived after it and behind every job that arrived before.",
        )
    row = queue.job(dead)
    if row is None or row_state(queue, dead) != "pending":
        run.fail(
            "move",
            "row-not-pending",
            job=dead,
            state=row_state(queue, dead),
            held=f"After step 2 the row of {dead} said state={row_state(queue, dead)!r}.",
        )
    if live not in snap.active:
        run.fail("move", "not-yet", what="Step 2 moved the live worker's job too: move only the ids it is given.")
    run.good("move", "Step 2 moved the expired job to pending and marked its row; the live lease stayed.")

    # The whole contract of both steps: against the reference's on generated queues.
    contract_step(run, MOVE, (read_expired, move_back), what="Your read_expired and move_back")
    reference = run.exercise.answer_from(run.exercise.solution)
    seen: list = []
    crashed = crash_harm(run.client, MOVE, (read_expired, move_back), reference, run.exercise.lesson, seen=seen)
    if crashed is not None:
        k, state, harm = crashed
        run.show(seen[-1] if seen else None)
        run.fail(
            "crash",
            "not-yet",
            what=f"Killed after its write number {k} (a worker process dies between two commands), on "
            f"{state.describe()}, your move_back's write {k} was {harm}. Separate commands can be split by a "
            "crash: order your writes so that after each one the job is still where a claim or the next sweep "
            "finds it.",
        )
    run.good(
        "crash",
        "Killed between any two of its writes, on generated queues, your reaper lost no job and left none that a "
        "claim or reap.lua would dead-letter, and run again whole it finished the move as the reference does.",
    )

    # 2. The race of the lesson: reaper 1 frozen between its read and its move.
    raced = run.queue("-race")
    scene = race(read_expired, move_back, raced)
    for reaper in scene["reapers"]:
        if reaper.error is not None:
            run.code_failed("runs", f"Your reaper ({reaper.name})", reaper)
    holders = len(scene["holders"])
    caused = max(0, holders - 1)
    run.saw(in_the_lessons_race=holders)
    atomic = race_atomic(run.queue("-atomic", scene=False))
    if caused == 0:
        # No duplicate in that interleaving: try every other point reaper 1 can be paused at.
        steps = scene["reapers"][0].steps
        for k in range(1, len(steps) + 1):
            other = race(read_expired, move_back, run.queue(f"-k{k}"), pause_after=k)
            if len(other["holders"]) > 1:
                run.fail(
                    "race",
                    "recheck-still-races",
                    k=k,
                    holders=len(other["holders"]),
                    held=f"With reaper 2 and a claim run between your reaper's command {k} and the next, the job went "
                    f"to {len(other['holders'])} live workers.",
                )
        run.note("Your reaper gave no job to two workers at any point of the race: it acts as one atomic step.")
    run.at(raced)  # the count is about the lesson's race
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
            run.fail(
                "count",
                "counts-deliveries-not-duplicates",
                answer=duplicates,
                holders=holders,
                held=f"You counted {duplicates!r}; the race caused {caused} duplicate(s).",
            )
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


def _reap_both_steps(answer: Any, client: Any, queue: Queue, state: State) -> list[str]:
    """Step 1 on the queue, then step 2 with the ids whose lease has run out (the same ids
    for the learner and the reference, so step 2 is judged on its own)."""
    read_expired, move_back = answer[0], answer[1]
    read = [_text(i) for i in read_expired(client, queue.keys) or []]
    move_back(client, queue.keys, [j.id for j in state.jobs if j.place == "active" and j.expired])
    return sorted(read)


def _states(rng: random.Random, size: int) -> State:
    """Jobs in every set, most with their arrival number on their row (pending scored by it), some
    with none (a row written before arrival numbers: scored 0)."""
    state = states(rng, size + 1, places=("active", "active", "active", "pending", "scheduled", "dead", "done"))
    order = list(range(1, len(state.jobs) + 1))
    rng.shuffle(order)
    jobs = (
        replace(j, arrival=0 if j.place == "done" or rng.random() < 0.2 else n)
        for j, n in zip(state.jobs, order, strict=True)
    )
    return replace(state, jobs=tuple(jobs))


MOVE = Move(keys=(), argv=lambda state: [], reply=lambda r: r, generate=_states, python=_reap_both_steps)
TWO_STEP.move = MOVE
