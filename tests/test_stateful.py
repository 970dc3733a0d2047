"""A hypothesis state machine drives one queue on the real embedded Valkey through random
sequences of moves -- enqueue, claim, crash, complete (with the current token and with stale
ones), extend, retry, reap, stalled check, effects, complete_and_claim -- while a Python
model says where every job must be. After every step:

* nothing is lost: every id ever enqueued is in exactly one place (pending, active,
  scheduled, dead or done) and its row agrees;
* the server agrees with the model: each set, each token, each stall count, each deadline;
* the effects ledger holds at most one effect per JOB id;
and every stale-token move is checked to change nothing at all (snapshot before == after).

Leases are either long (a minute: never expire within an example) or a few milliseconds, so
a reap only waits, on the server's clock, when a short lease is actually running.
"""

from __future__ import annotations

from dataclasses import asdict

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import echoq
from echoq import Claim, Complete, Extend, Retry
from echoq.effects import Effect, Effects
from tests.support.helpers import assert_one_place, server_now_ms, wait_for_server_time
from tests.support.servers import fresh_name

LONG_MS = 60_000
SHORT_LEASES = st.integers(min_value=1, max_value=4)
LEASES = st.one_of(SHORT_LEASES, st.just(LONG_MS))
BACKOFFS = st.sampled_from([0, 0, 1, 3, LONG_MS])

EXAMPLES = settings(
    max_examples=300,
    stateful_step_count=20,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def without_clock(snapshot: echoq.Snapshot) -> dict:
    state = asdict(snapshot)
    del state["now_ms"]
    return state


class QueueMachine(RuleBasedStateMachine):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__()
        self.queue = echoq.Queue(fresh_name("sm"), client)
        self.effects = Effects(self.queue)
        self.place: dict[str, str] = {}  # job id -> where the model says it is
        self.attempts: dict[str, int] = {}  # tries; no release here, so each claim's token too
        self.stalled: dict[str, int] = {}
        self.deadline: dict[str, int] = {}  # active ids -> lease deadline (server ms)
        self.due: dict[str, int] = {}  # scheduled ids -> when claim may promote them
        self.held: dict[str, Claim] = {}  # claims whose worker is alive and believes it holds
        self.issued: list[Claim] = []  # every claim ever handed out (the stale-token pool)
        self.effected: set[str] = set()
        self.completed = 0

    # -- helpers -------------------------------------------------------------------------

    def ids_in(self, place: str) -> list[str]:
        return sorted(job_id for job_id, where in self.place.items() if where == place)

    def is_current(self, claim: Claim) -> bool:
        return self.place.get(claim.job_id) == "active" and self.attempts[claim.job_id] == claim.token

    def move(self, job_id: str, place: str) -> None:
        self.place[job_id] = place
        if place != "active":
            self.deadline.pop(job_id, None)
            self.held.pop(job_id, None)  # that worker's claim is stale from now on
        if place != "scheduled":
            self.due.pop(job_id, None)

    def expect_claims(self, claims: list[Claim], count: int) -> None:
        """The claim popped the oldest pending ids (promote_due ran first)."""
        expected = self.ids_in("pending")[:count]
        assert [c.job_id for c in claims] == expected, (claims, expected)
        for claim in claims:
            self.attempts[claim.job_id] += 1
            assert claim.token == claim.attempts == self.attempts[claim.job_id]
            self.move(claim.job_id, "active")
            self.deadline[claim.job_id] = claim.deadline_ms
            self.held[claim.job_id] = claim
            self.issued.append(claim)

    def promote_due(self) -> None:
        """Before a claim: wait out short backoffs so the claim promotes them, deterministically."""
        now = server_now_ms(self.queue.client)
        short = [due for due in self.due.values() if due < now + LONG_MS // 2]
        if short:
            wait_for_server_time(self.queue.client, max(short) + 1)
            for job_id in [j for j, due in self.due.items() if due <= max(short)]:
                self.move(job_id, "pending")

    def expire_short_leases(self) -> None:
        now = server_now_ms(self.queue.client)
        short = [d for d in self.deadline.values() if d < now + LONG_MS // 2]
        if short:
            wait_for_server_time(self.queue.client, max(short) + 1)

    # -- rules ---------------------------------------------------------------------------

    @rule(count=st.integers(min_value=1, max_value=3))
    def enqueue(self, count: int) -> None:
        for n in range(count):
            result = self.queue.enqueue(f"payload {n}")
            assert result.outcome is echoq.Enqueue.ENQUEUED
            self.place[result.job_id] = "pending"
            self.attempts[result.job_id] = 0
            self.stalled[result.job_id] = 0

    @precondition(lambda self: self.place)
    @rule(data=st.data())
    def enqueue_duplicate(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.place)))
        before = without_clock(self.queue.snapshot())
        result = self.queue.enqueue("impostor", job_id=job_id)
        assert result.outcome is echoq.Enqueue.DUPLICATE and result.state == self.place[job_id]
        assert without_clock(self.queue.snapshot()) == before

    @precondition(lambda self: self.ids_in("pending") or self.due)
    @rule(count=st.integers(min_value=1, max_value=3), lease=LEASES)
    def claim(self, count: int, lease: int) -> None:
        self.promote_due()
        self.expect_claims(self.queue.claim_many(count, lease), count)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """The worker dies holding the job: no complete, no cleanup. The job stays active
        until its lease runs out and a reap finds it."""
        job_id = data.draw(st.sampled_from(sorted(self.held)))
        del self.held[job_id]

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        claim = self.held[data.draw(st.sampled_from(sorted(self.held)))]
        assert self.queue.complete(claim) is Complete.COMPLETED
        self.move(claim.job_id, "done")
        self.completed += 1

    @precondition(lambda self: self.held)
    @rule(data=st.data(), count=st.integers(min_value=0, max_value=2), lease=LEASES)
    def complete_and_claim(self, data: st.DataObject, count: int, lease: int) -> None:
        claim = self.held[data.draw(st.sampled_from(sorted(self.held)))]
        if count:  # with nothing to claim the script does not look at the schedule either
            self.promote_due()
        outcome, claims = self.queue.complete_and_claim(claim, lease_ms=lease, count=count)
        assert outcome is Complete.COMPLETED
        self.move(claim.job_id, "done")
        self.completed += 1
        self.expect_claims(claims, count)

    @precondition(lambda self: any(not self.is_current(c) for c in self.issued))
    @rule(data=st.data(), move=st.sampled_from(["complete", "retry", "extend"]))
    def stale_token(self, data: st.DataObject, move: str) -> None:
        """A worker whose lease was lost (reaped, re-claimed, finished) tries again: refused,
        and nothing on the server changes."""
        stale = data.draw(st.sampled_from([c for c in self.issued if not self.is_current(c)]))
        before = without_clock(self.queue.snapshot())
        if move == "complete":
            outcome = self.queue.complete(stale)
        elif move == "retry":
            outcome = self.queue.retry(stale, error="late", max_attempts=1).outcome
        else:
            outcome = self.queue.extend(stale, lease_ms=LONG_MS)
        assert outcome == ("gone" if self.place[stale.job_id] == "done" else "stale")
        assert without_clock(self.queue.snapshot()) == before

    @precondition(lambda self: self.held)
    @rule(data=st.data(), lease=LEASES)
    def extend(self, data: st.DataObject, lease: int) -> None:
        claim = self.held[data.draw(st.sampled_from(sorted(self.held)))]
        assert self.queue.extend(claim, lease_ms=lease) is Extend.EXTENDED
        self.deadline[claim.job_id] = int(self.queue.client.zscore(self.queue.keys.active, claim.job_id))

    @precondition(lambda self: self.held)
    @rule(data=st.data(), backoff=BACKOFFS, max_attempts=st.integers(min_value=1, max_value=4))
    def retry(self, data: st.DataObject, backoff: int, max_attempts: int) -> None:
        claim = self.held[data.draw(st.sampled_from(sorted(self.held)))]
        result = self.queue.retry(claim, error="boom", backoff_ms=backoff, max_attempts=max_attempts)
        assert result.attempts == claim.attempts
        if claim.attempts >= max_attempts:
            assert result.outcome is Retry.DEAD
            self.move(claim.job_id, "dead")
        elif backoff == 0:
            assert result.outcome is Retry.RETRIED
            self.move(claim.job_id, "pending")
        else:
            assert result.outcome is Retry.SCHEDULED and result.due_ms is not None
            self.move(claim.job_id, "scheduled")
            self.due[claim.job_id] = result.due_ms

    @precondition(lambda self: self.deadline)
    @rule()
    def reap(self) -> None:
        self.expire_short_leases()
        now, moved = self.queue.reap_once(limit=1_000)
        expected = sorted(j for j, d in self.deadline.items() if d <= now)
        assert sorted(moved) == expected
        for job_id in moved:
            self.move(job_id, "pending")

    @precondition(lambda self: self.deadline)
    @rule(max_stalled=st.integers(min_value=1, max_value=3))
    def stalled_check(self, max_stalled: int) -> None:
        self.expire_short_leases()
        report = self.queue.stalled_check(max_stalled=max_stalled)
        expired = {j for j, d in self.deadline.items() if d <= report.now_ms}
        assert set(report.recovered) | set(report.dead) == expired
        for job_id in expired:
            self.stalled[job_id] += 1
            fatal = self.stalled[job_id] >= max_stalled  # the max_stalled-th stall is fatal
            assert (job_id in report.dead) is fatal
            self.move(job_id, "dead" if fatal else "pending")

    @precondition(lambda self: self.issued)
    @rule(data=st.data())
    def effect(self, data: st.DataObject) -> None:
        """A delivery performs its side effect, keyed on the JOB id (its worker may since
        have died, been reaped, or finished: the effect must still happen at most once, and
        never for a job that was finished without it)."""
        job_id = data.draw(st.sampled_from(sorted({c.job_id for c in self.issued})))
        result = self.effects.apply_once(job_id, "charged")
        if job_id in self.effected:
            assert (result.outcome, result.count) == (Effect.SKIPPED, 1)
        elif self.place[job_id] == "done":  # the queue no longer holds it: a stale worker's effect
            assert (result.outcome, result.count) == (Effect.GONE, 0)
        else:
            assert (result.outcome, result.count) == (Effect.APPLIED, 1)
            self.effected.add(job_id)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def server_agrees_with_the_model(self) -> None:
        snap = assert_one_place(self.queue, set(self.place))  # nothing lost, one place each
        assert snap.pending == self.ids_in("pending")  # in byte order = mint order
        assert snap.active == {j: self.deadline[j] for j in self.ids_in("active")}
        assert sorted(snap.scheduled) == self.ids_in("scheduled")
        assert sorted(snap.dead) == self.ids_in("dead")
        assert sorted(snap.done) == self.ids_in("done")
        for job_id, row in snap.rows.items():
            assert (row.attempts, row.token, row.stalled) == (
                self.attempts[job_id],
                self.attempts[job_id],
                self.stalled[job_id],
            ), job_id
        assert snap.stats.get("completed", 0) == self.completed
        assert all(n == 1 for n in snap.effects.values()), snap.effects
        assert set(snap.effects) == self.effected

    def teardown(self) -> None:
        self.queue.reset()


def test_the_queue_keeps_its_guarantees_under_random_moves(valkey_client: redis.Redis) -> None:
    run_state_machine_as_test(lambda: QueueMachine(valkey_client), settings=EXAMPLES)
