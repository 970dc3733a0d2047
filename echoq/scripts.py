"""The script registry: the one place that finds, expands and runs Lua.

Every ``.lua`` file under ``lua/`` (the library's moves, and the teaching kit's scripts
in ``lua/teaching/``) is loaded here and nowhere else; no module sends script text to the
server by itself. A built wheel carries the same files as ``echoq/lua/``.

**Includes.** A line ``--- @include "includes/name"`` stands for ``lua/includes/name.lua``.
An include declares what it needs with its own ``@include`` lines, and expansion is
recursive: each include's needs are placed before it, each include appears once (a second
request becomes a one-line comment), and a cycle is an error. :func:`expanded` returns
the whole text, exactly as it is sent to the server -- its SHA1 is the script's SHA -- so
what a lesson shows a learner is what the server runs.

**Running.** :func:`run` sends ``EVALSHA``; on ``NOSCRIPT`` (a restarted or flushed
server) it sends the source once with ``EVAL``, which also caches it, so a client never
needs ``SCRIPT LOAD`` rights. An error reply ``CODE message`` is raised as the class
:data:`echoq.errors.SCRIPT_ERRORS` names for ``CODE``.

**Typed errors for direct commands too.** The library's few direct commands (a row read,
a SCAN, TIME, ...) run inside :func:`guard`, which turns what the server or the network
says into the same typed one-line errors as a script's: an ACL refusal is
:class:`~echoq.PermissionDenied` naming the user, the command or key refused and what to
do; a lost connection is :class:`~echoq.ServerUnavailable`.

**One message for every refusal.** :func:`denied` writes every ``PermissionDenied`` line,
and :func:`is_acl_refusal` is the one test of what counts as a refusal. The client
:func:`echoq.connect` returns (:class:`echoq.client.TypedRedis`) raises a refusal as
``PermissionDenied`` itself, for any command -- a learner's own ``GET``, a pipeline,
MONITOR, a script -- naming the operation :func:`run` or :func:`guard` announced
(:func:`operation`), else the command. A plain ``redis.Redis`` a caller brought raises a
bare ``ResponseError``, which :func:`run` and :func:`guard` turn into the same line.

**On a cluster** (a ``redis.cluster.RedisCluster`` from :func:`echoq.connect`) the client
sends each call to the master serving the slot of its KEYS, which all carry one queue's
hash tag; keys of two slots are refused before anything is sent. :func:`run_replicated`
adds the durability wait: the script and a ``WAIT`` (or ``WAITAOF``) go in one
non-transactional pipeline on ONE connection to that master, because ``WAIT`` counts the
replicas that have the writes of its own connection, and of no other.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from .errors import (
    ACL_REFUSALS,
    SCRIPT_ERRORS,
    EchoqError,
    InvalidArgument,
    NotReplicated,
    PermissionDenied,
    ScriptFailed,
    ServerBusy,
    ServerUnavailable,
)

__all__ = [
    "lua_dir",
    "names",
    "raw_source",
    "expanded",
    "sha",
    "run",
    "run_replicated",
    "run_text",
    "Pipelined",
    "preload",
    "guard",
    "doing",
    "operation",
    "translate",
    "is_acl_refusal",
    "denied",
    "lost_server",
]

_HERE = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^--- @include "([a-z_/]+)"[ \t]*$', re.MULTILINE)
_NAME = re.compile(r"^[a-z_]+(/[a-z_]+)?$")


@cache
def lua_dir() -> Path:
    """The folder holding the ``.lua`` files: installed package data, else the checkout's."""
    for candidate in (_HERE / "lua", _HERE.parent / "lua"):
        if (candidate / "claim.lua").is_file():
            return candidate
    raise FileNotFoundError(
        f"echoq's Lua scripts are missing (looked in {_HERE / 'lua'} and {_HERE.parent / 'lua'}); reinstall echoq"
    )


def names() -> list[str]:
    """Every runnable script: ``claim``, ``reap``, ..., ``teaching/naive_pop`` (not includes)."""
    root = lua_dir()
    found = [p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.lua")]
    return sorted(n for n in found if not n.startswith("includes/"))


def _path(name: str) -> Path:
    if not isinstance(name, str) or _NAME.match(name) is None:
        raise InvalidArgument(f"{name!r} is not a script name; use one of {', '.join(names())}")
    path = lua_dir() / f"{name}.lua"
    if not path.is_file():
        raise InvalidArgument(f"no script {name!r} in {lua_dir()}; use one of {', '.join(names())}")
    return path


def raw_source(name: str) -> str:
    """A file exactly as written, its ``@include`` lines unexpanded."""
    return _path(name).read_text()


@cache
def expanded(name: str) -> str:
    """The script exactly as the server runs it: every include inlined, once, needs first."""
    placed: list[str] = []

    def expand(include: str, stack: tuple[str, ...]) -> str:
        if include in stack:
            raise ScriptFailed(f"include cycle in lua/: {' -> '.join(stack + (include,))}")
        text = _path(include).read_text()

        def inline(match: re.Match[str]) -> str:
            needed = match.group(1)
            if needed in placed:
                return f"-- (@include {needed}: already above)"
            body = expand(needed, stack + (include,)).rstrip("\n")
            placed.append(needed)
            return f"-- ---- @include {needed} ----\n{body}\n-- ---- end of {needed} ----"

        return _INCLUDE.sub(inline, text)

    return expand(name, ())


@cache
def sha(name: str) -> str:
    """The SHA1 the server knows the script by (the SHA1 of :func:`expanded`)."""
    return hashlib.sha1(expanded(name).encode()).hexdigest()


# What the library is doing on this thread (its name, and the keys it touches), so that a
# refusal the typed client raises names the operation, not only the command it sent.
_OPERATION: ContextVar[tuple[str, tuple[str, ...]] | None] = ContextVar("echoq_operation", default=None)


@contextmanager
def doing(what: str, keys: Sequence[str] = ()) -> Iterator[None]:
    """Name the library operation the commands inside run for (see :func:`operation`)."""
    token = _OPERATION.set((what, tuple(keys)))
    try:
        yield
    finally:
        _OPERATION.reset(token)


def operation() -> tuple[str, tuple[str, ...]] | None:
    """The library operation running on this thread (inside :func:`run` or :func:`guard`):
    its name and the keys it touches, for :func:`denied`; None outside one."""
    return _OPERATION.get()


def run(client: Any, name: str, keys: list[str], args: list[Any]) -> Any:
    """Run script ``name`` on ``client`` (EVALSHA, then EVAL once on NOSCRIPT)."""
    digest = sha(name)
    try:
        with doing(f"{name}.lua", keys):
            try:
                return client.evalsha(digest, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                return client.eval(expanded(name), len(keys), *keys, *args)
    except redis.ResponseError as exc:
        raise translate(exc, name, client=client, keys=keys) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(client, exc) from None
    except RedisClusterException as exc:
        raise _cluster_refusal(client, exc, name, keys) from None


class Pipelined:
    """Calls of script ``name`` sent on one connection ahead of their replies (RESP pipelining).

    :meth:`send` returns as soon as the call is written; :meth:`receive` reads the oldest
    reply. The server runs the calls one at a time in the order sent, as it runs any
    client's; what the caller gains is that the server works on one call while the caller
    handles the reply to the one before. A NOSCRIPT reply (a flushed or restarted server:
    that call did not run) is run again with :func:`run`, in order. Errors are raised as
    :func:`run` raises them. :meth:`close` gives the connection back to the pool (or drops
    it, when replies were left unread)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client, self.name = client, name
        self._digest = sha(name)
        self._connection: Any = None
        self._sent: deque[tuple[list[str], list[Any]]] = deque()

    def send(self, keys: list[str], args: list[Any]) -> None:
        try:
            if self._connection is None:  # connects: the server may be gone already
                self._connection = self.client.connection_pool.get_connection()
            with doing(f"{self.name}.lua", keys):
                # A health check (PING, when the client asks for them) would read a pending reply.
                self._connection.send_command(
                    "EVALSHA", self._digest, len(keys), *keys, *args, check_health=not self._sent
                )
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._drop()
            raise lost_server(self.client, exc) from None
        self._sent.append((keys, args))

    def receive(self) -> Any:
        keys, args = self._sent.popleft()
        try:
            with doing(f"{self.name}.lua", keys):
                try:
                    return self._connection.read_response(disconnect_on_error=False)
                except redis.exceptions.NoScriptError:
                    return run(self.client, self.name, keys, args)
        except redis.ResponseError as exc:
            raise translate(exc, self.name, client=self.client, keys=keys) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._drop()
            raise lost_server(self.client, exc) from None
        except BaseException:
            self._drop()  # interrupted mid-reply: the connection's state is unknown
            raise

    def close(self) -> None:
        if self._connection is None:
            return
        if self._sent:
            self._drop()
            return
        self.client.connection_pool.release(self._connection)
        self._connection = None

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.disconnect()
            self.client.connection_pool.release(self._connection)
            self._connection = None
        self._sent.clear()


@contextmanager
def guard(client: Any, what: str, keys: Sequence[str] = ()) -> Iterator[None]:
    """Run direct commands on ``client`` with typed one-line errors: an ACL refusal becomes
    :class:`PermissionDenied` (``what`` the caller was doing, on ``keys``), a lost server
    :class:`ServerUnavailable`, any other error reply an :class:`EchoqError`.

    Keep the block to the commands themselves (never a ``yield``): it names them ``what``."""
    try:
        with doing(what, keys):
            yield
    except redis.ResponseError as exc:
        if is_acl_refusal(exc):
            raise denied(client, exc, what, keys) from None
        if _is_busy(exc):
            raise busy(what, exc) from None
        raise EchoqError(f"{what}: the server replied with an error ({_first_line(exc)})") from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(client, exc) from None
    except RedisClusterException as exc:
        raise _cluster_refusal(client, exc, what, list(keys)) from None


def typed(client: Any, exc: BaseException, what: str) -> BaseException:
    """A client library's error that escaped the translations above, as the one-line
    :class:`EchoqError` :func:`guard` would have raised for it (``what``: the operation);
    any other exception (an EchoqError already, a handler's KeyboardInterrupt) as it is."""
    if isinstance(exc, EchoqError):
        return exc
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return lost_server(client, exc)
    if isinstance(exc, redis.ResponseError):
        if is_acl_refusal(exc):
            return denied(client, exc, what)
        if _is_busy(exc):
            return busy(what, exc)
        return EchoqError(f"{what}: the server replied with an error ({_first_line(exc)})")
    if isinstance(exc, redis.RedisError | RedisClusterException):
        return EchoqError(f"{what}: {type(exc).__name__}: {_first_line(exc)}")
    return exc


def _is_busy(exc: BaseException) -> bool:
    """A BUSY reply: the server is held by a script past its time limit (nothing ran)."""
    return str(exc).startswith("BUSY ")


def busy(what: str, exc: BaseException) -> ServerBusy:
    """One line for a BUSY reply: what was refused, why, and what ends it."""
    return ServerBusy(
        f"{what}: the server is busy running a script past its time limit and runs nothing else until it "
        "ends; nothing of this call ran. SCRIPT KILL ends a script that has not written (else only a restart "
        f"does); retry once the server answers ({_first_line(exc)})"
    )


def preload(client: Any) -> list[str]:
    """Load every script into the server's cache (SCRIPT LOAD, as an admin): clients whose
    users may not load scripts (a workshop's learners) then always hit with EVALSHA."""
    loaded = []
    for name in names():
        if client.script_load(expanded(name)) != sha(name):
            raise ScriptFailed(f"the server loaded {name}.lua under another SHA1 than the registry's")
        loaded.append(name)
    return loaded


def run_text(client: Any, text: str, keys: list[str], args: list[Any], *, name: str = "script") -> Any:
    """Run Lua ``text`` that is not one of lua/'s files (a learner's answer to an exercise).

    Errors are NOT translated: the caller shows the server's own words to the learner. (An
    ACL refusal is still ``PermissionDenied`` on the client :func:`echoq.connect` returns:
    a refusal is never the learner's Lua being wrong.)"""
    try:
        return client.eval(text, len(keys), *keys, *args)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(client, exc) from None
    except RedisClusterException as exc:
        raise _cluster_refusal(client, exc, name, keys) from None


def translate(exc: redis.ResponseError, name: str, *, client: Any = None, keys: Sequence[str] = ()) -> Exception:
    """The typed error for a script's error reply: its first word looked up in SCRIPT_ERRORS;
    an ACL refusal (NOPERM on EVALSHA, or "ACL failure" inside the script) is
    :class:`PermissionDenied` (see :func:`denied`)."""
    if is_acl_refusal(exc):
        return denied(client, exc, f"{name}.lua", keys)
    if _is_busy(exc):
        return busy(f"{name}.lua", exc)
    cluster = _cluster_reply(exc, name)
    if cluster is not None:
        return cluster
    text = _first_line(exc)
    code, _, detail = text.partition(" ")
    if code in SCRIPT_ERRORS:
        kind = SCRIPT_ERRORS[code][0]
        return kind(f"{name}: {detail}")
    return ScriptFailed(f"{name}.lua failed on the server: {text}")


def _first_line(exc: Exception) -> str:
    """The server's words without the script locator it appends (" script: <sha>, on ...")."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.rsplit(" script: ", 1)[0].strip()


# Commands the server's own configuration refuses before any ACL is consulted (Valkey and
# Redis keep DEBUG and MODULE off unless enable-debug-command / enable-module-command say so).
_PROTECTED = re.compile(r"^(\w+) command not allowed\b")
_COMMAND = re.compile(r"'([A-Za-z][\w|-]*)' command")
_QUEUE_KEY = re.compile(r"^emq:\{([^}]*)\}:")
_IN_SCRIPT = "ACL failure in script: "


def is_acl_refusal(exc: BaseException) -> bool:
    """True for the server refusing this user a command or a key (direct or in a script), by
    its ACL or, for DEBUG and MODULE, by its configuration."""
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return True
    if not isinstance(exc, redis.ResponseError):
        return False
    text = str(exc)
    return _PROTECTED.match(text) is not None or any(m.lower() in text.lower() for m in ACL_REFUSALS)


def denied(client: Any, exc: Exception, what: str, keys: Sequence[str] = ()) -> PermissionDenied:
    """One line for an ACL refusal: who was refused, which command or key, and what to do.

    Valkey and Redis 7 word refusals differently, and inside a script neither names the key:
    a script only ever touches its own queue's keys, so the queue is named instead."""
    kw = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {}) or {}
    user = (kw.get("password") and kw.get("username")) or "default"  # no password: not sent, maybe one
    said = _first_line(exc)
    if said.startswith(_IN_SCRIPT):
        said = said[len(_IN_SCRIPT) :].rstrip(" .") + ", inside the script"
    protected = _PROTECTED.match(said)
    command = None if "key" in said.lower() else _COMMAND.search(said)
    why = f"the server's ACL said: {said}"
    if protected is not None:
        name = protected.group(1).lower()
        why = f"the server's configuration turns it off for every user: enable-{name}-command"
        refused = f"the command {name.upper()}"
        todo = f"whoever runs the server may turn it on (enable-{name}-command in its configuration)"
    elif command is not None:
        name = command.group(1).lower()
        refused = f"the command {name.upper()}"
        todo = f"ask whoever runs the server to allow it (ACL SETUSER {user} +{name})"
    elif "key" not in said.lower():
        refused = "a command it runs"
        todo = (
            f"ask whoever runs the server to allow this user the commands echoq uses "
            f"(ACL SETUSER {user} +@read +@write +@scripting +time)"
        )
    else:
        queues = sorted({m.group(1) for key in keys if (m := _QUEUE_KEY.match(key))})
        if len(keys) == 1:
            refused = f"the key {keys[0]}"
        elif queues:
            refused = "the keys of queue " + ", ".join(f"{q!r} (emq:{{{q}}}:*)" for q in queues)
        else:
            refused = "a key it needs"
        pattern = " ".join(f"~emq:{{{q}}}:*" for q in queues) or "the keys"
        todo = (
            "use a queue this user may touch (on a shared server, one in your own namespace: "
            f"'<namespace>.<name>'), or ask whoever runs the server to grant user {user!r} {pattern}"
        )
    return PermissionDenied(f"{what}: user {user!r} may not use {refused} ({why}); {todo}")


def lost_server(client: Any, exc: Exception) -> ServerUnavailable:
    from .server import TRY_INSTEAD, describe_client

    reason = _first_line(exc)
    return ServerUnavailable(
        f"lost Valkey at {describe_client(client)} ({reason}); is the server still running? "
        f"Reconnect with echoq.connect(), or {TRY_INSTEAD}"
    )


# -- clusters ------------------------------------------------------------------------------------


def _cluster_reply(exc: redis.ResponseError, name: str) -> Exception | None:
    """The one-line error for a cluster's own replies (not a script's), or None."""
    text = str(exc).split(" script:")[0].strip()
    if isinstance(exc, redis.exceptions.ClusterCrossSlotError) or text.startswith("CROSSSLOT"):
        return InvalidArgument(
            f"{name}: the server refused keys of two hash slots ({text}); a script may touch the keys of "
            "one queue only, and they all carry its {tag}"
        )
    if isinstance(exc, MovedError | AskError):
        return ScriptFailed(
            f"{name}: this server is one node of a Valkey Cluster, and the queue's slot {exc.slot_id} is served "
            f"by {exc.host}:{exc.port}; connect with the cluster form of VALKEY_URL, "
            "redis+cluster://:password@host:port"
        )
    if isinstance(exc, ClusterDownError | TryAgainError):
        return ServerUnavailable(
            f"{name}: the cluster cannot serve this queue's slot right now ({text}); a failover may be under "
            "way: try again in a moment"
        )
    return None


def _cross_slot(name: str, slots: list[int] | None) -> InvalidArgument:
    """Keys of several slots in one call (``slots``, when known), refused before anything is sent."""
    count = "several" if slots is None else len(slots)
    return InvalidArgument(
        f"{name}: its KEYS fall in {count} hash slots {slots or ''} (CROSSSLOT); "
        "a script may touch the keys of one queue only, and they all carry its {tag}"
    )


def _cluster_refusal(client: Any, exc: RedisClusterException, name: str, keys: list[str]) -> Exception:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "same key slot" in text or "same slot" in text:
        return _cross_slot(
            name, sorted({client.keyslot(k) for k in keys}) if isinstance(client, RedisCluster) else None
        )
    if isinstance(exc, SlotNotCoveredError):
        return ServerUnavailable(
            f"{name}: no master serves this queue's slot right now ({text}); a failover may be under way: "
            "try again in a moment"
        )
    return lost_server(client, exc)


def _wait_command(replicas: int, timeout_ms: int, fsync: bool) -> tuple[Any, ...]:
    # WAITAOF numlocal numreplicas timeout: fsynced to the master's own AOF and to the
    # replicas'; WAIT numreplicas timeout: received by the replicas (in memory).
    return ("WAITAOF", 1, replicas, timeout_ms) if fsync else ("WAIT", replicas, timeout_ms)


def run_replicated(
    client: Any, name: str, keys: list[str], args: list[Any], *, replicas: int, timeout_ms: int, fsync: bool = False
) -> Any:
    """Run script ``name`` like :func:`run`, then wait until ``replicas`` replicas have its
    writes (``WAIT``; with ``fsync``, ``WAITAOF 1 replicas``: fsynced to the master's AOF and
    to theirs), at most ``timeout_ms``.

    The script and the wait travel in one non-transactional pipeline on one connection to
    the master serving the keys' slot. Returns the script's reply; raises
    :class:`~echoq.errors.NotReplicated` when fewer replicas acknowledged in time (the write
    HAS been applied on the master, and may be lost if it fails before replicating).
    """
    wait = _wait_command(replicas, timeout_ms, fsync)
    cluster = isinstance(client, RedisCluster)
    tries = 1 + (client.retry.get_retries() if cluster else 0)
    use_eval = False
    ask: str | None = None  # a node that asked us (ASK) to send this one call to it
    failure: Exception | None = None
    for attempt in range(tries + 2):  # +2: a NOSCRIPT and an ASK cost one go each
        if attempt:
            time.sleep(min(0.5, 0.025 * 2**attempt) if failure is not None else 0)
        try:
            target, where = _target(client, keys, name, ask) if cluster else (client, None)
            pipe = target.pipeline(transaction=False)
            if ask is not None:
                pipe.execute_command("ASKING")
            if use_eval:
                pipe.execute_command("EVAL", expanded(name), len(keys), *keys, *args)
            else:
                pipe.execute_command("EVALSHA", sha(name), len(keys), *keys, *args)
            pipe.execute_command(*wait)
            *_, reply, acked = pipe.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError, ClusterDownError, SlotNotCoveredError) as exc:
            failure = exc
            if not cluster or attempt + 1 >= tries:
                break
            _refresh(client)
            continue
        ask = None
        if isinstance(reply, redis.exceptions.NoScriptError) and not use_eval:
            use_eval, failure = True, None
            continue
        # MovedError is a subclass of AskError in redis-py: ask about it first.
        if cluster and isinstance(reply, AskError) and not isinstance(reply, MovedError):
            ask, failure = f"{reply.host}:{reply.port}", None
            continue
        if cluster and isinstance(reply, MovedError | ClusterDownError | TryAgainError):
            failure = reply
            if isinstance(reply, MovedError):
                client.nodes_manager.move_slot(reply)
            else:
                _refresh(client)
            continue
        if isinstance(reply, redis.ResponseError):
            raise translate(reply, name, client=client, keys=keys) from None
        if isinstance(acked, redis.ResponseError):
            raise ScriptFailed(
                f"{name}: applied, but the server refused {wait[0]} ({acked}); "
                + (
                    "Durability(fsync=True) needs appendonly yes on the master and its replicas"
                    if fsync
                    else "the server must be a master"
                )
            ) from None
        local, remote = (int(acked[0]), int(acked[1])) if fsync else (1, int(acked))
        if remote < replicas or local < 1:
            raise NotReplicated(
                f"{name}: applied on the master{f' {where}' if where else ''}, but "
                + ("not fsynced to its own AOF and " if local < 1 else "")
                + f"acknowledged by {remote} of {replicas} replica(s) within {timeout_ms} ms: it may be lost if "
                "that master fails now; repeat the call (enqueue with the same job_id is refused as a duplicate, "
                "a repeated complete answers gone), or ask for fewer replicas",
                acknowledged=remote,
                wanted=replicas,
                reply=reply,
            )
        return reply
    if isinstance(failure, redis.ResponseError):
        raise translate(failure, name, client=client, keys=keys) from None
    if isinstance(failure, RedisClusterException):
        raise _cluster_refusal(client, failure, name, keys) from None
    raise lost_server(client, failure or ConnectionError("no reply")) from None


def _target(client: RedisCluster, keys: list[str], name: str, ask: str | None) -> tuple[redis.Redis, str]:
    """The node client (one pool, one connection per pipeline) of the master serving ``keys``."""
    slots = {client.keyslot(k) for k in keys}
    if len(slots) != 1:
        raise _cross_slot(name, sorted(slots))
    node = client.get_node(node_name=ask) if ask else client.nodes_manager.get_node_from_slot(slots.pop())
    if node is None:  # an ASK to a node the client has not met yet
        client.nodes_manager.initialize()
        node = client.get_node(node_name=ask)
    return client.get_redis_connection(node), node.name


def _refresh(client: RedisCluster) -> None:
    """Ask a live node for the slot map again (after a node died or a failover moved slots)."""
    try:
        client.nodes_manager.initialize()
    except (redis.RedisError, OSError):
        pass  # no node answered yet; the next try asks again
