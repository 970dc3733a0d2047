"""The server's clock, the only clock leases are written and judged on."""

from __future__ import annotations

import time

import redis

from .errors import ServerUnavailable


def server_now_ms(client: redis.Redis) -> int:
    """The server's TIME in milliseconds (what the scripts compute as `now`)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_for_server_ms(client: redis.Redis, target_ms: int, timeout_s: float = 5.0) -> bool:
    """Poll the server's clock until it reaches ``target_ms`` (a lease deadline, say).

    Returns False if ``timeout_s`` passed first. Polling the server rather than sleeping on
    the local clock keeps the wait honest: a lease expires when the SERVER says so.
    """
    give_up = time.monotonic() + timeout_s
    while server_now_ms(client) < target_ms:
        if time.monotonic() > give_up:
            return False
        time.sleep(0.001)
    return True


def wait_until_expired(client: redis.Redis, deadline_ms: int, timeout_s: float = 5.0) -> None:
    """Wait until a lease deadline has come on the server's clock: from then on the reaper
    (which takes deadline <= now) treats the lease as expired. Raises
    :class:`ServerUnavailable` in one line if the clock does not get there in time."""
    if not wait_for_server_ms(client, deadline_ms, timeout_s):
        raise ServerUnavailable(
            f"the server's clock did not reach {deadline_ms} within {timeout_s:.0f} s; is Valkey overloaded?"
        )
