"""The Fleet lab's sentences: the fleet's moves, its tally, each worker's card, the verdict.

Functions take facts and return plain text; see :mod:`echoq.teaching.lab.words` for what
every panel shares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....queue import Snapshot
from ..words import seconds, short, tag

SETTINGS: dict[str, Callable[[Any], str]] = {
    "job_ms": lambda v: f"Pace: each job takes {seconds(v)} of work.",
    "rate": lambda v: (
        f"Producer: {v} new job(s) per second while the fleet runs." if v else "Producer: off (0 jobs per second)."
    ),
    "path": lambda v: (
        "Path: reliable (claim under a lease, keyed effects)."
        if v == "reliable"
        else "Path: NAIVE pop-and-process (the contrast)."
    ),
    "lease_ms": lambda v: f"Lease: {seconds(v)}; a live worker extends it, a killed one cannot.",
    "beat_ms": lambda v: f"Beat: every {seconds(v)} each worker runs the stalled check.",
}


NO_WORKERS = "none: press 'start'"


def title(path: str, job_ms: int, rate: int, producing: bool) -> str:
    producer = f"{rate} new jobs/s" if producing else "no producer"
    return f"The worker path · {path} · {seconds(job_ms)} per job · {producer}"


def started(n: int, path: str, beat_ms: int, job_ms: int) -> str:
    if path == "naive":
        return (
            f"started {n} NAIVE workers (threads in this kernel): each pops a job out of Valkey (naive_pop.lua) "
            f"and works on it for {seconds(job_ms)}; the job is then only in the worker's memory."
        )
    return (
        f"started {n} workers (threads in this kernel), each on a {seconds(beat_ms)} beat: stalled check, then "
        f"drain, {seconds(job_ms)} per job; the consumer is keyed on the JOB id."
    )


def added(n: int, pending_key: str) -> str:
    return f"enqueue_many.lua added {n} jobs to {pending_key}."


def no_worker(slot: int) -> str:
    return f"no worker {slot}: start the fleet first (workers are numbered from 1)"


def not_working(slot: int, state: str) -> str:
    return f"worker {slot} is already {state}. Nothing changed."


def killed(
    slot: int, job_id: str | None, token: int | None, active_key: str, path: str, ms_left: int | None = None
) -> str:
    """``ms_left``: on the reliable path, the killed worker's lease left at the frame's read
    (None: the job is no longer in the active set)."""
    if job_id is None:
        return f"killed worker {slot} (simulated: worker.abandon()) between jobs: it held none."
    if path == "naive":
        return (
            f"killed worker {slot} mid-job: it had popped {short(job_id)}, so the only copy was in its memory. "
            "That job is LOST: no set holds it, no row is left. (Valkey cannot know; the lab counts it because "
            "the lab did the killing.)"
        )
    killed = f"killed worker {slot} mid-job (worker.abandon(), as a killed process): {short(job_id)} (token {token})"
    if ms_left is None:
        return f"{killed}: by the time of this read it is no longer in {active_key}."
    if ms_left <= 0:
        return (
            f"{killed} is in {active_key} past its lease deadline ({seconds(-ms_left)} ago): the next live "
            "worker's beat returns it."
        )
    return (
        f"{killed} stays leased in {active_key} for {seconds(ms_left)} more, until its lease runs out; then a "
        "live worker's beat returns it."
    )


def restarted(slot: int) -> str:
    return f"restarted worker {slot}: its first beat recovers any expired lease, then it drains."


def still_working(slot: int) -> str:
    return f"worker {slot} is still working. Nothing changed."


def stopped(n: int, workers: int) -> str:
    if n == 0:
        return "no worker was running: stopped the producer. Nothing else changed."
    whom = f"all {n} running worker(s)" if n == workers else f"the {n} running worker(s) of {workers}"
    return f"stopped {whom} and the producer: each finished the job in its hand and claims no more."


def path_pending(chosen: str, running: str, alive: bool) -> str:
    if alive:
        return f"(Path set to {chosen}; the fleet still runs {running}: press 'start' to switch.)"
    return f"(Path set to {chosen}: the next 'start' uses it.)"


def tally(snap: Snapshot, t: Any, path: str, alive: int, workers: int, keys: Callable[[str], str]) -> str:
    """``t``: the frame's :class:`~echoq.teaching.lab.fleet.model.Tally` (this run's numbers)."""
    c = snap.counts
    dups = "n/a on the naive path (nothing is delivered twice)" if t.duplicates is None else str(t.duplicates)
    run = (
        f"This run: enqueued {t.enqueued}, completed {t.completed}"
        if path == "reliable"
        else f"This run: enqueued {t.enqueued}, popped {t.popped}"
    )
    return (
        f"{alive} of {workers} workers alive. {keys('pending')} {c['pending']}, active {c['active']}, "
        f"done {c['done']}, dead {c['dead']}. {run}. Lost: {t.lost}. Duplicate effects: {dups}."
    )


def worker(
    slot: int, state: str, job_id: str | None, token: int | None, path: str, killed_job: str | None = None
) -> str:
    mark = {"working": "●", "killed": "✕", "stopped": "○", "failed": "!"}.get(state, "?")
    if state == "working" and job_id:
        hand = f"holds {tag(job_id)} (popped: only copy)" if path == "naive" else f"holds {tag(job_id)} · token {token}"
    elif state == "working":
        hand = "idle, waiting for a job"
    elif state == "killed":
        left = "it held none" if not killed_job else ("lost " if path == "naive" else "left ") + tag(killed_job)
        hand = f"killed (simulated): {left}"
    else:
        hand = state
    return f"{mark} w{slot}  {hand}"


def verdict(lost: int, duplicates: int | None) -> str:
    if duplicates is None:
        return f"lost {lost} · naive path"  # nothing is delivered twice there: no duplicates to count
    return f"lost {lost} · duplicate effects {duplicates}"
