"""The reliable queue: one method per Lua script, outcomes as Enums, typed errors.

>>> q = Queue("orders")                    # connects with echoq.connect()
>>> q.enqueue("ship #1").outcome
<Enqueue.ENQUEUED: 'enqueued'>
>>> claim = q.claim(lease_ms=30_000)        # pending -> active, under a lease
>>> q.complete(claim)                       # fenced by claim.token
<Complete.COMPLETED: 'completed'>
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis

from .errors import InvalidArgument
from .ids import check_job_id, new_job_id
from .keyspace import Keyspace
from .scripts import Scripts, lost_server, translate

DEFAULT_LEASE_MS = 30_000
DEFAULT_KEEP_DONE = 10_000


class JobState(StrEnum):
    """Where a job is. A live job is in exactly one of these; a completed one is retired."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    DEAD = "dead"
    RETIRED = "retired"  # completed: the row is gone, the id is remembered in emq:{q}:done


class Enqueue(StrEnum):
    ENQUEUED = "enqueued"
    DUPLICATE = "duplicate"  # the id is known already; nothing changed


class Complete(StrEnum):
    COMPLETED = "completed"
    STALE = "stale"  # the caller's token no longer holds the job; nothing changed
    GONE = "gone"  # no such row; nothing changed


class Retry(StrEnum):
    RETRIED = "retried"  # back in pending now
    SCHEDULED = "scheduled"  # waiting out a backoff
    DEAD = "dead"  # attempts reached the maximum: dead-lettered
    STALE = "stale"
    GONE = "gone"


class Extend(StrEnum):
    EXTENDED = "extended"
    STALE = "stale"
    GONE = "gone"


@dataclass(frozen=True)
class Enqueued:
    job_id: str
    outcome: Enqueue
    state: JobState | None = None  # for a duplicate: where the known job is


@dataclass(frozen=True)
class Claim:
    """A job this worker holds until ``deadline_ms`` (server clock), fenced by ``token``."""

    job_id: str
    payload: str
    token: int  # the row's attempts after this claim: 1 on the first delivery
    deadline_ms: int

    @property
    def attempt(self) -> int:
        return self.token


@dataclass(frozen=True)
class RetryResult:
    outcome: Retry
    attempts: int | None = None
    due_ms: int | None = None


@dataclass(frozen=True)
class StalledReport:
    now_ms: int
    recovered: list[str]
    dead: list[str]


@dataclass(frozen=True)
class Job:
    """One row, as read with :meth:`Queue.job`."""

    job_id: str
    state: JobState
    attempts: int
    stalled: int
    payload: str | None
    error: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Row:
    state: str
    attempts: int
    stalled: int
    reason: str


@dataclass
class Snapshot:
    """One atomic read of a queue (see lua/snapshot.lua). Lists are capped; counts are exact."""

    queue: str
    now_ms: int
    pending: list[str]
    active: dict[str, int]  # id -> lease deadline (server ms)
    scheduled: dict[str, int]  # id -> due (server ms)
    dead: dict[str, int]  # id -> time of death (server ms)
    done: dict[str, int]  # id -> time of completion, newest first
    counts: dict[str, int]  # pending / active / scheduled / dead / done
    stats: dict[str, int]
    rows: dict[str, Row] = field(default_factory=dict)
    effects: dict[str, int] = field(default_factory=dict)

    def place_of(self, job_id: str) -> JobState | None:
        for state, members in (
            (JobState.PENDING, self.pending),
            (JobState.ACTIVE, self.active),
            (JobState.SCHEDULED, self.scheduled),
            (JobState.DEAD, self.dead),
            (JobState.RETIRED, self.done),
        ):
            if job_id in members:
                return state
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _positive(name: str, value: int, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and not allow_zero):
        need = ">= 0" if allow_zero else "> 0"
        raise InvalidArgument(f"{name} must be a whole number {need}, got {value!r}")
    return value


class Queue:
    """A reliable queue named ``name`` on a Valkey server.

    Every move is one Lua script run atomically on the server (see ``lua/``). ``client``
    defaults to :func:`echoq.connect`, i.e. ``VALKEY_URL`` or the embedded server.
    """

    def __init__(self, name: str, client: redis.Redis | None = None, *, keep_done: int = DEFAULT_KEEP_DONE) -> None:
        self.keys = Keyspace(name)
        if client is None:
            from .server import connect

            client = connect()
        self.client = client
        self.keep_done = keep_done
        self._scripts = Scripts(client)

    @property
    def name(self) -> str:
        return self.keys.queue

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        return self._scripts.run(script, keys, args)

    # -- moves -------------------------------------------------------------------------

    def enqueue(self, payload: str = "", *, job_id: str | None = None, delay_ms: int = 0) -> Enqueued:
        """Add a job; a known ``job_id`` is refused as a duplicate and nothing changes."""
        job_id = check_job_id(job_id) if job_id is not None else new_job_id()
        _positive("delay_ms", delay_ms, allow_zero=True)
        k = self.keys
        reply = self._run(
            "enqueue",
            [k.pending, k.scheduled, k.done, k.stats, k.job(job_id)],
            [job_id, payload, delay_ms],
        )
        outcome = Enqueue(_text(reply[0]))
        state = JobState(_text(reply[2]).replace("completed", "retired")) if len(reply) > 2 else None
        return Enqueued(job_id, outcome, state)

    def enqueue_many(self, payloads: list[str]) -> list[str]:
        """Enqueue several jobs in one pipeline round trip; returns their new ids."""
        k = self.keys
        ids = [new_job_id() for _ in payloads]
        pipe = self.client.pipeline(transaction=False)
        for job_id, payload in zip(ids, payloads, strict=True):
            self._scripts.run(
                "enqueue", [k.pending, k.scheduled, k.done, k.stats, k.job(job_id)], [job_id, payload, 0], client=pipe
            )
        try:
            pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise lost_server(self.client, exc) from None
        return ids

    def claim(self, lease_ms: int = DEFAULT_LEASE_MS) -> Claim | None:
        """Take the oldest pending job into the active set under a lease; None if none."""
        claims = self.claim_many(1, lease_ms)
        return claims[0] if claims else None

    def claim_many(self, count: int, lease_ms: int = DEFAULT_LEASE_MS) -> list[Claim]:
        """Claim up to ``count`` jobs in one call, each under its own lease and token."""
        _positive("lease_ms", lease_ms)
        _positive("count", count)
        k = self.keys
        reply = self._run("claim", [k.pending, k.active, k.scheduled, k.stats], [lease_ms, count])
        return _claims(reply, 0)

    def complete(self, claim: Claim | str, token: int | None = None) -> Complete:
        """Finish a job you hold. Refused (STALE) if your lease was lost; GONE if no row."""
        job_id, token = _holder(claim, token)
        k = self.keys
        reply = self._run("complete", [k.active, k.done, k.stats, k.job(job_id)], [job_id, token, self.keep_done])
        return Complete(_text(reply[0]))

    def complete_many(self, claims: Sequence[Claim]) -> list[Complete]:
        """Complete several held jobs in one pipeline, each fenced by its own token.

        The completions are independent (a non-transactional pipeline of complete.lua): one
        stale claim is refused on its own and does not hold back the others. The outcomes
        come back in the order of ``claims``.
        """
        for claim in claims:
            if not isinstance(claim, Claim):
                raise InvalidArgument(f"complete_many takes the Claims that claim_many returned, got {claim!r}")
        if not claims:
            return []
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        for claim in claims:
            self._scripts.run(
                "complete",
                [k.active, k.done, k.stats, k.job(claim.job_id)],
                [claim.job_id, claim.token, self.keep_done],
                client=pipe,
            )
        try:
            replies = pipe.execute()
        except redis.ResponseError as exc:
            raise translate(exc, "complete") from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise lost_server(self.client, exc) from None
        return [Complete(_text(reply[0])) for reply in replies]

    def complete_and_claim(
        self, claim: Claim | str, token: int | None = None, *, lease_ms: int = DEFAULT_LEASE_MS, count: int = 1
    ) -> tuple[Complete, list[Claim]]:
        """Complete one job and claim up to ``count`` more in ONE round trip."""
        job_id, token = _holder(claim, token)
        _positive("lease_ms", lease_ms)
        _positive("count", count, allow_zero=True)
        k = self.keys
        reply = self._run(
            "complete_and_claim",
            [k.pending, k.active, k.scheduled, k.done, k.stats, k.job(job_id)],
            [job_id, token, self.keep_done, lease_ms, count],
        )
        return Complete(_text(reply[0])), _claims(reply, 1)

    def retry(
        self,
        claim: Claim | str,
        token: int | None = None,
        *,
        error: str = "",
        backoff_ms: int = 0,
        max_attempts: int = 3,
    ) -> RetryResult:
        """Give a failed job back: pending now, scheduled after ``backoff_ms``, or dead."""
        job_id, token = _holder(claim, token)
        _positive("backoff_ms", backoff_ms, allow_zero=True)
        _positive("max_attempts", max_attempts)
        k = self.keys
        reply = self._run(
            "retry",
            [k.active, k.pending, k.scheduled, k.dead, k.stats, k.job(job_id)],
            [job_id, token, error, backoff_ms, max_attempts],
        )
        outcome = Retry(_text(reply[0]))
        if outcome in (Retry.RETRIED, Retry.SCHEDULED, Retry.DEAD):
            return RetryResult(outcome, int(reply[1]), int(reply[2]) if len(reply) > 2 else None)
        return RetryResult(outcome)

    def extend(self, claim: Claim | str, token: int | None = None, *, lease_ms: int = DEFAULT_LEASE_MS) -> Extend:
        """Push your lease to server now + ``lease_ms``; refused if you no longer hold it."""
        job_id, token = _holder(claim, token)
        _positive("lease_ms", lease_ms)
        k = self.keys
        reply = self._run("extend", [k.active, k.job(job_id)], [job_id, token, lease_ms])
        return Extend(_text(reply[0]))

    def reap_once(self, limit: int = 100) -> tuple[int, list[str]]:
        """One bounded sweep: (server now in ms, ids moved from active back to pending)."""
        _positive("limit", limit)
        k = self.keys
        reply = self._run("reap", [k.active, k.pending, k.stats], [limit])
        return int(reply[0]), [_text(x) for x in reply[1:]]

    def reap(self, limit: int = 100) -> list[str]:
        """Sweep until no expired lease is left; every moved id, in the order moved."""
        moved: list[str] = []
        while True:
            _now, batch = self.reap_once(limit)
            moved += batch
            if len(batch) < limit:
                return moved

    def stalled_check(self, max_stalled: int = 1, limit: int = 100) -> StalledReport:
        """Recover stalled jobs; dead-letter those recovered ``max_stalled`` times already."""
        _positive("max_stalled", max_stalled, allow_zero=True)
        _positive("limit", limit)
        k = self.keys
        recovered: list[str] = []
        dead: list[str] = []
        while True:
            now, rec, died = self._run("stalled_check", [k.active, k.pending, k.dead, k.stats], [max_stalled, limit])
            recovered += [_text(x) for x in rec]
            dead += [_text(x) for x in died]
            if len(rec) + len(died) < limit:
                return StalledReport(int(now), recovered, dead)

    # -- reads ---------------------------------------------------------------------------

    def snapshot(self, limit: int = 1000) -> Snapshot:
        """One atomic read of every set, the counters and the server's now."""
        _positive("limit", limit)
        k = self.keys
        reply = self._run(
            "snapshot",
            [k.pending, k.active, k.scheduled, k.dead, k.done, k.stats, k.effects],
            [limit],
        )
        now, pending, active, scheduled, dead, done, stats, rows, effects = reply

        def scored(part: list[Any]) -> dict[str, int]:
            flat = part[1]
            return {_text(flat[i]): int(float(flat[i + 1])) for i in range(0, len(flat), 2)}

        return Snapshot(
            queue=self.name,
            now_ms=int(now),
            pending=[_text(x) for x in pending[1]],
            active=scored(active),
            scheduled=scored(scheduled),
            dead=scored(dead),
            done=scored(done),
            counts={
                "pending": int(pending[0]),
                "active": int(active[0]),
                "scheduled": int(scheduled[0]),
                "dead": int(dead[0]),
                "done": int(done[0]),
            },
            stats={_text(stats[i]): int(stats[i + 1]) for i in range(0, len(stats), 2)},
            rows={
                _text(rows[i]): Row(_text(rows[i + 1]), int(rows[i + 2]), int(rows[i + 3]), _text(rows[i + 4]))
                for i in range(0, len(rows), 5)
            },
            effects={_text(effects[i]): int(effects[i + 1]) for i in range(0, len(effects), 2)},
        )

    def job(self, job_id: str) -> Job | None:
        """The row of one job, or None if it is retired or unknown."""
        row = self.client.hgetall(self.keys.job(job_id))
        if not row:
            return None
        row = {_text(key): _text(value) for key, value in row.items()}
        return Job(
            job_id=job_id,
            state=JobState(row.get("state", "pending")),
            attempts=int(row.get("attempts", 0)),
            stalled=int(row.get("stalled", 0)),
            payload=row.get("payload"),
            error=row.get("error") or None,
            reason=row.get("reason") or None,
        )

    def keys_in_use(self) -> Iterator[str]:
        for key in self.client.scan_iter(match=self.keys.pattern(), count=500):
            yield _text(key)

    def reset(self) -> int:
        """Delete every key of this queue (for starting a lesson afresh); how many went."""
        keys = list(self.keys_in_use())
        for start in range(0, len(keys), 500):
            self.client.delete(*keys[start : start + 500])
        return len(keys)


def _holder(claim: Claim | str, token: int | None) -> tuple[str, int]:
    if isinstance(claim, Claim):
        return claim.job_id, claim.token if token is None else token
    if token is None:
        raise InvalidArgument("pass the Claim, or a job id together with its token")
    return check_job_id(claim), token


def _claims(reply: list[Any], start: int) -> list[Claim]:
    return [
        Claim(_text(reply[i]), _text(reply[i + 1]), int(reply[i + 2]), int(reply[i + 3]))
        for i in range(start, len(reply), 4)
    ]
