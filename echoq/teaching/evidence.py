"""What an exercise's check saw when it rejected an answer, kept as data for the picture in
its feedback.

A check's ✗ line is one sentence; this module keeps the reads that sentence was made from,
so that a picture (:mod:`echoq.teaching.lab.judged`, drawn only when the feedback is shown)
tells the same thing. Nothing here draws, and nothing here judges: the judges hand over what
they already read.

* :class:`Sides` -- the differential judge's run that gave the ✗ line (:mod:`.exercises.differential`
  runs the shrunk state once more with each move's commands logged, and that run is the
  verdict): the state both moves started from, every key of both queues afterwards (the very
  reads the line was made from), any key written outside the queue, and each move's commands
  in order with what each write left in the key it wrote (read right after the write).
* :class:`Scene` -- a scene's failure: the scratch queue the ✗ line is about, read when the
  line was written (before anything is cleaned up), the jobs and row fields the line names,
  and the run's timeline (:class:`Watch`): the child processes it started (their steps,
  freezes, kills) and the moves the check made itself, up to the moment of the ✗.

Capturing a move's commands: a Lua move runs with a ``redis`` of its own in scope (a lexical
shadow of the server's table, :func:`traced`) whose ``call`` and ``pcall`` pass every command
on and log it; the log comes back beside the move's reply (:func:`untraced`). The prelude
sits on the script's first line, so a line number in an error is the learner's own. A Python
move gets a client that logs its calls (:class:`Tracing`).
"""

from __future__ import annotations

import string
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from ..clock import server_now_ms
from ..ids import JOB_ID_RE
from .proxies import ClientProxy, PipelineProxy

__all__ = [
    "WRITES",
    "Command",
    "Event",
    "Scene",
    "Sides",
    "Tracing",
    "Watch",
    "read_queue",
    "scene",
    "traced",
    "untraced",
]

SETS = ("pending", "active", "scheduled", "dead", "done")
ROW_FIELDS = ("state", "token", "attempts", "stalled")  # a row's fields a picture shows first
SHOWN = 12  # members read per set for a scene's picture (the counts are exact)
LOGGED = 200  # commands a move's log keeps (a move that loops longer is cut, and says so)

# The commands that write, and which of their arguments are keys: 1 the first, 2 every one, 3 the first two.
_WRITES = {
    **dict.fromkeys(
        "ZADD ZREM ZPOPMIN ZPOPMAX ZINCRBY ZREMRANGEBYSCORE ZREMRANGEBYRANK ZREMRANGEBYLEX HSET HMSET HSETNX HDEL "
        "HINCRBY HINCRBYFLOAT SET SETEX PSETEX SETNX INCR INCRBY DECR DECRBY APPEND EXPIRE PEXPIRE EXPIREAT "
        "PEXPIREAT PERSIST SADD SREM LPUSH RPUSH LPOP RPOP LREM LSET LTRIM GETDEL GETSET".split(),
        1,
    ),
    "DEL": 2,
    "UNLINK": 2,
    "RENAME": 3,
    "RENAMENX": 3,
    "COPY": 3,
}


# -- a move's commands -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command a move sent, and what each key it wrote held right after it."""

    args: tuple[str, ...]  # the command and its arguments, as sent ('ZADD', 'emq:{…}:active', ...)
    wrote: tuple[tuple[str, str, Any], ...] = ()  # (key, type, value) after it: what the write left


WRITES = frozenset(_WRITES)  # the commands that write, by name


_LUA_WRITES = "{" + ", ".join(f"{name}={how}" for name, how in sorted(_WRITES.items())) + "}"

# One line (the script's first): a line number in the learner's error stays the learner's.
_PRELUDE = (
    "local __real, __log, __n = redis, {}, 0 "
    f"local __W = {_LUA_WRITES} "
    "local function __val(k) local t = __real.call('TYPE', k) t = type(t) == 'table' and t['ok'] or t "
    "local v = {} if t == 'zset' then v = __real.call('ZRANGE', k, 0, 63, 'WITHSCORES') "
    "elseif t == 'hash' then v = __real.call('HGETALL', k) elseif t == 'string' then v = {__real.call('GET', k)} "
    "elseif t == 'list' then v = __real.call('LRANGE', k, 0, 63) elseif t == 'set' then v = __real.call('SMEMBERS', k) "
    "end return {k, t, v} end "
    "local function __trace(how, ...) local reply = how(...) __n = __n + 1 if __n <= " + str(LOGGED) + " then "
    "local a, fx = {}, {} for i = 1, select('#', ...) do a[i] = tostring((select(i, ...))) end "
    "local w = __W[string.upper(a[1] or '')] "
    "if w == 1 then fx[1] = __val(a[2]) elseif w == 2 then for i = 2, #a do fx[#fx + 1] = __val(a[i]) end "
    "elseif w == 3 then fx[1] = __val(a[2]) fx[2] = __val(a[3]) end __log[__n] = {a, fx} end return reply end "
    "local redis = setmetatable({call = function(...) return __trace(__real.call, ...) end, "
    "pcall = function(...) return __trace(__real.pcall, ...) end}, {__index = __real}) "
    "local __reply = (function() "
)
_CODA = "\nend)() return {__n, __log, __reply}"


def traced(source: str) -> str | None:
    """The Lua ``source`` run so that its commands come back with its reply (see the module's
    docstring); None where it cannot be (a shebang line must stay the script's first)."""
    if source.lstrip().startswith("#!"):
        return None
    return _PRELUDE + source + _CODA


def untraced(reply: Any) -> tuple[Any, list[Command], int]:
    """A traced script's reply: (the move's own reply, its commands, how many it sent)."""
    sent, log = int(reply[0]), reply[1] or []
    own = reply[2] if len(reply) > 2 else None
    if isinstance(own, redis.ResponseError):  # the move returned an error reply: as if untraced
        raise own
    commands = [Command(tuple(_text(a) for a in args), tuple(_effect(fx) for fx in effects)) for args, effects in log]
    return own, commands, sent


def _effect(entry: list[Any]) -> tuple[str, str, Any]:
    key, kind, raw = _text(entry[0]), _text(entry[1]), entry[2] if len(entry) > 2 else []
    return key, kind, _value(kind, raw)


def _value(kind: str, raw: Any) -> Any:
    if kind == "zset":
        flat = [_text(x) for x in raw]
        return [(flat[i], _number(flat[i + 1])) for i in range(0, len(flat), 2)]
    if kind == "hash":
        if isinstance(raw, dict):
            return {_text(k): _text(v) for k, v in raw.items()}
        flat = [_text(x) for x in raw]
        return dict(zip(flat[::2], flat[1::2], strict=True))
    if kind == "string":
        items = raw if isinstance(raw, list | tuple) else [raw]
        return _text(items[0]) if items and items[0] not in (None, False) else None
    if kind in ("list", "set"):
        return sorted(_text(x) for x in raw) if kind == "set" else [_text(x) for x in raw]
    return None


class Tracing(ClientProxy):
    """A client for a Python move that passes every call on and logs it (with what each write
    left in the key it wrote, read right after it on the same server)."""

    def __init__(self, client: Any, log: list[Command]) -> None:
        super().__init__(client)
        self._log = log

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._client, name)
        if name.startswith("_") or not callable(found) or name == "connection_pool":
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            reply = found(*args, **kwargs)
            self.record(_shown(name, args, kwargs))
            return reply

        return call

    def pipeline(self, *args: Any, **kwargs: Any) -> TracingPipeline:
        return TracingPipeline(self._client.pipeline(*args, **kwargs), self)

    def record(self, shown: tuple[str, ...], keys: Iterable[str] | None = None) -> None:
        """Log a command (the first LOGGED), with what each key it wrote (``keys``, else the
        command's own) holds now."""
        if len(self._log) < LOGGED:
            wrote = _written(shown) if keys is None else keys
            self._log.append(Command(shown, tuple((key, *read_key(self._client, key)) for key in wrote)))


class TracingPipeline(PipelineProxy):
    """A pipeline of a :class:`Tracing` client. A command run at once (after WATCH) is logged
    as the client logs it; the commands queued for ``execute()`` are logged as one step, as the
    server ran them: ``MULTI … EXEC`` (or ``PIPELINE …`` without a transaction), with what each
    key they wrote held after the last of them. The state between two commands of a MULTI is
    never seen by anyone, and a picture does not show one."""

    PASSED = ("multi", "unwatch", "discard")

    def __init__(self, pipe: Any, tracing: Tracing) -> None:
        super().__init__(pipe)
        self._tracing = tracing
        self._commands: list[tuple[str, ...]] = []

    def _queued(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._commands.append(_shown(name, args, kwargs))

    def _ran(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._tracing.record(_shown(name, args, kwargs))

    def _forget(self) -> None:
        self._commands = []

    def execute(self, *args: Any, **kwargs: Any) -> list[Any]:
        queued, self._commands = self._commands, []
        replies = self._pipe.execute(*args, **kwargs)
        if queued:
            atomic = bool(getattr(self._pipe, "transaction", True))
            shown = ("MULTI" if atomic else "PIPELINE", *(a for c in queued for a in c), *(("EXEC",) if atomic else ()))
            self._tracing.record(shown, dict.fromkeys(k for c in queued for k in _written(c)))
        return replies


def _shown(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, ...]:
    """A call as a command and its arguments (``execute_command`` shows the command it names)."""
    if name == "execute_command" and args:
        return (_text(args[0]).upper(), *(_shown_arg(a) for a in args[1:]))
    command = _METHODS.get(name, name.upper())
    return (command, *(_shown_arg(a) for a in args), *(_shown_arg(v) for v in kwargs.values()))


_METHODS = {"delete": "DEL"}  # redis-py's methods named otherwise than their commands


def _written(shown: tuple[str, ...]) -> list[str]:
    """The keys a command (as :func:`_shown` gives it) writes."""
    how = _WRITES.get(shown[0]) if shown else None
    if how == 2:
        return list(shown[1:])
    return list(shown[1 : 1 + (2 if how == 3 else 1)]) if how else []


def _shown_arg(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{_text(k)} {_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return " ".join(_text(v) for v in value)
    return _text(value)


def read_key(client: Any, key: str) -> tuple[str, Any]:
    """(type, value) of one key, as :func:`_value` gives it."""
    kind = _text(client.type(key))
    if kind == "zset":
        raw: Any = [x for pair in client.zrange(key, 0, 63, withscores=True) for x in pair]
    elif kind == "hash":
        raw = client.hgetall(key)
    elif kind == "string":
        raw = [client.get(key)]
    elif kind == "list":
        raw = client.lrange(key, 0, 63)
    elif kind == "set":
        raw = client.smembers(key)
    else:
        raw = []
    return kind, _value(kind, raw)


# -- the differential judge's two sides -----------------------------------------------------------


Keyspace = dict[str, tuple[str, Any, int]]  # differential.keyspace: name after the prefix -> (type, value, ttl)


@dataclass
class Sides:
    """Both moves on one state: the reads the ✗ line was made from, and each move's commands."""

    state: str  # the state, described as the ✗ line describes it
    before: Keyspace
    mine: Keyspace
    theirs: Keyspace
    where: dict[str, Any]  # what the ✗ line names: key, field, member, stray, reply
    prefixes: tuple[str, str]  # each queue's key prefix (the learner's, the reference's)
    strays: dict[str, tuple[str, Any]] = field(default_factory=dict)  # key as the line shows it -> (type, value)
    mine_commands: list[Command] = field(default_factory=list)
    theirs_commands: list[Command] = field(default_factory=list)
    sent: tuple[int, int] = (0, 0)  # commands each move sent (its log keeps the first LOGGED)
    caller: str = ""  # the job the move was called for, if any
    show: Callable[[str], str] | None = field(default=None, repr=False)  # a key outside the queue, as the line shows it
    titles: tuple[str, str] = ("your move", "the reference move")
    now: int = 0  # the server's time at both moves (the judge's fixed time, ms): a time score is shown from it

    def name_of(self, key: str, side: int = 0) -> str:
        """A key a command names, as the picture names it: after its queue's prefix
        (``job:JOB…``), or as the ✗ line shows a key outside the queue."""
        prefix = self.prefixes[side]
        if key.startswith(prefix):
            return key[len(prefix) :]
        return self.show(key) if self.show is not None else key

    def after(self, steps: int) -> Keyspace:
        """The learner's queue after its first ``steps`` commands: the state before, with each
        written key as the move's own read right after the write found it."""
        out = dict(self.before)
        for command in self.mine_commands[:steps]:
            for key, kind, value in command.wrote:
                name = self.name_of(key)
                if kind == "none":
                    out.pop(name, None)
                else:
                    out[name] = (kind, _as_keyspace(kind, value), -1)
        return out

    def part(self) -> tuple[str, str | None]:
        """The key the ✗ line names (after the prefix, or the stray as shown) and its field or
        member (None: the key as a whole)."""
        if "stray" in self.where:
            return self.where["stray"], None
        return self.where.get("key", ""), self.where.get("field") or self.where.get("member")

    def divergence(self) -> tuple[int | None, int | None]:
        """(the learner's command, the reference's command) where the part the ✗ line names
        took its final value: the learner's first command whose effect differs from the
        reference's (for a key outside the queue, the first that wrote it) -- or, when no
        command of the learner's set that part (it was left as it was before), the reference's
        command the learner's move lacks. Indexes from 0."""
        key, sub = self.part()
        if not key:
            return None, None
        if "stray" in self.where:
            return next(
                (n for n, c in enumerate(self.mine_commands) if any(self.name_of(k) == key for k, _, _ in c.wrote)),
                None,
            ), None
        mine = _last_change(self.mine_commands, key, sub, self.name_of, 0)
        if mine is not None:
            return mine, None
        return None, _last_change(self.theirs_commands, key, sub, lambda k, s=1: self.name_of(k, s), 1)


def _last_change(commands: list[Command], key: str, sub: str | None, name_of: Callable[..., str], side: int):
    """The command after which ``key`` (its ``sub`` field or member) last changed, or None."""
    last, value = None, _MISSING
    for n, command in enumerate(commands):
        for written, kind, after in command.wrote:
            if name_of(written, side) != key:
                continue
            now = _sub_value(kind, after, sub)
            if now != value:
                last, value = n, now
    return last


_MISSING = object()


def _sub_value(kind: str, value: Any, sub: str | None) -> Any:
    if kind == "none" or value is None:
        return None
    if sub is None:
        return (kind, repr(value))
    if kind == "zset":
        return dict(value).get(sub)
    if kind == "hash":
        return value.get(sub)
    return (kind, repr(value))


def _as_keyspace(kind: str, value: Any) -> Any:
    """A value read by a move's log, in :func:`differential.keyspace`'s form."""
    if kind == "zset":
        return dict(value)
    return value


# -- a scene's failure ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One moment of a scene's timeline."""

    at: float  # time.monotonic() of the machine (a child's clock and the check's are the same clock)
    actor: str  # 'worker A', 'the check', 'reaper 1' ...
    what: str  # 'claim', 'frozen', 'resumed', 'killed', 'reaps' ...
    kind: str = "step"  # step, start, frozen, resumed, killed, raised, check
    queue: str | None = None  # the scratch queue it acted on, where known


class Watch:
    """What a run does, as it happens: the children it starts and the moves the check makes
    itself. Kept as references (reading them costs nothing until a picture asks)."""

    def __init__(self) -> None:
        self.children: list[tuple[Any, str | None]] = []  # (processes.Child, its queue's name), in the order started
        self.events: list[Event] = []  # the check's own moves
        self.failed_at: float | None = None

    def child(self, child: Any, args: tuple[Any, ...] = ()) -> None:
        queue = next((a.name for a in args if hasattr(a, "keys") and hasattr(a, "snapshot")), None)
        self.children.append((child, queue))

    def note(self, actor: str, what: str, queue: Any = None) -> None:
        name = getattr(queue, "name", queue)
        self.events.append(Event(time.monotonic(), actor, what, "check", name))

    def timeline(self, queue: str | None = None, most_children: int = 2) -> list[Event]:
        """The events up to the ✗, in time order: the start, steps, freezes, resumes and end of
        the last ``most_children`` children that worked on ``queue`` (of the run, if none did) --
        and of the last one killed or frozen before them, where none of them was -- and the
        check's own moves on that queue among them."""
        end = self.failed_at if self.failed_at is not None else time.monotonic()
        mine = [c for c, q in self.children if queue is not None and q == queue] or [c for c, _q in self.children]
        children = mine[-most_children:]
        broken = [c for c in mine[:-most_children] if c.killed or any(m == "frozen" for _, m in c.moments)]
        if broken and not any(c.killed or c.moments for c in children):
            children = [broken[-1], *children]
        since = min((getattr(c, "started_at", end) for c in children), default=end)
        out = [e for e in self.events if since <= e.at <= end and e.queue in (None, queue)]
        names = _lane_names(children)
        for child in children:
            actor = names[id(child)]
            out.append(Event(getattr(child, "started_at", since), actor, "starts", "start"))
            for label, (_sent, done) in zip(child.steps, child.step_times, strict=False):
                if done <= end:
                    out.append(Event(done, actor, label))
            for at, what in getattr(child, "moments", []):
                if at <= end:
                    out.append(Event(at, actor, what, what))
            if child.killed and child.step_times:
                out.append(Event(child.step_times[-1][1] + 1e-6, actor, "killed", "killed"))
            if child.error and getattr(child, "ended_at", None) and child.ended_at <= end:
                out.append(Event(child.ended_at, actor, "raised", "raised"))
        return sorted(out, key=lambda e: e.at)


def _lane_names(children: list[Any]) -> dict[int, str]:
    """Each child's name, numbered where several share one ('a worker 1', 'a worker 2')."""
    counts: dict[str, int] = {}
    for child in children:
        counts[child.name] = counts.get(child.name, 0) + 1
    seen: dict[str, int] = {}
    out = {}
    for child in children:
        if counts[child.name] > 1:
            seen[child.name] = seen.get(child.name, 0) + 1
            out[id(child)] = f"{child.name} {seen[child.name]}"
        else:
            out[id(child)] = child.name
    return out


@dataclass
class Scene:
    """A scene's failure: one scratch queue as the server held it when the ✗ line was written,
    what the line names in it, and the run's timeline."""

    queue: str  # the queue's name
    board: Keyspace  # its sets (the first SHOWN members of each) and the rows of those and of the named jobs
    counts: dict[str, int]  # each set's exact size
    now_ms: int
    jobs: tuple[str, ...] = ()  # the jobs the ✗ line names
    fields: tuple[str, ...] = ()  # the row fields the ✗ line names
    watch: Watch | None = None


def named(template: str, details: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The jobs and row fields a ✗ line names: the JOB ids in the details its template writes,
    and the row fields among those details' names (``state=...`` names the row's state)."""
    used = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    jobs: list[str] = []
    for name in sorted(used):
        for found in JOB_ID_RE.findall(str(details.get(name, ""))):
            if found not in jobs:
                jobs.append(found)
    fields = tuple(f for f in ROW_FIELDS if f in used and f in details)
    return tuple(jobs), fields


def read_queue(client: Any, prefix: str, jobs: Iterable[str] = ()) -> tuple[Keyspace, dict[str, int], int]:
    """One queue as a scene's picture shows it: the first SHOWN members of each set with their
    scores, each set's size, the rows of the members read and of ``jobs``, and the server's now."""
    pipe = client.pipeline(transaction=False)
    for place in SETS:
        pipe.zcard(prefix + place)
        pipe.zrange(prefix + place, 0, SHOWN - 1, withscores=True)
    replies = pipe.execute()
    board: Keyspace = {}
    counts: dict[str, int] = {}
    ids: list[str] = []
    for n, place in enumerate(SETS):
        counts[place] = int(replies[2 * n])
        members = {_text(m): _number(s) for m, s in replies[2 * n + 1]}
        if counts[place]:
            board[place] = ("zset", members, -1)
        ids += [m for m in members if m not in ids]
    ids += [j for j in jobs if j not in ids]
    pipe = client.pipeline(transaction=False)
    for job in ids:
        pipe.hgetall(prefix + "job:" + job)
    for job, row in zip(ids, pipe.execute() if ids else [], strict=True):
        if row:
            board["job:" + job] = ("hash", {_text(f): _text(v) for f, v in row.items()}, -1)
    return board, counts, server_now_ms(client)


def scene(client: Any, queue: Any, template: str, details: dict[str, Any], watch: Watch | None) -> Scene:
    """The scene a ✗ line is about: ``queue`` (the one the check recorded, never a guess), read
    now, with the jobs and row fields the line names."""
    jobs, fields = named(template, details)
    board, counts, now = read_queue(client, queue.keys.prefix, jobs)
    return Scene(queue.name, board, counts, now, jobs, fields, watch)


# -- small pieces ----------------------------------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _number(value: Any) -> Any:
    text = _text(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() else number
