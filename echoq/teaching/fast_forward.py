"""A teaching affordance: skip the wait for a lease to run out, without touching any clock."""

from __future__ import annotations

from collections.abc import Callable

from .. import scripts
from ..limits import BOUNDS, whole
from ..queue import Queue

__all__ = ["fast_forward"]

# Called with the queue after each fast-forward: a check notes it on its run's timeline.
observers: list[Callable[[Queue], None]] = []


def fast_forward(queue: Queue, advance_ms: int | None = None) -> tuple[int, int]:
    """Pull the queue's live lease deadlines ``advance_ms`` earlier (all the way to the
    server's now when None) with ``lua/teaching/fast_forward.lua``. Returns (now, moved).

    The server's clock is untouched: the reaper still judges leases against ``TIME``,
    exactly as if each lease had been taken ``advance_ms`` earlier.
    """
    longest = BOUNDS["lease_ms"][1]
    advance = longest if advance_ms is None else whole("advance_ms", advance_ms, 0, longest, unit="of milliseconds")
    now, moved = scripts.run(queue.client, "teaching/fast_forward", [queue.keys.active], [advance])
    for observe in observers:
        observe(queue)
    return int(now), int(moved)
