"""Differential judging: the learner's move and the reference move, run on identical states,
compared on every key the queue owns.

A named misconception catches a mistake somebody foresaw; this catches the rest. For a move
(a Lua script the exercise asks for) the judge builds the same generated state in two
queues of the same shape on the same server -- one for the learner's move, one for the
reference's -- runs each move there, and compares afterwards every key under each queue's
prefix: which keys exist, their type, every member and score of a sorted set, every field
of a row, every TTL, and the move's reply where the contract defines one. The first
difference found is the feedback line, so that line is true by construction: it names the
key, the field or member, both values, and what that part of the queue is for.

The states are generated from a fixed seed (the same answer always meets the same states
in the same order): several jobs in every place a job can be, prior attempts and stall
counts, expired and live leases (some with their deadline exactly on the server's now, or
1 ms after it), dead and done jobs, JOB ids at the edges of their
alphabet, and queue names that contain the sets' own words (``pending-orders``), which a
row key built by substitution gets wrong. A failing state is then shrunk (jobs removed,
counts lowered, while the difference stays) so the line is about the smallest state that
shows it.

Tolerance: none. Both moves read one fixed server time (:mod:`.fixed_time`: ``TIME``
answers the same to each, and the states are built around it), so a value the reference
derives from its clock (a lease deadline, a time of death or of completion) must be the
same millisecond in the learner's keys: microseconds divided by 999 or 1001, a clock
truncated to whole seconds, or a clock read on the client is off, and shown by how much.
(Only a fraction of a millisecond left unrounded passes: no reader compares finer.)

A field of a row that neither the state before nor the reference's move has (a learner's
own ``claimed_ms``) is allowed, and so are a row's free-text fields (``reason``, ``error``)
and a ``stats`` hash of counters: nothing in the exercises' contract reads them. A row's
count (``token``, ``attempts``, ``stalled``, ``unstarted``) deleted equals that count at 0:
every reader of the library takes a missing count as 0 (:data:`ZERO_WHEN_MISSING`).
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis

from ... import scripts
from ...errors import PermissionDenied
from ...queue import Queue, _text
from .. import evidence, learner
from . import fixed_time

__all__ = ["Job", "Move", "State", "Trial", "Verdict", "compare", "crash_harm", "judge", "states"]

SEED = 19  # every check generates the same states, in the same order
TRIALS = 40  # generated states per judgement (the fixed edge states come first)
PLACES = ("pending", "active", "scheduled", "dead", "done")
# Queue names that contain the sets' own words: a row key made by substituting a word fails here.
TAILS = ("q", "pending-orders", "active-jobs", "dead-done", "job-pending")
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
EDGE_IDS = ("JOB" + "0" * 26, "JOB" + "Z" * 26, "JOB" + "0" * 25 + "1", "JOB" + "Z" * 25 + "Y")
_names = itertools.count(1)

# What each part of the queue is for: the reason a difference there matters.
WHY = {
    "pending": "a pending job's score is its place in line: claims take the lowest first",
    "active": "an active job's score is its lease deadline on the server's clock, which the reaper judges",
    "scheduled": "a scheduled job's score is the time it becomes due",
    "dead": "a dead job's score is its time of death, by which the dead set is kept bounded",
    "done": "the done set remembers completed ids so that enqueue refuses them again",
    "state": "the row is the truth: reaper, complete, retry and extend act only on a row whose state matches its set",
    "token": "the token is the fencing token: each claim adds one, and complete and extend refuse any other",
    "attempts": "attempts counts the tries toward max_attempts: each claim adds one, a release gives one back",
    "stalled": "the stall count decides when a job that keeps killing workers is dead-lettered",
    "payload": "the payload is the work the job asks for",
    "enqueued_ms": "enqueued_ms records when the job entered the queue",
    "arrival": "arrival is the job's place in line, kept so that a job put back in pending goes back to it",
    "reply": "the reply is what the caller acts on",
}


@dataclass(frozen=True)
class Job:
    id: str
    place: str  # one of PLACES
    attempts: int = 0  # tries counted toward max_attempts
    stalled: int = 0
    expired: bool = False  # for an active job: its lease has run out
    edge: bool = False  # for an active job: its deadline on the server's now (expired) or 1 ms after it
    payload: str = "work"
    token: int = 0  # the fencing token: at least attempts (a release gives a try back, never a token)
    arrival: int = 0  # its arrival number (includes/arrival), kept on its row; 0: a row with none, pending score 0


@dataclass(frozen=True)
class State:
    tail: str
    jobs: tuple[Job, ...]
    params: tuple[tuple[str, int], ...] = ()  # e.g. (('max_stalled', 3),): the move's ARGV inputs
    caller: tuple[str, int] = ("", 0)  # a (job id, token) the move is called for, where it takes one

    def param(self, name: str) -> int:
        return dict(self.params)[name]

    def describe(self) -> str:
        places = [f"{sum(j.place == p for j in self.jobs)} {p}" for p in PLACES if any(j.place == p for j in self.jobs)]
        active = [j for j in self.jobs if j.place == "active"]
        notes = [
            f"{n} {what}"
            for n, what in (
                (sum(j.expired and not j.edge for j in active), "with its lease run out"),
                (sum(j.expired and j.edge for j in active), "with its deadline exactly on the server's now"),
                (sum(j.edge and not j.expired for j in active), "with its deadline 1 ms after the server's now"),
            )
            if n
        ]
        if notes:
            places = [f"{p} ({', '.join(notes)})" if p.endswith(" active") else p for p in places]
        jobs = ", ".join(places) or "no jobs"
        extra = "".join(f", {k} {v}" for k, v in self.params)
        call = f", called for {self.caller[0]} with token {self.caller[1]}" if self.caller[0] else ""
        return f"a queue named like '…{self.tail}' holding {jobs}{extra}{call}"


@dataclass(frozen=True)
class Move:
    """How an exercise's move is called: its KEYS (queue key names, or 'row' for the
    caller's row), its ARGV from the state, how often in a row, and which part of its reply
    the contract fixes (None: the reply is free)."""

    keys: tuple[str, ...]
    argv: Callable[[State], list[Any]]
    calls: int = 1
    reply: Callable[[Any], Any] | None = None
    generate: Callable[[random.Random, int], State] | None = None  # states for this move (default: states())
    # A Python move: called as python(answer, client, queue, state) instead of running a script;
    # the answer is then the learner's function(s), and the reference's come from the solution.
    python: Callable[[Any, Any, Queue, State], Any] | None = None


@dataclass
class Trial:
    """One move run on one queue: what it replied, or its error, and the commands it sent."""

    reply: Any = None
    error: Exception | None = None
    log: list[evidence.Command] = field(default_factory=list)  # the commands it sent, for the feedback's picture
    sent: int = 0


@dataclass
class Verdict:
    difference: str | None  # the first difference, as the feedback line; None: none found
    state: State | None = None
    tried: int = 0
    error: Exception | None = None  # the learner's move raised (its text is in difference)
    refused_key: str | None = None  # an ACL refusal: the key outside the learner's namespace
    seen: evidence.Sides | None = None  # the reads and commands the difference was found in


# -- states ----------------------------------------------------------------------------------------


def _job_id(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return rng.choice(EDGE_IDS)
    return "JOB" + "".join(rng.choice(_ALPHABET) for _ in range(26))


def states(rng: random.Random, size: int, *, places: Sequence[str] = PLACES) -> State:
    """One generated state with up to ``size`` jobs spread over ``places``."""
    jobs: dict[str, Job] = {}
    for _ in range(rng.randint(1, max(1, size))):
        place = rng.choice(places)
        attempts = rng.randint(1, 5) if place in ("active", "dead") else rng.choice((0, 0, 1, 2, 4))
        job = Job(
            id=_job_id(rng),
            place=place,
            attempts=attempts,
            token=attempts + rng.choice((0, 0, 0, 1, 2)),
            stalled=rng.choice((0, 0, 1, 2, 3)),
            expired=place == "active" and rng.random() < 0.5,
            edge=place == "active" and rng.random() < 0.3,
            payload=rng.choice(("work", "", "card-7 2500", "pending", '{"n": 1}')),
        )
        jobs.setdefault(job.id, job)
    return State(tail=rng.choice(TAILS), jobs=tuple(sorted(jobs.values(), key=lambda j: j.id)))


def _build(queue: Queue, state: State, now: int) -> None:
    """Write ``state`` into the empty ``queue``, times relative to the server's ``now``."""
    k = queue.keys
    pipe = queue.client.pipeline(transaction=False)
    for job in state.jobs:
        lease = (0 if job.expired else 1) if job.edge else (-60_000 if job.expired else 600_000)
        score = {
            "pending": job.arrival,
            "active": now + lease,
            "scheduled": now + 300_000,
            "dead": now - 120_000,
            "done": now - 180_000,
        }[job.place]
        pipe.zadd(getattr(k, job.place), {job.id: score})
        if job.place == "done":
            continue  # a completed job has no row
        row = {
            "state": job.place,
            "token": job.token,
            "attempts": job.attempts,
            "stalled": job.stalled,
            "payload": job.payload,
            "enqueued_ms": now - 900_000,
        }
        if job.place == "dead":
            row["reason"] = "stalled"
        if job.arrival:
            row["arrival"] = job.arrival
        pipe.hset(k.prefix + "job:" + job.id, mapping=row)
    pipe.execute()


# -- reading a queue --------------------------------------------------------------------------------


def _number(value: Any) -> Any:
    text = _text(value) if isinstance(value, bytes) else value
    if isinstance(text, str):
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() else number
    return text


# What a move may do beyond the reference without breaking the contract: keep counters of its
# own (a stats hash, as the library's moves do), and write or clear a row's free text (why a
# job died or failed: a person reads it, no move decides by it).
FREE_KEYS = frozenset({"stats"})
FREE_FIELDS = frozenset({"reason", "error"})
# A row's counts that every reader takes as 0 when the field is missing (Queue.job, the snapshot,
# claim's check that token and attempts are counts, HINCRBY, retry's read of attempts, the
# fence, which no claim's token of 1 or more can match): a field deleted equals a field at 0.
ZERO_WHEN_MISSING = frozenset({"token", "attempts", "stalled", "unstarted"})

SCAN_LIMIT = 20_000  # above this many keys on the server (a class's), read the queue's known keys, not a SCAN
SETS = ("pending", "active", "scheduled", "dead", "done")


def known_keys(client: Any, prefix: str, state: State) -> list[str]:
    """The keys a queue can own: its sets and counters, and the row of every id in the state
    or in any of its sets now (without a SCAN of the whole server)."""
    pipe = client.pipeline(transaction=False)
    for name in SETS:
        pipe.zrange(prefix + name, 0, -1)
    ids = {_text(i) for members in pipe.execute() for i in members} | {j.id for j in state.jobs}
    if state.caller[0]:
        ids.add(state.caller[0])
    return [prefix + n for n in (*SETS, "stats", "effects")] + [prefix + "job:" + i for i in sorted(ids)]


def keyspace(client: Any, prefix: str, candidates: list[str] | None = None) -> dict[str, tuple[str, Any, int]]:
    """Every key under ``prefix`` (or of ``candidates``, those that exist): its name after the
    prefix -> (type, value, ttl in ms or -1)."""
    if candidates is None:
        keys = sorted({_text(key) for key in client.scan_iter(match=_glob(prefix) + "*", count=500)})
    else:
        pipe = client.pipeline(transaction=False)
        for key in candidates:
            pipe.exists(key)
        keys = sorted(key for key, there in zip(candidates, pipe.execute(), strict=True) if there)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.pttl(key)
    meta = pipe.execute() if keys else []
    pipe = client.pipeline(transaction=False)
    kinds = []
    for n, key in enumerate(keys):
        kind = _text(meta[2 * n])
        kinds.append(kind)
        if kind == "zset":
            pipe.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            pipe.hgetall(key)
        elif kind == "string":
            pipe.get(key)
        elif kind == "list":
            pipe.lrange(key, 0, -1)
        elif kind == "set":
            pipe.smembers(key)
        else:
            pipe.type(key)
    values = pipe.execute() if keys else []
    out: dict[str, tuple[str, Any, int]] = {}
    for n, key in enumerate(keys):
        kind, raw = kinds[n], values[n]
        if kind == "zset":
            value: Any = {_text(m): _number(s) for m, s in raw}
        elif kind == "hash":
            value = {_text(f): _text(v) for f, v in raw.items()}
        elif kind == "set":
            value = sorted(_text(m) for m in raw)
        elif kind == "list":
            value = [_text(m) for m in raw]
        else:
            value = _text(raw) if raw is not None else None
        ttl = int(meta[2 * n + 1])
        out[key[len(prefix) :]] = (kind, value, -1 if ttl < 0 else ttl)
    return out


def _glob(text: str) -> str:
    return "".join(f"[{c}]" if c in "[]*?\\" else c for c in text)


# -- comparing --------------------------------------------------------------------------------------


class _Clock:
    """The server's time at both moves (the judge's fixed time), to judge and show a value
    derived from TIME."""

    def __init__(self, now: int) -> None:
        self.now = now

    def same(self, learner: Any, reference: Any) -> bool:
        if learner == reference:
            return True
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (learner, reference)):
            return str(learner) == str(reference)
        if reference < 10**12:  # not a time in ms: exact
            return False
        return abs(learner - reference) < 1  # the same millisecond of the one fixed TIME

    def show(self, value: Any) -> str:
        """A value as the learner can read it: a time relative to the server's time at the move."""
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 10**12:
            offset = value - self.now
            if offset == 0:
                return "the server's time at the move"
            sign, size = "+" if offset > 0 else "-", abs(offset)
            if size >= 60_000 and size % 1000 == 0:
                shown = f"{size // 1000:,.0f} s"
            else:
                shown = f"{size:,.0f} ms" if size == int(size) else f"{size:,.1f} ms"
            return f"the server's time at the move {sign} {shown}"
        if isinstance(value, float):
            return f"{value:g}"
        return repr(value) if isinstance(value, str) else str(value)


def _why(part: str) -> str:
    return WHY.get(part, "")


def compare(
    mine: dict[str, tuple[str, Any, int]],
    theirs: dict[str, tuple[str, Any, int]],
    before: dict[str, tuple[str, Any, int]],
    clock: _Clock,
) -> tuple[str, dict[str, Any]] | None:
    """The first difference between the learner's keyspace and the reference's, in plain
    words with where it is, or None. Sets before rows, rows in id order."""

    def order(name: str) -> tuple[int, str]:
        return (0 if ":" not in name else 1, name)

    for name in sorted(set(mine) | set(theirs), key=order):
        key = "emq:{q}:" + name
        part = name.split(":")[0]
        here = {"key": name}
        if name not in mine:
            kind, value, _ = theirs[name]
            return (
                f"after your move {key} does not exist; the reference move leaves it holding "
                f"{_summary(kind, value, clock)}. {_why(part).capitalize()}.".replace(". .", "."),
                here,
            )
        if name not in theirs and name in FREE_KEYS and name not in before:
            continue  # counters of the learner's own: nothing in the exercise's contract reads them
        if name not in theirs:
            kind, value, _ = mine[name]
            was = (
                "was there before and the reference move deletes it"
                if name in before
                else ("the reference move writes no such key")
            )
            return f"after your move {key} holds {_summary(kind, value, clock)}; {was}.", here
        (kind_m, value_m, ttl_m), (kind_t, value_t, ttl_t) = mine[name], theirs[name]
        if kind_m != kind_t:
            return f"after your move {key} is a {kind_m}; the reference move leaves a {kind_t}.", here
        if kind_m == "zset":
            found = _zset_difference(key, part, value_m, value_t, clock)
        elif kind_m == "hash":
            found = _hash_difference(key, value_m, value_t, before.get(name, ("hash", {}, -1))[1], clock)
        elif value_m != value_t:
            found = (f"after your move {key} holds {value_m!r}; the reference move leaves {value_t!r}.", {})
        else:
            found = None
        if found is not None:
            return found[0], {**here, **found[1]}
        if (ttl_m < 0) != (ttl_t < 0) or abs(ttl_m - ttl_t) > 1000:

            def ttl(t: int) -> str:
                return "no expiry" if t < 0 else f"an expiry in about {t / 1000:,.0f} s"

            return f"after your move {key} has {ttl(ttl_m)}; the reference move leaves it with {ttl(ttl_t)}.", {
                **here,
                "ttl": (ttl_m, ttl_t),
            }
    return None


def _summary(kind: str, value: Any, clock: _Clock) -> str:
    if kind == "zset":
        items = list(value.items())[:2]
        shown = ", ".join(f"{m} (score {clock.show(s)})" for m, s in items)
        more = f" and {len(value) - 2} more" if len(value) > 2 else ""
        return f"{len(value)} member(s): {shown}{more}"
    if kind == "hash":
        return "the fields " + ", ".join(f"{f}={v!r}" for f, v in sorted(value.items()))
    return f"a {kind}"


def _zset_difference(key: str, part: str, mine: dict, theirs: dict, clock: _Clock):
    why = _why(part)
    why = f" ({why})" if why else ""
    for member in sorted(set(mine) | set(theirs)):
        if member not in mine:
            score = clock.show(theirs[member])
            return (
                f"after your move {member} is not in {key}; the reference move leaves it there with score {score}.",
                {"member": member, "values": (None, theirs[member])},
            )
        if member not in theirs:
            score = clock.show(mine[member])
            return (
                f"after your move {member} is in {key} with score {score}; the reference move does not put it there.",
                {"member": member, "values": (mine[member], None)},
            )
        if not clock.same(mine[member], theirs[member]):
            return (
                f"after your move {key} scores {member} at {clock.show(mine[member])}; the reference "
                f"move scores it {clock.show(theirs[member])}{why}.",
                {"member": member, "values": (mine[member], theirs[member])},
            )
    return None


def _hash_difference(key: str, mine: dict, theirs: dict, before: dict, clock: _Clock):
    for name in sorted(set(mine) | set(theirs)):
        why = _why(name)
        why = f": {why}" if why else ""
        if name in FREE_FIELDS or (name not in theirs and name not in before):
            continue  # a field of the learner's own: nothing in the contract reads it
        if name in ZERO_WHEN_MISSING and _number(mine.get(name, 0)) == _number(theirs.get(name, 0)) == 0:
            continue  # missing on one side, 0 on the other: the same count to every reader
        if name not in mine:
            return (
                f"after your move {key} has no field {name}; the reference move leaves it "
                f"{clock.show(_number(theirs[name]))}{why}.",
                {"field": name, "values": (None, theirs[name])},
            )
        if name not in theirs:
            return (
                f"after your move {key} still has field {name} = {clock.show(_number(mine[name]))}; "
                f"the reference move removes it{why}.",
                {"field": name, "values": (mine[name], None)},
            )
        if not clock.same(_number(mine[name]), _number(theirs[name])):
            kept = before.get(name) == theirs[name]
            return (
                f"after your move {key} field {name} is {clock.show(_number(mine[name]))}; the "
                f"reference move {'keeps it at' if kept else 'makes it'} "
                f"{clock.show(_number(theirs[name]))}{why}.",
                {"field": name, "values": (mine[name], theirs[name])},
            )
    return None


# -- running ----------------------------------------------------------------------------------------


class Judge:
    """Runs both moves on generated states in two scratch queues of one run."""

    def __init__(self, client: Any, move: Move, learner_source: str, reference_source: str, lesson: str) -> None:
        self.client, self.move = client, move
        self.sources = (learner_source, reference_source)
        self.lesson = lesson
        self._made: list[Queue] = []
        self._base: dict[str, str] = {}  # queue name -> the unique part of it, which no other queue has
        # On a small server every key under a queue's prefix is read (SCAN), and keys written
        # outside it are found; on a class's server a SCAN per trial would cost seconds, so the
        # queue's known keys are read (a key written elsewhere still shows as the one missing).
        self.scan = int(client.dbsize()) <= SCAN_LIMIT
        self._state: State | None = None
        self.trace = False  # log each move's commands (evidence.traced): for the run whose difference is shown

    def _queue(self, side: str, tail: str) -> Queue:
        base = f"d{self.lesson}-{os.getpid() % 100_000}-{next(_names)}{side}"
        queue = Queue(learner.queue_name(f"{base}-{tail}"[:64]), self.client)
        self._made.append(queue)
        self._base[queue.name] = base
        return queue

    def _keys(self, queue: Queue) -> list[str] | None:
        return None if self.scan or self._state is None else known_keys(self.client, queue.keys.prefix, self._state)

    def cleanup(self) -> None:
        for queue in self._made:
            try:
                if self.scan:
                    queue.reset()
                    for key in _strays(self.client, queue, self._base.get(queue.name, queue.name)):
                        self.client.delete(key)
                else:
                    for key in self._keys(queue) or []:
                        self.client.delete(key)
            except Exception:  # cleaning up must never hide the verdict
                pass
        self._made.clear()

    def sweep(self) -> None:
        """Once the judgement is over, on a server too big to SCAN on every trial: one SCAN
        for what a move wrote under this judge's queue names that no known key covers (a
        row key with its prefix cut short), so a wrong answer leaves nothing behind."""
        if self.scan:
            return
        mine = learner.queue_name(f"d{self.lesson}-{os.getpid() % 100_000}-")
        try:
            for key in self.client.scan_iter(match=f"*{mine}*", count=1_000):
                self.client.delete(key)
        except Exception:  # cleaning up must never hide the verdict
            pass

    def _run(self, source: str, queue: Queue, state: State) -> Trial:
        k = queue.keys
        keys = [k.prefix + "job:" + state.caller[0] if name == "row" else getattr(k, name) for name in self.move.keys]
        trial = Trial()
        replies = []
        try:
            for _ in range(self.move.calls):
                if self.move.python is not None:
                    client = fixed_time.Client(self.client)
                    client = evidence.Tracing(client, trial.log) if self.trace else client
                    replies.append(self.move.python(source, client, queue, state))
                else:
                    replies.append(self._script(fixed_time.lua(source), keys, self.move.argv(state), trial))
        except (redis.ResponseError, PermissionDenied) as exc:
            trial.error = exc
        except Exception as exc:  # a Python move's own error is the learner's code failing
            if self.move.python is None:
                raise
            trial.error = exc
        trial.reply = [_normal(r) for r in replies]
        return trial

    def _script(self, source: str, keys: list[str], argv: list[Any], trial: Trial) -> Any:
        """Run a Lua move, its commands logged into ``trial`` (:func:`evidence.traced`)."""
        text = evidence.traced(source) if self.trace else None
        if text is not None:
            try:
                raw = scripts.run_text(self.client, text, keys, argv, name="your move")
                reply, commands, sent = evidence.untraced(raw)
            except redis.ResponseError as exc:
                if "Error compiling script" not in str(exc):
                    raise
            else:
                trial.log += commands
                trial.sent += sent
                return reply
        return scripts.run_text(self.client, source, keys, argv, name="your move")  # it did not compile: its own words

    def differ(self, state: State) -> Verdict:
        """Both moves on ``state``; the first difference (or the learner's error)."""
        mine_q, theirs_q = self._queue("a", state.tail), self._queue("b", state.tail)
        self._state = state
        try:
            now = fixed_time.NOW_MS  # the time both moves read from TIME
            _build(mine_q, state, now)
            _build(theirs_q, state, now)
            before = keyspace(self.client, theirs_q.keys.prefix, self._keys(theirs_q))
            mine = self._run(self.sources[0], mine_q, state)
            if mine.error is not None:
                refused = _refused_key(mine.error)
                return Verdict(
                    f"your move failed: {_first_line(mine.error)}", state, error=mine.error, refused_key=refused
                )
            theirs = self._run(self.sources[1], theirs_q, state)
            if theirs.error is not None:
                raise RuntimeError(f"the reference move failed (not your code): {theirs.error}")
            clock = _Clock(now)
            base = self._base[mine_q.name]
            stray = _strays(self.client, mine_q, base) if self.scan else []
            mine_keys = keyspace(self.client, mine_q.keys.prefix, self._keys(mine_q))
            theirs_keys = keyspace(self.client, theirs_q.keys.prefix, self._keys(theirs_q))

            def shown(key: str) -> str:
                head = mine_q.name.rsplit(base, 1)[0] + base + "-"
                return key.replace(mine_q.keys.prefix, "emq:{q}:").replace(head, "…")

            seen = evidence.Sides(
                state.describe(), before, mine_keys, theirs_keys, {}, (mine_q.keys.prefix, theirs_q.keys.prefix),
                {shown(_text(k)): evidence.read_key(self.client, _text(k)) for k in stray[:3]},
                mine.log, theirs.log, (mine.sent, theirs.sent), state.caller[0], shown,
                now=now,
            )  # fmt: skip
            if stray:
                seen.where = {"stray": shown(_text(stray[0]))}
                return Verdict(
                    f"your move wrote {seen.where['stray']}, a key outside the queue's emq:{{q}}: keys; the reference "
                    "move writes only keys of its own queue",
                    state,
                    seen=seen,
                )
            found = compare(mine_keys, theirs_keys, before, clock)
            if found is None and self.move.reply is not None:
                got = [self.move.reply(r) for r in mine.reply]
                want = [self.move.reply(r) for r in theirs.reply]
                if not _same_reply(got, want, clock):
                    n = next(
                        i for i, (g, w) in enumerate(zip(got, want, strict=True)) if not _same_reply([g], [w], clock)
                    )
                    call = f" to call {n + 1}" if self.move.calls > 1 else ""
                    # Shown as each move replied (the contract may judge only part of a reply, or its kind).
                    said, meant = mine.reply[n], theirs.reply[n]
                    seen.where = {"reply": (said, meant)}
                    return Verdict(
                        f"your move replied {_show_reply(said, clock)}{call}; the reference move replies "
                        f"{_show_reply(meant, clock)}: the reply is what the caller acts on",
                        state,
                        seen=seen,
                    )
            if found is None:
                return Verdict(None, state)
            line, seen.where = found
            return Verdict(line.rstrip("."), state, seen=seen)
        finally:
            self.cleanup()


class Crashed(Exception):
    """Raised by :class:`CrashAfter` in place of the write the crash came before."""


# What a Python move writes through: each call of these is one write a crash can come before.
WRITE_CALLS = frozenset({"zadd", "zrem", "hset", "hdel", "hincrby", "delete", "set", "zincrby", "hmset"})
_SPLIT_WRITES = frozenset("DEL" if w == "delete" else w.upper() for w in WRITE_CALLS)  # as a command log shows them


class CrashAfter:
    """A client that lets ``writes`` writes through and then 'crashes' (raises :class:`Crashed`)
    instead of the next one: a worker process killed between two of a move's writes."""

    def __init__(self, client: Any, writes: int) -> None:
        self._client, self._left = client, writes

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._client, name)
        if name not in WRITE_CALLS or not callable(found):
            return found

        def write(*args: Any, **kwargs: Any) -> Any:
            if self._left <= 0:
                raise Crashed(name)
            self._left -= 1
            return found(*args, **kwargs)

        return write


def crash_harm(
    client: Any,
    move: Move,
    learner: Any,
    reference: Any,
    lesson: str,
    *,
    trials: int = 6,
    most: int = 6,
    seen: list[evidence.Sides] | None = None,
) -> tuple[int, State, str] | None:
    """A Python move killed after its k-th write (k = 1, 2, ... until it runs whole), on the
    first ``trials`` generated states, judged by what a crash must not do -- not by whether
    its writes leave what the reference's would:

    * lose a job: a job of the queue left in none of pending, active, scheduled and dead,
      where no claim and no sweep will ever find it;
    * leave one that nobody can run: a job in pending (or in active) whose row says another
      state while the set of that state does not hold it, which a claim takes out of pending
      (reap.lua out of active, its lease run out) and dead-letters as corrupt
      (includes/rows.lua), so it never runs;
    * leave what the move itself, run again whole (the crashed worker restarted, sweeping
      again), does not bring to where the reference's whole move leaves the queue: a job run
      twice or left stuck shows there.

    Returns the first (k, state, what the crash left and why it hurts), or None. A crash
    between two separate commands is what a two-step move is exposed to; a MULTI/EXEC (a
    pipeline) is one command, never split. The crashed run's reads and commands go to
    ``seen``, when given (the feedback's picture)."""
    assert move.python is not None
    inner = move.python

    def pair(state: State, k: int, again: bool, trace: bool = False) -> tuple[Verdict, bool]:
        ran_whole = [True]

        def run(answer: Any, c: Any, q: Queue, st: State) -> None:
            if answer is not learner:
                inner(answer, c, q, st)
                return
            try:
                inner(answer, CrashAfter(c, k), q, st)
            except Crashed:
                ran_whole[0] = False
            if again:
                inner(answer, c, q, st)

        judge = Judge(client, replace(move, python=run, reply=None), learner, reference, lesson)
        judge.trace = trace
        return judge.differ(state), ran_whole[0]

    for state in generated(move, trials=trials)[1:]:
        for k in range(1, most + 1):
            crashed, whole = pair(state, k, again=False)
            if crashed.error is not None:
                break  # the learner's own error: the contract step said it
            harm = _harm(state, crashed.seen) if crashed.seen is not None else None
            again = False
            if harm is None:
                restarted, _whole = pair(state, k, again=True)
                if restarted.difference is not None and restarted.error is None:
                    again = True
                    harm = (
                        "and your reaper, run again whole on what the crash left (a restarted worker sweeps "
                        f"again), then left the queue other than the reference's whole move: {restarted.difference}",
                        None,
                    )
            if harm is not None:
                text, where = harm
                traced, _whole = pair(state, k, again=again, trace=True)
                last = traced.seen
                if last is not None:
                    writes = [c for c in last.mine_commands if c.args and c.args[0] in _SPLIT_WRITES][:k]
                    if len(writes) == k:
                        shown = " ".join(
                            "emq:{q}:" + last.name_of(a) if a.startswith(last.prefixes[0]) else a
                            for a in writes[-1].args
                        )
                        text = f"{shown}: {text}"
                    if where is not None:
                        last.where = where
                    then = ", then run again whole" if again else ""
                    last.titles = (f"your move, killed after its write {k}{then}", "the reference, run whole")
                    if seen is not None:
                        seen.append(last)
                return k, state, text
            if whole:
                break  # it ran to its end: no later write to crash before
    return None


def _harm(state: State, seen: evidence.Sides) -> tuple[str, dict[str, Any]] | None:
    """What a crash left that must not be, read from the learner's queue after it (``seen.mine``):
    a job lost (in no set a claim or a sweep reads), or a job in pending or active whose row
    names another set that does not hold it (a claim, or reap.lua, dead-letters it as corrupt)."""
    mine = seen.mine
    members = {p: set(mine.get(p, ("zset", {}, -1))[1] or {}) for p in SETS}
    for job in state.jobs:
        if job.place == "done":
            continue
        places = [p for p in ("pending", "active", "scheduled", "dead") if job.id in members[p]]
        if not places and job.id not in members["done"]:
            return (
                f"left {job.id} in no set at all: no sweep finds it (it is not in emq:{{q}}:active) and no claim "
                "does (it is not in emq:{q}:pending), so the job is lost",
                {"key": "pending", "member": job.id},
            )
        row = mine.get("job:" + job.id)
        state_now = row[1].get("state") if row is not None and row[0] == "hash" else None
        home = state_now if state_now in ("pending", "active", "scheduled", "dead") else None
        if "pending" in places and state_now != "pending" and (home is None or home not in places):
            return (
                f"left {job.id} in emq:{{q}}:pending while its row emq:{{q}}:job:{job.id} said state "
                f"{state_now!r} and no other set held it: a claim takes it out of pending, finds the row "
                "disagreeing, and dead-letters it as corrupt, so nobody ever runs it",
                {"key": "job:" + job.id, "field": "state"},
            )
        if "active" in places and state_now != "active" and (home is None or home not in places):
            return (
                f"left {job.id} in emq:{{q}}:active, its lease run out, while its row emq:{{q}}:job:{job.id} said "
                f"state {state_now!r} and no other set held it: reap.lua, sweeping next, finds the row "
                "disagreeing and dead-letters it as corrupt, so nobody runs it",
                {"key": "job:" + job.id, "field": "state"},
            )
    return None


def _strays(client: Any, queue: Queue, base: str) -> list[str]:
    """Keys whose name holds the unique part of this queue's name (``base``) but that are not
    under its prefix: what a move wrote after building a key wrongly."""
    return sorted(
        text
        for text in (_text(key) for key in client.scan_iter(match=f"*{_glob(base)}*", count=500))
        if not text.startswith(queue.keys.prefix)
    )


def _refused_key(exc: Exception) -> str | None:
    if isinstance(exc, PermissionDenied) or "NOPERM" in str(exc) or "ACL failure" in str(exc):
        return str(exc)
    return None


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0].split(": on @")[0] if str(exc) else type(exc).__name__


def _normal(reply: Any) -> Any:
    if isinstance(reply, list | tuple):
        return [_normal(r) for r in reply]
    if isinstance(reply, bytes):
        return _number(reply)
    return reply


def _same_reply(got: list, want: list, clock: _Clock) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        if isinstance(g, list) and isinstance(w, list):
            if not _same_reply(g, w, clock):
                return False
        elif not clock.same(_number(g) if isinstance(g, str) else g, _number(w) if isinstance(w, str) else w):
            return False
    return True


def _show_reply(reply: Any, clock: _Clock) -> str:
    if isinstance(reply, list):
        return "{" + ", ".join(_show_reply(r, clock) for r in reply) + "}"
    return clock.show(_number(reply) if isinstance(reply, str) else reply)


def _edge_states(generate: Callable[[random.Random, int], State]) -> list[State]:
    rng = random.Random(SEED * 1000)
    empty = replace(generate(rng, 1), jobs=())
    return [empty]


def generated(move: Move, *, trials: int = TRIALS, seed: int = SEED) -> list[State]:
    """The states a judgement runs, in order: the edge states, then ``trials`` from ``seed``."""
    generate = move.generate or states
    rng = random.Random(seed)
    return _edge_states(generate) + [generate(rng, 1 + n // 4) for n in range(trials)]


def judge(
    client: Any,
    move: Move,
    learner_source: str,
    reference_source: str,
    lesson: str,
    *,
    trials: int = TRIALS,
    seed: int = SEED,
) -> Verdict:
    """Run both moves on ``trials`` generated states (fixed ``seed``); the first difference,
    shrunk, or a Verdict with no difference. The shrunk state is run once more with each move's
    commands logged (:func:`evidence.traced`), and that run is the verdict: its line, and the
    reads and commands its picture shows."""
    j = Judge(client, move, learner_source, reference_source, lesson)
    candidates = generated(move, trials=trials, seed=seed)
    try:
        for n, state in enumerate(candidates, start=1):
            verdict = j.differ(state)
            if verdict.difference is not None:
                verdict = _shrink(j, verdict)
                if verdict.error is None:  # once more, commands logged: the run its ✗ line and picture come from
                    j.trace = True
                    traced = j.differ(verdict.state)
                    if traced.difference is not None and traced.error is None:
                        verdict = traced
                verdict.tried = n
                return verdict
        return Verdict(None, tried=len(candidates))
    finally:
        j.sweep()


def _shrink(j: Judge, verdict: Verdict) -> Verdict:
    """Smaller states that still show a difference: fewer jobs, lower counts, a plain name."""
    best = verdict
    changed = True
    rounds = 0
    while changed and rounds < 4:
        changed, rounds = False, rounds + 1
        state = best.state
        assert state is not None
        tries: list[State] = []
        if state.tail != TAILS[0]:
            tries.append(replace(state, tail=TAILS[0]))
        for n, job in enumerate(state.jobs):
            if job.id != state.caller[0]:
                tries.append(replace(state, jobs=state.jobs[:n] + state.jobs[n + 1 :]))
        for n, job in enumerate(state.jobs):
            simpler = replace(job, stalled=0, payload="work")
            if simpler != job:
                tries.append(replace(state, jobs=state.jobs[:n] + (simpler,) + state.jobs[n + 1 :]))
        for attempt in tries:
            smaller = j.differ(attempt)
            if smaller.difference is not None and (smaller.error is None) == (best.error is None):
                best, changed = smaller, True
                break
    return best


def attempts_for_token(run: Any, move: Move, source: Any, reference: Any, state: State) -> bool:
    """True when the difference on ``state`` is the token/attempts mix-up: the caller's job has
    attempts != token there, and on the same state with its attempts set equal to its token
    the two moves agree (so the learner's move read attempts where the fence is the token)."""
    job = next((j for j in state.jobs if j.id == state.caller[0]), None)
    if job is None or job.attempts == job.token:
        return False
    same = replace(job, attempts=job.token)
    twin = replace(state, jobs=tuple(same if j.id == job.id else j for j in state.jobs))
    j = Judge(run.client, move, source, reference, run.exercise.lesson)
    return j.differ(twin).difference is None


def contract_step(run: Any, move: Move, source: Any, *, what: str = "Your move", mixup: str | None = None) -> Verdict:
    """The check's last step: the learner's move against the reference move on generated
    states. A ✓ line only when no state showed a difference; else one ✗ line with the first
    difference (or the learner's error, or the ACL's refusal) in plain words. ``mixup`` names
    the exercise's misconception for the token/attempts mix-up (:func:`attempts_for_token`),
    said instead of the plain difference when that is what the difference is."""
    reference: Any = run.exercise.solution
    if move.python is not None:
        reference = run.exercise.answer_from(run.exercise.solution)
    verdict = judge(run.client, move, source, reference, run.exercise.lesson)
    if verdict.difference is None:
        run.good(
            "contract",
            f"On {verdict.tried} generated queues (fixed seed {SEED}: jobs in every set, prior attempts and stall "
            "counts, ids at the edges, queue names holding the sets' own words) your move left every key of the "
            "queue -- members, scores, row fields, TTLs"
            + (", and its reply" if move.reply else "")
            + " -- as the reference move does (counters and free-text fields of your own aside; a row's count that "
            "is missing reads as 0, as every reader of the library takes it).",
        )
        return verdict
    assert verdict.state is not None
    run.show(verdict.seen)
    if verdict.refused_key is not None:
        run.fail(
            "contract", "key-outside-namespace", error=_first_line(verdict.error or Exception(verdict.refused_key))
        )
    if verdict.error is not None:
        run.fail(
            "contract",
            "code-error",
            what=f"{what}, on {verdict.state.describe()},",
            error=_first_line(verdict.error),
            where="",
        )
    if mixup is not None and verdict.error is None and attempts_for_token(run, move, source, reference, verdict.state):
        job = next(j for j in verdict.state.jobs if j.id == verdict.state.caller[0])
        run.fail(
            mixup,
            mixup,
            state=verdict.state.describe(),
            difference=verdict.difference,
            token=job.token,
            attempts=job.attempts,
            attempts_for_token=True,  # the twin state with attempts = token showed no difference
        )
    run.fail("contract", "differs-from-reference", what=f"On {verdict.state.describe()}: {verdict.difference}.")
    return verdict
