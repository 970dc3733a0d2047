"""Lesson 06: extend a long job's lease -- and know when it was lost.

The learner writes ``extend_lease(q, claim, work_done)``: it runs in a thread beside a job
that takes longer than its lease, extends the lease with the fenced ``q.extend`` until
``work_done`` is set, and returns whether the worker still held the job at the end (a
worker whose lease was lost must not do its effect). The check runs the job in a worker
PROCESS, while the parent plays a second worker that runs stalled checks every 50 ms and
takes any job they bring back (doing its effect and completing it). Four scenes:

1. **a long job** -- 2 leases and more of work: it must be delivered once (a lease lost is
   tried once more, as in scene 2);
2. **a late extension** -- the network holds one extend back a third of a lease: still once
   (a lease lost is tried once more, so that a busy machine's delays are not the verdict);
3. **a killed worker** -- SIGKILLed mid-job: its job must come back within one lease;
4. **a frozen worker** -- SIGSTOPped as its work ends, past its lease, while the other
   worker takes the job and completes it; resumed, it must not do the effect again (three
   times: on a slow machine one run can miss what the others show).

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
from echoq.queue import Claim, Queue
from echoq.teaching import processes
from echoq.teaching.contrasts import apply_every
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register
from echoq.teaching.fast_forward import fast_forward

LEASE_MS = 600


WORK_MS = 1_000
SPIN_EXTENDS = WORK_MS // 20  # more than one extension per 20 ms of work: a busy loop


EXTEND_MISCONCEPTIONS = [
    Misconception(
        "never-extends",
        "never extended",
        "The job takes {work_ms} ms under a {lease_ms} ms lease, and your extend_lease never extended it: the lease "
        "ran out and the other worker took the job over while yours was still working on it.",
        "A lease is a promise: alive until the deadline. Who extends the promise?",
        "Call q.extend(claim, lease_ms=LEASE_MS) again and again until work_done is set.",
    ),
    Misconception(
        "extends-too-rarely",
        "extensions further apart than the lease",
        "Your extend_lease extended the lease, but not before it ran out: the other worker took the job over while "
        "yours was still working on it. Between two extensions the lease must not expire.",
        "How long after an extension does the lease end? Extend before that.",
        "Extend at an interval well below LEASE_MS.",
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
    ),
    Misconception(
        "extends-too-far",
        "a lease nobody can wait out",
        "Killed mid-job, your worker left its job leased for {ahead_s:.0f} s more: its last extension asked for "
        "that long. A dead worker's job waits that long before anyone may take it over.",
        "The lease is how long the others wait when you die. Make each extension short.",
        "Extend by LEASE_MS each time, and extend more often instead.",
    ),
    Misconception(
        "ignores-stale",
        "STALE ignored",
        "Frozen past its lease while the other worker took the job and completed it, your worker woke up: its "
        "extension was refused ({outcome}) and still said the job was kept, so the effect ran {effects} times.",
        "What does an extension answer when someone else holds the job?",
        "Return False as soon as extend does not say EXTENDED.",
    ),
    Misconception(
        "no-final-check",
        "kept, without asking",
        "Frozen as its work ended and past its lease, while the other worker took the job and completed it, your "
        "worker woke up and its extend_lease said the job was kept without asking the server: the effect ran {effects} "
        "times.",
        "The last extension may have been long ago. Does the worker still hold the job now?",
        "When work_done is set, extend once more and return whether that was EXTENDED.",
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


def long_job(
    queue: Queue,
    extend_lease: ExtendLease,
    *,
    work_ms: int = WORK_MS,
    hold_extend: int | None = None,
    end_on_extend: bool = False,
) -> dict[str, Any]:
    """In a worker process: claim, run ``extend_lease`` in a thread beside ``work_ms`` of work,
    then -- only if it says the job was kept -- do the effect and complete. With
    ``end_on_extend`` the work ends just after an extension (so a freeze there is long before
    the next one)."""
    client = processes.counting_client(queue.client)
    if hold_extend is not None:
        processes.hold("extend", hold_extend)
    q = Queue(queue.name, client)
    claim = q.claim(lease_ms=LEASE_MS)
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
    apply_every(Effects(q), claim.job_id, "the report")
    processes.mark("effect")
    return {"kept": True, "complete": q.complete(claim).value}


class _Scene:
    """The job, and the other worker: stalled checks every 50 ms; takes what comes back."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.queue = run.queue()
        self.job = self.queue.enqueue("a long report").job_id
        self.queue.extend(new_job_id(), 1)  # the server learns extend.lua before any count matters
        self.effects = Effects(self.queue)
        self.takeovers = 0
        self.held_at_end = False  # the child's lease still ran when it ended (read before any sweep after)

    def other_worker(self) -> None:
        if not self.queue.stalled_check(max_stalled=5).recovered:
            return  # it only takes over what a stalled check brings back
        b = self.queue.claim(lease_ms=30_000)
        if b is not None:
            self.takeovers += 1
            apply_every(self.effects, b.job_id, "the report (other worker)")
            self.queue.complete(b)

    def play(self, child: processes.Child, seconds: float = 15, late_ms: int = 0) -> processes.Child:
        """Run the other worker beside ``child`` until it ends. A child frozen before an extend
        (its extension held up on the network) is let go ``late_ms`` later on the server's clock,
        after the other worker's sweep at that moment: it takes the job iff the lease ran out."""
        give_up = time.monotonic() + seconds
        while not child.ended:
            if child.state == "frozen":
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
        if answer.get("kept") is False and scene.held_at_end:
            run.fail(
                "long",
                "not-yet",
                what=f"When the work was done your extend_lease returned {answer['said']}, not True, while its worker "
                "still held the job (its lease had not run out, and nobody else had taken it). The worker took that "
                "as a lost lease and left the job undone: it stays undone until its lease runs out and another "
                "worker takes it over. Return True when the job is still yours.",
            )
        extends = worker.steps.count("extend")
        name = "never-extends" if extends == 0 else "extends-too-rarely"
        run.fail("long", name, work_ms=WORK_MS, lease_ms=LEASE_MS, effects=scene.ran())
    extends = worker.steps.count("extend")
    if extends > SPIN_EXTENDS:
        run.fail(
            "long",
            "not-yet",
            what=f"Your extend_lease sent more than {SPIN_EXTENDS} extensions during a {WORK_MS} ms job (more than one "
            f"every {WORK_MS // SPIN_EXTENDS} ms): it spins, and every one of them is a command the server serves for "
            f"nothing. A few extensions per {LEASE_MS} ms lease keep it; wait between them.",
        )
    run.good(
        "long",
        f"A {WORK_MS} ms job under a {LEASE_MS} ms lease was delivered once: extend_lease kept it, with "
        f"{extends} extensions (no busy loop).",
    )

    # 2. A killed worker: where is its lease?
    scene = _Scene(run)
    worker = processes.spawn(
        long_job, scene.queue, extend_lease, kill_at=lambda n, label: label == "extend", name="your worker"
    )
    run.waited("runs", "Your extend_lease", worker, 15)
    if worker.error is not None:
        run.code_failed("runs", "Your extend_lease", worker)
    if not worker.killed:
        run.fail("killed", "never-extends", work_ms=WORK_MS, lease_ms=LEASE_MS, effects=scene.ran())
    snap = scene.queue.snapshot()
    ahead = snap.active.get(scene.job, snap.now_ms) - snap.now_ms
    if ahead > LEASE_MS + 100:
        run.fail("killed", "extends-too-far", ahead_s=ahead / 1000)
    run.good(
        "killed",
        f"Killed (SIGKILL) right after an extension, the worker left its job leased for at most {LEASE_MS} ms.",
    )

    # 3. A late extension: the network holds the second extend back a third of a lease. Its
    #    margin is a third of a lease too, and a busy machine can eat into it (a thread woken
    #    late, a process resumed late): a lease lost once is tried again, so that only an
    #    answer that loses it both times -- one that leaves no room -- is told so.
    late_ms = LEASE_MS // 3
    for _try in range(2):
        scene = _Scene(run)
        worker = processes.spawn(partial(long_job, hold_extend=2), scene.queue, extend_lease, name="your worker")
        scene.play(worker, late_ms=late_ms)
        if scene.ran() == 1 and not scene.takeovers:
            break
    else:
        run.fail("late", "no-room-for-a-late-extension", late_ms=late_ms, effects=scene.ran())
    run.good("late", f"One extension {late_ms} ms late (a third of the lease): the lease held, the job ran once.")

    # 4. A frozen worker: SIGSTOP as the work ends; the lease runs out; the other worker
    #    takes the job and completes it; then SIGCONT. The freeze comes just after an
    #    extension, so the work's end is seen before the next one is due -- unless the
    #    machine is slow enough that the freeze outlasts the wait until it: then an answer
    #    that only checks on its periodic extensions learns of the loss by luck. So the
    #    scene runs three times, and any run with the effect done twice is the verdict.
    for _try in range(3):
        scene = _Scene(run)
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
        if scene.ran() != 1:
            # The steps whose command went out after the freeze, by the child's clock: a step
            # made before it may reach the parent after the resume on a busy machine.
            after = [
                step
                for step, (sent, done) in zip(worker.steps, worker.step_times, strict=True)
                if frozen_since is None or (done if sent is None else sent) > frozen_since
            ]
            if "extend" in after:
                run.fail(
                    "frozen",
                    "ignores-stale",
                    outcome="gone: the other worker had completed the job",
                    effects=scene.ran(),
                )
            run.fail("frozen", "no-final-check", effects=scene.ran())
    run.good(
        "frozen",
        "Frozen (SIGSTOP) past its lease while the other worker took the job and completed it, your worker woke up, "
        "learned it had lost the job, and did not do the effect again.",
    )
