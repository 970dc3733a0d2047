"""Find the Lua scripts, expand their includes, and run them by SHA.

The scripts live in the top-level ``lua/`` folder of a source checkout; a built wheel
carries the same files as ``echoq/lua/``. A line ``--- @include "includes/name"`` (the
convention BullMQ's commands use) is replaced by ``lua/includes/name.lua``, so shared
pieces such as the fence are written once and every loaded script is self-contained.

Each client gets the scripts through redis-py's ``register_script``: EVALSHA first, and on
NOSCRIPT (a restarted or flushed server) it loads the source and tries again.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script

from .errors import InvalidArgument, InvalidJobId, ScriptFailed, ServerUnavailable

_HERE = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^--- @include "([a-z_/]+)"\s*$', re.MULTILINE)

NAMES = (
    "enqueue",
    "claim",
    "complete",
    "complete_and_claim",
    "retry",
    "extend",
    "reap",
    "stalled_check",
    "snapshot",
    "effect",
)


@cache
def lua_dir() -> Path:
    """The folder holding the ``.lua`` files: installed package data, else the checkout's."""
    for candidate in (_HERE / "lua", _HERE.parent / "lua"):
        if (candidate / "claim.lua").is_file():
            return candidate
    raise FileNotFoundError(
        f"echoq's Lua scripts are missing (looked in {_HERE / 'lua'} and {_HERE.parent / 'lua'}); reinstall echoq"
    )


def raw_source(name: str) -> str:
    """A script's file exactly as written (what the notebooks show learners)."""
    return (lua_dir() / f"{name}.lua").read_text()


@cache
def source(name: str) -> str:
    """A script with its includes expanded: what is sent to the server."""

    def expand(match: re.Match[str]) -> str:
        return (lua_dir() / f"{match.group(1)}.lua").read_text()

    return _INCLUDE.sub(expand, raw_source(name))


class Scripts:
    """The scripts bound to one client; ``scripts.run('claim', keys, args)``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._scripts: dict[str, Script] = {name: client.register_script(source(name)) for name in NAMES}

    def run(self, name: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        return call(self._scripts[name], name, keys, args, self.client, client)


def call(script: Script, name: str, keys: list[str], args: list[Any], client: redis.Redis, via: Any = None) -> Any:
    """Run a registered script on ``client`` (or the pipeline ``via``), its errors made typed."""
    try:
        return script(keys=keys, args=args, client=via or client)
    except redis.ResponseError as exc:
        raise translate(exc, name) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(client, exc) from None


def translate(exc: redis.ResponseError, name: str) -> Exception:
    text = str(exc)
    # Server errors look like 'BADID ...' or, wrapped by some versions, 'Error running
    # script ...: BADID ...'; find the code wherever it stands.
    for code, kind in (("BADID", InvalidJobId), ("BADARG", InvalidArgument)):
        at = text.find(code + " ")
        if at >= 0:
            detail = text[at + len(code) + 1 :].split(" script:")[0].strip()
            return kind(f"{name}: {detail}")
    return ScriptFailed(f"{name}.lua failed on the server: {text}")


def lost_server(client: redis.Redis, exc: Exception) -> ServerUnavailable:
    from .server import TRY_INSTEAD, describe_client

    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ServerUnavailable(
        f"lost Valkey at {describe_client(client)} ({reason}); is the server still running? "
        f"Reconnect with echoq.connect(), or {TRY_INSTEAD}"
    )
