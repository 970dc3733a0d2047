"""Lesson 05: the consumer loop on a beat.

The learner writes ``worker_loop(q, work, running)``: until ``running()`` is False, run
the stalled check on a beat and, between beats, claim a job, run ``work(claim)``, complete it. The
check runs it as real worker PROCESSES (forked children, each with its own connection)
and plays three seeded scenes:

1. **a peer's crash** -- two workers; one is SIGKILLed inside ``work`` on its first
   job; the other must bring that job back on its beat, with no restart, and the job's
   effect must happen (once: ``work`` keys it on the JOB id);
2. **a failing job** -- one job's ``work`` raises on its first delivery; it must still be done,
   with its effect, by the same worker, which must still be running;
3. **a poison job** -- it SIGKILLs every worker that works on it; killed workers are
   restarted; it must end in the dead set at the MAX_STALLED-th stall and the others done.

Beside them: a job whose work takes longer than a beat (150 ms), with two workers -- a lease
shorter than the work lets the other worker's beat take it back, and the scene then waits for
that second delivery, so it always happens; the row of the failing job, read as its second try
begins (it must carry the error); and the stop: told to stop, every worker must return within
STOP_S, or it is killed; the loop is told it never stops only when it kept sending commands and
never asked running() (a loop asleep, or one that asked and went on, is told what it did).

Then the rows of :data:`SCENES`, on workloads the extend and charge checks share
(:mod:`..workloads`): **a busy queue** -- jobs keep arriving, 16 or more waiting, 5 to 40 ms of
work each -- and two workers; the one that takes the first job is SIGKILLed on it, and the other
must bring it back and do it within RECOVERY_MS of its lease running out, while every claim of its
own finds a job (a beat that runs only when a claim finds nothing never comes round). Every scene
before it lets the queue go quiet.

While idle, a worker must wait between claims rather than spin: judged by how soon it sends
its next command after a reply, over IDLE_S: a spinning loop answers most replies within
QUICK_PAUSE_S (a busy machine can only make that rarer), a waiting one hardly any. Every
verdict comes from the server (where each job is, the rows, the effects ledger) and the
processes (who died, how, what they saw).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from collections.abc import Callable
from typing import Any

from echoq.clock import server_now_ms
from echoq.effects import Effects
from echoq.queue import DEFAULT_LEASE_MS, Claim, Complete, Queue, RetryResult
from echoq.teaching import processes
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register
from echoq.teaching.exercises.workloads import BUSY, Feeder, Scene, work_ms_of

LEASE_MS, BEAT_MS, MAX_STALLED = 400, 100, 2


RECOVERY_MS = 1_500  # a beat must bring an expired lease back within this (ample on a loaded machine)
LONGEST_LEASE_MS = 5_000  # a crashed worker's job held longer than this is a lease nobody waits out
# Idle, a loop spins when it sends its next command within QUICK_PAUSE_S of a reply after at
# least SPIN_SHARE of its replies (its own time, apart from the network's and the server's): a
# loop that sleeps 1 ms or more after an empty claim waits that long after nearly every
# reply (its beats aside); one that asks again at once answers in microseconds, and a busy
# machine stretches a few of those pauses, never most of them. (A sum of the pauses would
# not do: one pause stretched by the machine outweighs thousands of quick ones.)
QUICK_PAUSE_S, SPIN_SHARE = 0.0005, 0.75
IDLE_S = 0.5  # the window an idle worker's pauses are measured over
STOP_S = 3.0  # a loop must return within this after running() turns False (it sleeps at most a beat)
# The beat, judged by the gaps between an idle worker's sweeps (by its own clock): none of
# BEAT_GAPS gaps within 3 beats is a beat too slow (a busy machine stretches some gaps, hardly
# all), and a median gap under half a beat is a sweep on every pass. A loop on a beat sweeps
# no sooner than a beat after its last decision, so only a gap after a late send can be short,
# never most of them; a sweep on every pass has most of its gaps a pause long, and a busy
# machine stretches a few of those, not the median of five.
BEAT_GAPS, BEAT_WAIT_S = 5, 2.0
LONG_WORK_MS = 150  # a job whose work outlasts the beat (and not the lease)

# The scenes played on a queue that never goes quiet (rows of workloads.BUSY and its kin): a loop
# whose beat waits for an idle queue passes every scene whose queue empties.
SCENES = (
    Scene(
        "busy",
        BUSY,
        "a worker SIGKILLed mid-job",
        f"its job is back and done within {RECOVERY_MS} ms after its lease ran out, by the worker running beside it",
    ),
)


LOOP_MISCONCEPTIONS = [
    Misconception(
        "complete-before-work",
        "done before the work",
        "A worker was killed inside work(claim) on {job}, and the job was already marked done: its effect never "
        "happened, and nothing will ever retry it.",
        'When may a worker say "done"? What if it dies one line later?',
        "Call q.complete(claim) after work(claim) has returned.",
        signature=lambda e: e["done_without_effect"] == e["killed_holding"],
    ),
    Misconception(
        "no-beat",
        "no beat",
        "A worker was killed holding {job}; its lease ran out, and {overdue:.1f} s later the job was still in "
        "emq:{{q}}:active, though another worker was running the whole time. Even a fresh worker never "
        "brought it back.",
        "Who moves an expired lease back to pending? Some worker must, again and again.",
        "Run q.stalled_check(max_stalled=MAX_STALLED) every BEAT_MS inside the loop.",
        signature=lambda e: e["still_active"] is not None and not e["fresh_worker_brought_back"],
    ),
    Misconception(
        "reap-only-at-start",
        "reaped once, at start",
        "A worker was killed holding {job}; the other worker, already running, had not brought it back "
        "{overdue:.1f} s after its lease ran out. Only a newly started worker did: your stalled check runs once, "
        "when the loop begins.",
        "Workers die while others are running. When does a running worker look for their jobs?",
        "Move the stalled check inside the loop, on a beat.",
        signature=lambda e: e["still_active"] is not None and e["fresh_worker_brought_back"],
    ),
    Misconception(
        "beat-only-when-idle",
        "the beat waits for an idle queue",
        "A worker was killed holding {job} while jobs kept arriving; {overdue:.1f} s after its lease ran out it was "
        "still not back, though the other worker ran all along, working one job after another (every claim it "
        "made found one), and ran the stalled check not once: yours runs only when claim() finds nothing, and a "
        "busy queue never lets it.",
        "When is the queue never empty? Exactly when a dead worker's job is most needed back.",
        "Run the stalled check on its beat whether or not the claim found a job: before the claim, not in its "
        "empty branch.",
        signature=lambda e: (
            not e["busy_back"] and e["busy_sweeps"] == 0 and e["busy_empty_claims"] == 0 and e["busy_worked"] > 0
        ),
    ),
    Misconception(
        "lease-too-long",
        "a lease nobody waits out",
        "A worker was killed holding {job}, whose lease runs {lease_s:.0f} s: the job waits that long before any "
        "beat may bring it back. Use LEASE_MS.",
        "How long after a crash does the job come back? Exactly as long as its lease.",
        "Claim with lease_ms=LEASE_MS.",
        signature=lambda e: e["killed_lease_left_ms"] > LONGEST_LEASE_MS,
    ),
    Misconception(
        "swallow-and-complete",
        "the error swallowed, the job completed",
        "work(claim) raised on {job} ({error}), and the job was completed anyway: its effect never happened.",
        "A job whose work raised is not done.",
        "On an exception, give the job back with its error (q.retry); never complete it.",
        signature=lambda e: e["done_without_effect"] == e["raised_on"],
    ),
    Misconception(
        "one-error-ends-the-worker",
        "one error ends the worker",
        "work(claim) raised once ({error}) and your loop let it escape: the worker process ended{where}, with "
        "jobs still to do.",
        "A failing job is normal; a dead worker is not.",
        "Catch Exception around work(claim), and give the job back with q.retry.",
        signature=lambda e: e["worker_ended_with"].startswith("FlakyError"),
    ),
    Misconception(
        "poison-loops-forever",
        "poison loops forever",
        "A job that kills every worker that works on it killed {kills} workers and was still coming back "
        "({where}): your beat returns it every time.",
        "Something must count how often a job has stalled.",
        "Use q.stalled_check(max_stalled=MAX_STALLED), which dead-letters a job at its MAX_STALLED-th stall; "
        "q.reap() returns it forever.",
        signature=lambda e: e["poison_place"] != "dead" and e["poison_kills"] > MAX_STALLED,
    ),
    Misconception(
        "lease-shorter-than-the-work",
        "a lease shorter than the work",
        "A job whose work takes {work_ms} ms was claimed under a {lease_ms} ms lease: it ran out while the work was "
        "still running, another worker's beat brought the job back, and it was worked on {runs} times.",
        "How long may a worker hold a job before the others take it back? Longer than the work takes.",
        "Claim with lease_ms=LEASE_MS: the beat is how often the check runs, not how long a job may take.",
        signature=lambda e: e["long_runs"] > 1 and e["long_least_lease_ms"] < LONG_WORK_MS,
    ),
    Misconception(
        "retried-without-its-error",
        "given back without its error",
        "work(claim) raised FlakyError on {job}; your loop gave the job back, but when it was claimed again its row "
        "said error = {error!r}: what went wrong is recorded nowhere, and a job that fails every time would end "
        "in the dead set with no reason anyone can read.",
        "A job that failed carries why it failed, for whoever looks at it next.",
        "Pass the exception's text to q.retry (error=...).",
        signature=lambda e: e["retried_row_error"] in ("None", "''"),
    ),
    Misconception(
        "never-stops",
        "never stops",
        "Told to stop, your loop was still running {seconds:g} s later, still sending Valkey commands, and it never "
        "asked running() in that time: the worker could not be stopped (a deploy, a shutdown), so it was killed, "
        "holding whatever it held.",
        "Who decides when the worker stops? Ask it every time round the loop.",
        "Loop while running(): that is the stop signal.",
        signature=lambda e: e["commands_after_stop"] > 0 and not e["asked_running_after_stop"],
    ),
    Misconception(
        "attempts-as-the-token",
        "attempts is not the token",
        "Your loop fenced a complete or retry with {sent}, the claim's attempts; its token was {token}. One try of "
        "this job had been given back unstarted (a release gives the try back, never the token), so the two differ "
        "and the server refused it: the job stays held until its lease runs out.",
        "Which number fences a claim? Attempts counts tries; something else changes on every claim.",
        "Pass the claim itself to q.complete and q.retry.",
        signature=lambda e: e["fenced_with_the_attempts"] != e["claim_token"],
    ),
    Misconception(
        "spins-when-idle",
        "spins when idle",
        "With nothing to do, one worker sent {commands} commands to Valkey in {seconds:.1f} s, and after {quick} of "
        "its {replies} replies it sent the next command within {within_ms:g} ms: it asks again at once when a claim "
        "comes back empty. A fleet of those keeps the server busy doing nothing.",
        "What should a worker do when there is no job?",
        "Sleep a little (a few ms up to the beat) when claim returns None.",
        signature=lambda e: e["idle_replies"] > 0 and e["idle_quick_pauses"] >= SPIN_SHARE * e["idle_replies"],
    ),
]


LOOP = register(
    load(
        __file__,
        key="loop",
        lesson="05",
        title="the loop on a beat",
        kind="python",
        names=("worker_loop",),
        misconceptions=LOOP_MISCONCEPTIONS,
    )
)


Loop = Callable[[Queue, Callable[[Claim], None], Callable[[], bool]], object]


DIES_ONCE = "order 0 (its first worker dies)"


class FlakyError(RuntimeError):
    """What the check's work raises on a flaky job's first delivery."""


LONG = "a long job"


def _long_work(queue: Queue, claim: Claim) -> None:
    """A job that works LONG_WORK_MS, longer than the beat. Under a lease shorter than that,
    it works on until another worker has taken the job (its row's token moved on) or 3 s
    passed: so the second delivery that lease allows always happens, whatever the machine's pace."""
    lease_ms = claim.deadline_ms - server_now_ms(queue.client)
    processes.mark(f"long work, lease {lease_ms}")
    time.sleep(LONG_WORK_MS / 1000)
    give_up = time.monotonic() + 3
    while lease_ms < LONG_WORK_MS and time.monotonic() < give_up:
        row = queue.job(claim.job_id)
        if row is None or row.token != claim.token:
            break
        time.sleep(0.01)


def _work(queue: Queue, work_ms: float) -> Callable[[Claim], None]:
    effects = Effects(queue)

    def work(claim: Claim) -> None:
        processes.mark("work")
        if claim.payload == "poison" or (claim.payload == DIES_ONCE and claim.attempts == 1):
            os.kill(os.getpid(), signal.SIGKILL)  # this job kills whoever works on it (once, or always)
        if claim.payload == "flaky" and claim.attempts == 1:
            raise FlakyError("the payment API timed out")
        if claim.payload == "flaky":  # what its row says of the first try, as this try begins
            row = queue.job(claim.job_id)
            processes.mark(f"flaky row error {row.error if row is not None else None!r}")
        if claim.payload == LONG:
            _long_work(queue, claim)
        time.sleep((work_ms + work_ms_of(claim.payload)) / 1000)
        effects.apply_once(claim.job_id, claim.payload)
        processes.mark("effect")

    return work


class _Watched(Queue):
    """The queue as the learner's loop gets it: a complete or retry fenced on a number that is
    not the claim's token but its attempts is also a step that says so."""

    held: dict[str, tuple[int, int]]  # job id -> (token, attempts) of the latest claim of it here

    def claim(self, lease_ms: int = DEFAULT_LEASE_MS) -> Claim | None:
        got = super().claim(lease_ms)
        if got is not None:
            self.held = {**getattr(self, "held", {}), got.job_id: (got.token, got.attempts)}
        return got

    def _sent(self, claim: Claim | str, token: int | None) -> None:
        job_id = claim.job_id if isinstance(claim, Claim) else claim
        sent = claim.token if isinstance(claim, Claim) and token is None else token
        real, attempts = getattr(self, "held", {}).get(job_id, (None, None))
        if real is not None and sent != real and sent == attempts:
            processes.mark(f"attempts sent as the token {sent} {real}")

    def complete(self, claim: Claim | str, token: int | None = None) -> Complete:
        self._sent(claim, token)
        return super().complete(claim, token)

    def retry(self, claim: Claim | str, token: int | None = None, **options: Any) -> RetryResult:
        self._sent(claim, token)
        return super().retry(claim, token, **options)


def _worker(loop: Loop, queue: Queue, stop_fd: int, work_ms: float) -> str:
    import select

    client = processes.counting_client(queue.client)
    q = _Watched(queue.name, client)

    told: list[bool] = []

    def running() -> bool:
        if select.select([stop_fd], [], [], 0)[0]:
            if not told:  # the loop asked, and heard it must stop: what a loop that never stops lacks
                told.append(True)
                processes.mark("told to stop")
            return False
        return True

    loop(q, _work(Queue(queue.name, client), work_ms), running)
    return "stopped" if not running() else "returned"


class Fleet:
    """Worker processes running the learner's loop on one queue."""

    def __init__(self, run: Run, loop: Loop, queue: Queue, seed: int) -> None:
        self.run, self.loop, self.queue = run, loop, queue
        self.rng = random.Random(seed)
        self.workers: list[tuple[processes.Child, int]] = []
        self.kills = 0
        self.told_at = 0.0  # when the workers were last told to stop (time.monotonic())

    def start(self, kill_at: processes.StepAt = None) -> processes.Child:
        stop_r, stop_w = os.pipe()
        child = processes.spawn(
            _worker, self.loop, self.queue, stop_r, self.rng.uniform(0, 3), kill_at=kill_at, name="a worker"
        )
        os.close(stop_r)
        self.workers.append((child, stop_w))
        return child

    def poll(self) -> None:
        for child, _ in self.workers:
            child.poll()

    def stop(self, child: processes.Child) -> None:
        for c, w in self.workers:
            if c is child and w >= 0:
                os.write(w, b"x")
        self.told_at = time.monotonic()
        try:
            child.wait(STOP_S)
        except processes.ChildTimeout:
            self.late([child])

    def late(self, late: list[processes.Child]) -> None:
        """The ✗ line for workers still running STOP_S after they were told to stop: 'never stops'
        only when one kept sending commands and never asked running(); otherwise what it did."""
        self.run.at(self.queue)
        for child in late:
            sent = sum(1 for at, _ in child.step_times if at is not None and at > self.told_at)
            asked = "told to stop" in child.steps
            if not asked and sent:
                self.run.saw(commands_after_stop=sent, asked_running_after_stop=asked)
                self.run.fail("stop", "never-stops", seconds=STOP_S)
        child = late[0]
        if "told to stop" in child.steps:
            self.run.fail(
                "stop",
                "not-yet",
                what=f"Told to stop, your loop asked running(), which returned False, and {STOP_S:g} s later it was "
                "still running: the worker could not be stopped, so it was killed, holding whatever it held. Return "
                "once running() says False.",
            )
        self.run.fail(
            "stop",
            "not-yet",
            what=f"Told to stop, your loop was still running {STOP_S:g} s later, and in that time it neither asked "
            "running() nor sent Valkey a command: it was waiting (a sleep, or a wait) longer than that, so it was "
            "killed, holding whatever it held. A worker must notice the stop soon: wait at most about a beat at a "
            "time.",
        )

    def stop_all(self) -> list[processes.Child]:
        """Tell every worker to stop; the ones still running STOP_S later are killed and returned."""
        self.told_at = time.monotonic()
        for child, w in self.workers:
            if not child.ended:
                try:
                    os.write(w, b"x")
                except OSError:
                    pass
        late = []
        for child, w in self.workers:
            try:
                child.wait(STOP_S)
            except processes.ChildTimeout:
                late.append(child)
            os.close(w)
        self.workers = []
        return late

    def steps(self, prefix: str) -> list[str]:
        """The steps of every worker so far whose label starts with ``prefix``."""
        self.poll()
        return [step for child, _ in self.workers for step in child.steps if step.startswith(prefix)]

    def raised(self) -> processes.Child | None:
        self.poll()
        return next((c for c, _ in self.workers if c.state == "raised"), None)

    def until(self, settled: Callable[[], bool], seconds: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            self.poll()
            if settled():
                break
            time.sleep(0.01)
        return time.monotonic() - started


SWEEPS = ("stalled_check", "reap")  # the scripts a beat runs (the stalled check, or a bare reap)


def _beat_gaps(worker: processes.Child, since: int) -> list[float]:
    """The times (ms, by the worker's own clock) between the sweeps it sent after its first
    ``since`` steps."""
    sent = [
        at if at is not None else done
        for step, (at, done) in zip(worker.steps[since:], worker.step_times[since:], strict=False)
        if step in SWEEPS
    ]
    return [(b - a) * 1000 for a, b in zip(sent, sent[1:], strict=False)]


def _done_without_effect(queue: Queue, ids: list[str]) -> str | None:
    snap = queue.snapshot()
    effects = Effects(queue).counts()
    return next((i for i in ids if i in snap.done and effects.get(i, 0) == 0), None)


@check_runner(LOOP)
def check_worker_loop(run: Run, worker_loop: Loop, *, seed: int = 5) -> None:
    """Run the learner's loop as worker processes through a crash, a failing job and a
    poison job; judge by the server's sets and the effects ledger."""
    if not callable(worker_loop):
        run.fail("runs", "not-yet", what=f"Pass your loop function (worker_loop), not {worker_loop!r}.")

    # 1. A peer's crash: two workers are running; the one that works on the first order is
    #    SIGKILLed inside work(claim); the other runs on, and nobody restarts anything.
    queue = run.queue("-crash")
    fleet = Fleet(run, worker_loop, queue, seed)
    run.cleanup(fleet.stop_all)
    pair = [fleet.start(), fleet.start()]
    for worker in pair:
        try:
            worker.wait_steps(1, 3)  # each is inside its loop, talking to Valkey
        except processes.ChildTimeout:
            run.fail("runs", "too-slow", what="Your loop (it never sent Valkey a command)", seconds=3)
    ids = queue.enqueue_many([DIES_ONCE] + [f"order {n}" for n in range(1, 4)])
    deadline = time.monotonic() + 10
    while not any(w.killed for w in pair):
        fleet.poll()
        if (raised := fleet.raised()) is not None:
            run.code_failed("runs", "Your loop", raised)
        if time.monotonic() > deadline:
            run.fail("runs", "too-slow", what="Your loop (it never worked on the first order)", seconds=10)
        time.sleep(0.005)
    survivor = next(w for w in pair if not w.killed)
    dying = ids[0]
    snap = queue.snapshot()
    if dying in snap.active and snap.active[dying] - snap.now_ms > LONGEST_LEASE_MS:
        run.saw(killed_holding=dying, killed_lease_left_ms=snap.active[dying] - snap.now_ms)
        run.fail("crash", "lease-too-long", job=dying, lease_s=(snap.active[dying] - snap.now_ms) / 1000)
    expires = snap.active.get(dying, snap.now_ms)

    def settled_or_overdue() -> bool:
        now = queue.snapshot()
        return now.counts["done"] == len(ids) or now.now_ms > expires + RECOVERY_MS

    waited = fleet.until(settled_or_overdue, 10.0)
    if (raised := fleet.raised()) is not None:
        run.code_failed("runs", "Your loop", raised)
    lost = _done_without_effect(queue, ids)
    run.saw(killed_holding=dying, done_without_effect=lost)
    if lost == dying:
        run.fail("crash", "complete-before-work", job=lost)
    if lost is not None:
        run.fail(
            "crash",
            "not-yet",
            what=f"{lost} was marked done but its effect never ran: complete a job only "
            "after work(claim) has returned.",
        )
    snap = queue.snapshot()
    stuck = next((i for i in ids if i in snap.active), None)
    if stuck is not None:
        fleet.stop(survivor)
        fresh = fleet.start()
        fleet.until(lambda: stuck not in queue.snapshot().active, RECOVERY_MS / 1000)
        fleet.stop(fresh)
        # still in active after its lease ran out, with the other worker running all along
        run.saw(still_active=stuck, fresh_worker_brought_back=stuck not in queue.snapshot().active)
        if stuck not in queue.snapshot().active:
            run.fail("crash", "reap-only-at-start", job=stuck, overdue=RECOVERY_MS / 1000)
        run.fail("crash", "no-beat", job=stuck, overdue=RECOVERY_MS / 1000)
    if snap.counts["done"] != len(ids):
        run.fail(
            "crash", "not-yet", what=f"After {waited:.1f} s only {snap.counts['done']} of {len(ids)} jobs were done."
        )
    run.one_place_each("crash", queue, ids)
    effects = Effects(queue).counts()
    run.good(
        "crash",
        f"A worker SIGKILLed inside work(claim): the other, running all along, brought its job back on its beat; "
        f"all {len(ids)} jobs done, each effect once ({sum(effects.values())} effects).",
    )

    # While idle: how soon after a reply does the survivor send its next command? A busy
    # machine lengthens a sleep, never shortens it, so a loop that waits between claims never
    # answers most replies at once, as one that asks again at once does.
    before = len(survivor.poll().steps)
    time.sleep(IDLE_S)
    commands = len(survivor.poll().steps) - before
    pauses = survivor.pauses(before)[:commands]
    quick = sum(pause < QUICK_PAUSE_S for pause in pauses)
    # ... and its beat: wait for BEAT_GAPS gaps between its sweeps (or BEAT_WAIT_S).
    give_up = time.monotonic() + BEAT_WAIT_S
    while len(_beat_gaps(survivor.poll(), before)) < BEAT_GAPS and time.monotonic() < give_up:
        time.sleep(0.02)
    gaps = _beat_gaps(survivor, before)
    if late := fleet.stop_all():
        fleet.late(late)
    run.saw(idle_quick_pauses=quick, idle_replies=len(pauses))
    if pauses and quick >= SPIN_SHARE * len(pauses):
        run.at(queue)
        run.fail(
            "idle",
            "spins-when-idle",
            commands=commands,
            seconds=IDLE_S,
            quick=quick,
            replies=len(pauses),
            within_ms=QUICK_PAUSE_S * 1000,
        )
    if not gaps or min(gaps) > 3 * BEAT_MS:
        shown = f"at best every {min(gaps):.0f} ms" if gaps else f"fewer than twice in {BEAT_WAIT_S:g} s"
        run.fail(
            "beat",
            "not-yet",
            what=f"While idle, a worker ran the stalled check {shown}, far apart from BEAT_MS ({BEAT_MS} ms): a dead "
            "worker's job then waits that much longer before anyone brings it back. Run it every BEAT_MS.",
        )
    if statistics.median(gaps) < BEAT_MS / 2:
        run.fail(
            "beat",
            "not-yet",
            what=f"While idle, a worker ran the stalled check every {statistics.median(gaps):.0f} ms (the median "
            f"gap), not every BEAT_MS ({BEAT_MS} ms): on every pass of its loop. Every sweep is a script the server "
            "runs over the whole active set; on a beat is enough.",
        )
    run.good(
        "idle",
        f"Idle, a worker sent {commands} commands in {IDLE_S:g} s: it waits between claims, and ran the stalled check "
        f"every {min(gaps):.0f} to {max(gaps):.0f} ms. Told to stop, every worker returned within {STOP_S:g} s.",
    )

    # 2. A failing job: its work raises on its first delivery. Every job had one try given back
    #    unstarted first (a stopping worker's prefetch), so each claim's token is one ahead of
    #    its attempts.
    queue = run.queue("-flaky")
    ids = queue.enqueue_many(["order a", "flaky", "order b"])
    queue.release_many(queue.claim_many(len(ids), lease_ms=LEASE_MS))
    fleet = Fleet(run, worker_loop, queue, seed + 1)
    run.cleanup(fleet.stop_all)
    worker = fleet.start()
    waited = fleet.until(
        lambda: queue.snapshot().counts["done"] == len(ids) or worker.ended or fleet.steps("attempts sent"), 4.0
    )
    if mixed := fleet.steps("attempts sent as the token "):
        sent, token = mixed[0].rsplit(" ", 2)[1:]
        run.saw(fenced_with_the_attempts=int(sent), claim_token=int(token))
        run.fail("error", "attempts-as-the-token", sent=sent, token=token)
    lost = _done_without_effect(queue, ids)
    run.saw(raised_on=ids[1], done_without_effect=lost)
    if lost is not None:
        run.fail("error", "swallow-and-complete", job=lost, error="FlakyError: the payment API timed out")
    if worker.ended:
        run.saw(worker_ended_with=worker.error)
        if worker.error and worker.error.startswith("FlakyError"):
            run.fail("error", "one-error-ends-the-worker", error=worker.error, where="")
        if worker.error:
            run.code_failed("runs", "Your loop", worker)
        run.fail("error", "not-yet", what="Your loop returned while running() was still True.")
    if queue.snapshot().counts["done"] != len(ids):
        run.fail(
            "error",
            "not-yet",
            what=f"After {waited:.1f} s the job whose work raised once was not done: give it back, with its "
            "error, so that it is tried again.",
        )
    stats = queue.snapshot().stats
    if stats.get("stalled", 0) > 0 or not stats.get("retried", 0):
        run.fail(
            "error",
            "not-yet",
            what="work(claim) raised FlakyError once; your loop caught it and left the job to run out its lease: "
            "it came back only as a stalled job, and its error is recorded nowhere. A job that fails every time "
            "would end in emq:{q}:dead as 'stalled', its real error lost. Give a failed job back through the retry "
            "path, with the error, so the row keeps it.",
        )
    seen = [step.removeprefix("flaky row error ") for step in fleet.steps("flaky row error ")]
    fleet.stop_all()
    if not seen:
        raise RuntimeError(f"the flaky job's second try was never seen: {worker!r}")
    run.saw(retried_row_error=seen[0])
    if seen[0] in ("None", "''"):
        run.fail("error", "retried-without-its-error", job=ids[1], error="")
    run.one_place_each("error", queue, ids)
    run.good(
        "error",
        f"A job whose work raised once: it went back through the retry path, its row said error = {seen[0]} as its "
        "second try began, and it was done; the same worker ran on.",
    )

    # 2b. A job whose work outlasts the beat, with two workers: the lease must outlast the work.
    queue = run.queue("-long")
    ids = queue.enqueue_many([LONG])
    fleet = Fleet(run, worker_loop, queue, seed + 3)
    run.cleanup(fleet.stop_all)
    fleet.start(), fleet.start()
    fleet.until(lambda: queue.snapshot().counts["done"] == 1 or len(fleet.steps("long work")) > 1, 5.0)
    if (raised := fleet.raised()) is not None:
        run.code_failed("runs", "Your loop", raised)
    runs = fleet.steps("long work")
    fleet.stop_all()
    leases = [int(step.rsplit(" ", 1)[1]) for step in runs]
    run.saw(long_runs=len(runs), long_least_lease_ms=min(leases, default=None))
    if not leases:
        run.fail("long", "not-yet", what=f"A job whose work takes {LONG_WORK_MS} ms was never worked on within 5 s.")
    if len(runs) > 1 and min(leases) < LONG_WORK_MS:
        run.fail("long", "lease-shorter-than-the-work", work_ms=LONG_WORK_MS, lease_ms=min(leases), runs=len(runs))
    if queue.snapshot().counts["done"] != 1:
        run.fail("long", "not-yet", what=f"A job whose work takes {LONG_WORK_MS} ms was not done within 5 s.")
    run.good(
        "long",
        f"A job whose work took {LONG_WORK_MS} ms, longer than a beat, under a lease of {leases[0]} ms left at its "
        f"start: it was worked on {len(runs)} time(s) and done.",
    )

    # 3. A poison job: every worker that works on it dies; dead workers are restarted.
    queue = run.queue("-poison")
    ids = queue.enqueue_many(["order c", "poison", "order d"])
    fleet = Fleet(run, worker_loop, queue, seed + 2)
    run.cleanup(fleet.stop_all)
    for _ in range(2):
        fleet.start()
    poison = ids[1]
    kills = 0
    give_up = time.monotonic() + 6.0
    while time.monotonic() < give_up and kills <= MAX_STALLED + 2:
        fleet.poll()
        for child, _w in list(fleet.workers):
            if child.killed and not getattr(child, "_replaced", False):
                child._replaced = True  # type: ignore[attr-defined]
                kills += 1
                fleet.start()
            elif child.state == "raised":
                run.code_failed("runs", "Your loop", child)
        snap = queue.snapshot()
        if poison in snap.dead and snap.counts["done"] == len(ids) - 1:
            break
        time.sleep(0.01)
    snap = queue.snapshot()
    fleet.stop_all()
    if poison not in snap.dead:
        where = snap.place_of(poison) or "nowhere"
        row = queue.job(poison)
        stalls = row.stalled if row else 0
        run.saw(poison_place=where, poison_kills=kills)
        run.fail("poison", "poison-loops-forever", kills=kills, where=f"now in {where}, stalled count {stalls}")
    row = queue.job(poison)
    if row is not None and row.stalled != MAX_STALLED:
        run.fail(
            "poison",
            "not-yet",
            what=f"The poison job was dead-lettered at its stall number {row.stalled}; with MAX_STALLED = "
            f"{MAX_STALLED} stall number {MAX_STALLED} is fatal: each extra stall is one more worker killed.",
        )
    if snap.counts["done"] != len(ids) - 1:
        run.fail("poison", "not-yet", what="The jobs beside the poison job were not all done.")
    run.one_place_each("poison", queue, ids)
    run.good(
        "poison",
        f"A poison job killed {kills} workers (each restarted) and then rested in emq:{{q}}:dead; "
        "the other jobs were done.",
    )

    # 4. The rows played on a busy queue (SCENES): a dead worker's job must come back while
    #    the queue never goes quiet.
    for n, scene in enumerate(SCENES):
        _play_busy(run, worker_loop, scene, seed + 10 + n)


def _empty_claims(steps: list[str]) -> int:
    """Claims after which the worker worked on nothing: claims that found the queue empty."""
    return sum(1 for step, after in zip(steps, [*steps[1:], ""], strict=True) if step == "claim" and after != "work")


def _play_busy(run: Run, worker_loop: Loop, scene: Scene, seed: int) -> None:
    """Two workers on a queue kept busy; the one that takes the first job is SIGKILLed on it. The
    other must bring it back on its beat, while every claim of its own still finds a job."""
    queue = run.queue(f"-{scene.name}")
    dying = queue.enqueue(DIES_ONCE).job_id  # first in line: the first claim takes it
    feeder = Feeder(queue, scene.workload, seed=seed)
    feeder.fill()
    fleet = Fleet(run, worker_loop, queue, seed)
    run.cleanup(fleet.stop_all)
    pair = [fleet.start(), fleet.start()]
    give_up = time.monotonic() + 10
    while not any(w.killed for w in pair):
        feeder.top_up()
        if (raised := fleet.raised()) is not None:
            run.code_failed("runs", "Your loop", raised)
        if time.monotonic() > give_up:
            run.fail(scene.name, "too-slow", what="Your loop (it never worked on the first job)", seconds=10)
        time.sleep(0.005)
    survivor = next(w for w in pair if not w.killed)
    since = len(survivor.poll().steps)
    held = queue.client.zscore(queue.keys.active, dying)
    expires = int(held) if held is not None else server_now_ms(queue.client)
    row = queue.keys.job(dying)

    def back_or_overdue() -> bool:
        feeder.top_up()
        return not queue.client.exists(row) or server_now_ms(queue.client) > expires + RECOVERY_MS

    fleet.until(back_or_overdue, 10.0)
    done = not queue.client.exists(row)
    late_ms = server_now_ms(queue.client) - expires
    steps = survivor.poll().steps[since:]
    if (raised := fleet.raised()) is not None:
        run.code_failed("runs", "Your loop", raised)
    if late := fleet.stop_all():
        fleet.late(late)
    worked, empty = steps.count("work"), _empty_claims(steps)
    sweeps = sum(step in SWEEPS for step in steps)
    run.saw(busy_back=done, busy_sweeps=sweeps, busy_empty_claims=empty, busy_worked=worked)
    if not done:
        if not sweeps and not empty and worked:
            run.fail(scene.name, "beat-only-when-idle", job=dying, overdue=RECOVERY_MS / 1000)
        snap = queue.snapshot()
        ran = "ran the stalled check" if sweeps else "never ran the stalled check"
        run.fail(
            scene.name,
            "not-yet",
            what=f"A worker was killed holding {dying} while jobs kept arriving; {RECOVERY_MS / 1000:g} s after its "
            f"lease ran out it was in {snap.place_of(dying) or 'no set'}, not done, though the other worker ran all "
            f"along and {ran} meanwhile. A dead worker's job must come back within a few beats, busy queue or not.",
        )
    effects = Effects(queue).counts()
    if effects.get(dying, 0) != 1:
        run.fail(scene.name, "not-yet", what=f"{dying} was done, but its effect ran {effects.get(dying, 0)} times.")
    run.good(
        scene.name,
        f"On {scene.workload.words}, {scene.fault}: its job was back and done {max(late_ms, 0) / 1000:.1f} s after "
        f"its lease ran out, by the worker beside it, which worked {worked} jobs meanwhile.",
    )
