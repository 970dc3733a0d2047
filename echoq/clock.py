"""The server's clock, the only clock leases are written and judged on -- and the clock
:class:`echoq.Queue` mints JOB ids on."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis
from redis.cluster import RedisCluster

from .errors import ServerUnavailable
from .ids import Minter
from .translation import translating

__all__ = ["server_now_ms", "wait_for_server_ms", "wait_until_expired", "ServerClock", "server_clock"]


def server_now_ms(client: redis.Redis) -> int:
    """The server's TIME in milliseconds (what the scripts compute as `now`)."""
    seconds, micros = _time(client)
    return seconds * 1000 + micros // 1000


class ServerClock:
    """The server's clock, followed locally: one TIME, then this machine's monotonic clock
    from there, read again every ``refresh_s`` seconds so drift cannot build up. This
    machine's wall clock is never used, so however wrong it is, ids minted here
    (:meth:`mint`) sort among other producers' by the server's time."""

    def __init__(self, refresh_s: float = 60.0) -> None:
        self._refresh_ns = int(refresh_s * 1e9)
        self._lock = threading.Lock()
        self._server_ms = 0.0
        self._at_ns = -self._refresh_ns - 1
        self._minter = Minter()

    def now_ms(self, client: redis.Redis) -> int:
        """The server's now in ms, read with TIME on ``client`` at most every refresh_s."""
        with self._lock:
            if time.monotonic_ns() - self._at_ns > self._refresh_ns:
                before = time.monotonic_ns()
                seconds_micros = _time(client)
                after = time.monotonic_ns()
                self._server_ms = seconds_micros[0] * 1000 + seconds_micros[1] / 1000
                self._at_ns = (before + after) // 2
            return int(self._server_ms + (time.monotonic_ns() - self._at_ns) / 1e6)

    def mint(self, client: redis.Redis) -> str:
        """A JOB id minted at the server's now: after every id this clock minted before."""
        return self._minter.mint(self.now_ms(client))


def _time(client: redis.Redis) -> tuple[int, int]:
    with translating(client, "read the server's clock (TIME)"):
        if isinstance(client, RedisCluster):  # TIME has no key: ask one node, the same each time
            seconds, micros = client.get_redis_connection(client.get_default_node()).time()
        else:
            seconds, micros = client.time()
    return int(seconds), int(micros)


_clocks: dict[tuple[Any, ...], ServerClock] = {}
_clocks_lock = threading.Lock()


def server_clock(client: redis.Redis) -> ServerClock:
    """The one :class:`ServerClock` of this process for the server ``client`` talks to, so
    every queue on that server mints ids in one order."""
    if isinstance(client, RedisCluster):  # one cluster, one clock: named by its seed nodes
        where: tuple[Any, ...] = ("cluster", *sorted(client.nodes_manager.startup_nodes))
    else:
        kw = client.connection_pool.connection_kwargs
        where = (kw.get("path"), kw.get("host"), kw.get("port"))
    with _clocks_lock:
        clock = _clocks.get(where)
        if clock is None:
            clock = _clocks[where] = ServerClock()
        return clock


def wait_for_server_ms(client: redis.Redis, target_ms: int, timeout_s: float = 5.0) -> bool:
    """Poll the server's clock until it reaches ``target_ms`` (a lease deadline, say).

    Returns False if ``timeout_s`` passed first. Polling the server rather than sleeping on
    the local clock keeps the wait honest: a lease expires when the SERVER says so.
    """
    give_up = time.monotonic() + timeout_s
    while (now_ms := server_now_ms(client)) < target_ms:
        left_s = give_up - time.monotonic()
        if left_s < 0:
            return False
        # This machine's clock runs at the server's rate: sleep most of what is left, then
        # ask the server again, rather than asking it a thousand times a second.
        time.sleep(max(0.001, min(0.9 * (target_ms - now_ms) / 1000, left_s)))
    return True


def wait_until_expired(client: redis.Redis, deadline_ms: int, timeout_s: float = 5.0) -> None:
    """Wait until a lease deadline has come on the server's clock: from then on the reaper
    (which takes deadline <= now) treats the lease as expired. Raises
    :class:`ServerUnavailable` in one line if the clock does not get there in time."""
    if not wait_for_server_ms(client, deadline_ms, timeout_s):
        raise ServerUnavailable(
            f"the server's clock did not reach {deadline_ms} within {timeout_s:.0f} s; is Valkey overloaded?"
        )
