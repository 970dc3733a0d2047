"""The client :func:`echoq.connect` hands back: a ``redis.Redis`` whose ACL refusals are typed.

On a shared server (a workshop) each learner's user may touch only their own keys and
may not run commands that hurt others. Valkey refuses such a call with ``NOPERM``, or,
inside a script, with "ACL failure in script"; redis-py raises those as a bare
``ResponseError``. This client raises them as :class:`echoq.PermissionDenied` instead, for
a direct command (``GET``, ``FLUSHALL``, ``CONFIG``, ...), a script, a pipeline or MONITOR
alike, in the one line :func:`echoq.translation.denied` writes for every refusal: the user,
what was refused (the key, the queue or the command) and the ACL rule that would allow
it. Inside a library operation (:func:`echoq.translation.operation`) the line is named after
that operation (``claim.lua``, ``Queue.job``); otherwise after the command. Every other
reply and error is redis-py's own, unchanged.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import redis
from redis.client import Monitor, Pipeline

from .scripts.registry import expanded, names, payload_cap, sha
from .translation import denied, is_acl_refusal, operation

__all__ = ["TypedRedis"]

_SCRIPT_CALLS = ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO")
_SUBCOMMANDS = ("CONFIG", "SCRIPT", "FUNCTION", "CLIENT", "ACL", "DEBUG", "OBJECT", "MEMORY", "MODULE")


@cache
def _script_names(cap: int | None = None) -> dict[str, str]:
    """SHA1 and full text of every registry script (as loaded for a server's payload cap)
    -> its name, to name a refused script."""
    found: dict[str, str] = {}
    for name in names():
        found[sha(name, cap)] = f"{name}.lua"
        found[expanded(name, cap)] = f"{name}.lua"
    return found


def _named(args: tuple[Any, ...], cap: int | None = None) -> tuple[str, list[str]]:
    """What a refused command is reported as, and the keys it named: a registry script by
    its name and KEYS, any other command by its name (and subcommand) and its first key."""
    if not args:
        return "command", []
    command = str(args[0]).upper()
    if command in _SCRIPT_CALLS and len(args) > 2:
        try:
            numkeys = int(args[2])
        except ValueError:
            numkeys = 0
        return _script_names(cap).get(str(args[1]), "script"), [str(k) for k in args[3 : 3 + numkeys]]
    if len(args) > 1 and command in _SUBCOMMANDS:
        return f"{command} {str(args[1]).upper()}", []
    return command, [str(args[1])] if len(args) > 1 else []  # most commands take their key first


def _refused(client: redis.Redis, exc: Exception, args: tuple[Any, ...]) -> Exception:
    what, keys = operation() or _named(args, payload_cap(client))
    return denied(client, exc, what, keys)


class _Pipeline(Pipeline):
    def __init__(self, client: redis.Redis, *rest: Any) -> None:
        super().__init__(client.connection_pool, *rest)
        self._typed_client = client

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = [args for args, _options in self.command_stack]
        try:
            return super().execute(raise_on_error)
        except redis.ResponseError as exc:
            if not is_acl_refusal(exc):
                raise
            refused = next((a for a in stack if str(a[0]).upper() not in ("MULTI", "EXEC")), ("MULTI",))
            raise _refused(self._typed_client, exc, refused) from None


class _Monitor(Monitor):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client.connection_pool)
        self._typed_client = client

    def __enter__(self) -> _Monitor:
        try:
            return super().__enter__()
        except redis.ResponseError as exc:
            if not is_acl_refusal(exc):
                raise
            self.connection_pool.release(self.connection)
            raise _refused(self._typed_client, exc, ("MONITOR",)) from None


class TypedRedis(redis.Redis):
    """``redis.Redis``, except that an ACL refusal is :class:`echoq.PermissionDenied`."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except redis.ResponseError as exc:
            if is_acl_refusal(exc):
                raise _refused(self, exc, args) from None
            raise

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        return _Pipeline(self, self.response_callbacks, transaction, shard_hint)

    def monitor(self) -> Monitor:
        return _Monitor(self)
