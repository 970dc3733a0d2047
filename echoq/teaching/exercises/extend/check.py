"""Lesson 06: extend a long job's lease -- and know when it was lost.

The learner writes ``extend_lease(q, claim, work_done)``: it runs in a thread beside a job
that takes longer than its lease, extends the lease with the fenced ``q.extend`` until
``work_done`` is set, and returns whether the worker still held the job at the end (a
worker whose lease was lost must not do its effect). The check runs the job in a worker
PROCESS, while the parent plays a second worker that runs stalled checks every 50 ms and
takes any job they bring back (doing its effect and completing it). Four scenes:

1. **a long job** -- 2 leases and more of work: it must be delivered once (a lease lost is
   tried once more, as in scene 2);
2. **a late extension** -- the network holds one extend back a third of a lease (the second;
   the first, from an answer that sends only one): still once (a lease lost is tried once
   more, so that a busy machine's delays are not the verdict);
3. **a killed worker** -- SIGKILLed mid-job: its job must come back within one lease;
4. **a frozen worker** -- SIGSTOPped as its work ends, past its lease, while the other
   worker takes the job and completes it; resumed, it must not do the effect again (three
   times: on a slow machine one run can miss what the others show).

5. **another machine's clock** -- the worker's wall clock 2 s behind the server's: still once.

The refused scene (held back past the lease, mid-work) and the frozen one are the rows of
:data:`SCENES`: their queue holds two more jobs waiting behind the long one (a workload of
:mod:`..workloads`, which the loop and charge checks share), so an extend_lease that claims when
its extension is refused, or extends a job other than the one given, takes one of them; it must
claim nothing, and its True must mean that this worker holds this job, read on the server as the
worker acts on it.

In every scene one earlier try of the job was given back unstarted, so its token is one ahead
of its attempts (an extension fenced on attempts is refused, and told so). An answer that
extends by hand (a read, then a ZADD) is also frozen between the two, while the other worker
takes the job and completes it. A line that says an extension happened counts the deadline
moves the other worker saw on the server, or the extensions the worker asked for.

The verdict: how many times the effect ran (the effects ledger in 'every' mode counts
every run), the job's attempts, its lease deadline on the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from echoq.clock import server_now_ms, wait_until_expired
from echoq.effects import Effects
from echoq.ids import new_job_id
from echoq.queue import DEFAULT_LEASE_MS, Claim, Extend, Queue
from echoq.teaching import processes
from echoq.teaching.contrasts import apply_every
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register, skew_clock
from echoq.teaching.exercises.workloads import BACKLOG, IDLE, Feeder, Scene, Workload
from echoq.teaching.fast_forward import fast_forward

LEASE_MS = 600


WORK_MS = 1_000
SPIN_EXTENDS = WORK_MS // 20  # more than one command per 20 ms of work: a busy loop
LATE_MS = LEASE_MS // 3  # how long the late-extension scene holds an extension back on the network
LEASE_SLACK_MS = 100  # killed right after an extension, its job may be held LEASE_MS and this much more
SKEW_S = -2.0  # the last scene's worker clock, against the server's: two machines' clocks differ

# The scenes whose queue holds more than the job (rows of the workloads the loop and charge checks
# share): an extend_lease that claims when refused, or extends a job other than the one given,
# behaves as the reference does while the long job is alone.
LOST, FROZEN = SCENES = (
    Scene(
        "lost",
        BACKLOG,
        f"an extension held up {2 * LEASE_MS} ms, past the lease, mid-work, while the other worker took the job over",
        "extend_lease says True only while this worker holds this job; the effect runs once; it claims nothing",
    ),
    Scene(
        "frozen",
        BACKLOG,
        "the worker frozen (SIGSTOP) as its work ended, past its lease, while the other worker took the job and "
        "completed it",
        "extend_lease says True only while this worker holds this job; the effect runs once; it claims nothing",
    ),
)


EXTEND_MISCONCEPTIONS = [
    Misconception(
        "never-extends",
        "never extended",
        "The job takes {work_ms} ms under a {lease_ms} ms lease, and your extend_lease never extended it: the lease "
        "ran out and the other worker took the job over while yours was still working on it.",
        "A lease is a promise: alive until the deadline. Who extends the promise?",
        "Call q.extend(claim, lease_ms=LEASE_MS) again and again until work_done is set.",
        signature=lambda e: e["taken_over"] > 0 and not e["extensions_sent"] and not e["deadline_pushed"],
    ),
    Misconception(
        "extends-too-rarely",
        "extensions further apart than the lease",
        "Your extend_lease asked for extensions, but not before the lease ran out: the other worker took the job "
        "over while yours was still working on it. Between two extensions the lease must not expire.",
        "How long after an extension does the lease end? Extend before that.",
        "Extend at an interval well below LEASE_MS.",
        signature=lambda e: e["taken_over"] > 0 and bool(e["extensions_sent"] or e["deadline_pushed"]),
    ),
    Misconception(
        "no-room-for-a-late-extension",
        "no room for a late extension",
        "With one extension held up on the network for {late_ms} ms (a third of the lease), the lease ran out: "
        "the other worker took the job over while yours was still working on it. Your extensions leave too little of "
        "the lease as a margin.",
        "An extension can be late: a slow network, a busy CPU, a garbage-collection pause.",
        "Extend often enough that one extension a third of a lease late still arrives before the deadline: every "
        "half a lease or more often.",
        signature=lambda e: e["extension_held_ms"] > 0 and e["taken_over"] > 0,
    ),
    Misconception(
        "extends-too-far",
        "a lease nobody can wait out",
        "Killed {when}, your worker left its job leased for {ahead_s:.0f} s more: that extension asked for "
        "that long. A dead worker's job waits that long before anyone may take it over.",
        "The lease is how long the others wait when you die. Make each extension short.",
        "Extend by LEASE_MS each time, and extend more often instead.",
        signature=lambda e: e["lease_left_at_kill_ms"] > LEASE_MS + LEASE_SLACK_MS,
    ),
    Misconception(
        "attempts-as-the-token",
        "attempts is not the token",
        "Your extend_lease sent {sent} as the fencing token; this delivery's token is {token}, and {sent} is its "
        "attempts. An earlier try was given back unstarted (a release gives the try back, never the token), so the "
        "two differ here: the server refused the extension ({outcome}), and the other worker took the job over "
        "while yours was still working on it.",
        "Which number fences a claim? Attempts counts tries; something else changes on every claim.",
        "Pass the claim itself to q.extend, or claim.token.",
        signature=lambda e: e["token_sent"] == e["claim_attempts"] != e["claim_token"] and e["refused_extensions"] > 0,
    ),
    Misconception(
        "deadline-against-own-clock",
        "the server's deadline against this machine's clock",
        "With this worker's clock {skew:g} s behind the server's (every machine's clock is a little off, some by "
        "seconds), the lease ran out between two extensions and the other worker took the job over. A deadline is a "
        "time on the server's clock: how long to wait must come from the lease itself, not from a deadline compared "
        "with this machine's time.",
        "Two clocks are never the same clock. Which one wrote the deadline?",
        "Wait a fixed part of LEASE_MS between extensions (time.monotonic() or work_done.wait), whatever the deadline "
        "says.",
        signature=lambda e: e["unskewed_taken_over"] == 0 and e["taken_over"] > 0 and e["clock_behind_s"] > 0,
    ),
    Misconception(
        "ignores-stale",
        "STALE ignored",
        "Frozen past its lease while the other worker took the job and completed it, your worker woke up: its "
        "extension was refused ({outcome}) and still said the job was kept, so the effect ran {effects} times.",
        "What does an extension answer when someone else holds the job?",
        "Return False as soon as extend does not say EXTENDED.",
        signature=lambda e: e["refused_extensions"] > 0 and e["said_kept"] and e["effects"] > 1,
    ),
    Misconception(
        "claims-again-when-refused",
        "a lost job replaced by another",
        "Your extension of {job} was refused (the other worker had taken the job over), and your extend_lease then "
        "claimed {other}, a job that was waiting, and went on with that one: it returned True, so the worker did the "
        "effect of {job}, which it no longer held (the effect ran {effects} times), while {other} sat leased to a "
        "worker that never worked on it.",
        "A refused extension means the job is someone else's now. What may this worker still do with it?",
        "When q.extend does not answer EXTENDED, return False: never claim inside extend_lease.",
        signature=lambda e: bool(e["claimed_while_holding"]) and e["refused_extensions"] > 0 and e["kept_but_not_held"],
    ),
    Misconception(
        "no-final-check",
        "kept, without asking",
        "Frozen as its work ended and past its lease, while the other worker took the job and completed it, your "
        "worker woke up and its extend_lease said the job was kept without asking the server: the effect ran {effects} "
        "times.",
        "The last extension may have been long ago. Does the worker still hold the job now?",
        "When work_done is set, extend once more and return whether that was EXTENDED.",
        signature=lambda e: not e["extended_after_waking"] and e["said_kept"] and e["effects"] > 1,
    ),
]


EXTEND = register(
    load(
        __file__,
        key="extend",
        lesson="06",
        title="extend the lease, know when it is lost",
        kind="python",
        names=("extend_lease",),
        misconceptions=EXTEND_MISCONCEPTIONS,
    )
)


ExtendLease = Callable[[Queue, Claim, threading.Event], object]


BY_HAND = (
    "Your worker was frozen between reading its lease and writing the new deadline (ZADD), while the other worker "
    "took the job and completed it; woken, it wrote the finished job back into emq:{q}:active, where a reaper will "
    "hand it out again. A read and a write are two steps another worker can act between: q.extend checks the token "
    "and moves the deadline in one step."
)


class _Watched(Queue):
    """The queue as the learner's extend_lease gets it: each q.extend it makes is also a step
    that says which token it sent and what the server answered, and each job it claims (once
    the worker holds its own) is a step that names it."""

    given: Claim | None = None  # the worker's own claim, once made: any later claim is extend_lease's

    def claim(self, lease_ms: int = DEFAULT_LEASE_MS) -> Claim | None:
        got = super().claim(lease_ms)
        if self.given is not None and got is not None:
            processes.mark(f"extend_lease claimed {got.job_id}")
        return got

    def extend(self, claim: Claim | str, token: int | None = None, *, lease_ms: int = DEFAULT_LEASE_MS) -> Extend:
        outcome = super().extend(claim, token, lease_ms=lease_ms)
        sent = claim.token if isinstance(claim, Claim) and token is None else token
        processes.mark(f"extend sent {sent} {outcome.value}")
        return outcome


def long_job(
    queue: Queue,
    extend_lease: ExtendLease,
    *,
    work_ms: int = WORK_MS,
    hold_extend: int | None = None,
    end_on_extend: bool = False,
    skew_s: float = 0.0,
) -> dict[str, Any]:
    """In a worker process: claim, run ``extend_lease`` in a thread beside ``work_ms`` of work,
    then -- only if it says the job was kept -- do the effect and complete. With
    ``end_on_extend`` the work ends just after an extension (so a freeze there is long before
    the next one); with ``skew_s`` this process's wall clock is that far off the server's."""
    client = processes.counting_client(queue.client)
    if hold_extend is not None:  # whichever way it extends: q.extend, or a ZADD to the active set by hand
        processes.hold("extend", hold_extend)
        processes.hold("ZADD", hold_extend)
    if skew_s:
        skew_clock(skew_s, extend_lease)
    q = _Watched(queue.name, client)
    claim = q.claim(lease_ms=LEASE_MS)
    processes.mark(f"claimed token {claim.token} attempts {claim.attempts}")
    q.given = claim
    done = threading.Event()
    said: list[object] = []
    failed: list[BaseException] = []

    def keeper() -> None:
        try:
            said.append(extend_lease(q, claim, done))
        except BaseException as exc:
            failed.append(exc)

    keeper_thread = threading.Thread(target=keeper, name="extend_lease", daemon=True)
    keeper_thread.start()
    end = time.monotonic() + work_ms / 1000
    while time.monotonic() < end and keeper_thread.is_alive():  # an extend_lease that ended early: the lease is lost
        time.sleep(0.01)
    if end_on_extend:
        extends, give_up = processes.made("extend"), time.monotonic() + 2 * LEASE_MS / 1000
        while processes.made("extend") == extends and keeper_thread.is_alive() and time.monotonic() < give_up:
            time.sleep(0.001)
    processes.mark("work-done")
    done.set()
    keeper_thread.join(5)
    if failed:
        raise failed[0]
    if keeper_thread.is_alive():
        raise TimeoutError("extend_lease did not return within 5 s after work_done was set")
    kept = bool(said and said[0] is True)
    if not kept:
        return {"kept": False, "said": repr(said[0])[:80] if said else "nothing"}
    row = q.job(claim.job_id)  # True must mean: this worker holds this job, now
    if row is None or row.state != "active" or row.token != claim.token:
        processes.mark("kept but not held")
    apply_every(Effects(q), claim.job_id, "the report")
    processes.mark("effect")
    return {"kept": True, "complete": q.complete(claim).value}


def _first_extension() -> processes.StepAt:
    return lambda n, label: label in ("extend", "ZADD")


def _final_extension() -> processes.StepAt:
    """The first extension after the work is done (the predicate runs in the worker process)."""
    done = [False]

    def at(n: int, label: str) -> bool:
        done[0] = done[0] or label == "work-done"
        return done[0] and label in ("extend", "ZADD")

    return at


class _Scene:
    """The job, and the other worker: stalled checks every 50 ms; takes what comes back."""

    def __init__(self, run: Run, workload: Workload = IDLE) -> None:
        self.run = run
        self.queue = run.queue()
        self.job = self.queue.enqueue("a long report").job_id
        # One try given back unstarted (a stopping worker's prefetch): the row's token is then one
        # ahead of its attempts, as it is in any queue that has seen a release.
        self.queue.release_many([self.queue.claim(lease_ms=LEASE_MS)])
        self.waiting = Feeder(self.queue, workload, seed=6).fill()  # after the long job, in arrival order
        self.queue.extend(new_job_id(), 1)  # the server learns extend.lua before any count matters
        self.effects = Effects(self.queue)
        self.takeovers = 0
        self.held_at_end = False  # the child's lease still ran when it ended (read before any sweep after)
        self.deadlines: list[int] = []  # the job's lease deadline as each sweep saw it (server ms)
        self.held = False  # the child froze before an extend (its extension held up on the network)

    def written_back(self) -> bool:
        """The finished job is in the active set again (and still done): a write by hand
        after the other worker completed it."""
        snap = self.queue.snapshot()
        return self.job in snap.active and self.job in snap.done

    def pushed(self) -> int:
        """How often the job's lease deadline was seen to move later: extensions, by any means."""
        return sum(b > a for a, b in zip(self.deadlines, self.deadlines[1:], strict=False))

    def other_worker(self) -> None:
        deadline = self.queue.client.zscore(self.queue.keys.active, self.job)
        if deadline is not None:
            self.deadlines.append(int(deadline))
        if not self.queue.stalled_check(max_stalled=5).recovered:
            return  # it only takes over what a stalled check brings back
        b = self.queue.claim(lease_ms=30_000)
        if b is not None:
            self.takeovers += 1
            self.run.event("the other worker", "claims", self.queue)
            apply_every(self.effects, b.job_id, "the report (other worker)")
            self.queue.complete(b)
            self.run.event("the other worker", "completes", self.queue)

    def play(self, child: processes.Child, seconds: float = 15, late_ms: int = 0) -> processes.Child:
        """Run the other worker beside ``child`` until it ends. A child frozen before an extend
        (its extension held up on the network) is let go ``late_ms`` later on the server's clock,
        after the other worker's sweep at that moment: it takes the job iff the lease ran out."""
        give_up = time.monotonic() + seconds
        while not child.ended:
            if child.state == "frozen":
                self.held = True
                # Held since the child froze, not since this loop noticed it: on a busy
                # machine the notice comes late, and the hold must still be late_ms.
                frozen_ms = 0.0 if child.frozen_since is None else (time.monotonic() - child.frozen_since) * 1000
                held_at = server_now_ms(self.queue.client) - round(frozen_ms)
                wait_until_expired(self.queue.client, held_at + late_ms)
                self.other_worker()
                child.resume()
            self.other_worker()
            child._pump(0.05)
            if time.monotonic() > give_up:
                child.kill()
                self.run.fail("runs", "too-slow", what="Your extend_lease", seconds=seconds)
        snap = self.queue.snapshot()
        self.held_at_end = snap.active.get(self.job, 0) > snap.now_ms
        self.other_worker()
        if child.error is not None:
            self.run.code_failed("runs", "Your extend_lease", child)
        return child

    def ran(self) -> int:
        return self.effects.count(self.job)

    def saw(self, worker: processes.Child) -> None:
        """What this scene showed, for the misconceptions' signatures: the extensions the worker
        asked for and how they were answered, what its extend_lease said, what the other worker
        did, and how often the effect ran."""
        answer = worker.value if isinstance(worker.value, dict) else {}
        self.run.at(self.queue)
        self.run.saw(
            extensions_sent=_extends_sent(worker),
            refused_extensions=sum(
                1 for step in worker.steps if step.startswith("extend sent ") and not step.endswith(" extended")
            ),
            deadline_pushed=self.pushed(),
            taken_over=self.takeovers,
            said_kept=answer.get("kept") is True,
            kept_but_not_held="kept but not held" in worker.steps,
            effects=self.ran(),
        )


def _commands_while_working(worker: processes.Child) -> int:
    """The commands sent between the claim and the end of the work: extend_lease's own."""
    steps = worker.steps
    start = next((n for n, s in enumerate(steps) if s.startswith("claimed ")), 0)
    end = steps.index("work-done") if "work-done" in steps else len(steps)
    return sum(1 for s in steps[start + 1 : end] if not s.startswith("extend sent "))


def _extends_sent(worker: processes.Child) -> int:
    """The extensions extend_lease asked for: q.extend calls, and writes to the active set by hand."""
    return sum(1 for s in worker.steps if s.startswith("extend sent ") or s == "ZADD")


def _wrong_token(worker: processes.Child) -> tuple[int, int, str] | None:
    """(sent, token, outcome) when extend_lease sent the claim's attempts as its token and was
    refused; None otherwise."""
    claimed = next((s.split() for s in worker.steps if s.startswith("claimed token ")), None)
    if claimed is None:
        return None
    token, attempts = int(claimed[2]), int(claimed[4])
    for step in worker.steps:
        if step.startswith("extend sent "):
            _, _, sent, outcome = step.split(" ", 3)
            if sent == str(attempts) and attempts != token and outcome != "extended":
                return attempts, token, outcome
    return None


def _judge_what_it_took(run: Run, row: Scene, scene: _Scene, worker: processes.Child) -> None:
    """With jobs waiting beside the long one: extend_lease must claim none of them, and say True
    only while its worker holds its own job."""
    took = [step.rsplit(" ", 1)[1] for step in worker.steps if step.startswith("extend_lease claimed ")]
    scene.saw(worker)
    run.saw(claimed_while_holding=took)
    refused = any(step.startswith("extend sent ") and not step.endswith(" extended") for step in worker.steps)
    if took and refused and "kept but not held" in worker.steps:
        run.fail(row.name, "claims-again-when-refused", job=scene.job, other=took[0], effects=scene.ran())
    if took:
        run.fail(
            row.name,
            "not-yet",
            what=f"While your worker held {scene.job}, its extend_lease claimed jobs that were waiting "
            f"(the first: {took[0]}), and nobody worked on them: each sat leased to a worker that was not "
            "working on it, until its lease ran out. extend_lease keeps the lease of the job it was given, and "
            "takes no job.",
        )
    if "kept but not held" in worker.steps and scene.ran() == 1:
        run.fail(
            row.name,
            "not-yet",
            what=f"Your extend_lease returned True when the work was done, but by then {scene.job} was no longer "
            "this worker's (the other worker had taken it over): True must mean this worker still holds this job.",
        )


@check_runner(EXTEND)
def check_extend_lease(run: Run, extend_lease: ExtendLease) -> None:
    """A long job's lease extended by the learner's extend_lease, under a late extension, a kill, a freeze."""
    if not callable(extend_lease):
        run.fail("runs", "not-yet", what=f"Pass your function extend_lease, not {extend_lease!r}.")

    # 1. A long job: more than two leases of work. A lease lost once is tried again (as the
    #    late extension is): a busy machine can hold a thread back long enough to lose it.
    for _try in range(2):
        scene = _Scene(run)
        worker = scene.play(processes.spawn(long_job, scene.queue, extend_lease, name="your worker"))
        if scene.ran() == 1 and not scene.takeovers:
            break
    if scene.ran() != 1 or scene.takeovers:
        answer = worker.value if isinstance(worker.value, dict) else {}
        scene.saw(worker)
        wrong = _wrong_token(worker)
        if wrong is not None:
            run.saw(token_sent=wrong[0], claim_token=wrong[1], claim_attempts=wrong[0])
            run.fail("long", "attempts-as-the-token", sent=wrong[0], token=wrong[1], outcome=wrong[2].upper())
        if answer.get("kept") is False and scene.held_at_end:
            run.fail(
                "long",
                "not-yet",
                what=f"When the work was done your extend_lease returned {answer['said']}, not True, while its worker "
                "still held the job (its lease had not run out, and nobody else had taken it). The worker took that "
                "as a lost lease and left the job undone: it stays undone until its lease runs out and another "
                "worker takes it over. Return True when the job is still yours.",
            )
        name = "extends-too-rarely" if scene.pushed() or _extends_sent(worker) else "never-extends"
        run.fail("long", name, work_ms=WORK_MS, lease_ms=LEASE_MS, effects=scene.ran())
    run.saw(unskewed_taken_over=scene.takeovers)
    extends = _commands_while_working(worker)
    if extends > SPIN_EXTENDS:
        run.fail(
            "long",
            "not-yet",
            what=f"Your extend_lease sent more than {SPIN_EXTENDS} commands during a {WORK_MS} ms job (more than one "
            f"every {WORK_MS // SPIN_EXTENDS} ms): it spins, and every one of them is a command the server serves for "
            f"nothing. A few extensions per {LEASE_MS} ms lease keep it; wait between them.",
        )
    run.good(
        "long",
        f"A {WORK_MS} ms job under a {LEASE_MS} ms lease was delivered once: extend_lease kept it; the other worker "
        f"saw its deadline pushed later {scene.pushed()} times, and it sent {extends} commands while the work ran "
        "(no busy loop).",
    )

    # 2. A killed worker: where is its lease? Killed right after its first extension, and
    #    (another worker) right after the extension it makes once the work is done.
    for kill_at, when in (
        (_first_extension, "right after an extension"),
        (_final_extension, "right after the extension it made once the work was done"),
    ):
        # A lease that ran out before the kill (a busy machine held the worker back past it)
        # tells nothing about how far the extension reached: the scene is played again once.
        for _try in range(2):
            scene = _Scene(run)
            worker = processes.spawn(long_job, scene.queue, extend_lease, kill_at=kill_at(), name="your worker")
            run.waited("runs", "Your extend_lease", worker, 15)
            if worker.error is not None:
                run.code_failed("runs", "Your extend_lease", worker)
            if not worker.killed:
                break
            snap = scene.queue.snapshot()
            ahead = snap.active.get(scene.job, snap.now_ms) - snap.now_ms
            if ahead > 0:
                break
        if not worker.killed:
            if kill_at is _final_extension:
                continue  # it asks nothing once the work is done (the frozen scene judges that)
            run.fail(
                "killed",
                "not-yet",
                what="Your worker was to be killed right after an extension, and it made none this check could see "
                "(a q.extend, or a ZADD to the active set) during its whole job, though in the scene before it kept "
                "its lease.",
            )
        if ahead > LEASE_MS + LEASE_SLACK_MS:
            run.saw(lease_left_at_kill_ms=ahead)
            run.fail("killed", "extends-too-far", ahead_s=ahead / 1000, when=when)
    run.good(
        "killed",
        f"Killed (SIGKILL) right after an extension, the worker left its job leased for at most {LEASE_MS} ms.",
    )

    # 3. A late extension: the network holds the second extend back a third of a lease (from
    #    an extend_lease that sends fewer than two, its first: the one the job hangs on). Its
    #    margin is a third of a lease too, and a busy machine can eat into it (a thread woken
    #    late, a process resumed late): a lease lost once is tried again, so that only an
    #    answer that loses it both times -- one that leaves no room -- is told so.
    hold, tries, sent = 2, 0, 0
    while tries < 2:
        scene = _Scene(run)
        worker = processes.spawn(partial(long_job, hold_extend=hold), scene.queue, extend_lease, name="your worker")
        scene.play(worker, late_ms=LATE_MS)
        if not scene.held and hold == 2:
            hold, sent = 1, _extends_sent(worker)  # it never sent a second: hold back its first
            continue
        tries += 1
        if scene.ran() == 1 and not scene.takeovers:
            break
    else:
        scene.saw(worker)
        run.saw(extension_held_ms=LATE_MS if scene.held else 0)
        if scene.held and hold == 1:
            run.fail(
                "late",
                "not-yet",
                what=f"Your extend_lease sent {sent} extension(s) in all during a {WORK_MS} ms job under a "
                f"{LEASE_MS} ms lease. Held up {LATE_MS} ms on the network (a third of the lease), its first one "
                "arrived after the lease had run out, and the other worker took the job over while yours was still "
                "working on it. Extend often enough that one late extension still lands in time: every half a lease "
                "or more often.",
            )
        if scene.held:
            run.fail("late", "no-room-for-a-late-extension", late_ms=LATE_MS, effects=scene.ran())
        run.fail(
            "late",
            "not-yet",
            what=f"In a {WORK_MS} ms job your extend_lease sent no extension this check could see (a q.extend, or a "
            "ZADD to the active set), and the other worker took the job over while yours was still working on it.",
        )
    if not scene.held:
        run.fail(
            "late",
            "not-yet",
            what=f"In a {WORK_MS} ms job your extend_lease sent no extension this check could see (a q.extend, or a "
            "ZADD to the active set), though the job ran once: how it copes with a late extension could not be "
            "judged.",
        )
    run.good("late", f"One extension {LATE_MS} ms late (a third of the lease): the lease held, the job ran once.")

    # 3b. An extension held back past the lease, mid-work: the other worker takes the job and
    #     completes it; when the extension finally goes, it is refused, and extend_lease must
    #     say the job was lost (the effect must not run a second time).
    row = LOST
    scene = _Scene(run, row.workload)
    worker = processes.spawn(partial(long_job, hold_extend=2), scene.queue, extend_lease, name="your worker")
    scene.play(worker, late_ms=2 * LEASE_MS)
    if scene.held:
        _judge_what_it_took(run, row, scene, worker)
        if scene.ran() > 1 and "ZADD" in worker.steps:
            run.fail(row.name, "not-yet", what=BY_HAND)
        if scene.ran() > 1:
            run.fail(
                row.name,
                "ignores-stale",
                outcome=f"held up {2 * LEASE_MS} ms, past the lease, while the other worker took the job over",
                effects=scene.ran(),
            )
        run.good(
            row.name,
            f"With {row.workload.words}, {row.fault}: refused, your extend_lease said the job was lost, claimed "
            "nothing, and the effect ran once.",
        )

    # 4. A frozen worker: SIGSTOP as the work ends; the lease runs out; the other worker
    #    takes the job and completes it; then SIGCONT. The freeze comes just after an
    #    extension, so the work's end is seen before the next one is due -- unless the
    #    machine is slow enough that the freeze outlasts the wait until it: then an answer
    #    that only checks on its periodic extensions learns of the loss by luck. So the
    #    scene runs three times, and any run with the effect done twice is the verdict.
    for _try in range(3):
        scene = _Scene(run, FROZEN.workload)
        worker = processes.spawn(
            partial(long_job, end_on_extend=True), scene.queue, extend_lease, freeze_at="work-done", name="your worker"
        )
        worker.wait_frozen(15)
        if worker.ended:
            scene.play(worker)
            raise RuntimeError(f"your worker should have frozen as its work ended: {worker!r}")
        fast_forward(scene.queue)  # frozen: its lease runs out while it sleeps
        scene.other_worker()
        frozen_since = worker.frozen_since
        worker.resume()
        scene.play(worker)
        _judge_what_it_took(run, FROZEN, scene, worker)
        if scene.ran() != 1:
            scene.saw(worker)
            # The steps whose command went out after the freeze, by the child's clock: a step
            # made before it may reach the parent after the resume on a busy machine.
            after = [
                step
                for step, (sent, done) in zip(worker.steps, worker.step_times, strict=True)
                if frozen_since is None or (done if sent is None else sent) > frozen_since
            ]
            run.saw(extended_after_waking="extend" in after)
            if "extend" in after:
                run.fail(
                    "frozen",
                    "ignores-stale",
                    outcome="gone: the other worker had completed the job",
                    effects=scene.ran(),
                )
            # An extension by hand whose read came before the freeze and whose ZADD after it
            # wrote the finished job back: that is what the line says (scene 4b's, whichever
            # scene happens to freeze the worker in that gap).
            if "ZADD" in after and scene.written_back():
                run.fail("frozen", "not-yet", what=BY_HAND)
            run.fail("frozen", "no-final-check", effects=scene.ran())
    run.good(
        FROZEN.name,
        f"With {FROZEN.workload.words}, {FROZEN.fault}: your worker woke up, learned it had lost the job, claimed "
        "nothing, and did not do the effect again.",
    )

    # 4b. An extension by hand (a read, then a ZADD) has a gap between its read and its write:
    #     frozen there while the other worker takes the job and completes it, it writes a
    #     finished job back into the active set.
    if "ZADD" in worker.steps:
        scene = _Scene(run)
        worker = processes.spawn(partial(long_job, hold_extend=2), scene.queue, extend_lease, name="your worker")
        worker.wait_frozen(15)
        if worker.state == "frozen":
            fast_forward(scene.queue)  # frozen: its lease runs out while it sleeps
            scene.other_worker()
            worker.resume()
        scene.play(worker)
        if scene.written_back():
            run.fail("by-hand", "not-yet", what=BY_HAND)
        run.good("by-hand", "Frozen between the read and the write of an extension by hand, it wrote nothing back.")

    # 5. Another machine's clock: the worker's wall clock SKEW_S off the server's. A lease lost
    #    once is tried again, as in scene 1.
    for _try in range(2):
        scene = _Scene(run)
        worker = scene.play(
            processes.spawn(partial(long_job, skew_s=SKEW_S), scene.queue, extend_lease, name="your worker")
        )
        if scene.ran() == 1 and not scene.takeovers:
            break
    else:
        scene.saw(worker)
        run.saw(clock_behind_s=-SKEW_S)
        run.fail("skew", "deadline-against-own-clock", skew=abs(SKEW_S))
    run.good(
        "skew",
        f"With the worker's clock {abs(SKEW_S):g} s behind the server's, the {WORK_MS} ms job was still delivered "
        "once: the extensions do not hang on this machine's time.",
    )
