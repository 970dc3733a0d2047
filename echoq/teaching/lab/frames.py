"""A panel's recorded history: one :class:`Frame` per move (or sample), each drawn from one
atomic :meth:`echoq.Queue.snapshot`. The figure draws frames, the timeline scrubs them.

No widgets and no matplotlib here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...queue import Snapshot

__all__ = ["Frame", "History", "Lit"]


@dataclass(frozen=True)
class Lit:
    """The paths a move took, by the names of the figure's arrows: lit, with a pulse running
    along the first while the markers travel. A probe ran its script and moved nothing: its
    path is not lit, and the pulse goes half way and turns back."""

    paths: tuple[str, ...] = ()
    probe: bool = False

    @classmethod
    def moved(cls, *paths: str) -> Lit:
        return cls(tuple(paths))

    @classmethod
    def probed(cls, path: str) -> Lit:
        return cls((path,), probe=True)

    @property
    def on(self) -> tuple[str, ...]:
        """The paths drawn lit (none for a probe)."""
        return () if self.probe else self.paths

    def __bool__(self) -> bool:
        return bool(self.paths)


NO_PATH = Lit()


@dataclass(frozen=True)
class Frame:
    """What a panel showed at one moment: the snapshot it was drawn from, and the words."""

    index: int  # position in the panel's history, from 0, never reused
    at_s: float  # time.monotonic() when it was recorded
    clock: str  # wall-clock time of day, for the timeline ("14:03:07.2")
    move: str  # the move (or "sample", "settings") that produced it
    readout: str  # what the readout said
    snapshot: Snapshot | None  # THE one atomic read every marker and number comes from
    state: Mapping[str, Any] = field(default_factory=dict)  # the panel's own facts (settings, workers, ...)
    lit: Lit = NO_PATH  # the paths the move took, lit on the figure
    connected: bool = True

    def server_now_ms(self, at_s: float | None = None) -> int:
        """The server's now at ``at_s`` (monotonic), extrapolated from the snapshot's clock."""
        if self.snapshot is None:
            return 0
        if at_s is None:
            return self.snapshot.now_ms
        return self.snapshot.now_ms + int((at_s - self.at_s) * 1000)


class History:
    """The last ``limit`` frames of a panel, safe to read from any thread."""

    def __init__(self, limit: int = 600) -> None:
        self._frames: deque[Frame] = deque(maxlen=limit)
        self._next = 0
        self._lock = threading.Lock()

    def append(self, **fields: Any) -> Frame:
        with self._lock:
            now = time.time()
            clock = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 10) % 10}"
            frame = Frame(index=self._next, at_s=time.monotonic(), clock=clock, **fields)
            self._frames.append(frame)
            self._next += 1
            return frame

    def latest(self) -> Frame | None:
        with self._lock:
            return self._frames[-1] if self._frames else None

    def get(self, index: int) -> Frame | None:
        """The frame with this index, or None if it was never recorded or was dropped."""
        with self._lock:
            if not self._frames:
                return None
            offset = index - self._frames[0].index
            return self._frames[offset] if 0 <= offset < len(self._frames) else None

    @property
    def first_index(self) -> int:
        with self._lock:
            return self._frames[0].index if self._frames else 0

    @property
    def last_index(self) -> int:
        with self._lock:
            return self._frames[-1].index if self._frames else -1

    def __len__(self) -> int:
        with self._lock:
            return len(self._frames)

    def all(self) -> list[Frame]:
        with self._lock:
            return list(self._frames)
