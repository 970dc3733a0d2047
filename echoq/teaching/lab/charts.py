"""Static charts for the lessons' results: pure functions from a report to a figure.

The panels' live figures are in the panel packages; these draw a finished run once (the
chaos run of lesson 05, the server restarts of lesson 06), in the same palette and sizes
(:mod:`echoq.teaching.lab.style`), each line with its own marker as well as its colour.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ...queue import Snapshot
from ..chaos import ChaosReport
from ..persistence import RestartReport
from . import words
from .style import FONT, PLACES

COLOURS = {name: style.colour for name, style in PLACES.items()}
MARKERS = {name: style.marker for name, style in PLACES.items()}

PLACES = ("pending", "active", "done", "dead")


def chaos_timeline(report: ChaosReport) -> Figure:
    """Where the jobs were during a chaos run, sample by sample, with the verdict in words."""
    fig = Figure(figsize=(8, 3.2), layout="constrained")
    ax = fig.add_subplot()
    t = [s.t_s for s in report.timeline]
    for place in PLACES:
        ax.plot(
            t,
            [getattr(s, place) for s in report.timeline],
            label=place,
            color=COLOURS[place],
            lw=2,
            marker=MARKERS[place],
            markevery=max(1, len(t) // 12),
            markersize=6,
        )
    ax.set_xlabel("seconds since the run started", fontsize=FONT)
    ax.set_ylabel("jobs", fontsize=FONT)
    ax.legend(fontsize=FONT, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(
        f"{report.jobs} jobs, {report.workers} workers, {report.kills} kills: "
        f"lost {report.lost}, duplicate effects {report.duplicate_effects}",
        fontsize=FONT + 1,
        loc="left",
    )
    return fig


def persistence_bars(reports: Sequence[RestartReport]) -> Figure:
    """Acknowledged jobs that survived a server SIGKILL, per persistence setting."""
    fig = Figure(figsize=(6.5, 3), layout="constrained")
    ax = fig.add_subplot()
    names = [r.persistence for r in reports]
    ax.bar(names, [r.survived for r in reports], color=COLOURS["pending"], label="survived")
    ax.bar(names, [r.lost for r in reports], bottom=[r.survived for r in reports], color=COLOURS["dead"], label="lost")
    for x, r in enumerate(reports):
        ax.text(x, r.acknowledged + 1, f"{r.lost} lost", ha="center", fontsize=FONT)
    ax.set_ylabel("acknowledged jobs", fontsize=FONT)
    ax.set_ylim(0, max(r.acknowledged for r in reports) * 1.2)
    ax.legend(fontsize=FONT, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title("After the server was SIGKILLed and restarted", fontsize=FONT + 1, loc="left")
    return fig


def lost_jobs(snap: Snapshot) -> int:
    """Jobs enqueued that are in no place: not pending, active, scheduled, done or dead."""
    c = snap.counts
    placed = c["pending"] + c["active"] + c.get("scheduled", 0) + c["done"] + c["dead"]
    return snap.stats.get("enqueued", 0) - placed


def job_places(snap: Snapshot, *, when: str = "Where the jobs are") -> Figure:
    """One bar per place a job can be, plus the jobs that are in no place at all: lost.
    Every bar, and every number of the title (``when``, then the jobs enqueued and those in
    no place), is read from ``snap``, one atomic read of the server (its sets' sizes, and
    ``enqueued`` from its counters)."""
    fig = Figure(figsize=(6, 2.6), layout="constrained")
    ax = fig.add_subplot()
    names = ["pending", "active", "done", "lost"]
    counts = snap.counts
    values = [counts["pending"], counts["active"], counts["done"], lost_jobs(snap)]
    colours = [COLOURS["pending"], COLOURS["active"], COLOURS["done"], COLOURS["dead"]]  # "lost": the alarm colour
    bars = ax.bar(names, values, color=colours)
    ax.bar_label(bars, fontsize=FONT)
    ax.set_ylabel("jobs", fontsize=FONT)
    ax.set_ylim(0, max(values + [1]) * 1.25)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.spines[["top", "right"]].set_visible(False)
    enqueued = snap.stats.get("enqueued", 0)
    title = f"{when}: {words.count(enqueued)} in, {values[-1]} in no place"
    ax.set_title(title, fontsize=FONT + 1, loc="left")
    return fig
