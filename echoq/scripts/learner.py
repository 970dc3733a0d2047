"""Running Lua that is not one of the registry's scripts: a learner's answer to an exercise."""

from __future__ import annotations

from typing import Any

import redis
from redis.exceptions import RedisClusterException

from ..translation import cluster_refusal, lost_server

__all__ = ["run_text"]


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
        raise cluster_refusal(client, exc, name, keys) from None
