"""The Reap lab's sentences: workers that crash, the stalled check's sweeps, the race.

Functions take facts and return plain text; see :mod:`echoq.teaching.lab.words` for what
every panel shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..words import listed, seconds

SETTINGS: dict[str, Callable[[Any], str]] = {
    "max_stalled": lambda v: f"max_stalled = {v}: the next sweep dead-letters a job at its stall number {v}.",
    "lease_ms": lambda v: f"First worker's lease: {seconds(v)} (the others get 2x, 3x ...).",
    "workers": lambda v: f"'start workers' now starts {v} worker(s).",
}


def title(max_stalled: int) -> str:
    return f"Stalled recovery · max_stalled = {max_stalled}: stall {max_stalled} is fatal"


def started(n: int, pending_key: str) -> str:
    return f"enqueue.lua added {n} job(s) to {pending_key}; {n} worker(s) will claim them."


def workers_crashed(n: int, active_key: str) -> str:
    return (
        f"{n} worker(s) claimed a job each into {active_key} (staggered leases) and crashed; each job sits at "
        "its lease deadline on the time axis."
    )


def nothing_pending(pending_key: str) -> str:
    return f"{pending_key} is empty: nothing to claim. Nothing changed."


def claimed_again(n: int) -> str:
    return f"{n} job(s) claimed again by new workers, which crashed too."


def sweep_nothing() -> str:
    return "stalled_check.lua found no expired lease: every worker's lease still runs. Wait, or fast-forward."


def sweep(recovered: Sequence[str], dead: Sequence[str], pending_key: str, dead_key: str, max_stalled: int) -> str:
    parts = []
    if recovered:
        parts.append(f"moved {listed(recovered, at_most=5)} back to {pending_key}")
    if dead:
        parts.append(
            f"dead-lettered {listed(dead, at_most=5)} into {dead_key} "
            f"(its stall count reached max_stalled={max_stalled})"
        )
    return f"stalled_check.lua {' and '.join(parts)}."


def race(racy_deliveries: int, racy_dups: int, atomic_deliveries: int, atomic_dups: int) -> str:
    return (
        f"Race: two overlapping two-step sweeps (check, then move) gave one crashed job {racy_deliveries} "
        f"deliveries, {racy_dups} duplicate: two workers hold it at once. The atomic reap.lua gave "
        f"{atomic_deliveries} deliveries, {atomic_dups} duplicate."
    )


def stalled_label(stalled: int) -> str:
    return f"st {stalled}" if stalled else ""
