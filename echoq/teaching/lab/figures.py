"""The lab's pictures: each built once, then updated in place from a model's picture.

A figure class creates every artist in ``__init__`` and its ``update(picture)`` only
changes them (``set_offsets``, ``set_data``, ``set_text``, colours), then asks the canvas
for a redraw: nothing is rebuilt per frame, so a redraw costs one canvas draw. The figures
are plain :class:`matplotlib.figure.Figure` objects on an Agg canvas (no pyplot, no global
state): they render headlessly for tests and docs, and a view can hand them to ipympl.

Colours are matplotlib's ``petroff10`` cycle, chosen to stay apart under the common forms
of colour blindness; every place also has a label, so colour is never the only cue.
"""

from __future__ import annotations

from typing import Any

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from .model import FLEET_PLACES, ClaimPicture, DeliveryPicture, FleetPicture, ReapPicture, pending_x, short


def _petroff10() -> list[str]:
    style = matplotlib.style.library.get("petroff10")
    if style is not None:
        return list(style["axes.prop_cycle"].by_key()["color"])
    return [
        "#3f90da",
        "#ffa90e",
        "#bd1f01",
        "#94a4a2",
        "#832db6",
        "#a96b59",
        "#e76300",
        "#b9ac70",
        "#717581",
        "#92dadd",
    ]


PALETTE = _petroff10()
COLOURS = {
    "pending": PALETTE[0],  # blue
    "active": PALETTE[1],  # yellow-orange
    "dead": PALETTE[2],  # red
    "done": PALETTE[4],  # purple
    "muted": PALETTE[3],  # grey
    "ink": "#222222",
    "now": PALETTE[8],  # dark grey
}
FONT = 9


def new_figure(width_in: float, height_in: float, dpi: int = 100) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=dpi, layout=None)
    FigureCanvasAgg(fig)
    return fig


class LabFigure:
    """Shared by the panels' figures: the figure, and a redraw that blits.

    Text is what costs most in a matplotlib draw, and most of a lab figure's text never
    changes (titles, key names, axes). So the artists a move can change are marked
    ``dynamic``: a full draw renders everything else once into a background, and each
    redraw restores that background and draws only the dynamic artists over it (the
    blitting recipe from matplotlib's docs). A figure that changes its axes draws in full.
    """

    fig: Figure
    dynamic: list[Any] = []
    _background: Any = None

    def blit_artists(self, artists: list[Any]) -> None:
        self.dynamic = artists
        for artist in artists:
            artist.set_animated(True)
        self._background = None
        self.fig.canvas.mpl_connect("draw_event", self._on_full_draw)

    _saving = False

    def _on_full_draw(self, _event: object) -> None:
        if self._saving:
            return
        canvas = self.fig.canvas
        self._background = canvas.copy_from_bbox(self.fig.bbox)
        for artist in self.dynamic:
            self.fig.draw_artist(artist)

    def redraw(self, full: bool = False) -> None:
        canvas = self.fig.canvas
        if getattr(canvas, "syncing_data_url", False):
            # An ipympl canvas whose browser view has not reported in yet. Rendering now
            # races the view's start-up and leaves it blank (seen in JupyterLab: the first
            # frame and size arrive before the view has an image to draw). The artists are
            # already up to date; the view asks for a full draw itself once it is ready.
            return
        if full or not self.dynamic or self._background is None:
            # On Agg this draws now; on ipympl it schedules one draw for the browser.
            canvas.draw_idle() if not full else canvas.draw()
            return
        canvas.restore_region(self._background)
        for artist in self.dynamic:
            self.fig.draw_artist(artist)
        canvas.blit(self.fig.bbox)

    def png(self, path: Any) -> None:
        for artist in self.dynamic:
            artist.set_animated(False)  # savefig leaves animated artists out
        self._saving = True
        try:
            self.fig.savefig(path, dpi=self.fig.dpi)
        finally:
            self._saving = False
            for artist in self.dynamic:
                artist.set_animated(True)
            self.redraw(full=True)


# -- 1. the claim diagram ---------------------------------------------------------------------

BOXES = {"pending": (0.14, 0.54), "active": (0.50, 0.54), "done": (0.86, 0.54)}
BOX_W, BOX_H = 0.20, 0.32
SLOTS = 4  # job labels drawn per box; more are counted


class ClaimFigure(LabFigure):
    """pending → active (under a lease) → done, with crash → leased and reap → pending."""

    def __init__(self, picture: ClaimPicture) -> None:
        self.fig = fig = new_figure(8.4, 3.4)
        ax = self.ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_axis_off()
        q = picture.queue
        self.title = ax.text(0.02, 0.965, "", fontsize=FONT + 1, weight="bold", va="top")
        self.boxes: dict[str, FancyBboxPatch] = {}
        self.counts: dict[str, Any] = {}
        self.slots: dict[str, list[Any]] = {}
        top, bottom = 0.54 + BOX_H / 2, 0.54 - BOX_H / 2
        for place, (x, y) in BOXES.items():
            colour = COLOURS[place]
            box = FancyBboxPatch(
                (x - BOX_W / 2, y - BOX_H / 2),
                BOX_W,
                BOX_H,
                boxstyle="round,pad=0.01,rounding_size=0.02",
                facecolor=colour,
                alpha=0.18,
                edgecolor=colour,
                linewidth=1.5,
            )
            ax.add_patch(box)
            self.boxes[place] = box
            key = f"emq:{{{q}}}:{place}" if place != "done" else "row retired, id in emq:{q}:done"
            ax.text(x, top + 0.10, place, ha="center", fontsize=FONT + 1, weight="bold")
            ax.text(x, top + 0.04, key, ha="center", fontsize=FONT - 2, color=COLOURS["ink"])
            self.counts[place] = ax.text(x, bottom + 0.035, "", ha="center", fontsize=FONT - 1)
            self.slots[place] = [
                ax.text(x, top - 0.05 - i * 0.055, "", ha="center", va="center", fontsize=FONT - 1, family="monospace")
                for i in range(SLOTS)
            ]
        (px, _), (mx, _), (dx, _) = BOXES["pending"], BOXES["active"], BOXES["done"]
        half = BOX_W / 2 + 0.015
        mid = 0.58
        self.arrows: dict[str, FancyArrowPatch] = {
            "claim": FancyArrowPatch((px + half, mid), (mx - half, mid), arrowstyle="-|>", mutation_scale=14),
            "finish": FancyArrowPatch((mx + half, mid), (dx - half, mid), arrowstyle="-|>", mutation_scale=14),
            "crash": FancyArrowPatch(
                (mx + 0.07, bottom - 0.015),
                (mx + 0.025, bottom - 0.015),
                connectionstyle="arc3,rad=-1.4",
                arrowstyle="-|>",
                mutation_scale=12,
            ),
            "reap": FancyArrowPatch(
                (mx - 0.03, bottom - 0.015),
                (px + 0.03, bottom - 0.015),
                connectionstyle="arc3,rad=-0.25",
                arrowstyle="-|>",
                mutation_scale=14,
            ),
        }
        for arrow in self.arrows.values():
            ax.add_patch(arrow)
        self.arrow_labels = {
            "claim": ax.text((px + mx) / 2, mid + 0.03, "claim\nZPOPMIN, lease", ha="center", fontsize=FONT - 1),
            "finish": ax.text((mx + dx) / 2, mid + 0.03, "finish\ncomplete (fenced)", ha="center", fontsize=FONT - 1),
            "crash": ax.text(mx + 0.10, bottom - 0.10, "crash → stays leased", ha="left", fontsize=FONT - 1),
            "reap": ax.text((px + mx) / 2, 0.17, "reap → pending (lease expired)", ha="center", fontsize=FONT - 1),
        }
        self.lease = ax.text(0.02, 0.085, "", fontsize=FONT - 1, color=COLOURS["ink"], va="center")
        self.status = ax.text(0.02, 0.03, "", fontsize=FONT - 1, color=COLOURS["ink"], va="center")
        self.blit_artists(
            [
                *self.boxes.values(),
                *self.counts.values(),
                *(slot for slots in self.slots.values() for slot in slots),
                *self.arrows.values(),
                *self.arrow_labels.values(),
                self.lease,
                self.status,
            ]
        )
        self.update(picture)

    def update(self, picture: ClaimPicture) -> None:
        self.title.set_text(f"The recoverable claim · queue {picture.queue!r}")
        members = {
            "pending": [short(j) for j in picture.pending],
            "active": [
                f"{short(j)} {left / 1000:+.1f}s" if left <= 0 else f"{short(j)} {left / 1000:.1f}s"
                for j, left in picture.active.items()
            ],
            "done": [short(j) for j in picture.done],
        }
        for place, labels in members.items():
            count = picture.counts.get(place, len(labels))
            self.counts[place].set_text(f"{count} job{'s' if count != 1 else ''}")
            for i, slot in enumerate(self.slots[place]):
                if i == SLOTS - 1 and len(labels) > SLOTS:
                    slot.set_text(f"+ {len(labels) - SLOTS + 1} more")
                else:
                    slot.set_text(labels[i] if i < len(labels) else "")
            self.boxes[place].set_linewidth(2.5 if labels else 1.0)
        lit = {"enqueue": (), "fast-forward": ("reap",)}.get(picture.lit, (picture.lit,))
        for name, arrow in self.arrows.items():
            on = name in lit
            colour = (COLOURS["dead"] if name == "crash" else COLOURS["ink"]) if on else COLOURS["muted"]
            arrow.set_color(colour)
            arrow.set_linewidth(2.6 if on else 1.0)
            self.arrow_labels[name].set_color(colour)
            self.arrow_labels[name].set_fontweight("bold" if on else "normal")
        expired = [j for j, left in picture.active.items() if left <= 0]
        if not picture.active:
            lease = "lease: no job in active"
        elif expired:
            lease = f"lease of {short(expired[0])} ran out (server clock): a reap returns it to pending"
        else:
            job, left = next(iter(picture.active.items()))
            lease = f"lease of {short(job)}: {left / 1000:.1f} s left on the server's clock"
        worker = "worker: crashes mid-job (crash toggle on)" if picture.crash else "worker: healthy"
        held = f", holds {short(picture.held)}" if picture.held else ", holds nothing"
        self.lease.set_text(lease)
        self.status.set_text(worker + held)
        self.redraw()


# -- 2. deliveries vs effects -----------------------------------------------------------------


class DeliveryFigure(LabFigure):
    """Deliveries of one job against effects counted in the ledger, after each delivery."""

    def __init__(self, picture: DeliveryPicture) -> None:
        self.fig = fig = new_figure(7.2, 3.4)
        ax = self.ax = fig.add_axes((0.09, 0.15, 0.58, 0.70))
        ax.set_xlim(0.5, 10.5)
        ax.set_ylim(0, 11)
        ax.set_xticks(range(1, 11))
        ax.set_yticks(range(0, 11, 2))
        ax.set_xlabel("delivery of the same job (claim → effect → crash → reap …)", fontsize=FONT - 1)
        ax.set_ylabel("count so far", fontsize=FONT - 1)
        ax.tick_params(labelsize=FONT - 1)
        ax.grid(True, alpha=0.25)
        ax.spines[["top", "right"]].set_visible(False)
        (self.delivered,) = ax.step([], [], where="mid", color=COLOURS["pending"], lw=2, marker="o", ms=5)
        (self.effects,) = ax.step([], [], where="mid", color=COLOURS["dead"], lw=2, marker="s", ms=5, ls="--")
        self.delivered.set_label("deliveries")
        self.effects.set_label("effects in emq:{q}:effects")
        ax.legend(loc="upper left", fontsize=FONT - 1, frameon=False)
        self.title = fig.text(0.02, 0.96, "", fontsize=FONT + 1, weight="bold", va="top")
        self.total = fig.text(0.71, 0.80, "", fontsize=FONT + 1, va="top", weight="bold")
        self.detail = fig.text(0.71, 0.60, "", fontsize=FONT - 1, va="top", linespacing=1.5)
        self.blit_artists([self.delivered, self.effects, self.total, self.detail])
        self.update(picture)

    def update(self, picture: DeliveryPicture) -> None:
        run = picture.run
        self.title.set_text(f"At-least-once delivery, effect-once consumer · queue {picture.queue!r}")
        if run is None:
            self.delivered.set_data([], [])
            self.effects.set_data([], [])
            self.total.set_text("")
            self.detail.set_text("")
        else:
            xs = list(range(1, run.deliveries + 1))
            self.delivered.set_data(xs, xs)
            self.effects.set_data(xs, run.effects_after)
            self.total.set_text(f"{run.deliveries} deliveries\n→ {run.effects} effect{'s' if run.effects != 1 else ''}")
            kind = "keyed on the JOB id" if run.consumer == "keyed" else "naive: one per delivery"
            attempts = ", ".join(map(str, run.attempts))
            self.detail.set_text(f"consumer: {run.consumer}\n({kind})\njob {short(run.job_id)}\nattempts {attempts}")
        self.redraw()


# -- 3. the reaper on a time axis ---------------------------------------------------------------

LANES = {"pending": 0.0, "active": 1.0, "dead": 2.0}
X_MIN, X_MAX = -5.0, 10.0
MAX_DOTS = 12


class ReapFigure(LabFigure):
    """Active jobs at their lease deadlines around a line at the server's now; the lanes
    for pending and dead; and the race demo's deliveries, two-step vs atomic."""

    def __init__(self, picture: ReapPicture) -> None:
        self.fig = fig = new_figure(8.4, 3.6)
        ax = self.ax = fig.add_axes((0.22, 0.22, 0.52, 0.64))
        q = picture.queue
        ax.set_xlim(X_MIN, X_MAX)
        ax.set_ylim(-0.6, 2.6)
        ax.set_yticks(list(LANES.values()))
        ax.set_yticklabels(
            [
                f"pending, oldest first\nemq:{{{q}}}:pending",
                f"active, at lease deadline\nemq:{{{q}}}:active",
                f"dead\nemq:{{{q}}}:dead",
            ],
            fontsize=FONT - 2,
        )
        for lane, y in LANES.items():
            ax.axhspan(y - 0.4, y + 0.4, color=COLOURS[lane], alpha=0.08, lw=0)
        ax.set_xlabel("lease deadline − server now (s)", fontsize=FONT - 1)
        ax.tick_params(axis="x", labelsize=FONT - 1)
        ax.spines[["top", "right"]].set_visible(False)
        ax.axvspan(X_MIN, 0, ymin=0.35, ymax=0.6, color=COLOURS["dead"], alpha=0.07, lw=0)
        self.now_line = ax.axvline(0, color=COLOURS["now"], lw=1.5)
        ax.text(0.1, 2.45, "server now", fontsize=FONT - 2, color=COLOURS["now"])
        ax.text(X_MIN + 0.2, 1.45, "expired: reap takes these", fontsize=FONT - 2, color=COLOURS["dead"])
        self.dots = ax.scatter([], [], s=60, zorder=3, edgecolors=COLOURS["ink"], linewidths=0.6)
        self.labels = [ax.text(0, 0, "", fontsize=FONT - 3, ha="center", va="bottom") for _ in range(MAX_DOTS)]
        self.title = fig.text(0.02, 0.97, "", fontsize=FONT + 1, weight="bold", va="top")
        self.caption = fig.text(0.02, 0.025, "", fontsize=FONT - 1)
        # the race: deliveries of one crashed job, two-step vs atomic sweeps
        rax = self.race_ax = fig.add_axes((0.83, 0.22, 0.15, 0.58))
        rax.set_title("race: 2 sweeps overlap", fontsize=FONT - 1)
        rax.set_xticks([0, 1])
        rax.set_xticklabels(["two-step", "atomic"], fontsize=FONT - 2)
        rax.set_ylim(0, 4)
        rax.set_yticks([0, 1, 2, 3])
        rax.tick_params(labelsize=FONT - 2)
        rax.set_ylabel("deliveries of 1 job", fontsize=FONT - 2)
        rax.spines[["top", "right"]].set_visible(False)
        self.race_bars = rax.bar([0, 1], [0, 0], color=[COLOURS["dead"], COLOURS["pending"]], width=0.6)
        self.race_text = [rax.text(x, 0.1, "", ha="center", fontsize=FONT - 2) for x in (0, 1)]
        self.blit_artists([self.title, self.dots, *self.labels, self.caption, *self.race_bars, *self.race_text])
        self.update(picture)

    def positions(self, picture: ReapPicture) -> dict[str, tuple[float, float]]:
        where: dict[str, tuple[float, float]] = {}
        for j, x in pending_x(picture.pending).items():
            where[j] = (x, LANES["pending"])
        for j, x in pending_x(picture.dead).items():
            where[j] = (x, LANES["dead"])
        for j, left in picture.active.items():
            where[j] = (min(max(left / 1000, X_MIN + 0.1), X_MAX - 0.1), LANES["active"])
        return where

    def update(self, picture: ReapPicture, progress: float = 1.0) -> None:
        """Draw ``picture``; with ``progress`` < 1, moved jobs are drawn part way from
        where they were (the animation of a reap step)."""
        self.title.set_text(f"Stalled recovery · queue {picture.queue!r} · max_stalled = {picture.max_stalled}")
        where = self.positions(picture)
        ids = list(where)[:MAX_DOTS]
        xy, colours = [], []
        for j in ids:
            x, y = where[j]
            if j in picture.moved and progress < 1.0:
                lane, x0 = picture.moved[j]
                y0 = LANES[lane]
                x, y = x0 + (x - x0) * progress, y0 + (y - y0) * progress
            xy.append((x, y))
            lane_of = "pending" if y < 0.5 else "active" if y < 1.5 else "dead"
            colours.append(COLOURS[lane_of])
        self.dots.set_offsets(xy if xy else [[float("nan"), float("nan")]])
        self.dots.set_facecolors(colours if colours else [COLOURS["muted"]])
        for i, label in enumerate(self.labels):
            if i < len(ids):
                j = ids[i]
                x, y = xy[i]
                label.set_position((x, y + 0.13))
                label.set_text(f"{j[-4:]}\nstalled {picture.stalled.get(j, 0)}")
            else:
                label.set_text("")
        counts = f"{len(picture.pending)} pending, {len(picture.active)} active, {len(picture.dead)} dead"
        self.caption.set_text(f"{counts}. A job dies at its max_stalled-th stall.")
        racy, atomic = picture.race.get("two-step"), picture.race.get("atomic")
        for bar, text, report in zip(self.race_bars, self.race_text, (racy, atomic), strict=True):
            height = report.deliveries if report else 0
            bar.set_height(height)
            text.set_position((bar.get_x() + bar.get_width() / 2, height + 0.1))
            text.set_text(f"{report.duplicate_deliveries} dup" if report else "")
        self.redraw()


# -- 4. the fleet over time -----------------------------------------------------------------------

WINDOW_S = 30.0
MAX_WORKERS = 4


class FleetFigure(LabFigure):
    """Counts of pending / active / done / dead over time, each worker's state, and the
    two numbers that must stay 0: lost jobs and duplicate effects."""

    def __init__(self, picture: FleetPicture) -> None:
        self.fig = fig = new_figure(8.4, 3.4)
        ax = self.ax = fig.add_axes((0.08, 0.16, 0.56, 0.68))
        ax.set_xlabel("seconds before now", fontsize=FONT - 1)
        ax.set_xlim(-WINDOW_S, 0.5)
        ax.set_ylim(0, 10)
        ax.set_ylabel("jobs", fontsize=FONT - 1)
        ax.tick_params(labelsize=FONT - 1)
        ax.grid(True, alpha=0.25)
        ax.spines[["top", "right"]].set_visible(False)
        q = picture.queue
        self.lines = {}
        for place, style in zip(FLEET_PLACES, ("-", "-", "-", "--"), strict=True):
            (line,) = ax.plot([], [], style, color=COLOURS[place], lw=2, label=f"emq:{{{q}}}:{place}")
            self.lines[place] = line
        ax.legend(loc="center left", bbox_to_anchor=(1.03, 0.30), fontsize=FONT - 2, frameon=False)
        self.title = fig.text(0.02, 0.97, "", fontsize=FONT + 1, weight="bold", va="top")
        fig.text(0.68, 0.84, "workers (threads; kills simulated)", fontsize=FONT - 1, weight="bold")
        self.worker_rows = [
            fig.text(0.68, 0.76 - i * 0.075, "", fontsize=FONT - 1, family="monospace") for i in range(MAX_WORKERS)
        ]
        self.verdict = fig.text(0.68, 0.04, "", fontsize=FONT, weight="bold", linespacing=1.4)
        self.blit_artists([self.title, *self.lines.values(), *self.worker_rows, self.verdict])
        self.update(picture)

    def update(self, picture: FleetPicture) -> None:
        self.title.set_text(f"The worker path: a fleet on a beat · queue {picture.queue!r} · {picture.rate} jobs/s")
        end = picture.times[-1] if picture.times else 0.0
        ago = [t - end for t in picture.times]
        top = 1
        for place, line in self.lines.items():
            values = picture.series.get(place, [])
            line.set_data(ago, values)
            shown = [v for t, v in zip(ago, values, strict=False) if t >= -WINDOW_S]
            top = max(top, *shown) if shown else top
        # The y axis only changes when the counts outgrow it or shrink well inside it;
        # then the background (ticks included) must be drawn afresh.
        _, limit = self.ax.get_ylim()
        axes_changed = top * 1.1 > limit or (limit > 12 and top * 3 < limit)
        if axes_changed:
            self.ax.set_ylim(0, max(10, top * 1.4))
        marks = {"working": "●", "killed": "✕", "stopped": "○", "failed": "!"}
        for i, row in enumerate(self.worker_rows):
            if i < len(picture.workers):
                slot, state, completed, job = picture.workers[i]
                holding = f" {short(job)}" if job and state == "working" else ""
                row.set_text(f"{marks.get(state, '?')} w{slot} {state:<7} done {completed:>3}{holding}")
                row.set_color(COLOURS["dead"] if state in ("killed", "failed") else COLOURS["ink"])
            else:
                row.set_text("")
        self.verdict.set_text(f"lost jobs: {picture.lost}\nduplicate effects: {picture.duplicates}")
        self.verdict.set_color(COLOURS["ink"] if picture.lost == 0 and picture.duplicates == 0 else COLOURS["dead"])
        self.redraw(full=axes_changed)
