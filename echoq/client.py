"""The client :func:`echoq.connect` hands back: a ``redis.Redis`` whose ACL refusals are typed.

On a shared server (a workshop) each learner's user may touch only their own keys and
may not run commands that hurt others. Valkey refuses such a call with ``NOPERM``, or,
inside a script, with "ACL failure in script"; redis-py raises those as a bare
``ResponseError``. This client raises them as :class:`echoq.PermissionDenied` instead, in
the same one-line form the script registry uses (:func:`echoq.scripts.translate`), for a
direct command (``GET``, ``FLUSHALL``, ``CONFIG``, ...), a script, a pipeline or MONITOR
alike. Every other reply and error is redis-py's own, unchanged.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import redis
from redis.client import Monitor, Pipeline

from .errors import ACL_REFUSALS

__all__ = ["TypedRedis", "is_acl_refusal"]


# Commands the server's own configuration refuses before any ACL is consulted (Valkey and
# Redis keep DEBUG and MODULE off unless enable-debug-command / enable-module-command say so).
_PROTECTED = re.compile(r"^(\w+) command not allowed\b")


def is_acl_refusal(exc: BaseException) -> bool:
    """True for the server refusing a command or a key to this user (direct or in a script),
    by its ACL or, for DEBUG and MODULE, by its configuration."""
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return True
    if not isinstance(exc, redis.ResponseError):
        return False
    text = str(exc)
    return _PROTECTED.match(text) is not None or any(m.lower() in text.lower() for m in ACL_REFUSALS)


def _server_words(exc: redis.ResponseError) -> redis.ResponseError:
    """The refusal in the server's own words, without the parts that name the Lua frame."""
    text = str(exc)
    protected = _PROTECTED.match(text)
    if protected:
        return redis.exceptions.NoPermissionError(f"{protected.group(1)} is turned off in the server's configuration")
    if text.startswith("ACL failure in script: "):
        core = text[len("ACL failure in script: ") :].split(" script: ")[0].rstrip(" .")
        return redis.exceptions.NoPermissionError(f"{core}, inside the script")
    return exc


@cache
def _script_names() -> dict[str, str]:
    """SHA1 and full text of every registry script -> its name, to name a refused script."""
    from . import scripts

    found: dict[str, str] = {}
    for name in scripts.names():
        found[scripts.sha(name)] = name
        found[scripts.expanded(name)] = name
    return found


def _what(args: tuple[Any, ...]) -> str:
    """The name a refusal is reported under: the script's, or the command (with subcommand)."""
    if not args:
        return "command"
    command = str(args[0]).upper()
    if command in ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO") and len(args) > 1:
        return _script_names().get(str(args[1]), "script")
    if len(args) > 1 and command in ("CONFIG", "SCRIPT", "FUNCTION", "CLIENT", "ACL", "DEBUG", "OBJECT", "MEMORY"):
        return f"{command} {str(args[1]).upper()}"
    return command


def _refused(exc: redis.ResponseError, args: tuple[Any, ...]) -> Exception:
    from .scripts import translate

    what = _what(args)
    command = str(args[0]).upper() if args else ""
    if "key" in str(exc).lower() and len(args) > 1 and command not in ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO"):
        what = f"{what} {args[1]}"  # a key refused: name it (most commands take their key first)
    return translate(_server_words(exc), what)


class _Pipeline(Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = [args for args, _options in self.command_stack]
        try:
            return super().execute(raise_on_error)
        except redis.ResponseError as exc:
            if not is_acl_refusal(exc):
                raise
            refused = next((a for a in stack if str(a[0]).upper() not in ("MULTI", "EXEC")), ("MULTI",))
            raise _refused(exc, refused) from None


class _Monitor(Monitor):
    def __enter__(self) -> _Monitor:
        try:
            return super().__enter__()
        except redis.ResponseError as exc:
            if not is_acl_refusal(exc):
                raise
            self.connection_pool.release(self.connection)
            raise _refused(exc, ("MONITOR",)) from None


class TypedRedis(redis.Redis):
    """``redis.Redis``, except that an ACL refusal is :class:`echoq.PermissionDenied`."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except redis.ResponseError as exc:
            if is_acl_refusal(exc):
                raise _refused(exc, args) from None
            raise

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)

    def monitor(self) -> Monitor:
        return _Monitor(self.connection_pool)
