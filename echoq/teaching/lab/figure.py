"""The lab's pictures: places (boxes) holding job markers, built once and updated in place.

A panel's figure subclasses :class:`BoardFigure`: ``build()`` lays out its places and
arrows once; ``spots(frame, now_ms)`` says where each job marker sits in a frame, and
``annotate(frame, now_ms)`` writes the frame's other words (title, counts, workers).
Everything comes from the frame, and so from the frame's one snapshot.

An animation is :meth:`BoardFigure.draw_between`: the markers of frame ``a`` travel to their
places in frame ``b`` (a marker that moved set to set is seen crossing), while a pulse runs
along the path of the script that moved them. A marker never disappears or appears without
a cue: a new one slides in, one that left fades out.

Drawing: plain :class:`matplotlib.figure.Figure` on an Agg canvas (no pyplot, no global
state), so it renders headlessly for tests and docs, and a view can hand it to ipympl.
Text is what a draw spends its time on, and within one move's animation only the markers
(their labels, the lit arrows, the pulse) change. So those are *animated*: the static
picture is rendered once; the frame's *marks* (titles, counts, worker lines) are drawn
over it once per move, at the half-way frame (when the readout, too, turns to the new
frame's words); and each animation frame restores that background and draws only the
markers over it (matplotlib's blitting recipe).
"""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from . import words
from .frames import Frame
from .style import FONT, INK, MUTED, PAPER, PLACES, TITLE

__all__ = ["BoardFigure", "GridPlace", "TimePlace", "Spot", "ease"]

MARKER_SIZE = 110  # marker area, points^2
CELL_W_PX, CELL_H_PX = 58, 38  # room for one marker and its one-line label
LINE_PX = 14  # one more line of 10 pt text
LABEL_CHAR_PX = 8.4  # a character of a marker's label (10 pt monospace)
KEY_BAND_PX = 70  # the header and key lines over a box: at most a header and three key lines


@dataclass(frozen=True)
class Spot:
    """Where one marker is drawn, in figure fractions, and how."""

    x: float
    y: float
    style: str  # a key of style.PLACES: the marker shape and colour
    label: str = ""


def ease(p: float) -> float:
    """Smooth start and stop (smoothstep)."""
    p = min(1.0, max(0.0, p))
    return p * p * (3 - 2 * p)


class Place:
    """A box on the board that holds markers of one place (pending, active, done, dead...)."""

    def __init__(
        self,
        board: BoardFigure,
        name: str,
        box: tuple[float, float, float, float],
        *,
        header: str | None = None,
        key_suffix: str = "",
        style: str | None = None,
    ) -> None:
        self.board, self.name = board, name
        self.key_suffix = key_suffix  # words after the key's name (" · at lease deadline")
        self.x0, self.y0, self.x1, self.y1 = box
        self.key_right = self.x1  # how far right the key's lines may run (a board may widen it)
        self.style = style or name
        colour = PLACES[self.style].colour
        ax = board.ax
        ax.add_patch(
            FancyBboxPatch(
                (self.x0, self.y0),
                self.x1 - self.x0,
                self.y1 - self.y0,
                boxstyle="round,pad=0.004,rounding_size=0.012",
                facecolor=to_rgba(colour, 0.07),
                edgecolor=colour,
                linewidth=1.6,
            )
        )
        # The header: the place's marker, its name, and under it the key that holds it.
        self.header_marker = ax.scatter(
            [self.x0 + board.px(10)],
            [self.y1 + board.py(26)],
            s=MARKER_SIZE * 0.8,
            marker=PLACES[self.style].marker,
            c=[colour],
            edgecolors=INK if self._filled else colour,
            linewidths=0.8,
        )
        self.header = ax.text(
            self.x0 + board.px(22),
            self.y1 + board.py(26),
            header or name,
            fontsize=FONT + 1,
            weight="bold",
            va="center",
            color=INK,
        )
        self.key = board.dynamic_text(self.x0, self.y1 + board.py(9), "", va="center", color=MUTED)
        self.count = board.dynamic_text(self.x1, self.y1 + board.py(26), "", ha="right", va="center")
        self.overflow = board.dynamic_text(self.x1 - board.px(4), self.y0 + board.py(10), "", ha="right", va="center")

    @property
    def key_width(self) -> float:
        """How wide a key's line may run, from the box's left edge to ``key_right`` (the next
        box's edge, or the page's, where the board set it; else the box's own)."""
        return self.key_right - self.x0

    def set_key(self, queue: str) -> bool:
        """The key's name over the box, the queue's name whole: on as many lines as the box's
        width needs, the header lifted over them. True if the header moved (the static
        picture must be drawn again)."""
        lines = self.board.fitted(queue, self.name, self.key_width, self.key_suffix)
        self.key.set_text("\n".join(lines))
        lift = LINE_PX * (len(lines) - 1)
        b = self.board
        self.key.set_y(self.y1 + b.py(9 + lift / 2))
        y = self.y1 + b.py(26 + lift)
        moved = abs(self.header.get_position()[1] - y) > 1e-9
        self.header_marker.set_offsets([(self.x0 + b.px(10), y)])
        self.header.set_y(y)
        self.count.set_y(y)
        return moved

    @property
    def _filled(self) -> bool:
        return PLACES[self.style].marker not in ("x", "+", "1", "2", "3", "4") and not PLACES[
            self.style
        ].marker.startswith("$")

    def show_count(self, n: int, noun: str = "job") -> None:
        self.count.set_text(words.count(n, noun))


class GridPlace(Place):
    """Markers in rows, in the order given (oldest first for pending, newest first for done)."""

    def __init__(self, *args: Any, label_lines: int = 1, **kw: Any) -> None:
        super().__init__(*args, **kw)
        b = self.board
        self.cell_w = b.px(CELL_W_PX)
        self.cell_h = b.py(CELL_H_PX + LINE_PX * (label_lines - 1))
        self.cols = max(1, int((self.x1 - self.x0) / self.cell_w))
        self.rows = max(1, int((self.y1 - self.y0 - b.py(14)) / self.cell_h))

    @property
    def capacity(self) -> int:
        return self.cols * self.rows

    def spots(self, items: Sequence[tuple[str, str]], total: int | None = None) -> dict[str, Spot]:
        """``items``: (job id, label) in display order; ``total``: how many the place holds."""
        total = len(items) if total is None else total
        shown = list(items)[: self.capacity if total <= self.capacity else self.capacity - 1]
        pad_x = (self.x1 - self.x0 - self.cols * self.cell_w) / 2
        out = {}
        for i, (job_id, label) in enumerate(shown):
            row, col = divmod(i, self.cols)
            x = self.x0 + pad_x + (col + 0.5) * self.cell_w
            y = self.y1 - self.board.py(14) - row * self.cell_h
            out[job_id] = Spot(x, y, self.style, label)
        hidden = total - len(shown)
        self.overflow.set_text(words.more(hidden) if hidden > 0 else "")
        return out

    def entry(self) -> tuple[float, float]:
        return (self.x0 - self.board.px(40), self.y1 - self.board.py(14))


class TimePlace(Place):
    """The active set on a time axis: each marker at its lease deadline, measured from the
    server's now (the vertical line). The axis runs on left of now, at the same scale,
    through the expired zone: an expired lease is drawn at its deadline too (one that ran
    out longer ago than the zone reaches waits at its left edge, its label saying how long).
    Markers too close to share a row go a row further down, never on top of each other."""

    def __init__(
        self,
        *args: Any,
        span_ms: int = 10_000,
        expired_share: float = 0.34,
        extra_line: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        b = self.board
        self.span_ms = span_ms
        self.extra_line = extra_line  # the extra label (a stall count) on a third line of its own
        lines = 3 if extra_line else 2  # id, time (, extra)
        self.cell_w = b.px(CELL_W_PX)
        self.cell_h = b.py(CELL_H_PX + LINE_PX * (lines - 1))
        self.top = self.y1 - b.py(16)
        # The lowest row's label ends above the box's bottom edge (the ticks sit under it),
        # and in the expired zone above its caption.
        label = b.py(11 + 2 + LINE_PX * lines)
        self.rows = max(1, int((self.top - label - (self.y0 + b.py(2))) / self.cell_h) + 1)
        self.zone_rows = max(1, int((self.top - label - (self.y0 + b.py(26))) / self.cell_h) + 1)
        self.now_x = self.x0 + (self.x1 - self.x0) * expired_share
        self.left = self.x0 + b.px(6) + self.cell_w / 2  # the leftmost marker (and its label) in the box
        self.right = self.x1 - b.px(34)
        ax = b.ax
        ax.add_patch(
            Rectangle(
                (self.x0 + b.px(3), self.y0 + b.py(3)),
                self.now_x - self.x0 - b.px(6),
                self.y1 - self.y0 - b.py(6),
                facecolor=to_rgba(PLACES["dead"].colour, 0.06),
                hatch="//",
                edgecolor=to_rgba(PLACES["dead"].colour, 0.18),
                linewidth=0,
            )
        )
        ax.plot([self.now_x, self.now_x], [self.y0, self.y1], color=INK, lw=1.4)
        ax.text(self.now_x, self.y0 - b.py(11), words.NOW, fontsize=FONT, ha="center", va="center", color=INK)
        ax.text(
            (self.x0 + self.now_x) / 2,
            self.y0 + b.py(8),
            words.EXPIRED_ZONE,
            fontsize=FONT,
            ha="center",
            va="bottom",
            color=MUTED,
            linespacing=1.1,
        )
        self.ticks = [b.dynamic_text(0, self.y0 - b.py(11), "", ha="center", va="center") for _ in range(3)]
        self.set_span(span_ms)

    def set_span(self, span_ms: int) -> bool:
        """The axis' right end, in ms after now; True if it changed (the board redraws in full)."""
        span_ms = max(1_000, int(span_ms))
        changed = span_ms != getattr(self, "_drawn_span", None)
        self.span_ms = span_ms
        self._drawn_span = span_ms
        past = math.floor(self.zone_ms / 100) * 100  # the expired zone's far end, clear of "server now"
        for tick, ms in zip(self.ticks, (span_ms * 0.5, span_ms * 1.0, -past), strict=True):
            tick.set_position((self.x_of(ms), self.y0 - self.board.py(11)))
            tick.set_text(words.seconds_ahead(ms) if ms > 0 else words.seconds_ago(-ms))
        return changed

    @property
    def zone_ms(self) -> float:
        """How far back the expired zone's axis reaches, in ms before now."""
        return (self.now_x - self.left) / (self.right - self.now_x) * self.span_ms

    def x_of(self, ms_left: float) -> float:
        """Where a lease with ``ms_left`` to run (negative: ran out that long ago) is drawn."""
        x = self.now_x + (self.right - self.now_x) * min(1.0, ms_left / self.span_ms)
        return max(self.left, x)

    def spots(self, items: Sequence[tuple[str, int, str]]) -> dict[str, Spot]:
        """``items``: (job id, ms left on its lease, extra label line or "")."""
        out: dict[str, Spot] = {}
        hidden = 0
        # Each lease at its deadline's x, from the longest expired to the furthest ahead; a
        # row further down when a neighbour's label is too close (fewer rows left of now: the
        # zone's caption sits under them). An expired lease stays left of now, a live one right.
        # Two neighbours in a row are as far apart as half of each one's label and a gap.
        last = [(-math.inf, 0.0)] * self.rows  # (x, half its label's width) of each row's last
        for job_id, left, extra in sorted(items, key=lambda i: i[1]):
            x = self.x_of(left)
            x = min(x, self.now_x - self.board.px(3)) if left <= 0 else max(x, self.now_x + self.board.px(3))
            label = words.marker(job_id, left, extra, self.extra_line)
            half = self.board.px(LABEL_CHAR_PX * max(len(line) for line in label.splitlines()) / 2)
            for row in range(self.zone_rows if x < self.now_x else self.rows):
                if x - last[row][0] >= last[row][1] + half + self.board.px(6):
                    last[row] = (x, half)
                    out[job_id] = Spot(x, self.top - row * self.cell_h, self.style, label)
                    break
            else:
                hidden += 1
        self.overflow.set_text(words.more(hidden) if hidden else "")
        return out


class BoardFigure:
    """Shared by every panel's figure: places, markers, paths, a pulse, blitting."""

    width_in, height_in, dpi = 8.6, 4.2, 100
    max_markers = 60
    transition_s = 0.72  # one move's animation at speed 1
    steps = 18  # frames per move's animation (at least 10, over 0.3-1.0 s)

    def __init__(self) -> None:
        self.lock = threading.RLock()  # one drawer at a time: the animation thread, a click, the browser
        self.fig = fig = Figure(figsize=(self.width_in, self.height_in), dpi=self.dpi, facecolor=PAPER)
        FigureCanvasAgg(fig)
        self.ax = ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_axis_off()
        self._fitted: dict[tuple[str, str, float, str], list[str]] = {}
        self._line_widths: dict[str, float] = {}  # a line as drawn in the text's font, in pixels
        self.dynamic: list[Any] = []  # redrawn at every animation frame
        self.marks: list[Any] = []  # change between frames, not within a move: part of the background
        self.title = self.dynamic_text(0.012, 0.975, "", fontsize=TITLE, weight="bold", va="top")
        self.banner = self.dynamic_text(0.988, 0.975, "", ha="right", va="top", weight="bold")
        self.paths: dict[str, list[tuple[float, float]]] = {}
        self.arrows: dict[str, FancyArrowPatch] = {}
        self.cards: list[tuple[tuple[float, float, float, float], Any]] = []  # (box, its text): text stays inside
        self.build()
        self.scatters = {
            name: ax.scatter([], [], s=MARKER_SIZE, marker=style.marker, zorder=5, linewidths=1.0)
            for name, style in PLACES.items()
        }
        self.labels = [
            ax.text(0, 0, "", fontsize=FONT, family="monospace", ha="center", va="top", color=INK, zorder=6)
            for _ in range(self.max_markers)
        ]
        self.pulse = ax.scatter([], [], s=220, marker="o", facecolors="none", edgecolors=INK, linewidths=2.2, zorder=7)
        self.dynamic += [*self.scatters.values(), *self.labels, self.pulse]
        for artist in self.dynamic + self.marks:
            artist.set_animated(True)
        self._static: Any = None
        self._with_marks: Any = None
        self._marks_drawn: tuple[Any, ...] = ()
        self._saving = False
        self.frames_drawn = 0
        fig.canvas.mpl_connect("draw_event", self._on_full_draw)

    # -- building blocks (for build()) -----------------------------------------------------

    def px(self, n: float) -> float:
        """``n`` pixels as a fraction of the figure's width."""
        return n / (self.width_in * self.dpi)

    def py(self, n: float) -> float:
        return n / (self.height_in * self.dpi)

    def fitted(self, queue: str, part: str, width: float, suffix: str = "") -> list[str]:
        """A key's name in the fewest lines (:func:`words.key_label`) of which each, drawn in
        the text's font, is at most ``width`` (a fraction of the figure's width) wide."""
        found = self._fitted.get((queue, part, width, suffix))
        if found is None:
            renderer = self.fig.canvas.get_renderer()
            font = FontProperties(size=FONT)
            most = width * self.width_in * self.dpi

            def fits(line: str) -> bool:
                # Neighbouring widths wrap mostly into the same lines: each is measured once.
                if line not in self._line_widths:
                    self._line_widths[line] = renderer.get_text_width_height_descent(line, font, ismath=False)[0]
                return self._line_widths[line] <= most

            whole = len(words.key_label(queue, part)[0]) + len(suffix)
            found = words.key_label(queue, part, 1, suffix)
            for room in range(whole, 0, -1):
                lines = words.key_label(queue, part, room, suffix)
                if all(fits(line) for line in lines):
                    found = lines
                    break
            self._fitted[(queue, part, width, suffix)] = found
        return found

    def dynamic_text(self, x: float, y: float, text: str, **kw: Any) -> Any:
        """Text a frame may change (a count, a title): one of the frame's marks."""
        kw.setdefault("fontsize", FONT)
        kw.setdefault("color", INK)
        artist = self.ax.text(x, y, text, **kw)
        self.marks.append(artist)
        return artist

    def card(self, box: tuple[float, float, float, float], header: str = "") -> Any:
        """A plain box with a bold header and a text (a mark) inside; returns the text."""
        x0, y0, x1, y1 = box
        self.ax.add_patch(
            FancyBboxPatch(
                (x0, y0),
                x1 - x0,
                y1 - y0,
                boxstyle="round,pad=0.004,rounding_size=0.012",
                facecolor="#f6f6f6",
                edgecolor=MUTED,
                linewidth=1.0,
            )
        )
        if header:
            self.ax.text(x0 + self.px(8), y1 - self.py(6), header, fontsize=FONT, weight="bold", va="top", color=INK)
        text = self.dynamic_text(x0 + self.px(8), y1 - self.py(24 if header else 6), "", va="top", linespacing=1.35)
        self.cards.append((box, text))
        return text

    def arrow(
        self, name: str, points: list[tuple[float, float]], label: str = "", *, rad: float = 0.0, label_dy: float = 12
    ) -> None:
        """A path a move takes (lit when that move ran), and the pulse's route along it."""
        arrow = FancyArrowPatch(
            points[0],
            points[-1],
            connectionstyle=f"arc3,rad={rad}",
            arrowstyle="-|>",
            mutation_scale=16,
            color=MUTED,
            linewidth=1.2,
        )
        self.ax.add_patch(arrow)
        self.dynamic.insert(0, arrow)  # lit at a move's first frame: drawn with the markers
        self.arrows[name] = arrow
        size = (self.width_in * self.dpi, self.height_in * self.dpi)
        self.paths[name] = _arc(points[0], points[-1], rad, size) if rad else points
        if label:
            (x0, y0), (x1, y1) = points[0], points[-1]
            mid = self.paths[name][len(self.paths[name]) // 2] if rad else ((x0 + x1) / 2, (y0 + y1) / 2)
            self.ax.text(
                mid[0], mid[1] + self.py(label_dy), label, fontsize=FONT, ha="center", va="bottom", color=MUTED
            )

    def heading(self) -> str:
        """The title (and what is under it): what a still picture's alt text starts with."""
        return self.title.get_text()

    # -- what a panel defines -----------------------------------------------------------------

    def build(self) -> None:
        """Lay out the static parts (places, arrows) once."""

    def spots(self, frame: Frame, now_ms: int) -> dict[str, Spot]:
        """Where each job marker of ``frame`` sits when the server's clock reads ``now_ms``."""
        return {}

    def annotate(self, frame: Frame, now_ms: int) -> bool:
        """Write the frame's other words; return True if the static background must be redrawn."""
        return False

    def moves(self, a: Frame | None, b: Frame) -> bool:
        """True if going from ``a`` to ``b`` moves something: a lit path, or any marker."""
        if b.lit:
            return True

        def where(frame: Frame | None) -> dict[str, tuple[float, float, str]]:
            if frame is None:
                return {}
            spots = self.spots(frame, frame.server_now_ms())
            return {j: (round(s.x, 3), round(s.y, 3), s.style) for j, s in spots.items()}

        return where(a) != where(b)

    def time_dependent(self, frame: Frame) -> bool:
        """True if the picture changes as the server's clock runs (leases counting down)."""
        return bool(frame.snapshot and frame.snapshot.active)

    # -- drawing ------------------------------------------------------------------------------

    def pose(self, a: Frame | None, b: Frame, p: float = 1.0, *, at_s: float | None = None, banner: str = "") -> bool:
        """Set every dynamic artist for ``p`` of the way from frame ``a`` to frame ``b``.
        Returns True if the background changed (then draw in full)."""
        now_b = b.server_now_ms(at_s)
        # spots() also writes each place's "+N more": the frame whose words are shown goes last.
        first_half = a is not None and p < 0.5
        target = self.spots(b, now_b) if first_half else {}
        start = self.spots(a, a.server_now_ms(at_s)) if a is not None and p < 1.0 else {}
        if not first_half:
            target = self.spots(b, now_b)
        # The frame's words (counts, title, workers, verdict) change half way, when the
        # markers arrive in their new places, and so does the readout (the player shows the
        # new frame's words from its half-way frame on): the two always tell one frame. A
        # move's first frame then redraws only the markers (cheap).
        if first_half:
            assert a is not None
            full = self.annotate(a, a.server_now_ms(at_s))
        else:
            full = self.annotate(b, now_b)
        self.banner.set_text(banner)
        self.banner.set_color(INK)
        e = ease(p)
        placed: dict[str, list[tuple[float, float, tuple[float, float, float, float]]]] = {n: [] for n in self.scatters}
        texts: list[tuple[float, float, str, float]] = []
        for job_id in list(target) + [j for j in start if j not in target]:
            to, frm = target.get(job_id), start.get(job_id)
            # A marker's label is drawn where the marker rests: one that travels, slides in or
            # fades out carries none until it arrives (a label in flight would run over the
            # arrows' names and its neighbours' labels). A lease's marker drifting with the
            # clock by less than half a cell counts as resting.
            if to is not None and frm is not None:
                x, y = frm.x + (to.x - frm.x) * e, frm.y + (to.y - frm.y) * e
                spot, alpha = (to if e >= 0.5 else frm), 1.0
                resting = p >= 1.0 or (abs(to.x - frm.x) < self.px(CELL_W_PX / 2) and abs(to.y - frm.y) < self.py(4))
            elif to is not None:
                slide = self.px(30) * (1 - e) if p < 1.0 else 0.0
                x, y, spot, alpha = to.x - slide, to.y, to, (e if p < 1.0 else 1.0)
                resting = p >= 1.0
            else:
                assert frm is not None
                x, y, spot, alpha, resting = frm.x, frm.y, frm, 1 - e, False
            if alpha <= 0.02:
                continue
            placed[spot.style].append((x, y, to_rgba(PLACES[spot.style].colour, alpha)))
            if spot.label and resting:
                texts.append((x, y - self.py(11), spot.label, alpha))
        for name, scatter in self.scatters.items():
            points = placed[name]
            if points:
                scatter.set_offsets([(x, y) for x, y, _ in points])
                colours = [c for _, _, c in points]
                scatter.set_facecolors(colours if self._filled(name) else "none")
                scatter.set_edgecolors([to_rgba(INK, c[3]) for c in colours] if self._filled(name) else colours)
                scatter.set_linewidths(0.8 if self._filled(name) else 2.0)
            else:
                scatter.set_offsets(_NOWHERE)
        for label, (alpha,) in place_labels(self.labels, texts):
            label.set_alpha(alpha)
        # The move's paths (see Lit): lit, with the pulse along the first; a probe's pulse
        # goes half way and turns back.
        for name, arrow in self.arrows.items():
            on = name in b.lit.on
            arrow.set_color(INK if on else MUTED)
            arrow.set_linewidth(2.6 if on else 1.0)
        path = self.paths.get(b.lit.paths[0]) if b.lit else None
        if path and p < 1.0:
            back = e / 1.4 if e < 0.7 else 0.5 - (e - 0.7)
            self.pulse.set_offsets([_along(path, back if b.lit.probe else e)])
        else:
            self.pulse.set_offsets(_NOWHERE)
        return full

    @staticmethod
    def _filled(style: str) -> bool:
        marker = PLACES[style].marker
        return marker not in ("x", "+") and not marker.startswith("$")

    def _marks_now(self) -> tuple[Any, ...]:
        out = []
        for artist in self.marks:
            if hasattr(artist, "get_text"):
                out.append((artist.get_text(), artist.get_color(), artist.get_position()))
            else:
                out.append((artist.get_edgecolor(), artist.get_linewidth()))
        return tuple(out)

    def render(self, full: bool = False) -> None:
        """Show the posed artists, in three layers: the static picture (cached at a full
        draw), the frame's marks over it (cached once per move), the markers over those."""
        canvas = self.fig.canvas
        self.frames_drawn += 1
        marks = self._marks_now()
        if full or self._static is None:
            canvas.draw()  # the draw_event handler caches both layers and adds the markers
            return
        if marks != self._marks_drawn or self._with_marks is None:
            canvas.restore_region(self._static)
            for artist in self.marks:
                self.fig.draw_artist(artist)
            self._with_marks = canvas.copy_from_bbox(self.fig.bbox)
            self._marks_drawn = marks
        else:
            canvas.restore_region(self._with_marks)
        for artist in self.dynamic:
            self.fig.draw_artist(artist)
        if hasattr(canvas, "_force_full"):
            # ipympl: send whole frames. A browser replaces an image still loading by the
            # next one; with diff frames a dropped one would leave ghost markers behind.
            canvas._force_full = True
        canvas.blit(self.fig.bbox)

    def _on_full_draw(self, _event: object) -> None:
        if self._saving:
            return
        canvas = self.fig.canvas
        self._static = canvas.copy_from_bbox(self.fig.bbox)
        for artist in self.marks:
            self.fig.draw_artist(artist)
        self._with_marks = canvas.copy_from_bbox(self.fig.bbox)
        self._marks_drawn = self._marks_now()
        for artist in self.dynamic:
            self.fig.draw_artist(artist)

    def draw_between(self, a: Frame | None, b: Frame, p: float, *, at_s: float | None = None, banner: str = "") -> None:
        with self.lock:
            self.render(self.pose(a, b, p, at_s=at_s, banner=banner))

    def draw(self, frame: Frame, *, at_s: float | None = None, banner: str = "") -> None:
        self.draw_between(None, frame, 1.0, at_s=at_s, banner=banner)

    def png(self, frame: Frame | None = None, *, at_s: float | None = None) -> bytes:
        """The figure as a PNG (everything drawn, nothing blitted); ``frame`` at rest if given."""
        with self.lock:
            if frame is not None:
                self.pose(None, frame, 1.0, at_s=at_s)
            for artist in self.dynamic + self.marks:
                artist.set_animated(False)  # savefig leaves animated artists out
            self._saving = True
            buffer = io.BytesIO()
            try:
                self.fig.savefig(buffer, format="png", dpi=self.dpi, facecolor=PAPER)
            finally:
                self._saving = False
                for artist in self.dynamic + self.marks:
                    artist.set_animated(True)
                self._static = None  # the next frame draws in full
            return buffer.getvalue()


_NOWHERE = [[math.nan, math.nan]]


def place_labels(labels: list[Any], items: list[tuple[Any, ...]]) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """Each of a board's label texts given its item's place and words (``(x, y, text, *style)``),
    with the rest of the item for the caller to style; the texts left over emptied."""
    for label, item in zip(labels, [*items, *[None] * (len(labels) - len(items))], strict=False):
        if item is None:
            label.set_text("")
            continue
        x, y, text, *style = item
        label.set_position((x, y))
        label.set_text(text)
        yield label, tuple(style)


def _arc(
    a: tuple[float, float], b: tuple[float, float], rad: float, size: tuple[float, float], n: int = 24
) -> list[tuple[float, float]]:
    """Points along matplotlib's arc3 connection from a to b (a quadratic Bezier whose
    control point arc3 places in pixels, not in figure fractions)."""
    (x0, y0), (x1, y1) = a, b
    w, h = size
    cx = (x0 + x1) / 2 + rad * (y1 - y0) * h / w
    cy = (y0 + y1) / 2 - rad * (x1 - x0) * w / h
    return [
        ((1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t * t * x1, (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t * t * y1)
        for t in (i / (n - 1) for i in range(n))
    ]


def _along(path: list[tuple[float, float]], p: float) -> tuple[float, float]:
    """The point ``p`` of the way along a polyline, by length."""
    lengths = [math.dist(path[i], path[i + 1]) for i in range(len(path) - 1)]
    total = sum(lengths) or 1.0
    goal = p * total
    for (x0, y0), (x1, y1), length in zip(path, path[1:], lengths, strict=False):
        if goal <= length and length > 0:
            t = goal / length
            return (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t)
        goal -= length
    return path[-1]


class QueueFigure(BoardFigure):
    """A board of one queue's sets: ``self.pending``, ``self.active``, ``self.done`` (built by
    the panel's ``build``), labelled with the queue's own key names."""

    pending: GridPlace
    active: TimePlace
    done: GridPlace

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.other_keys: list[tuple[str, float]] = []  # keys drawn outside the places, their width (build())
        super().__init__()
        for place in self.places:
            # A key's lines may run over the gap to the next box whose header shares their height.
            beside = [p.x0 for p in self.places if p.x0 > place.x1 and abs(p.y1 - place.y1) < self.py(KEY_BAND_PX)]
            place.key_right = min(beside) - self.px(12) if beside else 1.0 - self.px(6)
        self.show_queue(queue)

    def key(self, part: str) -> str:
        return f"emq:{{{self.queue}}}:{part}"

    @property
    def places(self) -> list[Place]:
        return [p for p in (getattr(self, n, None) for n in ("pending", "active", "done", "dead")) if p is not None]

    def show_queue(self, queue: str) -> bool:
        """Each place's key over its box, the queue's name whole in every one (wrapped where
        a box is narrow). True if a header moved (the static picture must be drawn again)."""
        moved = [place.set_key(queue) for place in self.places]
        return any(moved)

    def key_label(self, queue: str, part: str) -> str:
        """A key's name as this picture writes it outside the places (``other_keys``: a key
        part and its width), wrapped as a place's is."""
        width = dict(self.other_keys).get(part)
        return "\n".join(self.fitted(queue, part, width) if width else words.key_label(queue, part))

    def spots(self, frame: Frame, now_ms: int) -> dict[str, Spot]:
        return {} if frame.snapshot is None else self.set_spots(frame.snapshot, now_ms)

    def set_spots(self, snap: Any, now_ms: int) -> dict[str, Spot]:
        """Where each job of the snapshot stands: pending and done by tag, active at its deadline."""
        out = self.pending.spots([(j, words.tag(j)) for j in snap.pending], snap.counts["pending"])
        out.update(self.active.spots([(j, deadline - now_ms, "") for j, deadline in snap.active.items()]))
        out.update(self.done.spots([(j, words.tag(j)) for j in snap.done], snap.counts["done"]))
        return out
