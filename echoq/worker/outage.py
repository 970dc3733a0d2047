"""Riding out a lost server (a restart, a cluster failover): a move is run again until the
server answers, or until the worker gives up."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.exceptions import RedisClusterException

from ..errors import ServerUnavailable
from ..translation import first_line, lost_server
from .delivery import Life

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# What a server that stopped answering raises: through the registry (one line), or from a
# plain command (a cluster's slot without a master raises ClusterDownError, or no node).
LOST_SERVER = (
    ServerUnavailable,
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterError,
    RedisClusterException,
)


class Outages:
    """Runs a worker's queue moves, riding out a server that does not answer for up to
    ``give_up_s`` (counted from the first failure)."""

    def __init__(self, life: Life, client: Any, give_up_s: float) -> None:
        self.life, self.client, self.give_up_s = life, client, give_up_s

    def ride_out(self, move: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run a queue move; while the server does not answer, run it again (10 ms back-off,
        doubling to 200 ms) until it does or ``give_up_s`` has passed since the first
        failure, then raise the last failure as a one-line ServerUnavailable.

        Running a move again is safe: a claim whose reply was lost leaves a lease that runs
        out and is reaped; a completion, extension, give-back or retry that did apply answers
        gone or stale the second time (the fence); a sweep finds nothing left to move.
        """
        life = self.life
        first_failure: float | None = None
        pause = 0.01
        while True:
            try:
                result = move(*args, **kwargs)
            except LOST_SERVER as exc:
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                    log.warning(
                        "the server does not answer (%s: %s); trying again for up to %.1f s",
                        type(exc).__name__,
                        first_line(exc),
                        self.give_up_s,
                    )
                # A stop at once (a second signal) does not wait for the server: what is
                # held then runs out its lease, as a killed worker's would.
                if now - first_failure >= self.give_up_s or life.hurry:
                    if isinstance(exc, ServerUnavailable):
                        raise
                    raise lost_server(self.client, exc) from None
                life.crashed.wait(pause)  # an abandoned worker stops waiting at once
                life.check()
                pause = min(0.2, pause * 2)
                continue
            except Exception:
                if first_failure is not None:  # the server answered (NotReplicated, say): back
                    self._back(first_failure)
                raise
            if first_failure is not None:
                self._back(first_failure)
            return result

    def ride_out_claiming(self, lease_ms: int, move: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """:meth:`ride_out` for a move that claims jobs under ``lease_ms`` (0: it claims
        none): a try whose reply was lost may have claimed on the server, so it is noted
        (:meth:`Life.unheard`)."""
        if not lease_ms:
            return self.ride_out(move, *args, **kwargs)

        def tried(*a: Any, **k: Any) -> _T:
            try:
                return move(*a, **k)
            except LOST_SERVER:
                self.life.unheard(lease_ms)
                raise

        return self.ride_out(tried, *args, **kwargs)

    def _back(self, since: float) -> None:
        with self.life.lock:
            self.life.report.reconnected += 1
        log.info("the server answers again after %.2f s; carrying on", time.monotonic() - since)
