"""The race explorer's panel: run every interleaving, see the outcomes as a grid, play any
one of them command by command on the Reap lab's board."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
import matplotlib
from matplotlib.figure import Figure
from traitlets import link

from ..style import PAPER
from ..view import LabPanel
from . import words
from .figure import RaceFigure, cell_at, draw_grid, grid
from .model import COMMANDS, RaceModel

__all__ = ["RaceLab"]


class RaceLab(LabPanel):
    """Every interleaving of two reapers' commands and a worker's claim, run on the server;
    click a cell of the grid (or give its number) to play that interleaving."""

    def __init__(
        self, name: str | None = None, *, live: bool | None = None, animate: bool = True, **connect: Any
    ) -> None:
        model = RaceModel(name, **connect)
        self.reaper_picker = self.setting(
            widgets.ToggleButtons(options=list(COMMANDS), value=model.reaper, description="reapers")
        )
        link((self.reaper_picker, "value"), (model, "reaper"))
        self.explore_button = self.button(
            "run every interleaving", model.explore, "each from a fresh state, on the server"
        )
        self.explore_button.button_style = "primary"
        self.pick = self.setting(widgets.BoundedIntText(value=1, min=1, max=1, description="interleaving #"))
        self.play_button = self.button("play it", lambda: self.play(self.pick.value - 1), "its commands, one by one")
        self.first_bad_button = self.button("first duplicated", lambda: self.play_first("duplicated"))
        self.grid_view = widgets.HTML()
        self._grid_canvas: Any = None
        self._grid_drawn: tuple[int, int | None] | None = None
        row = widgets.HBox([self.reaper_picker, self.explore_button], layout=widgets.Layout(flex_flow="row wrap"))
        pick_row = widgets.HBox([self.pick, self.play_button, self.first_bad_button])
        super().__init__(model, RaceFigure(model.name), [row, self.grid_view, pick_row], live=live, animate=animate)
        model.observe(self._show_grid, "revision")

    def use(self, read_expired: Callable[..., Any], move_back: Callable[..., Any]) -> None:
        """Race your own two-step reaper (the exercise's two functions): 'yours' joins the
        reapers to pick from; 'run every interleaving' then runs it."""
        self.model.use(read_expired, move_back)
        if "yours" not in self.reaper_picker.options:
            self.reaper_picker.options = [*self.reaper_picker.options, "yours"]
        self.model.reaper = "yours"

    def play(self, k: int) -> None:
        """Replay interleaving ``k`` (from 0) on the board, command by command."""
        before = self.model.history.last_index
        if self.model.replay(k) is None:
            return
        self.pick.value = k + 1
        self.player.play(before + 1, self.model.history.last_index)

    def play_first(self, outcome: str) -> None:
        ex = self.model.exploration
        k = ex.first(outcome) if ex else None
        if k is None:
            self.model.say(
                "play", words.none_is(outcome, self.model.reaper) if ex else words.explore_first(self.model.reaper)
            )
            return
        self.play(k)

    def _show_grid(self, _change: object = None) -> None:
        ex = self.model.exploration
        if ex is None:
            self.grid_view.value = ""
            return
        self.pick.max = len(ex.runs)
        shown = self.model.shown
        chosen = shown[1] if shown and shown[0] == ex.reaper else None
        if self._grid_drawn == (id(ex), chosen):
            return  # the grid changes with the exploration and the cell chosen, not with each frame
        self._grid_drawn = (id(ex), chosen)
        if self.live:
            if self._grid_canvas is None:
                self._grid_canvas = _clickable(Figure(dpi=100, facecolor=PAPER), self._clicked)
                self.children = tuple(self._grid_canvas if c is self.grid_view else c for c in self.children)
            draw_grid(self._grid_canvas.figure, ex, chosen)
            self._grid_canvas.draw_idle()
            return
        data = _png(grid(ex, chosen))
        alt = html.escape(words.grid_alt(ex))
        self.grid_view.value = f'<img src="data:image/png;base64,{data}" alt="{alt}"/>'

    def fallback(self) -> dict[str, Any]:
        """The board's still picture and readout, and under them the grid (with its alt text)."""
        data = super().fallback()
        ex = self.model.exploration
        if ex is not None and "text/html" in data:
            shown = self.model.shown
            png = _png(grid(ex, shown[1] if shown and shown[0] == ex.reaper else None))
            data["text/html"] = data["text/html"].replace(
                "</figure>",
                f'<img src="data:image/png;base64,{png}" alt="{html.escape(words.grid_alt(ex))}"/></figure>',
            )
            data["text/plain"] += "\n" + words.grid_alt(ex)
        return data

    def _clicked(self, x: float | None, y: float | None) -> None:
        ex = self.model.exploration
        if ex is None or x is None or y is None:
            return
        k = cell_at(ex, x, y)
        if k is not None and self.player.following:
            self.play(k)


def _clickable(fig: Any, on_click: Any) -> Any:
    """An ipympl canvas for the grid that calls ``on_click(x, y)`` in the grid's data units."""
    from ipympl.backend_nbagg import _Backend_ipympl

    with matplotlib.rc_context({"interactive": False}):
        manager = _Backend_ipympl.new_figure_manager_given_figure(id(fig), fig)
    canvas = manager.canvas
    canvas.header_visible = canvas.footer_visible = canvas.toolbar_visible = False
    canvas.resizable = False
    canvas.mpl_connect(
        "button_press_event", lambda e: on_click(e.xdata, e.ydata) if e.inaxes is canvas.figure.axes[0] else None
    )
    return canvas


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode()
