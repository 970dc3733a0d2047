"""The race explorer's sentences: each command as it ran, the counts, the outcome.

Functions take facts and return plain text; see :mod:`echoq.teaching.lab.words` for what
every panel shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..words import listed, short
from .facts import OUTCOMES, WRONG, Exploration, Run, Step

REAPER = {
    "two-step": "two-step reapers (check, then move)",
    "atomic": "atomic reapers (reap.lua)",
    "yours": "two-step reapers of yours (read_expired, then move_back)",
}

SETTINGS: dict[str, Callable[[Any], str]] = {
    "reaper": lambda v: f"The race is now between two {REAPER.get(v, v)}; press 'run every interleaving'.",
}


def title(reaper: str) -> str:
    return f"The race, every interleaving · {REAPER.get(reaper, reaper)}"


def counts_line(total: int, counts: dict[str, int] | None, *, brief: bool = False) -> str:
    """The counts: once and duplicated always (the race's question), the others when any.
    ``brief``: for the board's caption, under a title that already says "every interleaving"."""
    if counts is None:
        return f"{total} interleavings, not run yet."
    shown = [name for name in OUTCOMES if name in ("once", "duplicated") or counts.get(name)]
    run = f"{total} run" if brief else f"{total} interleavings run"
    return f"{run}: " + " · ".join(f"{name} {counts.get(name, 0)}" for name in shown)


def explored(ex: Exploration) -> str:
    counts = ex.counts()
    bad = sum(counts[name] for name in WRONG)
    first = min(k for k in (ex.first(name) for name in WRONG) if k is not None) if bad else 0
    verdict = (
        f"{bad} of them did not deliver the job exactly once: the first is #{first + 1}."
        if bad
        else "None went wrong: there is no gap between a read and a move for another command to run in."
    )
    return (
        f"Ran every interleaving of two {REAPER[ex.reaper]} and worker W's claim, each from a fresh state "
        f"(one crashed job, its lease run out): {counts_line(len(ex.runs), counts)}. {verdict}"
    )


def explore_first(reaper: str) -> str:
    return f"replay: run every interleaving of the {REAPER[reaper]} first."


def none_is(outcome: str, reaper: str) -> str:
    return f"play: no interleaving of the {REAPER[reaper]} is {outcome}."


def no_such(k: int, total: int) -> str:
    return f"replay refused: there is no interleaving #{k + 1}, only 1 to {total}. Nothing changed."


def fresh(job_id: str) -> str:
    return f"Fresh state: {short(job_id)}'s worker crashed and its lease ran out; it waits in active."


def claimed(step: Step, job_id: str | None) -> str:
    if job_id is None:
        return f"{step}: nothing pending, W gets no job."
    return f"{step}: W now holds {short(job_id)} (a live delivery)."


def reaped(step: Step, moved: Sequence[str]) -> str:
    if not moved:
        return f"{step}: no expired lease; nothing moved."
    return f"{step}: read and moved {listed(moved)} back to pending, in one step."


def read(step: Step, ids: Sequence[str]) -> str:
    if not ids:
        return f"{step}: read no expired id; it has nothing to move."
    return f"{step}: read {len(ids)} expired id(s) ({listed(ids)}), to move next."


def sent(step: Step, ids: Sequence[str], changed: int, key: str) -> str:
    if not ids:
        return f"{step}: it read no id, so it sends nothing."
    return f"{step} {listed(ids)} on {key}: {changed} changed, whatever happened since its read."


def outcome(run: Run) -> str:
    n = run.deliveries
    said = {
        "once": "delivered once after the crash, as it should be",
        "duplicated": f"duplicated: {n} live deliveries after one crash, two workers hold it",
        "dead-lettered": (
            "dead-lettered: a claim found it in pending with its row still saying active, and moved it to "
            "the dead set as corrupt; no worker gets it until someone requeues it"
        ),
        "late": (
            f"late, not lost: nobody holds it yet, but it is still in {run.place}"
            + (" under its expired lease, and the next reap brings it back" if run.place == "active" else "")
        ),
        "lost": "lost: it is in no set, so no reap, claim or requeue can find it again",
    }
    return said[run.outcome]


def moved_yours(step: Step, ids: Sequence[str]) -> str:
    if not ids:
        return f"{step}: it read no id; your move_back was called with none."
    return f"{step}: your move_back ran on {listed(ids)}, whatever happened since its read."


def last_worker(job_id: str | None, run: Run) -> str:
    got = f"gets {short(job_id)}" if job_id else "gets nothing"
    return f"Then a last worker asks for work and {got}. Outcome: {outcome(run)}."


MARK = {"duplicated": "2", "dead-lettered": "d", "late": "○", "lost": "×"}  # drawn in a grid's cell


def grid_head(ex: Exploration) -> str:
    """The grid's heading: what the cells are, the counts, the marks of the outcomes it has."""
    counts = ex.counts()
    marks = ", ".join(f"{MARK[name]}: {name}" for name in WRONG if counts[name]) or "2: duplicated"
    return f"{REAPER[ex.reaper]}: {counts_line(len(ex.runs), counts)}  ({marks})"


def grid_alt(ex: Exploration) -> str:
    """The grid's alt text: its heading, and which interleavings went wrong, by outcome."""
    wrong = []
    for outcome in WRONG:
        ks = [k + 1 for k, run in enumerate(ex.runs) if run.outcome == outcome]
        if ks:
            wrong.append(f"{outcome}: " + ", ".join(f"#{k}" for k in ks[:12]) + (", …" if len(ks) > 12 else ""))
    return f"Grid of every interleaving, one cell each. {grid_head(ex)}." + (f" {'; '.join(wrong)}." if wrong else "")


HOW = "Run every interleaving, then pick a cell:\nits commands play here one by one."


def step_line(k: int, n: int, of: int) -> str:
    return f"interleaving #{k + 1}: " + ("the fresh state" if n == 0 else f"step {n} of {of}")


def order_text(order: Sequence[str], n: int, width: int = 52) -> str:
    """The interleaving's commands in order, the one just run in [brackets], wrapped."""
    short_names = [s.replace("reaper ", "").replace("worker ", "").replace(".lua", "") for s in order]
    parts = [f"[{s}]" if i + 1 == n else s for i, s in enumerate(short_names)]
    lines, line = [], ""
    for part in parts:
        joined = f"{line} → {part}" if line else part
        if len(joined) > width and line:
            lines.append(line + " →")
            line = part
        else:
            line = joined
    lines.append(line + (" → last worker" if n <= len(order) else " → [last worker]"))
    return "\n".join(lines[:3])
