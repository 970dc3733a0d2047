"""A redis-py client and its pipelines, passed on call by call to something that sees each
call: the exercises' judge answers TIME with its fixed time (:mod:`.exercises.fixed_time`)
and the feedback's picture logs a move's commands (:class:`.evidence.Tracing`). Each is a
subclass of these two; they compose (the tracing client wraps the fixed-time one)."""

from __future__ import annotations

from typing import Any

import redis

__all__ = ["ClientProxy", "PipelineProxy"]


class ClientProxy:
    """``client``, passed on; a subclass gives its pipelines in :meth:`pipeline`."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transaction(self, func: Any, *watches: Any, **kwargs: Any) -> Any:
        # redis-py's own helper, on this client: its pipeline is this client's pipeline().
        return redis.Redis.transaction(self, func, *watches, **kwargs)  # type: ignore[arg-type]


class PipelineProxy:
    """A redis-py pipeline, passed on. A command it queues for ``execute()`` chains on the
    proxy (``p.zrem(...).zadd(...)``) and goes to :meth:`_queued`; one it runs at once (after
    WATCH) goes to :meth:`_ran`, its reply back to the caller. ``PASSED``: methods passed on
    untouched."""

    PASSED: tuple[str, ...] = ()

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe

    def __enter__(self) -> PipelineProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reset()

    def __len__(self) -> int:
        return len(self._pipe)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._pipe, name)
        if name.startswith("_") or not callable(found) or name in self.PASSED:
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._answer(name, args, kwargs, found(*args, **kwargs))

        return call

    def _answer(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], reply: Any) -> Any:
        if reply is self._pipe:
            self._queued(name, args, kwargs)
            return self
        self._ran(name, args, kwargs)
        return reply

    def _queued(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A command queued for ``execute()``."""

    def _ran(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A command run at once."""

    def _forget(self) -> None:
        """What the subclass keeps of the queued commands, dropped."""

    def reset(self) -> None:
        self._forget()
        self._pipe.reset()
