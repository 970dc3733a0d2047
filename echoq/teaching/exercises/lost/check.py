"""Lesson 01: which jobs does a killed pop-and-process worker lose?

The check does it for real: five jobs, a naive worker in a child process pops and
finishes ``job 1``, pops ``job 2`` and is SIGKILLed before it finishes. The truth comes
from the server (pending set, effects) and is compared with the learner's answer.
"""

from __future__ import annotations

from collections.abc import Collection

from echoq.effects import Effects
from echoq.queue import Queue
from echoq.teaching import processes
from echoq.teaching.contrasts import apply_every, naive_pop
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register

PAYLOADS = [f"job {n}" for n in range(1, 6)]


MISCONCEPTIONS = [
    Misconception(
        "server-keeps-a-copy",
        "the server keeps a copy",
        "Nothing lost, you said; but after the kill one job was in no key of the queue at all: the pop "
        "takes a job out of pending and deletes its row in the same step.",
        "Read naive_pop.lua again: what is left on the server the moment it returns?",
        "After the pop, the only copy of the job is in the worker's memory. What happens to that memory?",
        signature=lambda e: not e["answer"] and e["truth"],
    ),
    Misconception(
        "finished-work-lost",
        "finished work is lost too",
        "{finished} was finished before the kill: its effect is on the server. A crash cannot undo work "
        "that is done; only the job in the worker's hands had nowhere else to be.",
        "Which jobs were done, which were in the worker's hands, which had not been touched?",
        "A job that was popped AND processed is done. Take it out of your answer.",
        signature=lambda e: set(e["answer"]) & set(e["finished_jobs"]),
    ),
    Misconception(
        "pending-jobs-die-with-the-worker",
        "waiting jobs die with the worker",
        "{waiting} never left emq:{{q}}:pending: the worker had not taken them, so its death could not touch "
        "them. A restarted worker will find them.",
        "A worker holds only what it has popped. Where are the jobs it never popped?",
        "Count only the job the worker had in its hands when it died.",
        signature=lambda e: set(e["truth"]) <= set(e["answer"]) and set(e["answer"]) & set(e["waiting_jobs"]),
    ),
    Misconception(
        "the-next-job-is-lost",
        "the next job is lost",
        "{wrong} is still pending; the job lost is the one the worker had already popped when it died.",
        "The kill came after the second pop. Which job had that pop taken?",
        "The worker finished one job and was holding the next one it popped.",
        signature=lambda e: e["next"] in e["answer"] and not set(e["answer"]) & set(e["truth"]),
    ),
    Misconception(
        "everything-is-lost",
        "the whole queue is lost",
        "Only one worker died; the queue lives on the server. After the kill the server still held "
        "{kept} job(s) pending and the effect of {finished_count} finished one.",
        "A worker is not the queue. What does the server hold after the kill?",
        "Count the pending jobs and the done ones: what is left?",
        signature=lambda e: set(e["answer"]) >= set(e["jobs"]),
    ),
    Misconception(
        "a-count-not-the-jobs",
        "a number, not the jobs",
        'The question is which jobs: answer with a list of payloads, like ["job 4"], not {answer!r}.',
        "Name the jobs, as strings.",
        "A list with the payload of each lost job.",
        signature=lambda e: isinstance(e["answer"], int | float),
    ),
]


EXERCISE = register(
    load(
        __file__,
        key="lost",
        lesson="01",
        title="which jobs are lost",
        kind="value",
        names=("lost",),
        misconceptions=MISCONCEPTIONS,
    )
)


def _naive_worker(queue: Queue, effects: Effects) -> None:
    """The pop-and-process loop, in a child: each pop is a step; the kill comes after the
    second pop, before that job's effect."""
    while True:
        popped = naive_pop(queue)
        if popped is None:
            return
        processes.mark("popped")
        apply_every(effects, popped[0], popped[1])  # the work: its effect on the server


@check_runner(EXERCISE)
def check_lost_jobs(run: Run, lost: object) -> None:
    """Run the naive worker for real, SIGKILL it after its second pop, and compare the jobs
    the server lost with ``lost`` (a collection of payloads)."""
    if lost is None:
        run.fail("answer", "no-answer", what="Put your answer in place of None: a list of payloads.")
    queue = run.queue()  # the scene first: whatever the answer, its feedback pictures what the server held
    ids = queue.enqueue_many(PAYLOADS)
    payload_of = dict(zip(ids, PAYLOADS, strict=True))
    effects = Effects(queue)
    worker = processes.spawn(_naive_worker, queue, effects, kill_at=2, name="the naive worker")
    run.waited("kill", "the naive worker", worker, 10)
    snap = queue.snapshot()
    kept = set(snap.pending) | set(snap.active)
    finished = {payload_of[i] for i in effects.counts()}
    truth = {payload_of[i] for i in ids if i not in kept and payload_of[i] not in finished}
    waiting = {payload_of[i] for i in kept}
    if not worker.killed or truth != {"job 2"}:  # the scene itself went wrong: say so, judge nothing
        raise RuntimeError(f"the lesson 01 scene did not play out: {worker!r}, lost {sorted(truth)}")
    run.good("scene", "The scene ran for real: the naive worker process was killed (SIGKILL) after its second pop.")
    if isinstance(lost, (int, float)) and not isinstance(lost, bool):
        run.fail("answer", "a-count-not-the-jobs", answer=lost)
    # what the run showed, for the misconceptions' signatures: the next job is the one the next pop takes
    run.saw(
        truth=sorted(truth),
        finished_jobs=sorted(finished),
        waiting_jobs=sorted(waiting),
        jobs=list(PAYLOADS),
        next=next((p for p in PAYLOADS if p in waiting), None),
    )
    if isinstance(lost, str) or not isinstance(lost, Collection) or not all(isinstance(x, str) for x in lost):
        run.fail("answer", "not-yet", what=f'Answer with a list of payloads such as ["job 4"], not {lost!r}.')
    answer = set(lost)
    run.saw(answer=sorted(answer))
    show = ", ".join(sorted(truth))
    if answer == truth:
        run.good("answer", f"{show} was lost: in no key of the queue, its effect never ran.")
        return
    if not answer:
        run.fail("answer", "server-keeps-a-copy")
    if answer >= set(PAYLOADS):
        run.fail("answer", "everything-is-lost", kept=len(waiting), finished_count=len(finished))
    if answer & finished:
        run.fail("answer", "finished-work-lost", finished=", ".join(sorted(answer & finished)))
    if answer & waiting and truth <= answer:
        run.fail("answer", "pending-jobs-die-with-the-worker", waiting=", ".join(sorted(answer & waiting)))
    if answer & waiting:
        wrong = ", ".join(sorted(answer & waiting))
        run.fail(
            "answer",
            "the-next-job-is-lost",
            wrong=wrong,
            held=f"{wrong} never left emq:{{q}}:pending after the kill: it is still there for the next worker. "
            f"The job lost is {show}.",
        )
    run.fail("answer", "not-yet", what=f"{sorted(answer)} are not jobs of this queue; its jobs are job 1 to job 5.")
