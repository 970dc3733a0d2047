"""Fault injection for lessons and the chaos lab, on the Worker's public hooks.

:class:`CrashPlan` is a :class:`echoq.WorkerHooks`: it picks, when a job is claimed,
whether this delivery dies and at which :class:`~echoq.Checkpoint`, and when the worker
reaches that checkpoint it either

* ``simulate`` -- raises :class:`echoq.Abandon`: the worker stops touching Valkey at once,
  leaving the job leased, exactly as a killed process leaves it (for workers that are
  threads in a notebook's kernel);
* ``kill`` -- SIGKILLs its own process (for worker processes, as the chaos lab runs).

The production Worker knows nothing of either: it only calls the hook it was given.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import weakref
from collections.abc import Callable, Iterable
from enum import StrEnum

from ..errors import InvalidArgument
from ..limits import fraction, whole
from ..worker import Abandon, Checkpoint, Delivery

__all__ = ["CrashMode", "CrashPlan", "checkpoints"]


class CrashMode(StrEnum):
    SIMULATE = "simulate"  # abandon the job in-process, as a killed process would
    KILL = "kill"  # SIGKILL this process (for worker subprocesses)


def checkpoints(points: Checkpoint | str | Iterable[Checkpoint | str]) -> tuple[Checkpoint, ...]:
    """Checkpoints from names (``'mid_job'``, a comma list, or several); one-line error if unknown."""
    if isinstance(points, str):
        points = [p.strip() for p in points.split(",") if p.strip()]
    try:
        found = tuple(Checkpoint(p) for p in points)
    except ValueError:
        names = ", ".join(p.value for p in Checkpoint)
        raise InvalidArgument(f"crash points must be among {names}, got {points!r}") from None
    if not found:
        raise InvalidArgument(f"name at least one crash point ({', '.join(p.value for p in Checkpoint)})")
    return found


class CrashPlan:
    """Crash at ``at`` (one checkpoint, or a random one of several), on a ``rate`` fraction of
    deliveries, at most ``times`` times (None: no limit). ``on_crash`` is told just before."""

    def __init__(
        self,
        at: Checkpoint | str | Iterable[Checkpoint | str],
        mode: CrashMode | str = CrashMode.SIMULATE,
        *,
        rate: float = 1.0,
        times: int | None = None,
        seed: int | None = None,
        on_crash: Callable[[Checkpoint], None] | None = None,
    ) -> None:
        self.at = checkpoints(at)
        try:
            self.mode = CrashMode(mode)
        except ValueError:
            raise InvalidArgument(f"crash mode must be 'simulate' or 'kill', got {mode!r}") from None
        self.rate = fraction("crash rate", rate, 0.0, 1.0)
        self.times = None if times is None else whole("crash times", times, 0)
        self.on_crash = on_crash
        self.crashes = 0  # deliveries picked to crash so far
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._picked: weakref.WeakKeyDictionary[Delivery, Checkpoint] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        points = ",".join(p.value for p in self.at)
        return f"CrashPlan({points}, {self.mode.value}, rate={self.rate}, times={self.times}, crashes={self.crashes})"

    def _pick(self) -> Checkpoint | None:
        with self._lock:  # drain threads pick concurrently; `times` must hold across them
            if self.times is not None and self.crashes >= self.times:
                return None
            if self.rate < 1.0 and self._rng.random() >= self.rate:
                return None
            self.crashes += 1
            return self._rng.choice(self.at)

    def reached(self, delivery: Delivery, checkpoint: Checkpoint) -> None:
        if checkpoint is Checkpoint.AFTER_CLAIM:
            point = self._pick()
            if point is not None:
                self._picked[delivery] = point
        if self._picked.get(delivery) is not checkpoint:
            return
        if self.on_crash is not None:
            self.on_crash(checkpoint)
        if self.mode is CrashMode.KILL:
            os.kill(os.getpid(), signal.SIGKILL)
        raise Abandon(checkpoint)
