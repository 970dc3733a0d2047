"""Lesson 02: write the claim.

The learner's Lua claim takes KEYS pending and active, ARGV the lease in ms, and returns
``{id, token, deadline}`` (or ``{}`` when nothing is pending): the row's fencing token, bumped
by every claim, as the library's claim does (which also counts the try in ``attempts``). The check lives one job's
life with it, on the real server, next to the library's own moves:

1. on an empty queue it must return nothing and change nothing;
2. worker A (a child process) claims with it and is SIGKILLed at once;
3. a real reaper on another connection sweeps while A's lease still runs: the job must
   stay leased; then the lease runs out (fast-forwarded by exactly its length) and the
   reaper must find it;
4. worker B claims with it again, then completes with the real fenced ``complete``.

Every verdict is read from the server: where the job is, the row's fields, what the real
reaper and ``complete`` did with it.
"""

from __future__ import annotations

import random
from typing import Any

from echoq import scripts
from echoq.clock import server_now_ms
from echoq.queue import Complete, Queue, _text
from echoq.teaching import processes
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register
from echoq.teaching.exercises.differential import Move, State, contract_step, states
from echoq.teaching.fast_forward import fast_forward

LEASE_MS = 5_000


MISCONCEPTIONS = [
    Misconception(
        "popped-into-nowhere",
        "popped into nowhere",
        "Worker A was killed right after your claim, and {job} was in neither pending nor active: "
        "nothing on the server could ever hand it out again. This is lesson 01's lost job.",
        "Until the job is done it must sit in a set a reaper looks at.",
        "ZADD the id into KEYS[2], the active set, scored by its lease deadline.",
        signature=lambda e: e["job"] not in e["pending"] and e["job"] not in e["active"],
    ),
    Misconception(
        "left-in-pending",
        "left in pending",
        "After worker A's claim, {job} was still in emq:{{q}}:pending: the next worker's claim would hand it "
        "out again while A works on it.",
        "A claim MOVES the job: out of one set, into the other, in the same script.",
        "Take the id out of pending (ZPOPMIN does it) before you park it in active.",
        signature=lambda e: e["job"] in e["pending"],
    ),
    Misconception(
        "not-the-oldest",
        "not the oldest job",
        "Your claim took {got}, but {oldest} was waiting longer. Pending scores each job by its arrival "
        "number (1 for the first job to reach the server, 2 for the next, ...): the oldest has the lowest score.",
        "A sorted set keeps its members in score order; which end holds the job that arrived first?",
        "ZPOPMIN takes the smallest; ZPOPMAX the largest.",
        signature=lambda e: e["got"] != e["oldest"] and e["oldest"] in e["pending"],
    ),
    Misconception(
        "claims-too-many",
        "claims more than one job",
        "One claim moved {moved} jobs out of pending; a worker asked for one.",
        "Pop one id, and park that id.",
        "ZPOPMIN with no count pops one.",
        signature=lambda e: e["moved"] > 1,
    ),
    Misconception(
        "deadline-in-the-past",
        "lease over before it began",
        "A reaper on another connection, running {ms_after} ms after the claim, took {job} back: its "
        "deadline {deadline} was already at or before the server's now {now}. A live worker would lose its job "
        "at once.",
        "The active set is scored in milliseconds of the server's clock.",
        "TIME gives {seconds, microseconds}: seconds * 1000 + microseconds // 1000, then add the lease.",
        signature=lambda e: e["deadline"] <= e["now"],
    ),
    Misconception(
        "deadline-too-far",
        "lease that never ends",
        "A was killed and its {lease_ms} ms lease had run out, yet the reaper still found {job} alive: its "
        "deadline is {ahead} ahead of the server's now. A dead worker's job would wait that long.",
        "Check the units: milliseconds, for the deadline and for the lease.",
        "TIME's second value is MICROseconds: divide it by 1000; do not multiply the seconds by a million.",
        signature=lambda e: e["ahead_ms"] > 0,
    ),
    Misconception(
        "token-not-bumped",
        "token not bumped",
        "After two claims of {job} the row's token still said {row}: the token never changed, so the fenced "
        "complete cannot tell the worker that lost the job from the one that holds it now.",
        "Each claim must mint a new token, on the row, where complete can compare it.",
        "HINCRBY the row's token by 1 and return the value it gives back.",
        signature=lambda e: e["row"] == e["first_token"],
    ),
    Misconception(
        "token-not-returned",
        "the token it returned is not the row's",
        "Your claim returned token {returned}, but the row's token says {row}: the worker will show a token "
        "the fence does not know, and its complete will be refused.",
        "The token the worker keeps must be the one on the row.",
        "Return the value HINCRBY returned.",
        signature=lambda e: str(e["returned"]) != str(e["row"]),
    ),
    Misconception(
        "row-not-active",
        "row never marked active",
        "{job} sat in the active set while its row said state={state!r}: {consequence}. The row is the truth: "
        "the reaper, complete, retry and extend only accept a job whose row says 'active'.",
        "The row says where the job is. Where is it after your claim?",
        "HSET the row's state to 'active' in the claim.",
        signature=lambda e: e["state"] != "active",
    ),
]


EXERCISE = register(
    load(
        __file__,
        key="claim",
        lesson="02",
        title="write the claim",
        kind="lua",
        names=(),
        misconceptions=MISCONCEPTIONS,
    )
)


def _claim_with(source: str, queue: Queue) -> Any:
    """In a child: run the learner's claim on a counting client (the claim is step 1)."""
    k = queue.keys
    return scripts.run_text(processes.counting_client(queue.client), source, [k.pending, k.active], [LEASE_MS])


def _complete(queue: Queue, job_id: str, token: Any) -> str:
    """In a child: complete with the library's complete, fenced by ``token``."""
    q = Queue(queue.name, processes.counting_client(queue.client))
    try:
        return q.complete(job_id, token=int(token)).value
    except (TypeError, ValueError):
        return f"no usable token ({token!r})"


def _reply(run: Run, child: processes.Child, who: str) -> list[Any] | None:
    if child.error is not None:
        run.code_failed("runs", f"Your claim (run by {who})", child)
    value = child.value
    if value in (None, [], {}):
        return None
    if not isinstance(value, list) or len(value) < 3:
        run.fail("reply", "not-yet", what=f"Your claim returned {value!r}; return {{id, token, deadline}} (or {{}}).")
    return value


@check_runner(EXERCISE)
def check_claim_script(run: Run, source: str) -> None:
    """Run the learner's claim through a job's life: kill, reaper, redelivery, complete."""
    if not isinstance(source, str) or not source.strip():
        run.fail("runs", "not-yet", what="Pass your claim script (the string my_claim).")
    queue = run.queue()
    k = queue.keys

    # 1. Nothing pending: nothing claimed, nothing changed.
    empty = run.waited("runs", "Your claim", processes.spawn(_claim_with, source, queue, name="a worker"), 10)
    if empty.error is not None:
        run.code_failed("runs", "Your claim, on an empty queue,", empty)
    if empty.value not in (None, [], {}):
        run.fail("runs", "not-yet", what=f"On an empty queue your claim returned {empty.value!r}; return {{}}.")
    if list(queue.keys_in_use()):
        run.fail("runs", "not-yet", what="On an empty queue your claim wrote keys; claim nothing, write nothing.")
    run.good("runs", "It runs, and on an empty queue it claims nothing and writes nothing.")

    # 2. Worker A claims and is SIGKILLed right after the claim.
    ids = queue.enqueue_many(["oldest", "middle", "newest"])
    before = server_now_ms(queue.client)
    a = run.waited("claim", "Your claim", processes.spawn(_claim_with, source, queue, kill_at=1, name="worker A"), 10)
    if a.error is not None:
        run.code_failed("claim", "Your claim (run by worker A)", a)
    if not a.killed:
        raise RuntimeError(f"worker A was to be killed after its claim: {a!r}")
    snap = queue.snapshot()
    run.saw(pending=list(snap.pending), active=list(snap.active))
    moved_out = [i for i in ids if i not in snap.pending]
    if not moved_out:
        left = ids[0]
        run.fail("claim", "left-in-pending", job=left)
    if len(moved_out) > 1:
        run.fail("claim", "claims-too-many", moved=len(moved_out))
    (job,) = moved_out
    place_active = job in snap.active
    if not place_active and job not in snap.pending:
        run.fail("claim", "popped-into-nowhere", job=job)
    if job != ids[0]:
        run.fail("claim", "not-the-oldest", got=job, oldest=ids[0])
    if ids[0] in snap.pending and ids[0] in snap.active:
        run.fail("claim", "left-in-pending", job=ids[0])
    first_token = int(queue.client.hget(k.job(job), "token") or 0)
    claimed_state = _text(queue.client.hget(k.job(job), "state") or "")  # what your claim left on the row
    run.good("claim", "Worker A was killed (SIGKILL) right after your claim: the oldest job was in the active set.")

    # 3. A reaper on another connection, while A's lease should still run; then after it ran out.
    now, moved = queue.reap_once()
    run.event("a reaper", "reaps", queue)
    if job in moved:
        run.fail(
            "lease",
            "deadline-in-the-past",
            job=job,
            deadline=int(snap.active[job]),
            now=now,
            ms_after=max(0, now - before),
        )
    fast_forward(queue, LEASE_MS)  # as if the lease's whole length had passed on the server
    _, moved = queue.reap_once()
    run.event("a reaper", "reaps", queue)
    reaped_row = queue.job(job)
    if job not in moved and reaped_row is not None and reaped_row.reason == "corrupt":
        run.fail(
            "lease",
            "row-not-active",
            job=job,
            state=claimed_state,
            consequence="when its lease ran out, the reaper found a row that disagreed with its set and "
            "dead-lettered the job as corrupt data: no worker will run it",
            held=f"When its lease ran out, the reaper dead-lettered {job} as corrupt data: its row disagreed with "
            "its set. No worker will run it.",
        )
    if job not in moved:
        score = queue.client.zscore(k.active, job)
        ahead_ms = int(score or 0) - server_now_ms(queue.client)
        run.fail(
            "lease",
            "deadline-too-far",
            job=job,
            lease_ms=LEASE_MS,
            ahead=_duration(ahead_ms),
            ahead_ms=ahead_ms if score is not None else 0,
            held=f"A was killed and its {LEASE_MS} ms lease had run out, yet the reaper did not take {job} back: "
            f"it was in {queue.snapshot().place_of(job) or 'no set'}.",
        )
    run.good(
        "lease",
        f"The lease was on the server's clock: a reaper left the job alone while the {LEASE_MS} ms ran, "
        "and took it back once they had run out.",
    )

    # 4. Worker B claims it again, and completes with the real fenced complete.
    b = run.waited("redeliver", "Your claim", processes.spawn(_claim_with, source, queue, name="worker B"), 10)
    again = _reply(run, b, "worker B")
    if again is None or _text(again[0]) != job:
        snap = queue.snapshot()
        run.fail(
            "redeliver",
            "popped-into-nowhere",
            job=job,
            pending=list(snap.pending),
            active=list(snap.active),
            held=f"Worker B's claim returned {again!r}, not the reaped job {job}, which was then in "
            f"{snap.place_of(job) or 'no set'}.",
        )
    returned = again[1]
    row_token = int(queue.client.hget(k.job(job), "token") or 0)
    if row_token == first_token:
        run.fail("redeliver", "token-not-bumped", job=job, row=row_token, first_token=first_token)
    if str(returned) != str(row_token):
        run.fail("redeliver", "token-not-returned", returned=returned, row=row_token)
    run.good("redeliver", f"The reaped job was claimed again with token {returned}: a new fencing token.")
    state = _text(queue.client.hget(k.job(job), "state") or "")
    done = run.waited("complete", "The complete", processes.spawn(_complete, queue, job, returned, name="worker B"), 10)
    outcome = done.value
    if outcome != Complete.COMPLETED.value:
        run.fail(
            "complete",
            "row-not-active",
            job=job,
            state=state,
            consequence=f"B held it and did the work, but its fenced complete was refused ({outcome})",
            held=f"Worker B held {job} and did the work, but its fenced complete was refused ({outcome}).",
        )
    run.good("complete", "Worker B's fenced complete was accepted: the job is done.")

    # 5. The whole contract: the claim against the reference claim on generated queues.
    contract_step(run, MOVE, source, what="Your claim")


def _states(rng: random.Random, size: int) -> State:
    return states(rng, size, places=("pending", "pending", "pending", "active", "scheduled", "dead", "done"))


MOVE = Move(keys=("pending", "active"), argv=lambda state: [LEASE_MS], calls=2, reply=lambda r: r, generate=_states)


def _duration(ms: int) -> str:
    if ms >= 86_400_000 * 365:
        return f"about {ms / (86_400_000 * 365):,.0f} years"
    if ms >= 86_400_000:
        return f"about {ms / 86_400_000:,.0f} days"
    return f"{ms:,} ms"


EXERCISE.move = MOVE  # what the differential judge runs (tools/mutants.py too)
