"""The lessons' exercises: a stub for the learner, a check that runs it on Valkey, a solution.

Each ``check_*`` runs the learner's answer against the real server on a scratch queue and
returns :class:`Feedback`: one line per thing it verified, in words, saying what is right
and what to change. A check never raises on a wrong answer (the notebook keeps running);
``feedback.ok`` is False instead. The stubs in ``STUBS`` are what the notebooks start
from; they are deliberately wrong, and ``tests/test_exercises.py`` proves the checks say so.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from .. import scripts
from ..clock import server_now_ms, wait_for_server_ms
from ..effects import Effects
from ..queue import Queue
from . import learner

# -- feedback ----------------------------------------------------------------------------


@dataclass
class Feedback:
    exercise: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and bool(self.passed)

    def good(self, line: str) -> None:
        self.passed.append(line)

    def bad(self, line: str) -> None:
        self.failed.append(line)

    def expect(self, condition: bool, right: str, wrong: str) -> bool:
        (self.good if condition else self.bad)(right if condition else wrong)
        return condition

    def headline(self) -> str:
        if self.ok:
            return f"{self.exercise}: all {len(self.passed)} checks pass. Well done."
        return f"{self.exercise}: {len(self.failed)} thing(s) to fix, {len(self.passed)} right so far."

    def __str__(self) -> str:
        lines = [self.headline()]
        lines += [f"  ✗ {line}" for line in self.failed]
        lines += [f"  ✓ {line}" for line in self.passed]
        return "\n".join(lines)

    __repr__ = __str__  # what a notebook shows as text/plain (GitHub, nbviewer, a terminal)

    def _repr_html_(self) -> str:
        colour = "#1b7837" if self.ok else "#b35806"
        items = [f"<li>✗ {html.escape(line)}</li>" for line in self.failed]
        items += [f"<li>✓ {html.escape(line)}</li>" for line in self.passed]
        return f'<div style="color:{colour}"><b>{html.escape(self.headline())}</b><ul>{"".join(items)}</ul></div>'


def _scratch(name: str, client: redis.Redis | None) -> Queue:
    queue = Queue(learner.queue_name(f"exercise-{name}-{os.getpid()}"), client)
    queue.reset()
    return queue


# -- lesson 01: the naive loop -------------------------------------------------------------


def check_lost_prediction(answer: object, *, jobs: int = 5, crash_after: int = 3) -> Feedback:
    """Lesson 01: how many of ``jobs`` jobs are lost when the naive worker dies after its
    ``crash_after``-th pop? The check runs it for real and compares."""
    from .contrasts import naive_pop

    fb = Feedback("Lesson 01 prediction")
    queue = _scratch("naive", None)
    try:
        queue.enqueue_many([f"job {n}" for n in range(1, jobs + 1)])
        done = 0
        for n in range(1, crash_after + 1):
            popped = naive_pop(queue)
            if n < crash_after and popped is not None:
                done += 1  # finished before the crash
        # The worker died holding job `crash_after`: it is in no set and has no row.
        snap = queue.snapshot()
        left = snap.counts["pending"] + snap.counts["active"]
        lost = jobs - done - left
        if not isinstance(answer, int) or isinstance(answer, bool):
            fb.bad(f"Answer with a whole number (you gave {answer!r}).")
        else:
            fb.expect(
                answer == lost,
                f"{lost} job lost: the one the worker had popped when it died. It was in no key of the queue.",
                f"Not {answer}. On Valkey: {done} done, {left} still pending, so {jobs - done - left} lost -- "
                "which job was in the worker's hands, and where was it kept?",
            )
    finally:
        queue.reset()
    return fb


# -- lesson 02: the recoverable claim ------------------------------------------------------

CLAIM_STUB = """\
-- KEYS[1] = emq:{q}:pending   KEYS[2] = emq:{q}:active
-- ARGV[1] = lease in milliseconds
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then return {} end
local id = popped[1]
-- the row's key is built from KEYS[1] ('emq:{q}:pending' minus 'pending'): same queue, same {q}
local row = string.sub(KEYS[1], 1, -8) .. 'job:' .. id

-- TODO 1: bump the row's attempts by 1; the new value is the attempt number, the fencing token
local attempt = 0

-- TODO 2: read the server's clock, in milliseconds (hint: TIME gives seconds and microseconds)
local now = 0

-- TODO 3: park the id in the active set, scored by its lease deadline (now + lease)

redis.call('HSET', row, 'state', 'active')
return {id, attempt, now + tonumber(ARGV[1])}
"""

CLAIM_SOLUTION = """\
-- KEYS[1] = emq:{q}:pending   KEYS[2] = emq:{q}:active
-- ARGV[1] = lease in milliseconds
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then return {} end
local id = popped[1]
-- the row's key is built from KEYS[1] ('emq:{q}:pending' minus 'pending'): same queue, same {q}
local row = string.sub(KEYS[1], 1, -8) .. 'job:' .. id

local attempt = redis.call('HINCRBY', row, 'attempts', 1)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)

redis.call('HSET', row, 'state', 'active')
return {id, attempt, now + tonumber(ARGV[1])}
"""


def check_claim_script(source: str, *, client: redis.Redis | None = None) -> Feedback:
    """Lesson 02: run the learner's claim script on two real jobs and inspect every key."""
    fb = Feedback("Lesson 02 claim script")
    queue = _scratch("claim", client)
    k = queue.keys
    lease_ms = 30_000
    try:
        older, newer = queue.enqueue_many(["older", "newer"])
        before = server_now_ms(queue.client)
        try:
            reply = scripts.run_text(queue.client, source, [k.pending, k.active], [lease_ms], name="your claim")
        except redis.ResponseError as exc:
            fb.bad(f"Valkey refused the script: {str(exc).splitlines()[0]}")
            return fb
        after = server_now_ms(queue.client)
        if not isinstance(reply, list) or len(reply) != 3:
            fb.bad(f"The script should return {{id, attempt, deadline}}; it returned {reply!r}.")
            return fb
        job_id, attempt = str(reply[0]), reply[1]
        fb.expect(job_id == older, "It claimed the oldest job.", f"It claimed {job_id}, not the oldest ({older}).")
        in_pending = queue.client.zscore(k.pending, job_id) is not None
        score = queue.client.zscore(k.active, job_id)
        if not in_pending and score is None:
            fb.bad(
                "The claimed job is in neither pending nor active: if the worker crashed now, the job "
                "would be lost. Park it in the active set (TODO 3)."
            )
        else:
            fb.expect(not in_pending, "The job left the pending set.", "The job is still in pending as well.")
            fb.expect(score is not None, "The job is parked in the active set.", "The job is not in the active set.")
        row = queue.job(job_id)
        attempts = row.attempts if row else 0
        fb.expect(
            attempts == 1 and attempt == 1,
            "attempts went from 0 to 1 and the script returned it as the attempt number.",
            f"attempts is {attempts} and the attempt returned is {attempt}: HINCRBY the row's attempts by 1 and "
            "return the new value (TODO 1).",
        )
        if score is not None:
            fb.expect(
                before + lease_ms - 1_000 <= score <= after + lease_ms + 1_000,
                "The lease deadline is the server's now plus the lease.",
                f"The active score is {score:.0f}, but the server's now plus the lease is about {before + lease_ms}: "
                "read TIME (seconds and microseconds) and turn it into milliseconds (TODO 2).",
            )
        fb.expect(
            queue.client.zscore(k.pending, newer) is not None,
            "The newer job is still pending.",
            "The newer job left pending: claim one job only.",
        )
    finally:
        queue.reset()
    return fb


# -- lesson 03: the idempotent consumer ----------------------------------------------------

HANDLER_STUB = '''\
def handle(job_id: str, payload: str, effects) -> None:
    """Charge the card once, however many times this job is delivered."""
    # TODO: this charges the card on every delivery. Key the effect on the JOB id.
    effects.apply_every(job_id, payload)
'''

HANDLER_SOLUTION = '''\
def handle(job_id: str, payload: str, effects) -> None:
    """Charge the card once, however many times this job is delivered."""
    effects.apply_once(job_id, payload)
'''


def check_handler(handle: Callable[[str, str, Effects], object], *, deliveries: int = 4) -> Feedback:
    """Lesson 03: deliver one job ``deliveries`` times for real (claim, run the handler,
    die before completing, lease expires, reap) and count the effects in the ledger."""
    fb = Feedback("Lesson 03 idempotent handler")
    queue = _scratch("handler", None)
    effects = Effects(queue)
    try:
        job_id = queue.enqueue("charge card 42 EUR").job_id
        for _ in range(deliveries):
            claim = queue.claim(lease_ms=5)
            if claim is None:
                fb.bad("The job was not redelivered; did the handler complete or remove it? Only run the effect.")
                return fb
            try:
                handle(claim.job_id, claim.payload, effects)
            except Exception as exc:  # the learner's code: report, do not crash the notebook
                fb.bad(f"The handler raised {type(exc).__name__}: {exc}")
                return fb
            wait_for_server_ms(queue.client, claim.deadline_ms + 1)
            queue.reap()
        count = effects.count(job_id)
        fb.expect(count >= 1, "The effect happened.", "The effect never happened: the card was not charged.")
        fb.expect(
            count <= 1,
            f"{deliveries} deliveries made exactly 1 effect: the effect is keyed on the JOB id.",
            f"{deliveries} deliveries made {count} effects: the customer was charged {count} times. "
            "Key the effect on the JOB id (effects.apply_once).",
        )
    finally:
        queue.reset()
    return fb


# -- lesson 04: the atomic reap --------------------------------------------------------------

REAP_STUB = """\
-- KEYS[1] = emq:{q}:active   KEYS[2] = emq:{q}:pending
local prefix = string.sub(KEYS[1], 1, -7)  -- 'emq:{q}:active' minus 'active'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- TODO: select only the members whose lease deadline is at or before now
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf')
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)
  -- TODO: mark the row pending again
end
return expired
"""

REAP_SOLUTION = """\
-- KEYS[1] = emq:{q}:active   KEYS[2] = emq:{q}:pending
local prefix = string.sub(KEYS[1], 1, -7)  -- 'emq:{q}:active' minus 'active'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', prefix .. 'job:' .. id, 'state', 'pending')
end
return expired
"""


def check_reap_script(source: str, *, client: redis.Redis | None = None) -> Feedback:
    """Lesson 04: one expired lease and one live one; the script must move only the first."""
    fb = Feedback("Lesson 04 reap script")
    queue = _scratch("reap", client)
    k = queue.keys
    try:
        queue.enqueue_many(["stalled", "alive"])
        stalled = queue.claim(lease_ms=5)
        alive = queue.claim(lease_ms=60_000)
        wait_for_server_ms(queue.client, stalled.deadline_ms + 1)
        try:
            moved = scripts.run_text(queue.client, source, [k.active, k.pending], [], name="your reap")
        except redis.ResponseError as exc:
            fb.bad(f"Valkey refused the script: {str(exc).splitlines()[0]}")
            return fb
        fb.expect(
            queue.client.zscore(k.pending, stalled.job_id) is not None
            and queue.client.zscore(k.active, stalled.job_id) is None,
            "The expired lease went back to pending.",
            "The expired lease is not back in pending.",
        )
        fb.expect(
            queue.client.zscore(k.active, alive.job_id) is not None,
            "The live lease was left alone.",
            "A live lease was reaped: its worker is still busy, and the job will now run twice. "
            "Select only scores at or before now.",
        )
        row = queue.job(stalled.job_id)
        fb.expect(
            row is not None and row.state.value == "pending",
            "The reaped job's row says pending.",
            f"The reaped job's row still says {row.state.value if row else 'nothing'}: set its state to pending.",
        )
        fb.expect(
            isinstance(moved, list) and [str(x) for x in moved] == [stalled.job_id],
            "It returned the id it moved.",
            f"It returned {moved!r}; return the ids you moved.",
        )
    finally:
        queue.reset()
    return fb


STUBS = {"claim": CLAIM_STUB, "handler": HANDLER_STUB, "reap": REAP_STUB}
SOLUTIONS = {"claim": CLAIM_SOLUTION, "handler": HANDLER_SOLUTION, "reap": REAP_SOLUTION}


# -- lesson 05: the consumer loop ------------------------------------------------------------

LOOP_STUB = '''\
def my_worker_loop(q, handle) -> None:
    """One beat of a worker: recover stalled jobs, then drain the queue."""
    # TODO: jobs of dead workers sit in the active set until someone reaps them
    while (claim := q.claim(lease_ms=60_000)) is not None:
        q.complete(claim)      # TODO: is this the right moment to say "done"?
        handle(claim)
'''

LOOP_SOLUTION = '''\
def my_worker_loop(q, handle) -> None:
    """One beat of a worker: recover stalled jobs, then drain the queue."""
    q.stalled_check(max_stalled=2)
    while (claim := q.claim(lease_ms=60_000)) is not None:
        handle(claim)
        q.complete(claim)
'''


class _HandlerCrash(Exception):
    """Raised by the check's handler to play a worker dying inside the work."""


def check_worker_loop(loop: Callable[[Queue, Callable[[object], None]], None]) -> Feedback:
    """Lesson 05: a dead worker left one job leased; three jobs wait. The learner's loop
    runs twice (the first time its handler dies inside one job) and every job must end
    up done, exactly once."""
    from .fast_forward import fast_forward

    fb = Feedback("Lesson 05 worker loop")
    queue = _scratch("loop", None)
    try:
        abandoned = queue.enqueue("left by a dead worker").job_id
        dead_claim = queue.claim(lease_ms=5)
        waiting = queue.enqueue_many(["a", "b", "crashes the first time"])
        wait_for_server_ms(queue.client, dead_claim.deadline_ms + 1)
        handled: list[str] = []
        crash_once = {waiting[2]}

        def handle(claim: object) -> None:
            job_id = getattr(claim, "job_id", None)
            if job_id in crash_once:
                crash_once.discard(job_id)
                raise _HandlerCrash(job_id)
            handled.append(str(job_id))

        for run in (1, 2):
            try:
                loop(queue, handle)
            except _HandlerCrash:
                if run == 2:
                    fb.bad("The loop crashed on the second run too.")
                # The worker died holding a 60 s lease. Rather than make the learner wait a
                # minute, pull that lease's deadline to the server's now (the lab's labelled
                # teaching affordance; the reaper still judges it on the server's clock).
                fast_forward(queue)
            except Exception as exc:
                fb.bad(f"The loop raised {type(exc).__name__}: {exc}")
                return fb
        snap = queue.snapshot()
        fb.expect(
            abandoned in handled,
            "The job a dead worker left in the active set was recovered and handled.",
            "The job a dead worker left in emq:{q}:active was never handled: run a stalled check "
            "(or reap) at the start of each beat.",
        )
        fb.expect(
            waiting[2] in handled,
            "The job whose handler crashed was delivered again and handled.",
            "The job whose handler crashed was never handled again: it was marked done before the work "
            "ran. Complete a job only after handle() returns.",
        )
        fb.expect(
            sorted(handled) == sorted(set(handled)),
            "No job was handled twice.",
            f"Some job was handled twice: {sorted(handled)}.",
        )
        fb.expect(
            snap.counts["pending"] == 0 and snap.counts["active"] == 0,
            "The queue is empty at the end.",
            f"Left over: {snap.counts['pending']} pending, {snap.counts['active']} active.",
        )
    finally:
        queue.reset()
    return fb


# -- lesson 06: long jobs and lease extension ------------------------------------------------


def check_long_job(extend_every_ms: object, *, lease_ms: int = 300, job_ms: int = 900) -> Feedback:
    """Lesson 06: a job takes ``job_ms`` under a ``lease_ms`` lease, and a second worker
    runs stalled checks all the while. With the right ``extend_every_ms`` the job is
    delivered once; with extension off (0) or too rare it is reaped while alive and runs
    twice."""
    import threading
    import time

    from ..worker import Worker

    fb = Feedback("Lesson 06 lease extension")
    if not isinstance(extend_every_ms, int) or isinstance(extend_every_ms, bool) or extend_every_ms < 0:
        fb.bad(f"extend_every_ms must be a whole number of milliseconds >= 0 (0 = never), got {extend_every_ms!r}")
        return fb
    if extend_every_ms >= lease_ms:
        fb.bad(
            f"Every {extend_every_ms} ms is not often enough: the lease is {lease_ms} ms, so it would run out "
            "between two extensions. Pick a value well below it."
        )
        return fb
    queue = _scratch("long", None)
    deliveries: list[int] = []
    try:
        queue.enqueue("a long report")

        def slow(delivery: object) -> None:
            deliveries.append(getattr(delivery, "attempt", 0))
            time.sleep(job_ms / 1000)  # the work itself takes this long

        worker = Worker(queue, slow, lease_ms=lease_ms, extend_every_ms=extend_every_ms, beat_ms=50, idle_wait_ms=20)
        watcher = Worker(queue, slow, lease_ms=lease_ms, extend_every_ms=extend_every_ms, beat_ms=50, idle_wait_ms=20)
        first = threading.Thread(target=worker.work, kwargs={"burst": True})
        first.start()
        give_up = time.monotonic() + 5
        while not deliveries and time.monotonic() < give_up:
            time.sleep(0.005)
        second = threading.Thread(target=watcher.work, kwargs={"burst": True})
        second.start()
        first.join(30)
        second.join(30)
        fb.expect(
            len(deliveries) == 1,
            f"The {job_ms} ms job under a {lease_ms} ms lease was delivered once: its lease kept being extended.",
            f"The job was delivered {len(deliveries)} times: its lease ran out while the work was still "
            f"running, so the other worker reaped it and ran it again. Extend more often than every {lease_ms} ms.",
        )
        if len(deliveries) == 1:
            fb.expect(queue.snapshot().counts["done"] == 1, "It completed.", "It did not complete.")
    finally:
        queue.reset()
    return fb


STUBS |= {"loop": LOOP_STUB}
SOLUTIONS |= {"loop": LOOP_SOLUTION}
