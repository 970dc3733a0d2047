"""Lesson 05: give a claimed job back (release).

A stopping worker gives back the jobs it claimed but never started: out of active, back in
pending at its own place in line, and its try returned (the library's move is
``release_many.lua``). The learner's Lua release (KEYS pending, active, the job's row; ARGV the
id and the claim's token) is judged as a table of scenes -- each a queue the differential judge
builds twice, runs the learner's move on one and the reference on the other, and compares key
by key -- then on generated queues. docs/exercises.md writes this check step by step.
"""

from __future__ import annotations

from dataclasses import replace

from echoq.teaching.exercises.complete.check import COMPLETE_MOVE
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register
from echoq.teaching.exercises.differential import Job, Judge, Move, State, contract_step


def _more(mine: object, reference: object) -> bool:
    """Whether the learner's row counts more tries than the reference's (a number each)."""
    try:
        return int(str(mine)) > int(str(reference))
    except ValueError:
        return False


MISCONCEPTIONS = [
    Misconception(
        "try-not-given-back",
        "the try is not given back",
        "On {state}: {difference}. The job never started, yet the claim's try still counts toward max attempts.",
        "The claim counted a try in the row. Was that try used?",
        "HINCRBY the row's attempts by -1.",
        signature=lambda e: e["caller"] == "holder" and e.get("field") == "attempts" and _more(*e["values"]),
    ),
    Misconception(
        "left-in-active",
        "left in the active set",
        "On {state}: {difference}. Given back, the job is in two places: in pending, and in active as if still held.",
        "A release MOVES the job, as a claim does, the other way.",
        "ZREM the id from KEYS[2].",
        signature=lambda e: e["caller"] == "holder" and e["key"] == "active",
    ),
    Misconception(
        "back-of-the-line",
        "sent to the back of the line",
        "On {state}: {difference}. A job given back unstarted keeps the place it had when it arrived.",
        "Pending is scored by arrival number. Where does the row keep this job's?",
        "ZADD the id with the row's arrival field (0 when it has none).",
        signature=lambda e: e["caller"] == "holder" and e["key"] == "pending" and None not in e["values"],
    ),
    Misconception(
        "no-fence",
        "no fence",
        "On {state}: {difference}. Worker A's lease ran out and B claimed the job: A gave back B's job.",
        "The caller's claim came with a token. Does the row say the caller still holds the job?",
        "Reply {'stale'}, before any write, unless the row's state is 'active' and its token the caller's.",
        signature=lambda e: e["caller"] == "stale" and "key" in e,
    ),
    Misconception(
        "fence-on-token-only",
        "fenced on the token alone",
        "On {state}: {difference}. The reaper had already put the job back; its token had not moved since.",
        "Between a reap and the next claim the token stays. What changed on the row?",
        "Check the row's state is 'active' as well.",
        signature=lambda e: e["caller"] == "reaped" and "key" in e,
    ),
]

RELEASE = register(load(__file__, key="release", lesson="05", title="give a claimed job back", kind="lua", names=(),
                        misconceptions=MISCONCEPTIONS))  # fmt: skip
# Called for (id, token) on the queues complete's check generates; it replies 'released' or refuses.
RELEASE.move = RELEASE_MOVE = Move(
    keys=("pending", "active", "row"),
    argv=lambda state: list(state.caller),
    reply=lambda r: "released" if (r[0] if isinstance(r, list) and r else r) == "released" else "refused",
    generate=COMPLETE_MOVE.generate,
)
# Job A, claimed (token 3, its second try), is given back; job B arrived after it.
A = Job("JOB" + "7" * 26, "active", attempts=2, token=3, arrival=4)
B = Job("JOB" + "3" * 26, "pending", arrival=9)
SCENES = [  # (who calls, the queue, the misconceptions a difference there can show, the ✓ line)
    ("holder", State("q", (A, B), caller=(A.id, 3)), ("left-in-active", "back-of-the-line", "try-not-given-back"),
     "The holder gave the job back: out of active, ahead of the job that arrived after it, its try returned."),
    ("stale", State("q", (replace(A, attempts=3, token=4), B), caller=(A.id, 3)), ("no-fence",),
     "Worker A, whose job was claimed again after its lease ran out, was refused and changed nothing."),
    ("reaped", State("q", (replace(A, place="pending"), B), caller=(A.id, 3)), ("fence-on-token-only",),
     "Worker A, whose job the reaper had put back, was refused and changed nothing."),
]  # fmt: skip


@check_runner(RELEASE)
def check_release(run: Run, source: str) -> None:
    """Each scene judged against the reference move, then the whole contract on generated queues."""
    for caller, state, names, good in SCENES:
        run.saw(caller=caller)
        judge = Judge(run.client, RELEASE_MOVE, source, RELEASE.solution, RELEASE.lesson)
        judge.trace = True  # its commands logged: the ✗ line's picture steps through them
        verdict, said = judge.differ(state), {"state": state.describe()}
        if verdict.error is not None:
            run.fail(caller, "code-error", what=f"Your release, on {said['state']},", error=verdict.error, where="")
        if verdict.difference is not None:
            run.show(verdict.seen)
            said |= {"difference": verdict.difference, **verdict.seen.where}
            named = [n for n in names if RELEASE.misconception(n).seen_in({**run.seen, **said})]
            run.fail(
                caller, [*named, "differs-from-reference"][0], what="On {state}: {difference}.".format(**said), **said
            )
        run.good(caller, good)
    contract_step(run, RELEASE_MOVE, source, what="Your release")
