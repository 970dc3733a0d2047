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
from typing import Any, TypeVar

import redis

from . import limits, scripts
from .address import connection_settings
from .clock import server_clock
from .durability import WAITED, Durability
from .errors import ClockSkew, InvalidArgument
from .ids import JOB_ID_RE, check_job_id, minted_ms
from .keyspace import Keyspace
from .limits import BOUNDS, check, whole
from .server import connect
from .translation import translating

DEFAULT_LEASE_MS = 30_000
DEFAULT_KEEP_DONE = 10_000
DEFAULT_KEEP_DEAD = 10_000
# How long the idempotency record (emq:{q}:given) knows an id a producer gave: a retry of
# that enqueue within it is refused as a duplicate, whatever became of the job meanwhile.
DEFAULT_KEEP_GIVEN_MS = 3_600_000
DEFAULT_MAX_STALLED = 2  # the second stall is fatal: one stall is recovered
E = TypeVar("E", bound=StrEnum)  # a dead-letter move's outcomes (Requeue, Purge)
BATCH = BOUNDS["count"][1]  # most jobs one batch script takes (enqueue_many, complete_many)
DEAD_PAGE_MAX = BOUNDS["count"][1]  # most dead letters one page lists (Queue.dead_letters)
LOCK_MAX_MS = 3_600_000  # the longest a stalled-check lock may last: an hour
# A halt nobody popped (the worker's wait had ended) expires this long after its push; a
# waiting worker pops it within a round trip.
HALT_TTL_MS = 10_000

# The named KEYS of each of the library's scripts, read off the script's own header
# (echoq.scripts.named_keys): the rows of the jobs it is handed follow them.
SCRIPT_KEYS: dict[str, tuple[str, ...]] = {n: scripts.named_keys(n) for n in scripts.names() if "/" not in n}


class JobState(StrEnum):
    """Where a job is: in exactly one of these at every instant."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    DEAD = "dead"
    DONE = "done"  # completed: the row is gone, the id is remembered in emq:{q}:done (capped)


_STATES = {state.value for state in JobState}


def _state(value: object) -> JobState | None:
    """A row's state as read, or None where it holds no state the library writes."""
    text = _text(value)
    return JobState(text) if text in _STATES else None


class Enqueue(StrEnum):
    ENQUEUED = "enqueued"
    DUPLICATE = "duplicate"  # the id is known already; nothing changed


class Complete(StrEnum):
    COMPLETED = "completed"
    STALE = "stale"  # the caller's token no longer holds the job (its lease was lost); nothing changed
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


class Release(StrEnum):
    RELEASED = "released"  # back in pending, unstarted; the row's attempts gave this try back
    STALE = "stale"
    GONE = "gone"


class Requeue(StrEnum):
    REQUEUED = "requeued"  # back in pending at its arrival number, with fresh tries
    NOT_DEAD = "not_dead"  # its row says another state (a live job): nothing changed
    GONE = "gone"  # no row (completed, evicted, purged, or never there): nothing changed


class Purge(StrEnum):
    PURGED = "purged"  # its row and its dead-set entry are deleted
    NOT_DEAD = "not_dead"  # its row says another state (a live job): nothing changed
    GONE = "gone"  # neither a row nor a dead-set entry: nothing changed


@dataclass(frozen=True)
class Enqueued:
    job_id: str
    outcome: Enqueue
    state: JobState | None = None  # for a duplicate: where the known job is


@dataclass(frozen=True)
class Claim:
    """A job this worker holds until ``deadline_ms`` (server clock), fenced by ``token``.

    ``token`` is the fencing token: the row's token after this claim, bumped by every claim
    and never handed out twice; complete, extend, retry and release present it. ``attempts``
    counts the tries toward ``max_attempts``, this one included (1 on the first delivery); a
    claim given back unstarted (:meth:`Queue.release_many`), or recovered unstarted by the
    stalled check (its reply lost on the way to a Worker), gave its try back, so it may be
    lower than ``token``. The bare reaper (:meth:`Queue.reap`) gives no try back: it has no
    dead-letter floor to stop a job whose claims never start. A claim made without
    ``confirm`` (:meth:`Queue.claim`, :meth:`Queue.claim_many`) counts its try when its reply
    leaves the server: its caller is the handler, and nothing can tell its lost reply from a
    start."""

    job_id: str
    payload: str
    token: int
    attempts: int
    deadline_ms: int


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
    corrupt: int = 0  # expired entries whose row was missing or disagreed (see lua/includes/rows.lua)


@dataclass(frozen=True)
class Waiting:
    """What an idle worker needs to know, read atomically (:meth:`Queue.waiting`)."""

    pending: int
    scheduled: int
    next_due_in_ms: int | None  # until the earliest scheduled job is due (0: due now); None: none
    expired: int = 0  # leases in the active set that have run out: a stalled check's work
    now_ms: int = field(default=0, compare=False)  # the server's clock the counts were read on


@dataclass(frozen=True)
class Job:
    """A job's row: as :meth:`Queue.job` reads it, or as :meth:`Queue.snapshot` lists it
    (``Snapshot.rows``), which reads no payload nor error: there both are None.

    ``payload`` is ``str``; it is ``bytes`` only for a payload that is not UTF-8 text,
    which echoq never writes (something else did): such a job is dead-lettered with reason
    ``bad_payload`` on its first claim, its bytes kept here for a person to look at.
    ``state`` is None for a row whose state is not one echoq writes."""

    job_id: str
    state: JobState | None
    attempts: int  # tries counted toward max_attempts
    stalled: int
    payload: str | bytes | None
    error: str | None = None
    reason: str | None = None
    unstarted: int = 0  # recoveries of a claim never confirmed started (lua/stalled_check.lua)
    token: int = 0  # the fencing token of the latest claim (0: never claimed)


@dataclass(frozen=True)
class DeadLetter:
    """A dead job as :meth:`Queue.dead_letters` lists it: why it died and what went wrong."""

    job_id: str
    died_ms: int  # its time of death (server ms): its score in emq:{q}:dead
    reason: str | None  # stalled, unstarted, max_attempts, bad_payload or corrupt
    error: str | None  # the last error its handler raised (max_attempts), or what was wrong
    attempts: int  # the tries it had, counted toward max_attempts
    stalled: int  # the stalls counted on it
    payload: str | bytes | None  # None: the entry has no row (a corrupt one; purge_dead removes it)


@dataclass(frozen=True)
class DeadPage:
    """One page of the dead set, longest dead first (:meth:`Queue.dead_letters`)."""

    letters: list[DeadLetter]
    total: int  # jobs in the dead set when the page was read
    next_offset: int | None  # the offset of the next page; None: this was the last


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
    rows: dict[str, Job] = field(default_factory=dict)  # id -> its row, for the listed ids that have one
    effects: dict[str, int] = field(default_factory=dict)

    def place_of(self, job_id: str) -> JobState | None:
        for state, members in (
            (JobState.PENDING, self.pending),
            (JobState.ACTIVE, self.active),
            (JobState.SCHEDULED, self.scheduled),
            (JobState.DEAD, self.dead),
            (JobState.DONE, self.done),
        ):
            if job_id in members:
                return state
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _lenient(value: bytes) -> str:
    """Text for display from bytes that may not be UTF-8 (a field something else wrote)."""
    return value.decode("utf-8", "backslashreplace")


class Queue:
    """A reliable queue named ``name`` on a Valkey server.

    Every move is one Lua script run atomically on the server (see ``lua/``). ``client``
    defaults to :func:`echoq.connect`, i.e. ``VALKEY_URL`` or the user server; a cluster
    client works the same (every key of the queue is in one slot). ``durability`` makes
    the acknowledged moves wait for replicas (see :class:`echoq.Durability`).
    ``keep_given_ms`` is how long an id a producer gave (``job_id=``, ``job_ids=``) is
    remembered, so that enqueueing it again within that time is refused as a duplicate
    (default an hour); ``keep_done`` and ``keep_dead`` bound the done and dead sets.
    """

    def __init__(
        self,
        name: str,
        client: redis.Redis | redis.cluster.RedisCluster | None = None,
        *,
        keep_done: int = DEFAULT_KEEP_DONE,
        keep_dead: int = DEFAULT_KEEP_DEAD,
        keep_given_ms: int = DEFAULT_KEEP_GIVEN_MS,
        durability: Durability | None = None,
    ) -> None:
        self.keys = Keyspace(name)
        self.keep_done = check("keep_done", keep_done)  # ids in emq:{q}:done (duplicate refusal)
        self.keep_dead = check("keep_dead", keep_dead)  # jobs in emq:{q}:dead; older ones are evicted
        self.keep_given_ms = check("keep_given_ms", keep_given_ms)  # the idempotency record's time
        if durability is not None and not isinstance(durability, Durability):
            raise InvalidArgument(f"durability must be an echoq.Durability or None, got {durability!r}")
        self.durability = durability
        if client is None:
            client = connect()
        self.client = client

    @property
    def name(self) -> str:
        return self.keys.queue

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        wait = self.durability
        if wait is not None and script in WAITED:
            return scripts.run_replicated(
                self.client, script, keys, args, replicas=wait.replicas, timeout_ms=wait.timeout_ms, fsync=wait.fsync
            )
        return scripts.run(self.client, script, keys, args)

    def script_keys(self, script: str, *job_ids: str) -> list[str]:
        """The KEYS a script of this queue is called with: its named keys (SCRIPT_KEYS),
        then the row of each of ``job_ids``."""
        k = self.keys
        return [getattr(k, name) for name in SCRIPT_KEYS[script]] + [k.job(job_id) for job_id in job_ids]

    def new_job_id(self) -> str:
        """A JOB id minted on the server's clock (see :class:`echoq.clock.ServerClock`):
        jobs sort by the server's time, whatever this machine's clock says."""
        return server_clock(self.client).mint(self.client)

    # -- moves -------------------------------------------------------------------------

    def enqueue(self, payload: str | bytes = "", *, job_id: str | None = None, delay_ms: int = 0) -> Enqueued:
        """Add a job; a known ``job_id`` is refused as a duplicate and nothing changes.

        ``payload`` is text: ``str``, or ``bytes`` that are UTF-8, at most 1 MiB encoded
        (:class:`echoq.InvalidPayload` otherwise, before anything is written). Without
        ``job_id``, the id is minted on the server's clock; a ``job_id`` minted more than
        60 s ahead of the server's clock is refused (:class:`echoq.ClockSkew`). A ``job_id``
        given is known -- refused as a duplicate -- while its job lives, while it is among
        the newest ``keep_done`` completions, and for ``keep_given_ms`` after it first
        arrived whatever became of its job (then ``state`` is None)."""
        text = limits.payload(payload)
        keep_given = self.keep_given_ms if job_id is not None else 0
        job_id = check_job_id(job_id) if job_id is not None else self.new_job_id()
        check("delay_ms", delay_ms)
        reply = self._run("enqueue", self.script_keys("enqueue", job_id), [job_id, text, delay_ms, keep_given])
        outcome = Enqueue(_text(reply[0]))
        state = _state(reply[2]) if len(reply) > 2 else None
        return Enqueued(job_id, outcome, state)

    def new_job_ids(self, n: int) -> list[str]:
        """``n`` JOB ids minted on the server's clock, in order: what a producer that may
        retry mints before its first :meth:`enqueue_many` (see ``job_ids`` there)."""
        whole("n", n, 0, 10_000_000)
        clock = server_clock(self.client)
        return [clock.mint(self.client) for _ in range(n)]

    def enqueue_many(
        self, payloads: Sequence[str | bytes], *, delay_ms: int = 0, job_ids: Sequence[str] | None = None
    ) -> list[str]:
        """Enqueue several jobs, one script call per 1000; returns their ids in order.

        Every argument is checked first: a payload that is not UTF-8 text of at most 1 MiB,
        or a bad ``job_ids``, refuses the whole call before anything is written.

        ``job_ids`` (one per payload, distinct; mint them with :meth:`new_job_ids`) makes the
        call safe to retry: every id given is remembered for ``keep_given_ms`` after it first
        arrived, and an id the queue knows -- that record, a live row, or one of the newest
        ``keep_done`` completions -- is skipped, so calling again with the same ids within
        that time adds only what the first call did not, however many of its jobs completed
        meanwhile, and returns the same ids. Without it, the ids are minted here and a
        retry adds new jobs."""
        check("delay_ms", delay_ms)
        if isinstance(payloads, str | bytes) or not isinstance(payloads, Sequence):
            raise InvalidArgument(f"enqueue_many takes a list of payloads, got {type(payloads).__name__}")
        texts = [limits.payload(p) for p in payloads]
        if job_ids is None:
            ids, keep_given = [self.new_job_id() for _ in texts], 0
        else:
            ids, keep_given = self._given_ids(job_ids, len(texts)), self.keep_given_ms
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            args: list[Any] = [delay_ms, keep_given]
            for job_id, text in zip(chunk, texts[start : start + BATCH], strict=True):
                args += [job_id, text]
            self._run("enqueue_many", self.script_keys("enqueue_many", *chunk), args)
        return ids

    def _given_ids(self, job_ids: Sequence[str], n: int) -> list[str]:
        """A producer's ids, checked before any write: JOB ids, one per payload, distinct,
        none minted too far ahead of the server's clock (which the script would refuse in a
        later batch of 1000 after an earlier one was written)."""
        if isinstance(job_ids, str | bytes) or not isinstance(job_ids, Sequence):
            raise InvalidArgument(f"job_ids must be a list of JOB ids, got {type(job_ids).__name__}")
        ids = [check_job_id(job_id) for job_id in job_ids]
        if len(ids) != n:
            raise InvalidArgument(f"job_ids must give one id per payload: {len(ids)} ids for {n} payloads")
        if len(set(ids)) != len(ids):
            twice = next(job_id for job_id in ids if ids.count(job_id) > 1)
            raise InvalidArgument(f"job_ids must be distinct: {twice} is given twice")
        if ids:
            now = server_clock(self.client).now_ms(self.client)
            ahead = max(ids, key=minted_ms)
            if minted_ms(ahead) > now + limits.CLOCK_AHEAD_MS:
                raise ClockSkew(
                    f"{ahead} was minted {minted_ms(ahead) - now} ms ahead of the server's clock (at most "
                    f"{limits.CLOCK_AHEAD_MS} ms); mint ids with Queue.new_job_ids"
                )
        return ids

    def claim(self, lease_ms: int = DEFAULT_LEASE_MS) -> Claim | None:
        """Take the oldest pending job into the active set under a lease; None if none."""
        claims = self.claim_many(1, lease_ms)
        return claims[0] if claims else None

    def claim_many(self, count: int, lease_ms: int = DEFAULT_LEASE_MS) -> list[Claim]:
        """Claim up to ``count`` jobs in one call, each under its own lease and token."""
        check("lease_ms", lease_ms)
        check("count", count)
        reply = self._run("claim", self.script_keys("claim"), [lease_ms, count, self.keep_dead])
        return _claims(reply)

    def complete(self, claim: Claim | str, token: int | None = None) -> Complete:
        """Complete a job you hold: the Claim, or a job id with its fencing ``token``.
        Refused (STALE) if your lease was lost; GONE if no row."""
        job_id, token = _holder(claim, token)
        reply = self._run("complete", self.script_keys("complete", job_id), [job_id, token, self.keep_done])
        return Complete(_text(reply[0]))

    def complete_many(self, claims: Sequence[Claim]) -> list[Complete]:
        """Complete held jobs, each fenced by its own token: one script call per 1000.

        The completions are independent: one stale claim is refused on its own and does
        not hold back the others. The outcomes come back in the order of ``claims``.
        """
        return self.complete_many_and_claim(claims, count=0)[0]

    def complete_many_and_claim(
        self,
        claims: Sequence[Claim],
        *,
        count: int,
        lease_ms: int = DEFAULT_LEASE_MS,
        confirm: bool = False,
        started: Sequence[Claim] = (),
    ) -> tuple[list[Complete], list[Claim]]:
        """Complete held jobs (each fenced by its own token) and claim up to ``count`` more,
        in one script call (``complete_many.lua``) per 1000 jobs: a busy worker's round trip.
        Returns the outcomes in the order of ``claims``, and the new claims.

        With ``confirm``, the new claims count as unstarted until a later call names them in
        ``started`` (held jobs whose handler started, each fenced by its token): a claim
        whose reply was lost then stalls without spending its stall budget or its try (see
        ``lua/stalled_check.lua``). Without it, a claim counts as started at once."""
        _only_claims(claims, "complete_many")
        _only_claims(started, "complete_many")
        check("lease_ms", lease_ms)
        whole("count", count, 0, BATCH)  # 0: complete and claim nothing
        if len(started) > BATCH:
            raise InvalidArgument(f"started takes at most {BATCH} claims per call, got {len(started)}")
        outcomes: list[Complete] = []
        fresh: list[Claim] = []
        chunks = [claims[start : start + BATCH] for start in range(0, len(claims), BATCH)] or [[]]
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            keys, args = self._complete_many_call(
                chunk, count if last else 0, lease_ms, confirm=confirm, started=started if last else ()
            )
            done, claimed = self._complete_many_reply(self._run("complete_many", keys, args))
            outcomes += done
            fresh += claimed
        return outcomes, fresh

    def _complete_many_call(
        self,
        claims: Sequence[Claim],
        count: int,
        lease_ms: int,
        *,
        confirm: bool = False,
        started: Sequence[Claim] = (),
    ) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of one complete_many.lua call: ``claims`` and ``started`` (at
        most BATCH each, checked with _only_claims) and ``count`` and ``lease_ms`` checked by
        the caller."""
        rows = self.keys.prefix + "job:"  # + an id _only_claims checked
        args: list[Any] = [self.keep_done, lease_ms, count, self.keep_dead, 1 if confirm else 0, len(started)]
        for held in started:
            args += (held.job_id, held.token)
        for held in claims:
            args += (held.job_id, held.token)
        return (
            self.script_keys("complete_many") + [rows + h.job_id for h in started] + [rows + h.job_id for h in claims],
            args,
        )

    @staticmethod
    def _complete_many_reply(reply: list[Any]) -> tuple[list[Complete], list[Claim]]:
        done, claimed = reply
        return [_COMPLETES.get(x) or Complete(_text(x)) for x in done], _claims(claimed)

    def complete_and_claim(
        self, claim: Claim | str, token: int | None = None, *, lease_ms: int = DEFAULT_LEASE_MS, count: int = 1
    ) -> tuple[Complete, list[Claim]]:
        """Complete one job and claim up to ``count`` more in ONE round trip."""
        job_id, token = _holder(claim, token)
        held = Claim(job_id, "", token, 1, 0)
        outcomes, claims = self.complete_many_and_claim([held], count=count, lease_ms=lease_ms)
        return outcomes[0], claims

    def retry(
        self,
        claim: Claim | str,
        token: int | None = None,
        *,
        error: str = "",
        backoff_ms: int = 0,
        max_attempts: int = 3,
    ) -> RetryResult:
        """Give a failed job back: pending now, scheduled after ``backoff_ms``, or dead once
        the row's attempts (its tries) reached ``max_attempts``. Fenced by the claim's token.
        ``error`` is kept on the row, cut to 4096 bytes of UTF-8 if longer."""
        job_id, token = _holder(claim, token)
        if not isinstance(error, str):
            raise InvalidArgument(f"error must be str, got {type(error).__name__}")
        error = limits.text("error", error, shorten=True)
        check("delay_ms", backoff_ms, "backoff_ms")
        check("max_attempts", max_attempts)
        reply = self._run(
            "retry",
            self.script_keys("retry", job_id),
            [job_id, token, error, backoff_ms, max_attempts, self.keep_dead],
        )
        outcome = Retry(_text(reply[0]))
        if outcome in (Retry.RETRIED, Retry.SCHEDULED, Retry.DEAD):
            return RetryResult(outcome, int(reply[1]), int(reply[2]) if len(reply) > 2 else None)
        return RetryResult(outcome)

    def extend(self, claim: Claim | str, token: int | None = None, *, lease_ms: int = DEFAULT_LEASE_MS) -> Extend:
        """Push your lease to server now + ``lease_ms``; refused if you no longer hold it.
        Takes the Claim, or a job id with its fencing ``token``."""
        job_id, token = _holder(claim, token)
        check("lease_ms", lease_ms)
        reply = self._run("extend", self.script_keys("extend", job_id), [job_id, token, lease_ms])
        return Extend(_text(reply[0]))

    def extend_many(
        self, claims: Sequence[Claim], *, lease_ms: int = DEFAULT_LEASE_MS
    ) -> tuple[int | None, list[Extend]]:
        """Extend the leases of held jobs, each fenced by its own token: one script call
        (``extend_many.lua``) per 1000. Returns the new deadline (server ms; None when
        ``claims`` is empty) and one outcome per claim, in order: a refused one is refused on
        its own and the others are extended."""
        _only_claims(claims, "extend_many")
        check("lease_ms", lease_ms)
        deadline: int | None = None
        outcomes: list[Extend] = []
        for start in range(0, len(claims), BATCH):
            chunk = claims[start : start + BATCH]
            args: list[Any] = [lease_ms]
            for held in chunk:
                args += [held.job_id, held.token]
            new_deadline, done = self._run(
                "extend_many", self.script_keys("extend_many", *(h.job_id for h in chunk)), args
            )
            deadline = int(new_deadline)
            outcomes += [Extend(_text(x)) for x in done]
        return deadline, outcomes

    def release_many(self, claims: Sequence[Claim]) -> list[Release]:
        """Give held jobs back to pending before they were started, each fenced by its own
        token (``release_many.lua``, one call per 1000): what a stopping worker does with
        the jobs it prefetched. Each gets its try back (the row's attempts goes down by one;
        its token stays). One outcome per claim, in order."""
        _only_claims(claims, "release_many")
        outcomes: list[Release] = []
        for start in range(0, len(claims), BATCH):
            chunk = claims[start : start + BATCH]
            args: list[Any] = []
            for held in chunk:
                args += [held.job_id, held.token]
            done = self._run("release_many", self.script_keys("release_many", *(h.job_id for h in chunk)), args)
            outcomes += [Release(_text(x)) for x in done]
        return outcomes

    def stalled_check_locked(
        self, max_stalled: int = DEFAULT_MAX_STALLED, *, every_ms: int, holder: str = "", limit: int = 100
    ) -> StalledReport | None:
        """The stalled check, at most once per ``every_ms`` across every caller of this queue.

        The caller that sets ``emq:{q}:stalled_lock`` (``SET NX PX every_ms``) runs
        :meth:`stalled_check`; the others get None until the lock expires. So a fleet of
        workers on the same beat runs one check per beat between them, not one each (BullMQ's
        stalled-check key). ``holder`` is written into the lock (who ran the check).

        A lock found lasting longer than ``every_ms`` -- set by a caller with a longer
        window, or with no expiry at all (by hand, or a foreign client) -- is cut down to
        ``every_ms`` (``PEXPIRE LT``): how long the checks pause never depends on the
        slowest caller, and a lock always expires."""
        whole("every_ms", every_ms, 1, LOCK_MAX_MS, unit="of milliseconds")
        check("max_stalled", max_stalled)
        check("limit", limit)
        key = self.keys.stalled_lock
        with translating(self.client, "Queue.stalled_check_locked (SET NX PX)", [key]):
            if not self.client.set(key, holder[:64] or "1", nx=True, px=every_ms):
                self.client.pexpire(key, every_ms, lt=True)  # no expiry counts as the longest
                return None
        return self.stalled_check(max_stalled, limit)

    def wait_for_work(self, timeout_ms: int, *, halt: str | None = None) -> bool:
        """Block until a script that fills pending pushes a wake, or ``timeout_ms``
        passes: True when a wake came. A wake is a hint (another worker may have taken
        the job first); claim to find out. Uses a connection of its own from the pool.

        With ``halt`` (a run token, see :meth:`halt_wait`) the wait also ends, returning
        False, as soon as :meth:`halt_wait` pushes to ``emq:{q}:halt:<halt>``: that is how
        a Worker's ``stop()`` ends its idle wait at once."""
        whole("timeout_ms", timeout_ms, 1, 3_600_000, unit="of milliseconds")
        keys = self._wait_keys(halt)
        with translating(self.client, "Queue.wait_for_work (BLPOP)", keys):
            try:
                popped = self.client.blpop(keys, timeout=self._wait_s(timeout_ms))
            except redis.TimeoutError:
                return False
        return self._woken(popped)

    def _wait_keys(self, halt: str | None) -> list[str]:
        # The halt key first: BLPOP pops from the first key that holds something, and a halt
        # left beside a wake must not wait for the next wait (the wake stays for a claim).
        return [self.keys.wake] if halt is None else [self.keys.halt(halt), self.keys.wake]

    def _wait_s(self, timeout_ms: int) -> float:
        """BLPOP's timeout for a wait of ``timeout_ms``. The client gives up on a reply after
        its socket timeout (redis-py's default is 5 s): block for half of it at most, and the
        caller simply waits again. Should a loaded server still answer too late, that is "no
        wake yet" too."""
        timeout_s = timeout_ms / 1000
        socket_timeout = connection_settings(self.client).get("socket_timeout")
        if socket_timeout:
            timeout_s = min(timeout_s, max(0.001, socket_timeout / 2))
        return max(0.001, round(timeout_s, 3))

    def _woken(self, popped: Any) -> bool:
        """Whether what BLPOP popped (None: nothing before the timeout) was a wake."""
        if popped is None:
            return False
        key = popped[0]
        return (key.decode() if isinstance(key, bytes) else key) == self.keys.wake

    def _wait_then_claim(
        self, timeout_ms: int, *, halt: str, count: int, lease_ms: int, confirm: bool
    ) -> tuple[bool, list[Claim]]:
        """:meth:`wait_for_work`, and a claim of up to ``count`` (``complete_many.lua``, no
        completions) written behind it on the same connection: the server runs the claim
        the moment the wait ends, with no round trip between the wake and the claim.
        Whatever ended the wait (a wake, the timeout, a halt), the claim runs: it claims
        what is pending then, as a claim after the wait would. Returns (woken, claims)."""
        keys, wait_s = self._wait_keys(halt), self._wait_s(timeout_ms)
        claim_keys, args = self._complete_many_call([], count, lease_ms, confirm=confirm)
        with translating(self.client, "Queue.wait_for_work (BLPOP) and a claim", keys):
            try:
                popped, reply = scripts.run_behind(
                    self.client,
                    lambda pipe: pipe.blpop(keys, timeout=wait_s),
                    "complete_many",
                    claim_keys,
                    args,
                )
            except redis.TimeoutError:  # a loaded server's late reply, as in wait_for_work
                return False, []  # a claim it made comes back when its lease runs out (unstarted)
        return self._woken(popped), self._complete_many_reply(reply)[1]

    def halt_wait(self, run: str) -> None:
        """End the :meth:`wait_for_work` of the caller that passed ``halt=run`` (now, or as
        soon as it starts waiting). The push expires ``HALT_TTL_MS`` after it was made if
        nobody waits for it, so the key never outlives its use by more than that."""
        key = self.keys.halt(run)
        with translating(self.client, "Queue.halt_wait (LPUSH, PEXPIRE)", [key]):
            # Both commands go in one write on one connection, and the server runs them one
            # after the other: no MULTI, so a user with only @write (no @transaction) may halt.
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(key, "1")
            pipe.pexpire(key, HALT_TTL_MS)
            pipe.execute()

    def waiting(self) -> Waiting:
        """How many jobs are pending and scheduled, how soon the earliest scheduled one is due,
        and how many leases have run out: one atomic read on the server's clock
        (``waiting.lua``)."""
        pending, scheduled, due_in, expired, now = self._run("waiting", self.script_keys("waiting"), [])
        due = None if int(due_in) < 0 else int(due_in)
        return Waiting(int(pending), int(scheduled), due, int(expired), int(now))

    def _reap_batch(self, limit: int) -> tuple[int, list[str], int]:
        check("limit", limit)
        now, moved, corrupt = self._run("reap", self.script_keys("reap"), [limit, self.keep_dead])
        return int(now), [_text(x) for x in moved], int(corrupt)

    def reap_once(self, limit: int = 100) -> tuple[int, list[str]]:
        """One bounded sweep: (server now in ms, ids moved from active back to pending)."""
        now, moved, _corrupt = self._reap_batch(limit)
        return now, moved

    def reap(self, limit: int = 100) -> list[str]:
        """Sweep until no expired lease is left; every moved id, in the order moved."""
        moved: list[str] = []
        while True:
            _now, batch, corrupt = self._reap_batch(limit)
            moved += batch
            if len(batch) + corrupt < limit:
                return moved

    def stalled_check(self, max_stalled: int = DEFAULT_MAX_STALLED, limit: int = 100) -> StalledReport:
        """Sweep expired leases, counting a stall on each job: a job whose count reaches
        ``max_stalled`` is dead-lettered, the others go back to pending. ``max_stalled=N``
        means the N-th stall is fatal (BullMQ's ``maxStalledCount`` is N - 1)."""
        check("max_stalled", max_stalled)
        check("limit", limit)
        recovered: list[str] = []
        dead: list[str] = []
        corrupt = 0
        while True:
            now, rec, died, bad = self._run(
                "stalled_check", self.script_keys("stalled_check"), [max_stalled, limit, self.keep_dead]
            )
            recovered += [_text(x) for x in rec]
            dead += [_text(x) for x in died]
            corrupt += int(bad)
            if len(rec) + len(died) + int(bad) < limit:
                return StalledReport(int(now), recovered, dead, corrupt)

    # -- dead letters ----------------------------------------------------------------------

    def requeue_dead(self, job_ids: Sequence[str]) -> list[Requeue]:
        """Give these dead jobs a fresh chance (``requeue_dead.lua``, one call per 1000): each
        goes back to pending at its own arrival number -- its first-in, first-out place, ahead
        of every job that arrived after it -- with fresh tries (attempts and stalled back to 0;
        its unstarted count, which bounds a job no worker ever starts, is kept) and its token
        kept (a worker that held it before it died is still refused). This is the move lesson
        07 has a learner write. An id whose row says another state is left alone (NOT_DEAD);
        one with no row is GONE. Every id is checked before the first call. One outcome per
        id, in order."""
        return self._dead_move("requeue_dead", Requeue, job_ids)

    def requeue_all_dead(self) -> int:
        """:meth:`requeue_dead` every job in the dead set, 1000 per call, longest dead first;
        how many were requeued. Entries that cannot be requeued (no row) stay."""
        return self._every_dead(self.requeue_dead, Requeue.REQUEUED)

    def purge_dead(self, job_ids: Sequence[str]) -> list[Purge]:
        """Forget these dead jobs for good (``purge_dead.lua``, one call per 1000): each one's
        row, dead-set entry and effects-ledger entry are deleted (PURGED); an entry with no
        row is removed too. An id whose row says another state is left alone (NOT_DEAD).
        Every id is checked before the first call. One outcome per id, in order."""
        return self._dead_move("purge_dead", Purge, job_ids)

    def purge_all_dead(self) -> int:
        """:meth:`purge_dead` every job in the dead set, 1000 per call; how many were purged."""
        return self._every_dead(self.purge_dead, Purge.PURGED)


    def _dead_move(self, name: str, outcome: type[E], job_ids: Sequence[str]) -> list[E]:
        """``name`` (requeue_dead, purge_dead) on every id, every id checked before the first
        call, then one call per BATCH: one outcome per id, in order."""
        ids = self._dead_ids(job_ids, name)
        outcomes: list[E] = []
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            outcomes += [outcome(_text(x)) for x in self._run(name, self.script_keys(name, *chunk), chunk)]
        return outcomes
    def _dead_ids(self, job_ids: Sequence[str], method: str) -> list[str]:
        if isinstance(job_ids, str | bytes) or not isinstance(job_ids, Sequence):
            raise InvalidArgument(f"{method} takes a list of JOB ids, got {type(job_ids).__name__}")
        return [check_job_id(job_id) for job_id in job_ids]

    def _every_dead(self, move: Any, moved: StrEnum) -> int:
        """Run ``move`` over the dead set a page of 1000 at a time. What a call leaves in the
        set (an entry that is no JOB id, a live job's stray entry, for a requeue an entry
        with no row) is stepped over, so every call makes progress, and the loop ends once
        a page comes back empty; a job dead-lettered meanwhile is taken too."""
        done = offset = 0
        stays = {"not_dead", "gone"} if moved is Requeue.REQUEUED else {"not_dead"}
        while True:
            with translating(self.client, "Queue.*_all_dead (ZRANGE)", [self.keys.dead]):
                found = [_text(x) for x in self.client.zrange(self.keys.dead, offset, offset + BATCH - 1)]
            if not found:
                return done
            ids = [job_id for job_id in found if _is_job_id_text(job_id)]
            offset += len(found) - len(ids)
            outcomes = move(ids) if ids else []
            done += sum(outcome is moved for outcome in outcomes)
            offset += sum(outcome.value in stays for outcome in outcomes)

    def dead_letters(self, offset: int = 0, limit: int = 100) -> DeadPage:
        """One page of the dead set, longest dead first: each job's time of death, reason,
        error, tries and payload. ``limit`` is the page size, 1..1000 (``DEAD_PAGE_MAX``);
        pass the page's ``next_offset`` for the next one. A read, not a snapshot: a job
        requeued or evicted between two pages shifts the ones after it."""
        whole("offset", offset, 0)
        whole("limit", limit, 1, DEAD_PAGE_MAX)
        key = self.keys.dead
        with translating(self.client, "Queue.dead_letters (ZRANGE, HMGET)", [key]):
            pipe = self.client.pipeline(transaction=False)
            pipe.zcard(key)
            pipe.zrange(key, offset, offset + limit - 1, withscores=True)
            total, scored = pipe.execute()
            ids = [_text(member) for member, _score in scored]
            named = [job_id for job_id in ids if _is_job_id_text(job_id)]  # an entry that is no JOB id has no row
            pipe = self.client.pipeline(transaction=False)
            for job_id in named:
                # Raw bytes: a row something else wrote may hold bytes that are not UTF-8.
                pipe.execute_command("HMGET", self.keys.job(job_id), *_DEAD_FIELDS, NEVER_DECODE=[])
            rows = dict(zip(named, pipe.execute(), strict=True)) if named else {}
        none = [None] * len(_DEAD_FIELDS)
        letters = [
            _dead_letter(job_id, int(float(score)), rows.get(job_id) or none)
            for job_id, (_member, score) in zip(ids, scored, strict=True)
        ]
        after = offset + len(ids)
        return DeadPage(letters, int(total), after if after < int(total) else None)

    # -- reads ---------------------------------------------------------------------------

    def snapshot(self, limit: int = 1000) -> Snapshot:
        """One atomic read of every set, the counters and the server's now."""
        check("limit", limit)
        reply = self._run("snapshot", self.script_keys("snapshot"), [limit])
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
                _text(rows[i]): Job(
                    job_id=_text(rows[i]),
                    state=_state(rows[i + 1]),
                    attempts=int(rows[i + 2]),
                    stalled=int(rows[i + 3]),
                    payload=None,
                    reason=_text(rows[i + 4]) or None,
                    token=int(rows[i + 5]),
                    unstarted=int(rows[i + 6]),
                )
                for i in range(0, len(rows), 7)
            },
            effects={_text(effects[i]): int(effects[i + 1]) for i in range(0, len(effects), 2)},
        )

    def job(self, job_id: str) -> Job | None:
        """The row of one job, or None if it is completed or unknown (a dead job with no
        row is a corrupt entry: see README, Limits and guarantees)."""
        key = self.keys.job(job_id)
        with translating(self.client, "Queue.job", [key]):
            # Raw bytes: a row something else wrote may hold bytes that are not UTF-8.
            raw = self.client.execute_command("HGETALL", key, NEVER_DECODE=[])
        if not raw:
            return None
        if isinstance(raw, list):  # RESP2 without the dict callback
            raw = dict(zip(raw[::2], raw[1::2], strict=True))
        row = {_lenient(k): v for k, v in raw.items()}

        def field(name: str) -> str | None:
            value = row.get(name)
            return _lenient(value) if value else None

        def number(name: str) -> int:
            value = field(name) or "0"
            return int(value) if value.lstrip("-").isdigit() else 0

        payload: str | bytes | None = row.get("payload")
        if isinstance(payload, bytes):
            try:
                payload = payload.decode("utf-8")
            except UnicodeDecodeError:
                pass  # kept as bytes: see Job
        state = field("state")
        return Job(
            job_id=job_id,
            state=_state(state),
            attempts=number("attempts"),
            stalled=number("stalled"),
            payload=payload,
            error=field("error"),
            reason=field("reason"),
            unstarted=number("unstarted"),
            token=number("token"),
        )

    def keys_in_use(self) -> Iterator[str]:
        pattern = self.keys.pattern()
        with translating(self.client, "Queue.keys_in_use (SCAN)", [pattern]):
            for key in self.client.scan_iter(match=pattern, count=500):
                yield _lenient(key) if isinstance(key, bytes) else key

    def reset(self) -> int:
        """Delete every key of this queue (for starting a lesson afresh); how many went."""
        keys = list(self.keys_in_use())
        with translating(self.client, "Queue.reset (DEL)", [self.keys.pattern()]):
            for start in range(0, len(keys), 500):
                self.client.delete(*keys[start : start + 500])
        return len(keys)


_DEAD_FIELDS = ("state", "reason", "error", "attempts", "stalled", "payload")


def _dead_letter(job_id: str, died_ms: int, row: list[Any]) -> DeadLetter:
    state, reason, error, attempts, stalled, payload = row
    if state is None and payload is None:
        return DeadLetter(job_id, died_ms, None, None, 0, 0, None)

    def number(value: Any) -> int:
        text = _lenient(value) if isinstance(value, bytes) else ""
        return int(text) if text.isdigit() else 0

    if isinstance(payload, bytes):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError:
            pass  # kept as bytes, as Queue.job keeps them
    return DeadLetter(
        job_id,
        died_ms,
        _lenient(reason) if reason else None,
        _lenient(error) if error else None,
        number(attempts),
        number(stalled),
        payload,
    )


def _holder(claim: Claim | str, token: int | None) -> tuple[str, int]:
    if isinstance(claim, Claim):
        job_id, token = claim.job_id, claim.token if token is None else token
    elif token is None:
        raise InvalidArgument("pass the Claim, or a job id together with its fencing token (token=...)")
    else:
        job_id = claim
    return check_job_id(job_id), check("token", token)


_TOKEN_LOW, _TOKEN_HIGH = BOUNDS["token"]
_is_job_id_text = JOB_ID_RE.fullmatch
# Outcomes as a decoding client (str) or a plain one (bytes) reads them.
_COMPLETES: dict[str | bytes, Complete] = {c.value: c for c in Complete} | {c.value.encode(): c for c in Complete}


def _only_claims(claims: Sequence[Claim], method: str) -> None:
    """Every item a Claim with a JOB id and a token in range: checked before any call.

    The usual case costs two type tests, a match and a comparison per claim (a busy
    Worker sends every job through here); anything else goes through the checks that
    say what is wrong."""
    for held in claims:
        if not isinstance(held, Claim):
            raise InvalidArgument(f"{method} takes the Claims that claim_many returned, got {held!r}")
        job_id, token = held.job_id, held.token
        if type(job_id) is not str or _is_job_id_text(job_id) is None:
            check_job_id(job_id)
        if type(token) is not int or not _TOKEN_LOW <= token <= _TOKEN_HIGH:
            check("token", token)


def _claims(reply: list[Any]) -> list[Claim]:
    # Five values per job: id, payload, token, attempts, deadline (lua/claim.lua).
    if reply and type(reply[0]) is str:  # a decoding client: every text of the reply is str
        return [
            Claim(reply[i], reply[i + 1], int(reply[i + 2]), int(reply[i + 3]), int(reply[i + 4]))
            for i in range(0, len(reply), 5)
        ]
    return [
        Claim(_text(reply[i]), _text(reply[i + 1]), int(reply[i + 2]), int(reply[i + 3]), int(reply[i + 4]))
        for i in range(0, len(reply), 5)
    ]
