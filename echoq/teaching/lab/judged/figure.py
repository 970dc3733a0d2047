"""The picture of a rejected answer, built once and updated in place from a :class:`Picture`.

Two kinds, in the labs' look (each place's colour and marker shape, four-character tags,
cards): *sides* -- two boards, the learner's move and the reference move, from one starting
state, with the learner's commands listed under them -- and *scene* -- the queue of the
scene the check stopped in, and a timeline of what its processes and the check did. What
the ✗ line names is ringed (a member), drawn with a heavy edge (a set, a row) or on yellow
(a row's field, a key outside the sets); the ✗ line itself is under the picture.

:meth:`JudgedFigure.show` is a pure function of the picture: every text and marker is set
from it, nothing is kept from the picture before.
"""

from __future__ import annotations

import io
from typing import Any

from matplotlib.colors import to_rgba
from matplotlib.font_manager import FontProperties
from matplotlib.patches import FancyBboxPatch

from ...evidence import SETS
from ..figure import _NOWHERE, MARKER_SIZE, BoardFigure, place_labels
from ..style import FEEDBACK, FONT, INK, MUTED, PLACES
from ..words import more, tag
from . import words
from .model import COLUMNS, FIELDS, LANES, WINDOW, Picture

__all__ = ["JudgedFigure", "figure_for"]

WIDTH_PX = 1040
MARGIN = 12
LINE_WIDTH = WIDTH_PX - 2 * MARGIN - 16  # the ✗ line's text, in its box
GAP = 20
# Pixels from the top: the boards' titles, their sets' boxes, the row cards, the keys outside
# the sets, the commands (sides) or the timeline (scene); the ✗ line's box comes last.
SUBTITLE_TOP = 36
BOARD_TOP = 70
BOX_TOP = 112
BOX_H = 120  # a set's box: three rows of markers
CARD_TOP, CARD_H = BOX_TOP + BOX_H + 10, 86
OUTSIDE_TOP = CARD_TOP + CARD_H + 10
COMMANDS_TOP = OUTSIDE_TOP + 58
TIMELINE_TOP = CARD_TOP + CARD_H + 12
ROW_H = 38  # one row of markers and its label
LINE_PX = 15  # one line of 10 pt text
LANE_PX = 28
HIGHLIGHT = "#f0e442"  # Okabe-Ito yellow behind what the ✗ line names (black on it: 16:1)
BAD_FG, BAD_BG = FEEDBACK["bad"]
STEP_BG = "#e3e3e3"  # the command the board is at


class JudgedFigure(BoardFigure):
    """The picture of one rejected run (see the module's docstring)."""

    max_markers = 64

    def __init__(self, picture: Picture) -> None:
        self.kind, self.timeline, self.boards_n, lines = self.layout(picture)
        self.line_lines = [""] * lines
        self.width_in = WIDTH_PX / 100
        self.top_line = self._layout_height()
        self.height_in = (self.top_line + 18 + LINE_PX * len(self.line_lines)) / 100
        super().__init__()
        for artist in self.dynamic + self.marks:
            artist.set_animated(False)  # a still picture: drawn whole each time (png() does the same)
        self.show(picture)

    # -- layout -------------------------------------------------------------------------------

    @staticmethod
    def layout(picture: Picture) -> tuple[str, bool, int, int]:
        """What a figure's layout depends on: its kind, whether it has a timeline, how many
        boards, how many lines the ✗ line takes. Pictures of one layout share a figure."""
        lines = len(_wrap(picture.line, LINE_WIDTH, FONT))
        return picture.kind, bool(picture.columns), len(picture.boards), lines

    def _layout_height(self) -> int:
        """Pixels from the top to the ✗ line's box."""
        if self.kind == "sides":
            return COMMANDS_TOP + 22 + LINE_PX * (WINDOW + 1) + 14
        return TIMELINE_TOP + ((26 + LANE_PX * LANES + 12) if self.timeline else 0)

    def y(self, top_px: float) -> float:
        """A height given in pixels from the top, as a figure fraction."""
        return 1 - top_px / (self.height_in * self.dpi)

    def build(self) -> None:
        ax = self.ax
        self.boxes: list[dict[str, Any]] = []
        self.header_marks: dict[str, list[tuple[float, float]]] = {place: [] for place in SETS}
        self.board_titles: list[Any] = []
        self.rows: list[dict[str, Any]] = []
        self.outsides: list[dict[str, Any]] = []
        if self.kind == "sides":
            width = (WIDTH_PX - 2 * MARGIN - GAP) / 2
            lefts = [MARGIN, MARGIN + width + GAP]
        else:
            width = WIDTH_PX - 2 * MARGIN
            lefts = [MARGIN]
        for left in lefts[: self.boards_n]:
            self.board_titles.append(
                ax.text(self.px(left), self.y(BOARD_TOP), "", fontsize=FONT + 1, weight="bold", va="top")
            )
            self.boxes.append(self._set_boxes(left, width))
            card_w = width if self.kind == "sides" else width / 2 - GAP / 2
            self.rows.append(self._row_card(left, card_w))
            if self.kind == "sides":
                self.outsides.append(self._outside(left, width))
        self.subtitle_lines = [
            ax.text(self.px(MARGIN), self.y(SUBTITLE_TOP + LINE_PX * n), "", va="top", fontsize=FONT, color=MUTED)
            for n in range(2)
        ]
        # Where it has room: right of the commands' header (sides), of the board's title (scene).
        legend_top = COMMANDS_TOP if self.kind == "sides" else BOARD_TOP
        ax.text(self.px(WIDTH_PX - MARGIN), self.y(legend_top), words.LEGEND, ha="right", va="top", color=MUTED)
        for place, spots in self.header_marks.items():
            style = PLACES[place]
            ax.plot(*zip(*spots, strict=True), linestyle="none", marker=style.marker, markersize=7, color=style.colour)
        if self.kind == "sides":
            self._commands(COMMANDS_TOP)
        if self.timeline:
            self._timeline(TIMELINE_TOP)
        self._line_box()

    def _set_boxes(self, left: float, width: float) -> dict[str, Any]:
        ax = self.ax
        gap = 6 if self.kind == "sides" else 8
        w = (width - gap * (len(SETS) - 1)) / len(SETS)
        top = BOX_TOP
        boxes: dict[str, Any] = {}
        for n, place in enumerate(SETS):
            x0 = left + n * (w + gap)
            style = PLACES[place]
            patch = FancyBboxPatch(
                (self.px(x0), self.y(top + BOX_H)),
                self.px(w),
                self.y(top) - self.y(top + BOX_H),
                boxstyle="round,pad=0.002,rounding_size=0.008",
                facecolor=to_rgba(style.colour, 0.07),
                edgecolor=style.colour,
                linewidth=1.4,
            )
            ax.add_patch(patch)
            self.header_marks[place].append((self.px(x0 + 6), self.y(top - 10)))
            ax.text(self.px(x0 + 14), self.y(top - 10), place, fontsize=FONT, weight="bold", va="center")
            cols = max(1, int(w // 48))
            last_row = top + 14 + (BOX_H // ROW_H - 1) * ROW_H
            overflow = ax.text(self.px(x0 + w / 2), self.y(last_row), "", ha="center", va="center")
            boxes[place] = {"x0": x0, "w": w, "top": top, "cols": cols, "patch": patch, "overflow": overflow}
        return boxes

    def _row_card(self, left: float, width: float) -> dict[str, Any]:
        ax = self.ax
        top, height = CARD_TOP, CARD_H
        patch = FancyBboxPatch(
            (self.px(left), self.y(top + height)),
            self.px(width),
            self.y(top) - self.y(top + height),
            boxstyle="round,pad=0.002,rounding_size=0.008",
            facecolor="#f6f6f6",
            edgecolor=MUTED,
            linewidth=1.0,
        )
        ax.add_patch(patch)
        header = ax.text(self.px(left + 8), self.y(top + 6), "", weight="bold", va="top", fontsize=FONT)
        col_w = (width - 16) / 2
        fields = [
            ax.text(
                self.px(left + 8 + (n % 2) * col_w),
                self.y(top + 28 + (n // 2) * 14),
                "",
                va="top",
                fontsize=FONT,
                family="monospace",
            )
            for n in range(FIELDS)
        ]
        return {"patch": patch, "header": header, "fields": fields}

    def _outside(self, left: float, width: float) -> dict[str, Any]:
        ax = self.ax
        top = OUTSIDE_TOP
        header = ax.text(self.px(left), self.y(top), words.OUTSIDE, weight="bold", va="top", fontsize=FONT)
        entries = [
            ax.text(self.px(left + 8), self.y(top + 18 + n * LINE_PX), "", va="top", fontsize=FONT) for n in range(2)
        ]
        return {"header": header, "entries": entries, "width": width - 16}

    def _commands(self, top: float) -> None:
        ax = self.ax
        self.commands_header = ax.text(self.px(MARGIN), self.y(top), "", weight="bold", va="top", fontsize=FONT)
        self.command_lines = [
            ax.text(self.px(MARGIN), self.y(top + 20 + n * LINE_PX), "", va="top", fontsize=FONT, family="monospace")
            for n in range(WINDOW)
        ]
        self.missing = ax.text(
            self.px(MARGIN), self.y(top + 22 + WINDOW * LINE_PX), "", va="top", fontsize=FONT, color=BAD_BG
        )

    def _timeline(self, top: float) -> None:
        ax = self.ax
        ax.text(self.px(MARGIN), self.y(top), words.TIMELINE, weight="bold", va="top", fontsize=FONT)
        self.lane_top = top + 26
        self.lane_names = [
            ax.text(self.px(MARGIN), self.y(self.lane_top + 6 + n * LANE_PX), "", va="center", fontsize=FONT)
            for n in range(LANES)
        ]
        self.column_x0 = 130
        self.column_w = (WIDTH_PX - MARGIN - self.column_x0) / (COLUMNS + 1)
        self.lane_lines = [ax.plot([], [], color="#c8c8c8", linewidth=1.0, zorder=1)[0] for _ in range(LANES)]
        self.event_marks = {
            kind: ax.plot([], [], linestyle="none", marker=marker, markersize=8, color=colour, zorder=4)[0]
            for kind, (marker, colour) in EVENT_LOOK.items()
        }
        self.event_labels = [ax.text(0, 0, "", fontsize=FONT, ha="center", va="top", color=INK) for _ in range(COLUMNS)]
        self.broke = ax.plot([], [], color=BAD_BG, linewidth=2.0, zorder=3)[0]
        self.broke_label = ax.text(0, 0, "", fontsize=FONT, ha="center", va="bottom", color=BAD_BG, weight="bold")

    def _line_box(self) -> None:
        top = self.top_line
        height = 12 + LINE_PX * len(self.line_lines)
        self.ax.add_patch(
            FancyBboxPatch(
                (self.px(MARGIN), self.y(top + height)),
                self.px(WIDTH_PX - 2 * MARGIN),
                self.y(top) - self.y(top + height),
                boxstyle="round,pad=0.002,rounding_size=0.006",
                facecolor=BAD_BG,
                edgecolor=BAD_BG,
            )
        )
        self.line_texts = [
            self.ax.text(
                self.px(MARGIN + 8), self.y(top + 6 + n * LINE_PX), text, va="top", fontsize=FONT, color=BAD_FG
            )
            for n, text in enumerate(self.line_lines)
        ]

    def png(self, frame: Any = None, *, at_s: float | None = None) -> bytes:
        """The picture as a PNG of at most 256 colours: flat colours and text compress to a
        quarter of a full-colour PNG, and a notebook stores the picture twice (as an image, and
        in the HTML beside its alt text)."""
        from PIL import Image

        with self.lock:
            canvas = self.fig.canvas
            self._saving = True  # a still: no blitting background to keep
            try:
                canvas.draw()
            finally:
                self._saving = False
            width, height = canvas.get_width_height()
            image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
            buffer = io.BytesIO()
            image.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(buffer, format="PNG")
            return buffer.getvalue()

    # -- drawing a picture --------------------------------------------------------------------------

    def show(self, picture: Picture) -> None:
        """Set every text and marker from ``picture``."""
        with self.lock:
            for text, part in zip(self.line_texts, _wrap(picture.line, LINE_WIDTH, FONT), strict=False):
                text.set_text(part)
            self.title.set_text(picture.heading)
            wrapped = _wrap(picture.subtitle, WIDTH_PX - 2 * MARGIN, FONT)
            for text, part in zip(self.subtitle_lines, [*wrapped[:2], "", ""], strict=False):
                text.set_text(part)
            markers: dict[str, list[tuple[float, float]]] = {name: [] for name in self.scatters}
            rings: list[tuple[float, float]] = []
            labels: list[tuple[float, float, str, bool]] = []
            for board, title, boxes, row in zip(picture.boards, self.board_titles, self.boxes, self.rows, strict=False):
                title.set_text(board.title)
                self._fill_sets(board, boxes, markers, rings, labels)
                self._fill_row(board, row)
            for board, outside in zip(picture.boards, self.outsides, strict=False):
                self._fill_outside(board, outside)
            for name, scatter in self.scatters.items():
                points = markers[name]
                scatter.set_offsets(points or _NOWHERE)
                if points:
                    colour = PLACES[name].colour
                    scatter.set_facecolors([colour])
                    scatter.set_edgecolors([INK])
                    scatter.set_linewidths(0.8)
            self.pulse.set_offsets(rings or _NOWHERE)
            self.pulse.set_sizes([MARKER_SIZE * 3.2])
            for text, (lit,) in place_labels(self.labels, labels):
                text.set_alpha(1.0)
                text.set_weight("bold" if lit else "normal")
            if self.kind == "sides":
                self._fill_commands(picture)
            if self.timeline:
                self._fill_timeline(picture)

    def _fill_sets(self, board, boxes, markers, rings, labels) -> None:
        for place in SETS:
            box = boxes[place]
            members = board.sets.get(place, ())
            lit_box = place in board.lit_places
            box["patch"].set_edgecolor(INK if lit_box else PLACES[place].colour)
            box["patch"].set_linewidth(3.4 if lit_box else 2.6 if place in board.changed else 1.4)
            box["patch"].set_linestyle("--" if place in board.changed and not lit_box else "-")
            cols = 1 if any(second for _, second, _ in members) else box["cols"]
            rows = BOX_H // ROW_H
            ordered = sorted(members, key=lambda m: not m[2])  # what the line names first: never hidden
            total = board.counts.get(place, len(members))
            # More than fit: the last row says how many more, across the box.
            shown = ordered if total <= cols * rows else ordered[: cols * (rows - 1)]
            cell_w = box["w"] / cols
            for n, (job, second, lit) in enumerate(shown):
                r, c = divmod(n, cols)
                x = box["x0"] + (c + 0.5) * cell_w
                y = box["top"] + 14 + r * ROW_H
                markers[place].append((self.px(x), self.y(y)))
                if lit:
                    rings.append((self.px(x), self.y(y)))
                label = tag(job) + (f"\n{second}" if second else "")
                labels.append((self.px(x), self.y(y + 11), label, lit))
            hidden = total - len(shown)
            box["overflow"].set_text(more(hidden) if hidden > 0 else "")

    def _fill_row(self, board, row) -> None:
        row["patch"].set_edgecolor(INK if board.row_lit else MUTED)
        row["patch"].set_linewidth(3.0 if board.row_lit else 1.0)
        header = f"{words.ROW_CARD} emq:{{q}}:{words.ids(board.row_key)}" if board.row_key else words.NO_JOB
        row["header"].set_text(header)
        fields = list(board.row or ())
        for n, text in enumerate(row["fields"]):
            if n >= len(fields):
                text.set_text(words.NO_ROW if n == 0 and board.row is None and board.row_key else "")
                text.set_bbox(None)
                text.set_weight("normal")
                continue
            name, value, lit = fields[n]
            text.set_text(words.field_text(name, value))
            text.set_weight("bold" if lit else "normal")
            text.set_bbox(dict(facecolor=HIGHLIGHT, edgecolor="none", pad=1.5) if lit else None)

    def _fill_outside(self, board, outside) -> None:
        entries = list(board.outside)
        for n, text in enumerate(outside["entries"]):
            text.set_bbox(None)
            text.set_weight("normal")
            if n >= len(entries):
                if n == 0 or len(entries) != 1:
                    text.set_text(words.NOTHING_OUTSIDE if n == 0 and not entries else "")
                continue
            key, summary, lit = entries[n]
            if len(entries) == 1 and n == 0 and summary:
                shown = words.ids(key)  # one key: its value on the line under it
                outside["entries"][1].set_text(_fit(f"  {summary}", outside["width"], FONT))
            else:
                shown = f"{words.ids(key)}  ({summary})" if summary else words.ids(key)
            # bold runs about a tenth wider than the measure of regular text
            text.set_text(_fit(shown, outside["width"] * (0.88 if lit else 1.0), FONT))
            text.set_weight("bold" if lit else "normal")
            text.set_bbox(dict(facecolor=HIGHLIGHT, edgecolor="none", pad=1.5) if lit else None)

    def _fill_commands(self, picture: Picture) -> None:
        self.commands_header.set_text(picture.commands_title)
        lines = list(picture.commands)
        for n, text in enumerate(self.command_lines):
            if n >= len(lines):
                text.set_text(words.NO_COMMANDS if n == 0 and not lines else "")
                text.set_bbox(None)
                continue
            shown, mark = lines[n]
            diverged = "diverged" in mark
            at = "at" in mark.split()
            text.set_text(("▶ " if at else "  ") + shown + (f"  {words.DIVERGED}" if diverged else ""))
            text.set_color(BAD_BG if diverged else INK)
            text.set_weight("bold" if diverged else "normal")
            text.set_bbox(dict(facecolor=STEP_BG, edgecolor="none", pad=1.0) if at else None)
        self.missing.set_text(picture.missing)

    def _fill_timeline(self, picture: Picture) -> None:
        for n, name in enumerate(self.lane_names):
            name.set_text(picture.lanes[n] if n < len(picture.lanes) else "")
        spans: dict[int, list[float]] = {}
        points: dict[str, list[tuple[float, float]]] = {kind: [] for kind in self.event_marks}
        for n, label in enumerate(self.event_labels):
            if n >= len(picture.columns):
                label.set_text("")
                continue
            column = picture.columns[n]
            x = self.px(self.column_x0 + (n + 0.5) * self.column_w)
            y = self.lane_top + 6 + column.lane * LANE_PX
            spans.setdefault(column.lane, []).append(x)
            kind = column.kind if column.kind in EVENT_LOOK else "step"
            points[kind].append((x, self.y(y)))
            label.set_position((x, self.y(y + 7)))
            label.set_text(_fit(column.label, self.column_w - 8, FONT))
        for lane, line in enumerate(self.lane_lines):
            xs = spans.get(lane)
            y = self.y(self.lane_top + 6 + lane * LANE_PX)
            line.set_data(([min(xs), max(xs)], [y, y]) if xs else ([], []))
        for kind, marks in self.event_marks.items():
            marks.set_data(*zip(*points[kind], strict=True)) if points[kind] else marks.set_data([], [])
        x = self.px(self.column_x0 + (len(picture.columns) + 0.5) * self.column_w)
        top, bottom = self.lane_top - 4, self.lane_top + 6 + (max(1, len(picture.lanes)) - 1) * LANE_PX + 8
        self.broke.set_data([x, x], [self.y(top + 14), self.y(bottom)])
        self.broke_label.set_position((x, self.y(top + 12)))
        self.broke_label.set_text(words.BROKE)


# Each kind of moment on the timeline: its marker and colour (colour is never the only cue).
EVENT_LOOK = {
    "step": ("o", PLACES["pending"].colour),
    "start": (">", MUTED),
    "frozen": ("s", PLACES["held"].colour),
    "resumed": ("P", PLACES["held"].colour),
    "killed": ("X", INK),
    "raised": ("X", BAD_BG),
    "check": ("D", PLACES["scheduled"].colour),
}


_FIGURES: dict[tuple[str, bool, int, int], JudgedFigure] = {}
_FIGURES_KEPT = 8


def figure_for(picture: Picture) -> JudgedFigure:
    """A figure of ``picture``'s layout (built the first time one is asked for, then reused:
    what it shows is set again from each picture), showing ``picture``. Hold its lock while
    drawing it: another feedback's picture may be shown on it next."""
    key = JudgedFigure.layout(picture)
    figure = _FIGURES.pop(key, None)
    if figure is None:
        figure = JudgedFigure(picture)
    else:
        figure.show(picture)
    _FIGURES[key] = figure  # the most recently used last
    while len(_FIGURES) > _FIGURES_KEPT:
        _FIGURES.pop(next(iter(_FIGURES)))
    return figure


_ADVANCE: dict[tuple[str, float], float] = {}  # (character, size) -> its width in pixels at 100 dpi


def _width(text: str, size: float) -> float:
    """How wide matplotlib draws ``text`` in DejaVu Sans at ``size`` points (each character's
    advance, measured once; kerning only ever narrows a line)."""
    missing = {c for c in text if (c, size) not in _ADVANCE}
    if missing:
        from matplotlib.font_manager import findfont, get_font

        font = get_font(findfont(FontProperties(size=size)))
        font.set_size(size, 100)
        for c in missing:
            font.set_text(c)
            _ADVANCE[(c, size)] = font.get_width_height()[0] / 64 if c != " " else size * 100 / 72 * 0.318
    return sum(_ADVANCE[(c, size)] for c in text)


def _fit(text: str, width_px: float, size: float) -> str:
    """``text``, cut with an ellipsis where it would run wider than ``width_px``."""
    if _width(text, size) <= width_px:
        return text
    while text and _width(text + "…", size) > width_px:
        text = text[:-1]
    return text + "…"


def _wrap(text: str, width_px: float, size: float) -> list[str]:
    """``text`` in lines no wider than ``width_px`` at ``size`` points (a JOB id's capitals
    run wider than prose: measured, not counted)."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        attempt = f"{current} {word}" if current else word
        if current and _width(attempt, size) > width_px:
            lines.append(current)
            current = word
        else:
            current = attempt
    if current:
        lines.append(current)
    return lines or [""]
