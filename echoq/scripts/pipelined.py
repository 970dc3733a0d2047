"""Calls of one script sent ahead of their replies on one connection (RESP pipelining)."""

from __future__ import annotations

from collections import deque
from typing import Any

import redis

from ..translation import doing, lost_server, translate
from .registry import payload_cap, sha
from .runner import run

__all__ = ["Pipelined"]


class Pipelined:
    """Calls of script ``name`` sent on one connection ahead of their replies (RESP pipelining).

    :meth:`send` returns as soon as the call is written; :meth:`receive` reads the oldest
    reply. The server runs the calls one at a time in the order sent, as it runs any
    client's; what the caller gains is that the server works on one call while the caller
    handles the reply to the one before. A NOSCRIPT reply (a flushed or restarted server:
    that call did not run) is run again with :func:`run`, in order. Errors are raised as
    :func:`run` raises them. :meth:`close` gives the connection back to the pool (or drops
    it, when replies were left unread)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client, self.name = client, name
        self._digest = sha(name, payload_cap(client))
        self._connection: Any = None
        self._sent: deque[tuple[list[str], list[Any]]] = deque()

    def send(self, keys: list[str], args: list[Any]) -> None:
        try:
            if self._connection is None:  # connects: the server may be gone already
                self._connection = self.client.connection_pool.get_connection()
            with doing(f"{self.name}.lua", keys):
                # A health check (PING, when the client asks for them) would read a pending reply.
                self._connection.send_command(
                    "EVALSHA", self._digest, len(keys), *keys, *args, check_health=not self._sent
                )
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._drop()
            raise lost_server(self.client, exc) from None
        self._sent.append((keys, args))

    def receive(self) -> Any:
        keys, args = self._sent.popleft()
        try:
            with doing(f"{self.name}.lua", keys):
                try:
                    return self._connection.read_response(disconnect_on_error=False)
                except redis.exceptions.NoScriptError:
                    return run(self.client, self.name, keys, args)
        except redis.ResponseError as exc:
            raise translate(exc, self.name, client=self.client, keys=keys) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._drop()
            raise lost_server(self.client, exc) from None
        except BaseException:
            self._drop()  # interrupted mid-reply: the connection's state is unknown
            raise

    def close(self) -> None:
        if self._connection is None:
            return
        if self._sent:
            self._drop()
            return
        self.client.connection_pool.release(self._connection)
        self._connection = None

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.disconnect()
            self.client.connection_pool.release(self._connection)
            self._connection = None
        self._sent.clear()
