"""Every error the server or the network gives, as the library's one-line typed errors.

**Scripts.** An error reply ``CODE message`` from a script is raised as the class
:data:`echoq.errors.SCRIPT_ERRORS` names for ``CODE`` (:func:`translate`).

**Direct commands too.** The library's few direct commands (a row read, a SCAN, TIME, ...)
run inside :func:`translating`, which turns what the server or the network says into the same
typed one-line errors as a script's: an ACL refusal is :class:`~echoq.PermissionDenied`
naming the user, the command or key refused and what to do; a lost connection is
:class:`~echoq.ServerUnavailable`; a BUSY server :class:`~echoq.ServerBusy`.

**One message for every refusal.** :func:`denied` writes every ``PermissionDenied`` line,
and :func:`is_acl_refusal` is the one test of what counts as a refusal. The client
:func:`echoq.connect` returns (:class:`echoq.client.TypedRedis`) raises a refusal as
``PermissionDenied`` itself, for any command -- a learner's own ``GET``, a pipeline,
MONITOR, a script -- naming the operation the library announced with :func:`doing`
(:func:`operation`), else the command. A plain ``redis.Redis`` a caller brought raises a
bare ``ResponseError``, which the runner and :func:`translating` turn into the same line.

**Clusters.** A cluster's own replies (CROSSSLOT, MOVED to a node the client does not
follow, CLUSTERDOWN) get one line each that says what to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
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

from .address import describe_client, try_instead
from .errors import (
    ACL_REFUSALS,
    SCRIPT_ERRORS,
    EchoqError,
    InvalidArgument,
    OutOfMemory,
    PermissionDenied,
    ScriptFailed,
    ServerBusy,
    ServerUnavailable,
)

__all__ = [
    "doing",
    "operation",
    "translating",
    "typed",
    "busy",
    "translate",
    "first_line",
    "is_acl_refusal",
    "denied",
    "lost_server",
    "out_of_memory",
    "cluster_refusal",
    "cross_slot",
]


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
    """The library operation running on this thread (inside :func:`run` or :func:`translating`):
    its name and the keys it touches, for :func:`denied`; None outside one."""
    return _OPERATION.get()


@contextmanager
def translating(client: Any, what: str, keys: Sequence[str] = ()) -> Iterator[None]:
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
        if _is_oom(exc):
            raise out_of_memory(what, exc) from None
        raise EchoqError(f"{what}: the server replied with an error ({first_line(exc)})") from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(client, exc) from None
    except RedisClusterException as exc:
        raise cluster_refusal(client, exc, what, list(keys)) from None


def typed(client: Any, exc: BaseException, what: str) -> BaseException:
    """A client library's error that escaped the translations above, as the one-line
    :class:`EchoqError` :func:`translating` would have raised for it (``what``: the operation);
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
        if _is_oom(exc):
            return out_of_memory(what, exc)
        return EchoqError(f"{what}: the server replied with an error ({first_line(exc)})")
    if isinstance(exc, redis.RedisError | RedisClusterException):
        return EchoqError(f"{what}: {type(exc).__name__}: {first_line(exc)}")
    return exc


def _is_busy(exc: BaseException) -> bool:
    """A BUSY reply: the server is held by a script past its time limit (nothing ran)."""
    return str(exc).startswith("BUSY ")


def busy(what: str, exc: BaseException) -> ServerBusy:
    """One line for a BUSY reply: what was refused, why, and what ends it."""
    return ServerBusy(
        f"{what}: the server is busy running a script past its time limit and runs nothing else until it "
        "ends; nothing of this call ran. SCRIPT KILL ends a script that has not written (else only a restart "
        f"does); retry once the server answers ({first_line(exc)})"
    )


def _is_oom(exc: BaseException) -> bool:
    """An OOM reply: the server is at its maxmemory and refuses writes (nothing ran)."""
    return str(exc).startswith("OOM ") or isinstance(exc, redis.exceptions.OutOfMemoryError)


def out_of_memory(what: str, exc: BaseException) -> OutOfMemory:
    """One line for an OOM reply: what was refused, and the ways to free or add memory."""
    return OutOfMemory(
        f"{what}: the server is out of memory (at its maxmemory) and refused the write; nothing of this call ran. "
        "Free memory (python -m echoq dead purge --all, or delete keys you no longer need) or raise the server's "
        f"maxmemory; on a workshop's class server, tell the instructor ({first_line(exc)})"
    )


def translate(exc: redis.ResponseError, name: str, *, client: Any = None, keys: Sequence[str] = ()) -> Exception:
    """The typed error for a script's error reply: its first word looked up in SCRIPT_ERRORS;
    an ACL refusal (NOPERM on EVALSHA, or "ACL failure" inside the script) is
    :class:`PermissionDenied` (see :func:`denied`)."""
    if is_acl_refusal(exc):
        return denied(client, exc, f"{name}.lua", keys)
    if _is_busy(exc):
        return busy(f"{name}.lua", exc)
    if _is_oom(exc):
        return out_of_memory(f"{name}.lua", exc)
    cluster = _cluster_reply(exc, name)
    if cluster is not None:
        return cluster
    text = first_line(exc)
    code, _, detail = text.partition(" ")
    if code in SCRIPT_ERRORS:
        kind = SCRIPT_ERRORS[code][0]
        return kind(f"{name}: {detail}")
    return ScriptFailed(f"{name}.lua failed on the server: {text}")


def first_line(exc: Exception) -> str:
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
    said = first_line(exc)
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
    reason = first_line(exc)
    return ServerUnavailable(
        f"lost Valkey at {describe_client(client)} ({reason}); is the server still running? "
        f"Reconnect with echoq.connect(), or {try_instead()}"
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


def cross_slot(name: str, slots: list[int] | None) -> InvalidArgument:
    """Keys of several slots in one call (``slots``, when known), refused before anything is sent."""
    count = "several" if slots is None else len(slots)
    return InvalidArgument(
        f"{name}: its KEYS fall in {count} hash slots {slots or ''} (CROSSSLOT); "
        "a script may touch the keys of one queue only, and they all carry its {tag}"
    )


def cluster_refusal(client: Any, exc: RedisClusterException, name: str, keys: list[str]) -> Exception:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "same key slot" in text or "same slot" in text:
        return cross_slot(name, sorted({client.keyslot(k) for k in keys}) if isinstance(client, RedisCluster) else None)
    if isinstance(exc, SlotNotCoveredError):
        return ServerUnavailable(
            f"{name}: no master serves this queue's slot right now ({text}); a failover may be under way: "
            "try again in a moment"
        )
    return lost_server(client, exc)
