"""Lesson 04: the stall count; the max_stalled-th stall is fatal.

The learner's Lua sweep (KEYS active, pending, dead; ARGV max_stalled)
must add one to a stalled job's count and compare the NEW count: below max_stalled the job
is recovered, at or above it the job is dead-lettered. The check plays a poison job: every
worker that claims it is a child process SIGKILLed right after its claim; after each
kill the lease runs out and the learner's sweep runs. Seeded trials over several
max_stalled values; a live worker's long lease sits beside it all the time. The verdict:
at which stall the job reached emq:{q}:dead, and what every set and row say after each sweep.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from echoq import scripts
from echoq.clock import server_now_ms
from echoq.ids import new_job_id
from echoq.queue import Queue, _text
from echoq.teaching import processes
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register, row_state
from echoq.teaching.exercises.differential import Move, State, contract_step, states
from echoq.teaching.fast_forward import fast_forward

POISON_LEASE_MS = 5_000


LIVE_LEASE_MS = 86_400_000


STALL_MISCONCEPTIONS = [
    Misconception(
        "stall-never-counted",
        "stalls never counted",
        "A poison job killed {kills} workers in a row and was recovered every time; its row's stalled field "
        "stayed {count}: nothing kept the count where the next sweep could read it, so nothing will ever stop it.",
        "Each sweep is a new script run: a Lua variable starts afresh every time.",
        "HINCRBY the row's 'stalled' field by 1 for each stalled job; it returns the new count.",
        signature=lambda e: e["count"] == 0,
    ),
    Misconception(
        "never-dead-letters",
        "no dead letter",
        "A poison job killed {kills} workers in a row (its stalled count reached {count}, max_stalled {max}) and "
        "was recovered every time: it would kill workers forever.",
        "The count is there; what should happen when it reaches max_stalled?",
        "When the new count is at or above max_stalled, ZADD the id to KEYS[3] and mark the row 'dead' instead of "
        "recovering it.",
        signature=lambda e: e["count"] >= e["max"],
    ),
    Misconception(
        "one-stall-late",
        "one stall late",
        "With max_stalled = {max} the poison job was dead-lettered at stall {stall}, one late: the "
        "max_stalled-th stall is fatal, here stall {max} (BullMQ's maxStalledCount = {forgiven} forgives {forgiven}).",
        "Is the count you compare the one before this stall, or after it? And is equal fatal?",
        "Compare the value HINCRBY returns (this stall included) with max_stalled, and dead-letter when it is >=.",
        signature=lambda e: e["stall"] == e["max"] + 1,
    ),
    Misconception(
        "one-stall-early",
        "one stall early",
        "With max_stalled = {max} the poison job was dead-lettered at stall {stall}, too early: stalls below "
        "max_stalled are recovered; stall {max} is the fatal one.",
        "Count the stalls forgiven: with max_stalled = 2, how many are there?",
        "Recover while the new count is below max_stalled; dead-letter at or above it, without subtracting one.",
        signature=lambda e: e["stall"] == e["max"] - 1,
    ),
    Misconception(
        "dead-in-two-places",
        "dead and somewhere else",
        "The dead-lettered job was in {places} at once. A job is in exactly one place at every instant.",
        "Follow one id through your branch: which sets does it end in?",
        "When you dead-letter a job, do not also ZADD it back to pending.",
        signature=lambda e: "dead" in e["after"] and len(e["after"]) > 1,
    ),
    Misconception(
        "dead-row-not-marked",
        "dead, but the row disagrees",
        "The poison job sits in emq:{{q}}:dead but its row says state={state!r}: a person looking at the job, or "
        "a script fencing it, believes it is somewhere it is not.",
        "The row says where the job is.",
        "HSET the row's state to 'dead' when you dead-letter it.",
        signature=lambda e: "dead" in e["after"] and e["state"] != "dead",
    ),
    Misconception(
        "recovered-row-not-pending",
        "recovered, but the row disagrees",
        "The recovered job is back in emq:{{q}}:pending but its row says state={state!r}.",
        "The row says where the job is.",
        "HSET the row's state to 'pending' when you recover it.",
        signature=lambda e: e["after"] == ["pending"] and e["state"] != "pending",
    ),
    Misconception(
        "counts-live-leases",
        "counts a live lease as a stall",
        "A worker that is alive, its lease running for {left} more, had its job counted as stalled by your sweep "
        "({what}).",
        "Which members of the active set are stalled? Only those whose deadline has come.",
        "Select with ZRANGEBYSCORE from -inf to the server's now.",
        signature=lambda e: e["live_moved"] or e["live_stalled"] > 0,
    ),
]


STALL = register(
    load(
        __file__,
        key="stall",
        lesson="04",
        title="the stall count",
        kind="lua",
        names=(),
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
    sweep = processes.spawn(_sweep_in_child, source, queue, max_stalled, name="your sweep")
    child = run.waited("runs", "Your sweep", sweep, 15)
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
                run.fail(
                    "live",
                    "counts-live-leases",
                    left=left,
                    what=_places(snap, live, queue),
                    live_moved=live not in snap.active,
                    live_stalled=live_row.stalled if live_row else 0,
                    held=f"A worker that is alive, its lease running for {left} more: after your sweep "
                    f"{_places(snap, live, queue)}.",
                )
            row = queue.job(poison)
            places = [p for p in ("pending", "active", "dead") if poison in getattr(snap, p)]
            run.saw(after=places, state=row_state(queue, poison))
            if "dead" in places:
                if len(places) > 1:
                    run.fail("dead", "dead-in-two-places", places=" and ".join(places))
                if row is None or row_state(queue, poison) != "dead":
                    run.fail("dead", "dead-row-not-marked", state=row_state(queue, poison))
                if stall < max_stalled:
                    run.fail(
                        "threshold",
                        "one-stall-early",
                        max=max_stalled,
                        stall=stall,
                        held=f"With max_stalled = {max_stalled} the poison job was dead-lettered at stall {stall}: "
                        f"stalls below max_stalled are recovered; stall {max_stalled} is the fatal one.",
                    )
                if stall > max_stalled:
                    run.fail("threshold", "one-stall-late", max=max_stalled, stall=stall, forgiven=max_stalled - 1)
                break
            if places == ["pending"] and row is not None and row_state(queue, poison) != "pending":
                run.fail("recover", "recovered-row-not-pending", state=row_state(queue, poison))
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
            said = (
                f"A poison job killed {max_stalled + 1} workers in a row and was recovered every time; its row's "
                f"stalled field said {count}, with max_stalled {max_stalled}."
            )
            if count == 0:
                run.fail("threshold", "stall-never-counted", kills=max_stalled + 1, count=count, held=said)
            run.fail("threshold", "never-dead-letters", kills=max_stalled + 1, count=count, max=max_stalled, held=said)
    run.good("live", "A live worker's lease was never touched by any sweep.")
    run.good("dead", "The dead-lettered job was in emq:{q}:dead only, its row saying 'dead'.")
    shown = ", ".join(f"{m} -> dead at stall {m}" for m in sorted(order))
    run.good("threshold", f"Poison jobs, every worker SIGKILLed after its claim: max_stalled {shown}.")

    _edge(run, source)

    # The whole contract: the sweep against the reference sweep on generated queues.
    contract_step(run, STALL_MOVE, source, what="Your sweep")


EDGE_LEASES = 2_000  # one lease deadline per millisecond, from a second before now to a second after


def _edge(run: Run, source: str) -> None:
    """Many leases at once, one deadline per millisecond around the server's now, every one
    of them a job's last chance (max_stalled 1): after the sweep, every lease whose deadline
    was at or before the sweep's now must be gone from active -- more than a thousand of them
    (a sweep that reads a capped range leaves some), and the one exactly at its now, which the
    sweep's own time of death in the dead set tells."""
    queue = run.queue("-edge")
    now = server_now_ms(queue.client)
    ids = [new_job_id() for _ in range(EDGE_LEASES)]
    deadline = {job: now - EDGE_LEASES // 2 + n for n, job in enumerate(ids)}
    pipe = queue.client.pipeline(transaction=False)
    for job in ids:
        pipe.hset(
            queue.keys.job(job),
            mapping={
                "state": "active",
                "token": 1,
                "attempts": 1,
                "stalled": 0,
                "payload": "work",
                "enqueued_ms": now - 60_000,
            },
        )
    pipe.zadd(queue.keys.active, deadline)
    pipe.execute()
    _sweep(run, source, queue, 1)
    deaths = {int(score) for _job, score in queue.client.zrange(queue.keys.dead, 0, -1, withscores=True)}
    if len(deaths) != 1:
        return  # no single time of death to judge by: the contract step says what differs
    (t,) = deaths
    active = {_text(job) for job in queue.client.zrange(queue.keys.active, 0, -1)}
    left = [job for job in ids if deadline[job] <= t and job in active]
    if left and all(deadline[job] == t for job in left):
        run.fail(
            "edge",
            "not-yet",
            what="Your sweep left in active a lease whose deadline was exactly the server's now (the time of death "
            "your sweep wrote for the others): a lease ends at its deadline, so 'at or before now' includes now. "
            "Does your range include its upper end?",
        )
    if left:
        expired = sum(deadline[job] <= t for job in ids)
        run.fail(
            "edge",
            "not-yet",
            what=f"Of more than 1,000 leases that had run out at once, your sweep took {expired - len(left):,} and "
            "left the rest in active: does your read of the expired leases return them all?",
        )
    expired = sum(deadline[job] <= t for job in ids)
    exact = (
        ", the one whose deadline was exactly its now included" if deadline[ids[0]] <= t <= deadline[ids[-1]] else ""
    )
    run.good("edge", f"{expired:,} leases run out at once, one per millisecond: your sweep took every one{exact}.")


def _stall_states(rng: random.Random, size: int) -> State:
    state = states(rng, size + 1, places=("active", "active", "active", "pending", "scheduled", "dead", "done"))
    return replace(state, params=(("max_stalled", rng.choice((1, 2, 3, 5))),))


STALL_MOVE = Move(
    keys=("active", "pending", "dead"), argv=lambda state: [state.param("max_stalled")], generate=_stall_states
)


def _places(snap: Any, job: str, queue: Queue) -> str:
    where = [p for p in ("pending", "active", "dead") if job in getattr(snap, p)]
    row = queue.job(job)
    return f"it is now in {' and '.join(where) or 'no set'}, stalled count {row.stalled if row else '?'}"


STALL.move = STALL_MOVE  # what the differential judge runs (tools/mutants.py too)
