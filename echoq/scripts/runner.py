"""Running the registry's scripts: EVALSHA, and the source once on NOSCRIPT.

:func:`run` sends ``EVALSHA``; on ``NOSCRIPT`` (a restarted or flushed server) it sends the
source once with ``EVAL``, which also caches it, so a client never needs ``SCRIPT LOAD``
rights. :func:`run_behind` writes a script behind another command (a blocking wait) on one
connection. Errors come back typed (:mod:`echoq.translation`). On a cluster (a
``redis.cluster.RedisCluster`` from :func:`echoq.connect`) the client sends each call to
the master serving the slot of its KEYS, which all carry one queue's hash tag; keys of two
slots are refused before anything is sent. :func:`preload` loads every registered script
for clients that may not (a workshop's learners).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from ..errors import ScriptFailed
from ..translation import cluster_refusal, doing, lost_server, translate
from .registry import expanded, names, payload_cap, sha

__all__ = ["run", "run_behind", "preload"]


def run(client: Any, name: str, keys: list[str], args: list[Any]) -> Any:
    """Run script ``name`` on ``client`` (EVALSHA, then EVAL once on NOSCRIPT), as expanded
    for its server's payload cap."""
    cap = payload_cap(client)
    try:
        with doing(f"{name}.lua", keys):
            try:
                return client.evalsha(sha(name, cap), len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                return client.eval(expanded(name, cap), len(keys), *keys, *args)
    except redis.ResponseError as exc:
        raise translate(exc, name, client=client, keys=keys) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise lost_server(client, exc) from None
    except RedisClusterException as exc:
        raise cluster_refusal(client, exc, name, keys) from None


def run_behind(
    client: Any, first: Callable[[Any], Any], name: str, keys: list[str], args: list[Any]
) -> tuple[Any, Any]:
    """A command (``first`` queues it on a pipeline: a blocking wait, say) and script ``name``
    written behind it on the same connection, in one write: the server runs the script the
    moment the command returns, with no round trip between the two. Returns both replies.
    The command's error is raised as it came; the script's NOSCRIPT (a flushed server) is
    answered by :func:`run` (its source once), any other error of the script is raised typed."""
    pipe = client.pipeline(transaction=False)
    first(pipe)
    pipe.evalsha(sha(name, payload_cap(client)), len(keys), *keys, *args)
    before, reply = pipe.execute(raise_on_error=False)
    if isinstance(before, Exception):
        raise before
    if isinstance(reply, redis.exceptions.NoScriptError):
        reply = run(client, name, keys, args)
    elif isinstance(reply, redis.ResponseError):
        raise translate(reply, name, client=client, keys=keys) from None
    return before, reply


def preload(client: Any, *, flush: bool = False) -> list[str]:
    """Load every script, as expanded for ``client``'s payload cap, into the server's cache
    (SCRIPT LOAD, as an admin): clients whose users may not load scripts (a workshop's
    learners) then always hit with EVALSHA. With ``flush``, the cache is emptied first
    (SCRIPT FLUSH frees the Lua heap) in the same MULTI as the loads: no other client's
    call runs between the two, so none meets a server without the scripts."""
    cap = payload_cap(client)
    wanted = names()
    pipe = client.pipeline(transaction=True)
    if flush:
        pipe.script_flush()
    for name in wanted:
        pipe.script_load(expanded(name, cap))
    replies = pipe.execute()[1 if flush else 0 :]
    for name, digest in zip(wanted, replies, strict=True):
        if digest != sha(name, cap):
            raise ScriptFailed(f"the server loaded {name}.lua under another SHA1 than the registry's")
    return wanted
