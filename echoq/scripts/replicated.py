"""A script and the durability wait, on one connection to the master serving its keys.

:func:`run_replicated` sends the script and a ``WAIT`` (or ``WAITAOF``) in one
non-transactional pipeline on ONE connection, because ``WAIT`` counts the replicas that
have the writes of its own connection, and of no other. On a cluster it therefore picks
the master itself, and follows the cluster's redirections (MOVED, ASK) and failovers on
its own rather than through the cluster client.
"""

from __future__ import annotations

import time
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

from ..errors import NotReplicated, ScriptFailed
from ..translation import cluster_refusal, cross_slot, lost_server, translate
from .registry import expanded, payload_cap, sha

__all__ = ["run_replicated"]


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
                pipe.execute_command("EVAL", expanded(name, payload_cap(client)), len(keys), *keys, *args)
            else:
                pipe.execute_command("EVALSHA", sha(name, payload_cap(client)), len(keys), *keys, *args)
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
        raise cluster_refusal(client, failure, name, keys) from None
    raise lost_server(client, failure or ConnectionError("no reply")) from None


def _target(client: RedisCluster, keys: list[str], name: str, ask: str | None) -> tuple[redis.Redis, str]:
    """The node client (one pool, one connection per pipeline) of the master serving ``keys``."""
    slots = {client.keyslot(k) for k in keys}
    if len(slots) != 1:
        raise cross_slot(name, sorted(slots))
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
