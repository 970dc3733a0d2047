"""The Claim lab's sentences: its title, the readout of each move, the worker's card.

Functions take facts and return plain text; see :mod:`echoq.teaching.lab.words` for what
every panel shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..words import listed, seconds, short

SETTINGS: dict[str, Callable[[Any], str]] = {
    "crash": lambda v: (
        "crash mid-job is ON: 'complete' kills the worker instead of completing."
        if v
        else "crash mid-job is off: 'complete' completes the job."
    ),
    "lease_ms": lambda v: f"Lease set to {seconds(v)}: the next claim leases for that long.",
}


def title(crash: bool, lease_ms: int) -> str:
    crash_words = "ON" if crash else "off"
    return f"The recoverable claim · lease {seconds(lease_ms)} · crash mid-job {crash_words}"


def enqueued(job_id: str, pending_key: str) -> str:
    return f"enqueue.lua added {short(job_id)} to {pending_key}."


def still_holding(job_id: str) -> str:
    return f"The worker already holds {short(job_id)}: complete it (or crash) first. Nothing changed."


def empty(pending_key: str) -> str:
    return f"claim.lua found {pending_key} empty: enqueue a job first. Nothing changed."


def claimed(job_id: str, active_key: str, lease_ms: int, deadline_ms: int, token: int) -> str:
    return (
        f"claim.lua moved {short(job_id)} from pending to {active_key} under a {seconds(lease_ms)} lease "
        f"(deadline {deadline_ms} on the server's clock); its fencing token = {token}."
    )


def nothing_held() -> str:
    return "The worker holds no job: claim one first. Nothing changed."


def crashed(job_id: str, active_key: str, ms_left: int | None) -> str:
    """``ms_left``: the lease's time left on the server's clock at this read (None: not in active)."""
    crashed = "The worker crashed mid-job: no complete ran"
    if ms_left is None:
        return f"{crashed}; {short(job_id)} is no longer in {active_key}."
    if ms_left <= 0:
        return (
            f"{crashed}. {short(job_id)} is still in {active_key}, but its lease ran out {seconds(-ms_left)} ago "
            "on the server's clock: it is past its deadline, and the next reap returns it to pending."
        )
    return (
        f"{crashed}, so {short(job_id)} stays leased in {active_key} for {seconds(ms_left)} more, until its "
        "lease runs out; then a reap returns it to pending."
    )


def completed(job_id: str, token: int, active_key: str, done_key: str) -> str:
    return (
        f"complete.lua (token {token}) took {short(job_id)} out of {active_key}: the row is deleted, "
        f"the id remembered in {done_key}."
    )


def stale(job_id: str, token: int, outcome: str) -> str:
    return (
        f"complete.lua refused {short(job_id)} as {outcome}: token {token} no longer holds it (the lease "
        "ran out and it was reaped). Nothing changed."
    )


def reaped(ids: Sequence[str], active_key: str, pending_key: str) -> str:
    return (
        f"reap.lua moved {listed(ids, at_most=5)} from {active_key} back to {pending_key}: the lease ran out "
        "on the server's clock."
    )


def nothing_to_reap(active_key: str) -> str:
    return f"reap.lua found {active_key} empty: nothing to recover."


def reap_too_early(job_id: str, ms_left: int) -> str:
    return (
        f"reap.lua moved nothing: the lease of {short(job_id)} runs {seconds(ms_left)} more on the server's "
        "clock. Wait, or fast-forward."
    )


def worker(worker: str, held: Mapping[str, Any] | None) -> str:
    if worker == "holding" and held:
        return f"worker: holds {short(held['job_id'])} · token {held['token']}"
    if worker == "crashed":
        return "worker: crashed mid-job (a new one claims next)"
    return "worker: idle"


CRASH_SCRIPT = (
    "-- A crash runs no script: that is the point. The worker dies between claim.lua and\n"
    "-- complete.lua, so nothing moves the job: it stays in {active}, scored\n"
    "-- by its lease deadline, until reap.lua finds the lease expired."
)
