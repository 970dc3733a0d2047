"""Lesson 03: the fenced complete.

The learner's Lua complete (KEYS active, done, row; ARGV id, the
fencing token) is called by a live holder, by a holder frozen past its lease while the job was
reaped (and, in another run, claimed again by B). The verdict is where the job is, what
its row says, and what the real reaper and enqueue then do with it.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import redis

from echoq import scripts
from echoq.queue import Enqueue, Queue, _text
from echoq.teaching import evidence, processes
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register, row_state
from echoq.teaching.exercises.differential import Job, Move, State, contract_step, states
from echoq.teaching.fast_forward import fast_forward

LEASE_MS = 10_000

COMPLETE_MISCONCEPTIONS = [
    Misconception(
        "fence-on-attempts",
        "attempts is not the token",
        "On {state}: {difference}. That job's row has token {token} and attempts {attempts}; on the same queue "
        "with the two equal, your move and the reference agree: your fence compares attempts. Attempts counts "
        "tries and goes back down when a try is given back unstarted; the token only grows, one per claim.",
        "Two numbers on the row grow with each claim. Which one can never be handed out twice?",
        "Compare the row's token field with the caller's token (ARGV[2]).",
        signature=lambda e: e["token"] != e["attempts"] and e["attempts_for_token"],
    ),
    Misconception(
        "no-fence",
        "no fence",
        "Worker A, frozen past its lease, woke up and completed {job} while worker B held it: the job left "
        "the active set under B ({after}). If B now crashes, nothing will ever redo its work.",
        "A caller's claim came with a token. What does the row say about who holds the job now?",
        "Compare the row's state and token with what the caller holds, and reply {'stale'} before any write.",
        signature=lambda e: e["after_b"]["completed"] and e["after_reap"]["completed"] and not e["after_b"]["active"],
    ),
    Misconception(
        "fence-on-state-only",
        "fenced on the state alone",
        "Worker A, frozen past its lease, completed {job} while worker B held it: the row said 'active' -- "
        "but for B's claim, not A's ({after}).",
        "The state says the job is held; does it say by whom?",
        "The token field changes with every claim: compare it with the caller's token too.",
        signature=lambda e: e["after_b"]["completed"] and not e["after_reap"]["changed"],
    ),
    Misconception(
        "fence-on-token-only",
        "fenced on the token alone",
        "Worker A, frozen past its lease, completed {job} after the reaper had put it back in pending: "
        "its token still matched, since nobody had claimed it since ({after}).",
        "Between the reap and the next claim the token has not moved. What has?",
        "Check the row's state is 'active' as well.",
        signature=lambda e: e["after_reap"]["completed"] and not e["after_b"]["changed"],
    ),
    Misconception(
        "write-before-check",
        "writes before it checks",
        "Your complete refused worker A ({reply}), but had already changed the job ({after}): its commands "
        "wrote before they read the row. A refused call must change nothing.",
        "Read first, decide, and only then write.",
        "Move every ZREM, DEL and ZADD below the check.",
        # its commands, logged as the server ran them: a write came before any read of the row
        signature=lambda e: e["wrote_before_reading_the_row"],
    ),
    Misconception(
        "fence-refuses-the-holder",
        "the holder is refused too",
        "A worker that held {job} (token {token}; the row said state={state!r}, token={row_token!r}) "
        "was refused ({reply}): your fence turns away the very worker that holds the job.",
        "Compare like with like: Lua says a number and a string differ, always.",
        "HGET returns a string and ARGV[2] is a string: compare them as they are, or tonumber() both.",
        signature=lambda e: (
            e["reply"] != "completed" and e["state"] == "active" and str(e["row_token"]) == str(e["token"])
        ),
    ),
    Misconception(
        "left-in-active",
        "left in the active set",
        "{job} was completed but stayed in emq:{{q}}:active: when its lease ran out, {consequence}.",
        "Where was the job while its worker held it? It must leave that set when done.",
        "ZREM the id from KEYS[1].",
        signature=lambda e: e["holder_reply"] == "completed" and e["in_active"],
    ),
    Misconception(
        "row-left-behind",
        "row left behind",
        "{job} was completed but its row remains (state={state!r}): a job may not be done and still have a row "
        "saying where it is.",
        "A completed job's row has nothing left to say.",
        "DEL KEYS[3].",
        signature=lambda e: e["holder_reply"] == "completed" and e["row_kept"],
    ),
    Misconception(
        "not-remembered-done",
        "done jobs forgotten",
        "{job} was completed, then the producer sent the same job again (same JOB id) and the queue took it as "
        "new ({outcome}): emq:{{q}}:done did not remember it, so it would run twice.",
        "enqueue refuses an id it knows. Where does it look for ids that are done?",
        "ZADD the id to KEYS[2], the done set.",
        signature=lambda e: e["outcome"] == "enqueued",
    ),
]


COMPLETE = register(
    load(
        __file__,
        key="complete",
        lesson="03",
        title="the fenced complete",
        kind="lua",
        names=(),
        misconceptions=COMPLETE_MISCONCEPTIONS,
    )
)


def _claim_then_complete(queue: Queue, source: str) -> dict[str, Any]:
    """In a child: claim with the real script (a step), then complete with the learner's, its
    commands logged (evidence.traced) where its text allows: what it wrote, before and after
    what it read."""
    client = processes.counting_client(queue.client)
    q = Queue(queue.name, client)
    claim = q.claim(lease_ms=LEASE_MS)
    k = q.keys
    keys, argv = [k.active, k.done, k.job(claim.job_id)], [claim.job_id, claim.token]
    commands = None
    traced = evidence.traced(source)
    try:
        if traced is None:
            raise ValueError("no trace")
        reply, logged, _sent = evidence.untraced(scripts.run_text(client, traced, keys, argv))
        commands = [list(c.args) for c in logged]
    except (ValueError, redis.ResponseError) as exc:
        if isinstance(exc, redis.ResponseError) and "Error compiling script" not in str(exc):
            raise
        reply = scripts.run_text(client, source, keys, argv)  # its own words, untraced
    return {"job": claim.job_id, "token": claim.token, "reply": _reply_text(reply), "commands": commands}


def wrote_before_reading(commands: list[list[str]] | None, row: str) -> bool | None:
    """Did a write come before the first command that read ``row``? None: no log."""
    if commands is None:
        return None
    for args in commands:
        if args and args[0].upper() in evidence.WRITES:
            return True
        if row in args[1:]:
            return False
    return False


def _complete_as(queue: Queue, source: str, job: str, token: int) -> str:
    """In a child: complete ``job`` with the learner's script, as the holder of ``token``."""
    k = queue.keys
    client = processes.counting_client(queue.client)
    return _reply_text(scripts.run_text(client, source, [k.active, k.done, k.job(job)], [job, token]))


def _reply_text(reply: Any) -> str:
    if isinstance(reply, list):
        return _text(reply[0]) if reply else "{}"
    return _text(reply) if reply is not None else "nil"


def _where(queue: Queue, job: str) -> str:
    snap = queue.snapshot()
    places = [
        n for n, members in (("pending", snap.pending), ("active", snap.active), ("done", snap.done)) if job in members
    ]
    row = f"state {row_state(queue, job)}" if queue.job(job) else "deleted"
    return f"afterwards: in {' and '.join(places) or 'no set'}, row {row}"


def _stale_call(run: Run, source: str, *, reclaim: bool) -> dict[str, Any]:
    """A claims and freezes; its lease runs out; the reaper returns the job; (B claims it);
    A wakes and completes with the learner's script. Returns what happened."""
    queue = run.queue()
    job = queue.enqueue("stale holder").job_id
    a = processes.spawn(_claim_then_complete, queue, source, freeze_at="claim", name="worker A")
    a.wait_frozen(15)
    if a.ended:
        raise RuntimeError(f"worker A should have frozen after its claim: {a!r}")
    fast_forward(queue)
    queue.reap()
    run.event("the reaper", "reaps", queue)
    b = queue.claim(lease_ms=LEASE_MS) if reclaim else None
    if b is not None:
        run.event("worker B", "claims", queue)
    before = queue.snapshot()
    queue_row_before = queue.job(job)
    a.resume()
    run.waited("runs", "Your complete", a, 15)
    if a.error is not None:
        run.code_failed("runs", "Your complete (called by worker A)", a)
    after = queue.snapshot()
    row_before, row_after = before.rows.get(job), after.rows.get(job)
    row_before = (row_before, queue_row_before)
    row_after = (row_after, queue.job(job))
    unchanged = (
        before.place_of(job) == after.place_of(job)
        and job not in after.done
        and row_before == row_after
        and before.active.get(job) == after.active.get(job)
    )
    return {
        "queue": queue,
        "job": job,
        "b": b,
        "reply": (a.value or {}).get("reply"),
        "unchanged": unchanged,
        "after": _where(queue, job),
        "early": wrote_before_reading((a.value or {}).get("commands"), queue.keys.job(job)),
        "facts": {
            "changed": not unchanged,
            "completed": (a.value or {}).get("reply") == "completed" and not unchanged,
            "active": job in after.active,
        },
    }


@check_runner(COMPLETE)
def check_fenced_complete(run: Run, source: str) -> None:
    """Call the learner's complete as a live holder, and as a holder frozen past its lease."""
    if not isinstance(source, str) or not source.strip():
        run.fail("runs", "not-yet", what="Pass your complete script (the string my_complete).")

    # 1. The live holder completes.
    queue = run.queue()
    job = queue.enqueue("live holder").job_id
    child = run.waited("runs", "Your complete", processes.spawn(_claim_then_complete, queue, source), 15)
    if child.error is not None:
        run.code_failed("runs", "Your complete", child)
    reply = child.value["reply"]
    run.saw(holder_reply=reply)
    if reply != "completed":
        row = queue.job(job)
        state, row_token = (row_state(queue, job), row.token) if row else (None, None)
        run.fail(
            "holder",
            "fence-refuses-the-holder",
            job=job,
            token=child.value["token"],
            reply=reply,
            state=state,
            row_token=row_token,
            held=f"A worker that held {job} (token {child.value['token']}) was refused ({reply}); afterwards the "
            f"row said state={state!r}, token={row_token!r}.",
        )
    snap = queue.snapshot()
    run.saw(in_active=job in snap.active)
    if job in snap.active:
        fast_forward(queue)
        handed_out = job in queue.reap()
        run.fail(
            "holder",
            "left-in-active",
            job=job,
            consequence="the reaper handed the completed job out again"
            if handed_out
            else "the reaper found a lease whose row was gone and could only count it as corrupt data; until "
            "then anyone reading the active set saw a completed job as still held",
        )
    row = queue.job(job)
    run.saw(row_kept=row is not None)
    if row is not None:
        run.fail("holder", "row-left-behind", job=job, state=row_state(queue, job))
    again = queue.enqueue("live holder", job_id=job)
    if again.outcome is Enqueue.ENQUEUED:
        run.fail("holder", "not-remembered-done", job=job, outcome=again.outcome.value)
    run.good("holder", "The worker that held the job completed it: out of active, row gone, remembered as done.")

    # 2. Two stale holders: after a reap and B's claim; after a reap alone.
    reclaimed = _stale_call(run, source, reclaim=True)
    reaped = _stale_call(run, source, reclaim=False)
    run.saw(after_b=reclaimed["facts"], after_reap=reaped["facts"])
    for case in (reclaimed, reaped):
        run.at(case["queue"])
        if case["reply"] != "completed" and not case["unchanged"]:
            run.fail(
                "stale",
                "write-before-check",
                reply=case["reply"],
                after=case["after"],
                wrote_before_reading_the_row=case["early"],
                held=f"Your complete refused worker A ({case['reply']}), yet the job changed ({case['after']}). A "
                "refused call must change nothing.",
            )
        if case["reply"] == "completed" and case["unchanged"]:
            run.fail(
                "stale",
                "not-yet",
                what="Your complete answered 'completed' to worker A, whose lease was gone, yet changed nothing: "
                "reply {'stale'} when you refuse.",
            )
    took_b, took_pending = not reclaimed["unchanged"], not reaped["unchanged"]
    said = (
        f"Worker A, frozen past its lease, called your complete when it woke: after the reaper and B's claim, "
        f"{reclaimed['after']} (reply {reclaimed['reply']}); after the reaper alone, {reaped['after']} (reply "
        f"{reaped['reply']}). A stale holder's complete must change nothing."
    )
    run.at(reclaimed["queue"] if took_b else reaped["queue"])
    if took_b and took_pending:
        run.fail("stale", "no-fence", job=reclaimed["job"], after=reclaimed["after"], held=said)
    if took_b:
        run.fail("stale", "fence-on-state-only", job=reclaimed["job"], after=reclaimed["after"], held=said)
    if took_pending:
        run.fail("stale", "fence-on-token-only", job=reaped["job"], after=reaped["after"], held=said)
    run.good(
        "stale",
        "Worker A, frozen (SIGSTOP) past its lease, was refused when it woke -- after the reap, and after B's "
        "claim -- and the refusal changed nothing.",
    )

    # 3. B, the holder, still completes with your script.
    q, b = reclaimed["queue"], reclaimed["b"]
    run.at(q)
    child = run.waited("runs", "Your complete", processes.spawn(_complete_as, q, source, b.job_id, b.token), 15)
    final = child.value
    if final != "completed" or q.snapshot().place_of(b.job_id) != "done":
        row = q.job(b.job_id)
        state, row_token = (row_state(q, b.job_id), row.token) if row else (None, None)
        run.fail(
            "holder-b",
            "fence-refuses-the-holder",
            job=b.job_id,
            token=b.token,
            reply=final,
            state=state,
            row_token=row_token,
            held=f"Worker B, which held {b.job_id} (token {b.token}), was refused ({final}); afterwards the row said "
            f"state={state!r}, token={row_token!r}."
            if final != "completed"
            else f"Worker B, which held {b.job_id}, was told 'completed', but the job was not done "
            f"({_where(q, b.job_id)}).",
        )
    run.good("holder-b", "Then worker B, the job's real holder, completed it.")

    # 4. The whole contract: called as holder, stale holder or stranger, on generated queues.
    contract_step(run, COMPLETE_MOVE, source, what="Your complete", mixup="fence-on-attempts")


def _complete_states(rng: random.Random, size: int) -> State:
    state = states(rng, size)
    jobs = list(state.jobs)
    if not any(j.place == "active" for j in jobs):
        jobs.append(
            Job(
                id="JOB" + "".join(rng.choice("0123456789ABCDEFGH") for _ in range(26)),
                place="active",
                attempts=(tries := rng.randint(1, 4)),
                token=tries + rng.choice((0, 0, 1)),
            )
        )
    roll = rng.random()
    if roll < 0.6:
        job = rng.choice([j for j in jobs if j.place == "active"])
    else:
        job = rng.choice(jobs)
    token = max(0, job.token + rng.choice((0, 0, -1, 1)))
    if roll > 0.93:
        return replace(state, jobs=tuple(sorted(jobs, key=lambda j: j.id)), caller=("JOB" + "1" * 26, 1))
    return replace(state, jobs=tuple(sorted(jobs, key=lambda j: j.id)), caller=(job.id, token))


def _first(reply: object) -> object:
    """'completed', or 'refused' for any refusal ({'stale'}, {'gone'} for a missing row...):
    the contract fixes that a refusal changes nothing, not its word."""
    first = reply[0] if isinstance(reply, list) and reply else reply
    return "completed" if first in ("completed", b"completed") else "refused"


COMPLETE_MOVE = Move(
    keys=("active", "done", "row"),
    argv=lambda state: [state.caller[0], state.caller[1]],
    reply=_first,
    generate=_complete_states,
)

COMPLETE.move = COMPLETE_MOVE  # what the differential judge runs (tools/mutants.py too)
