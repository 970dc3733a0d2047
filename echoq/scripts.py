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
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from pathlib import Path
from typing import Any

import redis

from .errors import ACL_REFUSALS, SCRIPT_ERRORS, InvalidArgument, PermissionDenied, ScriptFailed, ServerUnavailable

__all__ = [
    "lua_dir",
    "names",
    "raw_source",
    "expanded",
    "sha",
    "run",
    "run_text",
    "preload",
    "translate",
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


def run(client: Any, name: str, keys: list[str], args: list[Any]) -> Any:
    """Run script ``name`` on ``client`` (EVALSHA, then EVAL once on NOSCRIPT)."""
    digest = sha(name)
    try:
        try:
            return client.evalsha(digest, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return client.eval(expanded(name), len(keys), *keys, *args)
    except redis.ResponseError as exc:
        raise translate(exc, name) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(client, exc) from None


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

    Errors are NOT translated: the caller shows the server's own words to the learner."""
    try:
        return client.eval(text, len(keys), *keys, *args)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(client, exc) from None


def translate(exc: redis.ResponseError, name: str) -> Exception:
    """The typed error for a script's error reply: its first word looked up in SCRIPT_ERRORS."""
    text = str(exc)
    if isinstance(exc, redis.exceptions.NoPermissionError) or any(
        m in text.lower() for m in map(str.lower, ACL_REFUSALS)
    ):
        return PermissionDenied(
            f"{name}: the server refused this user a key or a command ({text.split(' script:')[0].strip()}); "
            "you may only touch your own queues: check the queue name and the user in VALKEY_URL"
        )
    code, _, detail = text.partition(" ")
    if code in SCRIPT_ERRORS:
        kind = SCRIPT_ERRORS[code][0]
        return kind(f"{name}: {detail.split(' script:')[0].strip()}")
    return ScriptFailed(f"{name}.lua failed on the server: {text}")


def lost_server(client: Any, exc: Exception) -> ServerUnavailable:
    from .server import TRY_INSTEAD, describe_client

    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ServerUnavailable(
        f"lost Valkey at {describe_client(client)} ({reason}); is the server still running? "
        f"Reconnect with echoq.connect(), or {TRY_INSTEAD}"
    )
