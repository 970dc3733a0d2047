"""The cautionary contrasts: three ways to get the reliable queue WRONG, kept apart on purpose.

Nothing in the library (``echoq``) uses this module. Each
function here is the plausible-looking shortcut the pattern warns against, written so that
a lesson, a test or ``python -m echoq.teaching chaos --naive`` can show the damage on a real server:

* :func:`naive_pop` -- pop-and-process. The job leaves Valkey the moment it is taken, so a
  worker that dies before finishing loses it (``echoq/teaching/lua/naive_pop.lua``).
* :func:`apply_every` and :func:`naive_consumer` -- the effect on every delivery, never
  keyed on the JOB id: a redelivered job has its effect twice
  (``echoq/teaching/lua/naive_effect.lua``; the library's is ``Effects.apply_once``).
* :func:`racy_reap` -- a two-step check-then-move reaper. Read the expired ids, then move
  each one with separate commands. Two sweeps that overlap both move the same job, and the
  second move yanks it away from the worker that claimed it in between: one crash, two
  live deliveries (:func:`overlapping_sweeps` stages it).
* :func:`unfenced_complete` -- completion without the token check. A worker whose lease
  expired completes a job that another worker now holds (:func:`stale_completion` stages it).

The real counterparts are ``lua/claim.lua``, ``lua/effect.lua``, ``lua/reap.lua`` and
``lua/complete.lua``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from .. import scripts
from ..clock import server_now_ms, wait_until_expired
from ..effects import Effect, EffectResult, Effects
from ..ids import check_job_id
from ..limits import text
from ..queue import Claim, Complete, JobState, Queue, _text
from ..translation import lost_server
from ..worker import Delivery

__all__ = [
    "naive_pop",
    "apply_every",
    "naive_consumer",
    "racy_reap_read",
    "racy_reap_move",
    "racy_reap",
    "unfenced_complete",
    "OverlapReport",
    "overlapping_sweeps",
    "StaleCompletionReport",
    "stale_completion",
]


# -- the naive consumer: one effect per delivery -----------------------------------------------


def apply_every(effects: Effects, job_id: str, record: str = "") -> EffectResult:
    """CONTRAST. The naive consumer's effect: run it on every delivery (``effects``' ledger
    counts each run, and is never asked first). Compare :meth:`echoq.Effects.apply_once`."""
    job_id = check_job_id(job_id)
    record = text("record", record)
    keys = [effects.queue.keys.effects, effects.queue.keys.outbox]
    reply = scripts.run(effects.queue.client, "teaching/naive_effect", keys, [job_id, record, effects.keep_outbox])
    return EffectResult(Effect(_text(reply[0])), int(reply[1]))


def naive_consumer(effects: Effects, work: Callable[[Delivery], str | None] | None = None) -> Callable[[Delivery], Any]:
    """CONTRAST. :func:`echoq.keyed_consumer`'s handler, but the effect runs on every delivery."""

    def handle(delivery: Delivery) -> EffectResult:
        record = work(delivery) if work is not None else None
        delivery.checkpoint()  # the work is done, the effect is not
        return apply_every(effects, delivery.job_id, record if record is not None else f"attempt {delivery.attempts}")

    handle.__name__ = "naive_consumer"
    return handle


# -- contrast 1: the naive pop-and-process loop ----------------------------------------------


def naive_pop(queue: Queue) -> tuple[str, str] | None:
    """CONTRAST. Take the oldest pending job OUT of Valkey: (job id, payload), or None.

    After this call the job exists only in the caller's memory; a crash loses it
    (``lua/teaching/naive_pop.lua``).
    """
    k = queue.keys
    reply = scripts.run(queue.client, "teaching/naive_pop", [k.pending, k.stats], [])
    if not reply:
        return None
    return _text(reply[0]), _text(reply[1])


def naive_done(queue: Queue, job_id: str) -> None:
    """CONTRAST. The naive worker finished ``job_id`` (popped out of Valkey): record it in
    ``emq:{q}:done`` and count it, so the server can tell finished jobs from lost ones."""
    _record_done(queue, job_id, active=False)


# -- contrast 2: the two-step check-then-move reaper ----------------------------------------


def racy_reap_read(queue: Queue) -> list[str]:
    """CONTRAST, step 1: the ids whose lease deadline is at or before the server's now."""
    now = server_now_ms(queue.client)
    return [_text(x) for x in queue.client.zrangebyscore(queue.keys.active, "-inf", now)]


def racy_reap_move(queue: Queue, ids: list[str]) -> list[str]:
    """CONTRAST, step 2: move each id back to pending with separate commands and no
    re-check -- whatever happened to the job since step 1 read it. Returns the ids moved."""
    k = queue.keys
    for job_id in ids:
        queue.client.zrem(k.active, job_id)
        queue.client.zadd(k.pending, {job_id: 0})
        queue.client.hset(k.job(job_id), "state", JobState.PENDING.value)
        queue.client.hincrby(k.stats, "reaped", 1)
    return list(ids)


def racy_reap(queue: Queue, between: Callable[[], None] | None = None) -> list[str]:
    """CONTRAST: read the expired ids, call ``between`` (a barrier, another sweep, a
    claim...), then move them. Correct only until two sweeps overlap."""
    ids = racy_reap_read(queue)
    if between is not None:
        between()
    return racy_reap_move(queue, ids)


@dataclass
class OverlapReport:
    """What two overlapping sweeps did to one stalled job.

    ``claims`` is every delivery of the job, in order: the first went to the worker that
    crashed; any after the second are duplicates that one crash should never cause.
    """

    job_id: str
    racy: bool
    first_sweep: list[str]
    second_sweep: list[str]
    claims: list[Claim] = field(default_factory=list)

    @property
    def deliveries(self) -> int:
        return len(self.claims)

    @property
    def live_holders(self) -> list[Claim]:
        """Deliveries after the crash: workers that each believe they hold the job now."""
        return self.claims[1:]

    @property
    def duplicate_deliveries(self) -> int:
        return max(0, len(self.live_holders) - 1)


def overlapping_sweeps(queue: Queue, *, racy: bool, lease_ms: int = 5, holder_lease_ms: int = 30_000) -> OverlapReport:
    """Stage two reaper sweeps that overlap, deterministically, around one crashed job.

    Worker A claims a job and dies. Sweep 1 reads the expired ids; before it moves them,
    sweep 2 runs to the end and worker B claims the recovered job; then sweep 1 moves, and
    worker C asks for work. With ``racy=True`` (two-step sweeps) sweep 1's stale read moves
    the job out of B's hands and C gets it too: two live deliveries from one crash. With
    ``racy=False`` both sweeps are the atomic ``reap`` script, which has no gap to overlap
    in: sweep 1 runs after B's claim, finds a live lease and moves nothing.
    """
    job_id = queue.enqueue("overlapping sweeps").job_id
    crashed = queue.claim(lease_ms=lease_ms)
    if crashed is None or crashed.job_id != job_id:
        raise RuntimeError(f"{queue!r} must be empty for this demonstration; call queue.reset() first")
    wait_until_expired(queue.client, crashed.deadline_ms)  # worker A is gone: its lease runs out
    report = OverlapReport(job_id, racy, [], [], [crashed])

    def second_sweep_then_claim() -> None:
        report.second_sweep = racy_reap(queue) if racy else queue.reap()
        b = queue.claim(lease_ms=holder_lease_ms)
        if b is not None:
            report.claims.append(b)

    if racy:
        report.first_sweep = racy_reap(queue, between=second_sweep_then_claim)
    else:
        # An atomic sweep cannot be paused between its read and its move, so the most it
        # can overlap with is whatever runs before it, or after it.
        second_sweep_then_claim()
        report.first_sweep = queue.reap()
    c = queue.claim(lease_ms=holder_lease_ms)
    if c is not None:
        report.claims.append(c)
    return report


# -- contrast 3: completion without the fence -------------------------------------------------


def unfenced_complete(queue: Queue, job_id: str) -> None:
    """CONTRAST: complete a job without checking that the caller still holds it.

    No token, no state check: whoever calls this deletes the row, even if the job was
    reaped and another worker is in the middle of it.
    """
    _record_done(queue, job_id, active=True)


def _record_done(queue: Queue, job_id: str, *, active: bool) -> None:
    k = queue.keys
    pipe = queue.client.pipeline(transaction=True)
    if active:
        pipe.zrem(k.active, job_id)
    pipe.delete(k.job(check_job_id(job_id)))
    pipe.zadd(k.done, {job_id: server_now_ms(queue.client)})
    pipe.hincrby(k.stats, "completed", 1)
    try:
        pipe.execute()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(queue.client, exc) from None


@dataclass
class StaleCompletionReport:
    """A stale worker (A) completes after the job was reaped and claimed by B."""

    job_id: str
    fenced: bool
    stale: Claim  # A's claim: its lease expired while it worked
    holder: Claim  # B's claim: the live holder
    stale_outcome: Complete | None  # what A's completion got (None: unfenced, no answer)
    place_while_held: JobState | None  # where the job was right after A's completion
    holder_outcome: Complete  # what B's completion got

    @property
    def corrupted(self) -> bool:
        """The job left the active set while B still worked it, or B's complete was refused."""
        return self.place_while_held is not JobState.ACTIVE or self.holder_outcome is not Complete.COMPLETED


def stale_completion(queue: Queue, *, fenced: bool, lease_ms: int = 5) -> StaleCompletionReport:
    """Stage a stale completion: A claims, stalls past its lease, the reaper hands the job
    to B, then A wakes up and completes -- fenced (``queue.complete``) or not
    (:func:`unfenced_complete`). Finally B, which did the work, completes."""
    job_id = queue.enqueue("stale completion").job_id
    a = queue.claim(lease_ms=lease_ms)
    if a is None or a.job_id != job_id:
        raise RuntimeError(f"{queue!r} must be empty for this demonstration; call queue.reset() first")
    wait_until_expired(queue.client, a.deadline_ms)
    queue.reap()
    b = queue.claim(lease_ms=30_000)
    assert b is not None and b.job_id == job_id
    if fenced:
        stale_outcome: Complete | None = queue.complete(a)
    else:
        unfenced_complete(queue, job_id)
        stale_outcome = None
    place = queue.snapshot().place_of(job_id)
    holder_outcome = queue.complete(b)
    return StaleCompletionReport(job_id, fenced, a, b, stale_outcome, place, holder_outcome)
