"""The race explorer's pictures: the Reap lab's board, on which one interleaving is
replayed command by command, and the grid of every interleaving, each cell coloured (and
marked, for eyes that do not tell the colours apart) by its outcome."""

from __future__ import annotations

import textwrap
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..frames import Frame
from ..reap.figure import ReapFigure
from ..style import FEEDBACK, FONT, INK, PAPER, PLACES
from . import words
from .model import HOLD_MS, Exploration

__all__ = ["RaceFigure", "grid"]

LOOK = {  # outcome: (fill, mark drawn in the cell)
    "once": (PLACES["done"].colour, ""),
    "duplicated": (FEEDBACK["bad"][1], words.MARK["duplicated"]),
    "dead-lettered": (PLACES["dead"].colour, words.MARK["dead-lettered"]),
    "late": (PLACES["active"].colour, words.MARK["late"]),
    "lost": (INK, words.MARK["lost"]),
}
CELL_IN = 0.16  # a grid cell's side, inches
CHOSEN = "#f0e442"  # Okabe-Ito yellow: the ring around the interleaving being played
MARKS = {"2": "$2$", "d": "$d$", "○": "o", "×": "x"}  # the mark's matplotlib marker
COLS = 35  # cells in a row: 630 interleavings in 18 rows


class RaceFigure(ReapFigure):
    """The Reap lab's places and arrows; the words say which interleaving, which step."""

    def annotate(self, frame: Frame, now_ms: int) -> bool:
        state: dict[str, Any] = dict(frame.state)
        reaper = str(state.get("reaper", "two-step"))
        self.title.set_text(words.title(reaper))
        snap = frame.snapshot
        for place in (self.pending, self.active, self.dead):
            place.show_count(snap.counts[place.name] if snap else 0)
        step = state.get("step")
        self.caption.set_text(
            words.counts_line(int(state.get("total", 0)), state.get("counts"), brief=True)
            + ("\n" + words.step_line(step["k"], step["n"], step["of"]) if step else "")
        )
        self.race_text.set_text(words.order_text(step["order"], step["n"]) if step else words.HOW)
        return self.active.set_span(HOLD_MS)  # a live worker's lease, whole on the axis


def grid(ex: Exploration, chosen: int | None = None) -> Figure:
    """One cell per interleaving, in order, row by row; ``chosen`` outlined."""
    fig = Figure(dpi=100, facecolor=PAPER)
    FigureCanvasAgg(fig)
    return draw_grid(fig, ex, chosen)


def draw_grid(fig: Figure, ex: Exploration, chosen: int | None = None, cols: int = COLS) -> Figure:
    """Draw the grid of ``ex`` on ``fig`` (cleared first; a live canvas keeps its figure)."""
    runs = ex.runs
    cols = max(1, min(cols, len(runs)))
    rows = -(-len(runs) // cols)
    fig.clear()
    width, height = max(cols * CELL_IN + 0.3, 4.6), rows * CELL_IN + 0.75
    fig.set_size_inches(width, height)
    ax = fig.add_axes((0.15 / width, 0.1 / height, cols * CELL_IN / width, rows * CELL_IN / height))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_axis_off()
    # One scatter per outcome (and one per mark): a draw of 630 cells costs a few artists.
    where = {outcome: [] for outcome in LOOK}
    for k, run in enumerate(runs):
        r, c = divmod(k, cols)
        where[run.outcome].append((c + 0.5, r + 0.5))
    side = (CELL_IN * 72 * 0.86) ** 2  # a cell's square, points^2
    for outcome, points in where.items():
        if not points:
            continue
        fill, mark = LOOK[outcome]
        ax.scatter(*zip(*points, strict=True), s=side, marker="s", c=fill, linewidths=0, label=outcome)
        if mark:
            ax.scatter(*zip(*points, strict=True), s=side * 0.4, marker=MARKS[mark], c=PAPER, linewidths=1.4)
    if chosen is not None and 0 <= chosen < len(runs):
        r, c = divmod(chosen, cols)
        ax.scatter([c + 0.5], [r + 0.5], s=side * 1.3, marker="s", facecolors="none", edgecolors=CHOSEN, linewidths=3)
    head = "\n".join(textwrap.wrap(words.grid_head(ex), int(width * 100 / 7.4)))
    fig.text(0.15 / width, 1 - 0.06 / height, head, fontsize=FONT, va="top", color=INK)
    return fig


def cell_at(ex: Exploration, x: float, y: float, cols: int = COLS) -> int | None:
    """The interleaving whose cell holds the grid's data point (x, y), if any."""
    cols = max(1, min(cols, len(ex.runs)))
    if x < 0 or y < 0 or x >= cols:
        return None
    k = int(y) * cols + int(x)
    return k if k < len(ex.runs) else None
