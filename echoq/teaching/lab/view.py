"""What every panel's view shares: the figure, the readout, the time controls, the
static fallback. The panels (``ClaimLab`` ...) add their own controls.

Layout, top to bottom: the figure; the readout (an ARIA live region, so a screen reader
announces each move, and the figure's text alternative); the panel's controls; the time
controls (pause, step, speed, a timeline slider, live); reset and reconnect.

* **Moves are buttons.** A click calls one explicit model method; settings (sliders,
  toggles) only set a model trait, which changes nothing on the server.
* **Little idle cost.** The animation clock is in the browser: a hidden ``Play`` widget
  ticks only while a lease counts down (or the Fleet runs) and only where a browser shows
  the panel. The re-read clock is in the kernel (``WATCH_S``, on the kernel's event loop,
  so it never runs beside a cell or a click): every shown panel re-reads its queue (one
  atomic read; about 0.1% of a core per shown panel) and draws a change made outside it (a cell, another
  tab, another process): the picture never goes on showing a queue that is gone. It needs
  no browser to tick, so every view of the panel (a second tab, a reloaded page, Voila)
  follows the server; outside a kernel there is no clock (tests call ``_look``).
* **Lifecycle.** What a click left running (the Fleet's workers) stops when one of the
  lesson's own cells starts, and whatever a panel runs stops when it is closed or its cell
  is run again. The stored picture says it is a still picture.
* **Static fallback.** Displayed, a panel also carries a PNG of its latest frame, alt
  text and its readout; after every cell the display is updated if the panel changed. A
  notebook saved after Run All shows each lab's last state on GitHub or nbviewer.

With ipympl active (``%matplotlib widget``) the figure is a live canvas; otherwise it is an
image (with alt text) refreshed at every animation frame.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
import matplotlib
from traitlets import TraitError

from ...errors import EchoqError
from .. import presence
from . import words
from .figure import BoardFigure
from .frames import Frame
from .model import LabModel
from .player import Player
from .style import FEEDBACK

__all__ = ["LabPanel", "ipympl_active", "lab_model_id"]

READOUT_STYLE = "font-size:14px;line-height:1.45;max-width:980px"
# Lifecycle words (the panels' own words are in each panel's words.py).
OUTSIDE_CHANGE = "Re-read the queue: it changed outside this panel (a cell, or another tab)."
# True wherever the picture shows: a stored notebook, or a frontend without a widget manager
# (where the picture is re-published after each move, so "last move" stays exact).
STILL = (
    "A still picture of this lab's last move, not a live view: the live lab needs this cell run "
    "in JupyterLab, Notebook 7 or Voila (it starts afresh)."
)


def ipympl_active() -> bool:
    """True when the notebook asked for live figures (``%matplotlib widget``)."""
    backend = str(matplotlib.rcParams["backend"]).lower()
    return "ipympl" in backend or backend == "widget"


def pill(text: str, kind: str) -> str:
    fg, bg = FEEDBACK[kind]
    return (
        f'<span style="background:{bg};color:{fg};padding:1px 7px;border-radius:4px;'
        f'font-weight:600;white-space:nowrap">{html.escape(text)}</span>'
    )


class LabPanel(widgets.VBox):
    """A figure with its readout, the panel's controls and the time controls, bound to one model."""

    tick_ms = 250  # the browser clock's period while something moves by itself

    def __init__(
        self,
        model: LabModel,
        figure: BoardFigure,
        controls: list[widgets.Widget],
        *,
        live: bool | None = None,
        animate: bool = True,
    ) -> None:
        self.model = model
        self.figure = figure
        self.live = ipympl_active() if live is None else live
        self._moves: list[widgets.Widget] = getattr(self, "_moves", [])
        self._note = ""
        self._display_id = uuid.uuid4().hex
        self._fallback_revision = -1
        self._click_started = False  # the panel runs by itself because of a click (not a cell)
        self.canvas = self._canvas()
        self.readout = widgets.HTML(layout=widgets.Layout(width="auto"))
        self.player = Player(
            model.history,
            figure,
            publish=self._publish,
            can_draw=self._can_draw,
            shown=self._shown,
            animate=animate,
        )
        self.pause_button = widgets.Button(
            description="pause", icon="pause", tooltip="hold the picture still (read-only); moves are still recorded"
        )
        self.advance_button = widgets.Button(
            description="step", icon="step-forward", tooltip="animate the next recorded move, then hold"
        )
        self.live_button = widgets.Button(description="live", icon="forward", tooltip="follow the present again")
        self.replay_button = widgets.Button(
            description="replay",
            icon="history",
            disabled=True,
            tooltip="play the moves the picture jumped over to keep up with the server, then follow it again",
        )
        self.speed_picker = widgets.ToggleButtons(
            options=[("¼×", 0.25), ("½×", 0.5), ("1×", 1.0), ("2×", 2.0)],
            value=1.0,
            description="speed",
            tooltips=["a quarter of the speed", "half speed", "normal speed", "twice as fast"],
        )
        self.speed_picker.style.button_width = "44px"
        self.timeline = widgets.IntSlider(
            value=0,
            min=0,
            max=0,
            description="time",
            readout=False,
            continuous_update=True,
            layout=widgets.Layout(width="340px"),
            tooltip="scrub back through the recorded frames (read-only)",
        )
        self.timeline_label = widgets.HTML()
        self.reset_button = self.button("reset", model.reset, "delete this panel's keys; settings back to defaults")
        self.reconnect_button = widgets.Button(description="reconnect", icon="plug", tooltip="connect to Valkey again")
        self._ticker = widgets.Play(
            value=0,
            min=0,
            max=1_000_000,
            interval=self.tick_ms,
            repeat=True,
            show_repeat=False,
            layout=widgets.Layout(display="none"),
        )
        self.pause_button.on_click(lambda _b: self._clicked(self.pause))
        self.advance_button.on_click(lambda _b: self._clicked(self.step))
        self.live_button.on_click(lambda _b: self._clicked(self.go_live))
        self.replay_button.on_click(lambda _b: self._clicked(self.replay))
        self.reconnect_button.on_click(lambda _b: self.run(model.reconnect))
        self.speed_picker.observe(self._speed, "value")
        self.timeline.observe(self._scrub, "value")
        self._ticker.observe(self._tick, "value")
        time_row = widgets.HBox(
            [
                self.pause_button,
                self.advance_button,
                self.speed_picker,
                self.timeline,
                self.timeline_label,
                self.live_button,
                self.replay_button,
            ],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        footer = widgets.HBox([self.reset_button, self.reconnect_button])
        # The same lab (its kind and queue) has the same widget id in every run of its cell:
        # a notebook saved after one run then names the panel a later run shows, so a second
        # tab or a reloaded page finds it (a fresh id left them "model not found"). The one
        # shown before goes first: two live widgets must never share an id.
        model_id = lab_model_id(type(self), model.name)
        older = _widget_instances().get(model_id)
        if older is not None:
            older.close()
        super().__init__([self.canvas, self.readout, *controls, time_row, footer, self._ticker], model_id=model_id)
        model.observe(self._on_revision, "revision")
        model.observe(self._on_connected, "connected")
        self._on_connected()
        latest = model.frame
        if latest is not None:
            self.player.notify()
        else:
            self._show_readout(model.readout, "note", words.status_live(False))

    # -- building blocks ----------------------------------------------------------------

    def button(self, label: str, move: Callable[[], Any], tooltip: str = "", **kw: Any) -> widgets.Button:
        """A button that runs one move; off while the picture is held or Valkey is away."""
        button = widgets.Button(description=label, tooltip=tooltip or label, **kw)
        button.on_click(lambda _b: self.run(move))
        self._moves = getattr(self, "_moves", [])
        self._moves.append(button)
        return button

    def setting(self, control: widgets.Widget) -> widgets.Widget:
        """A control that sets a model trait (no I/O); off while the picture is held."""
        self._moves = getattr(self, "_moves", [])
        self._moves.append(control)
        return control

    @property
    def buttons(self) -> list[widgets.Widget]:
        """Every control that acts on the model (disabled while Valkey is away)."""
        return list(self._moves)

    @staticmethod
    def _clicked(then: Callable[[], Any]) -> None:
        """A click: the learner is active (a workshop's dashboard shows it), then ``then``."""
        presence.touch()
        then()

    def run(self, move: Callable[[], Any]) -> None:
        """Run a move from a control; any refusal ends up in the readout, never a traceback."""
        presence.touch()  # a click: the learner is active (a workshop's dashboard shows it)
        was_running = self.runs_by_itself()
        try:
            move()
        except (EchoqError, TraitError) as exc:
            self.model.say("refused", words.refused("that", exc))
        if self.runs_by_itself() and not was_running:
            self._click_started = True

    def quiesce(self) -> bool:
        """The lesson moved on (one of its cells started): stop what a click left running
        (the Fleet's workers and producer), so the cell works on what it sets up, alone.
        What a cell started goes on: the next cell may be waiting for it. True if stopped."""
        started_by_click, self._click_started = self._click_started, False
        stop = getattr(self.model, "stop_all", None)
        if not (started_by_click and self.runs_by_itself() and stop is not None):
            return False
        self._note = (
            "the lesson moved on (a cell ran), so the workers started here were stopped; start them again to go on."
        )
        stop()
        return True

    def _look(self) -> bool:
        """Re-read the queue; record a frame if it changed outside this panel. True if it had.
        The kernel's re-read clock calls it every ``WATCH_S`` while the panel is shown."""
        model = self.model
        latest = model.history.latest()
        if not (model.opened and model.connected and self.player.following) or self.runs_by_itself():
            return False
        try:
            snap = model.read()
        except Exception:  # noqa: BLE001 - Valkey away: the next move says so, in the readout
            return False
        if latest is not None and latest.snapshot is not None and _same(latest.snapshot, snap):
            return False
        return model.record("sample", OUTSIDE_CHANGE, snapshot=snap)

    def _canvas(self) -> widgets.Widget:
        fig = self.figure.fig
        if not self.live:
            return widgets.HTML(layout=widgets.Layout(width=f"{int(fig.bbox.width)}px"))
        from ipympl.backend_nbagg import _Backend_ipympl

        # ipympl's own path (what pyplot.figure uses), with interactive mode off so the canvas
        # is not also queued for display on its own at the end of the cell.
        with matplotlib.rc_context({"interactive": False}):
            manager = _Backend_ipympl.new_figure_manager_given_figure(id(fig), fig)
        canvas = manager.canvas
        canvas.header_visible = False
        canvas.footer_visible = False
        canvas.toolbar_visible = False
        canvas.resizable = False
        canvas.capture_scroll = False
        figure = self.figure

        def draw_when_asked(_event: object) -> None:
            # The browser asks for a full draw (on start-up, after a resize): draw the frame
            # the panel shows (moves made before the view existed were never drawn). The
            # animation thread may be mid-frame: one drawer at a time.
            with figure.lock:
                player = getattr(self, "player", None)
                frame = self.model.history.get(player.cursor) if player is not None else None
                if frame is not None and not player.running:
                    figure.pose(None, frame, at_s=time.monotonic() if player.following else None)
                canvas.draw()

        canvas.handle_draw = draw_when_asked
        return canvas

    # -- drawing ------------------------------------------------------------------------

    def _can_draw(self) -> bool:
        if not self.live:
            return True
        # An ipympl canvas draws for a browser view; until one reports in (never, under nbval
        # or nbconvert) drawing would only encode pictures nobody sees.
        return not getattr(self.canvas, "syncing_data_url", True)

    def _publish(self, frame: Frame) -> None:
        if self.live:
            return  # ipympl sent the frame when the figure blitted
        canvas = self.figure.fig.canvas
        from PIL import Image

        buffer = io.BytesIO()
        width, height = canvas.get_width_height()
        Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).save(
            buffer, format="png", compress_level=1
        )
        data = base64.b64encode(buffer.getvalue()).decode()
        alt = html.escape(words.still_alt(self.figure.heading(), frame.snapshot, frame.readout))
        self.canvas.value = f'<img src="data:image/png;base64,{data}" alt="{alt}" width="{width}" height="{height}"/>'

    def _shown(self, frame: Frame, settled: bool = True) -> None:
        """The player shows ``frame``: at rest (settled), or animating towards it.

        Widgets are changed on the kernel's thread only: from the animation thread the change
        is handed to the kernel's event loop. (ipywidgets keeps per-widget sync state, the
        property lock and hold_sync, that a second thread would race with the browser's own
        changes: a scrub could be lost.)"""
        loop = _kernel_loop()
        if loop is not None and threading.current_thread() is not threading.main_thread():
            loop.add_callback(self._show, frame, settled)
        else:
            self._show(frame, settled)

    def _show(self, frame: Frame, settled: bool) -> None:
        last = self.model.history.last_index
        if self.player.following:
            kind = "good" if frame.connected else "bad"
            status = words.status_live(not settled) + f" · #{frame.index + 1} · {frame.clock}"
        else:
            kind, status = "past", words.status_held(frame.index, last, frame.clock)
        if not frame.connected:
            kind = "bad"
        text = frame.readout
        jumped = self.player.jumped
        if self.player.following and jumped is not None and frame.index == jumped[1] + 1:
            text = f"{text} {words.jumped(jumped[1] - jumped[0] + 1)}"
        # Controls first: once the readout says "read-only", the buttons already are.
        self._sync_controls()
        self._sync_timeline(frame.index)
        self._sync_ticker(frame)
        self._show_readout(text, kind, status)

    def _show_readout(self, text: str, kind: str, status: str) -> None:
        note = f" <i>{html.escape(self._note)}</i>" if self._note else ""
        self._note = ""
        self.readout.value = (
            f'<div role="status" aria-live="polite" aria-atomic="true" style="{READOUT_STYLE}">'
            f"{pill(status, kind)} <b>readout</b> · {html.escape(text)}{note}</div>"
        )

    def _sync_timeline(self, index: int) -> None:
        history = self.model.history
        value = max(index, history.first_index)
        # One message per trait, the range first: a slider given a new max and value in one
        # message can place its handle by the old range (and then a key press moves nothing).
        self.timeline.max = max(history.last_index, 0)
        self.timeline.value = value
        self.timeline.min = history.first_index
        frame = history.get(index)
        self.timeline_label.value = f"<code>{html.escape(frame.clock) if frame else ''}</code>"

    def _sync_controls(self) -> None:
        editable = self.model.connected and self.player.following
        for control in self._moves:
            control.disabled = not editable
        self.reconnect_button.disabled = self.model.connected
        self.reconnect_button.button_style = "" if self.model.connected else "warning"
        self.live_button.button_style = "" if self.player.following else "info"
        self.replay_button.disabled = self.player.jumped is None or self.player.replaying

    def _sync_ticker(self, frame: Frame | None) -> None:
        want = bool(
            self.player.following
            and self.model.connected
            and frame is not None
            and (self.figure.time_dependent(frame) or self.runs_by_itself())
        )
        if self._ticker.playing != want:
            self._ticker.playing = want

    def runs_by_itself(self) -> bool:
        """True while the panel's queue changes without a click (the Fleet's workers)."""
        return False

    # -- model -> view ------------------------------------------------------------------

    def _on_revision(self, _change: object = None) -> None:
        self.player.notify()

    def _on_connected(self, _change: object = None) -> None:
        self._sync_controls()
        if not self.model.connected:
            self._ticker.playing = False

    # -- time controls --------------------------------------------------------------------

    def pause(self) -> None:
        self._note = "paused: the picture holds still; press step to move one frame on, live to return."
        self.player.pause()

    def step(self) -> None:
        if not self.player.step():
            self._note = "step: this is the newest frame recorded."
            self.player.pause()

    def go_live(self) -> None:
        # Back from the past, the pill turning to "live" and the present's words say it all:
        # the readout reads exactly as the present's frame.
        if self.player.following:
            self._note = "live: the picture already follows the queue."
            frame = self.model.frame
            if frame is not None:
                self._shown(frame)
            return
        self.player.live()

    def replay(self) -> None:
        """Play the moves the picture jumped over (read-only), then follow the server again."""
        if not self.player.replay():
            self._note = "replay: the picture showed every recorded move; scrub the timeline to look back."
            frame = self.model.frame
            if frame is not None:
                self._shown(frame)

    def settle(self, timeout_s: float = 30.0) -> bool:
        """Wait until the picture has caught up with the recorded moves (tests, docs)."""
        return self.player.settle(timeout_s)

    def _speed(self, change: dict[str, Any]) -> None:
        self.player.speed = float(change["new"])

    def _scrub(self, change: dict[str, Any]) -> None:
        # The slider follows the picture; only a value that came from the browser (ipywidgets
        # holds it in the property lock while applying it) is a scrub.
        if "value" not in self.timeline._property_lock:
            return
        self.player.show(int(change["new"]))

    def _tick(self, _change: object) -> None:
        if self.runs_by_itself():
            self.model.sample()  # the Fleet: re-read the queue on the browser's clock
        else:
            self.player.tick()

    # -- static fallback ----------------------------------------------------------------

    def fallback(self) -> dict[str, Any]:
        """The latest frame as a PNG, its alt text and its readout (for readers without a kernel)."""
        frame = self.model.frame
        if frame is None:
            return {"text/plain": self.model.readout}
        png = self.figure.png(frame)
        alt = words.still_alt(self.figure.heading(), frame.snapshot, frame.readout)
        shown = self.model.history.get(self.player.cursor)
        if shown is not None:
            with self.figure.lock:
                self.figure.pose(None, shown)  # the live view keeps what it shows
        data = base64.b64encode(png).decode()
        width = int(self.figure.fig.bbox.width)
        title = self.figure.title.get_text()
        self._fallback_revision = self.model.revision
        return {
            "image/png": data,
            "text/html": (
                f'<figure style="margin:0"><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" '
                f'width="{width}" style="max-width:100%"/><figcaption style="{READOUT_STYLE}">'
                f"<b>readout</b> · {html.escape(frame.readout)}<br><i>{html.escape(STILL)}</i></figcaption></figure>"
            ),
            "text/plain": f"{title}\nreadout: {frame.readout}\n{STILL}",
        }

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        data = super()._repr_mimebundle_(**kwargs) or {}
        data.update(self.fallback())
        return data

    def _ipython_display_(self) -> None:
        from IPython.display import display

        for older in list(_displayed):  # a lab cell run again: its earlier panel stops working
            if older is not self and older.model.name == self.model.name:
                older.close()
        self.model.open()  # showing a panel connects it (never its constructor)
        display(self._repr_mimebundle_(), raw=True, display_id=self._display_id)
        _displayed.add(self)
        _watch_cells()
        _start_clock()

    def close(self) -> None:
        if hasattr(self, "player"):  # close() also runs from __del__, after a failed __init__
            self.player.close()
            self._ticker.playing = False
        _displayed.discard(self)
        super().close()


def lab_model_id(kind: type, queue: str) -> str:
    """The widget id of the lab ``kind`` on ``queue``: the same in every run and kernel."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"echoq-lab:{kind.__module__}.{kind.__qualname__}:{queue}").hex


def _widget_instances() -> dict[str, widgets.Widget]:
    from ipywidgets.widgets import widget

    return widget._instances


def _kernel_loop() -> Any:
    """The kernel's event loop (its thread runs widget messages), or None outside a kernel."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    kernel = getattr(get_ipython(), "kernel", None)
    return getattr(kernel, "io_loop", None)


# -- keep the stored outputs current ----------------------------------------------------------

_displayed: weakref.WeakSet[LabPanel] = weakref.WeakSet()
_watching = False

# -- the re-read clock ------------------------------------------------------------------------

WATCH_S = 0.25  # how often the kernel re-reads each shown panel's queue (a change made outside
# it is then drawn within about a second: this, plus the half move after which the readout tells it)
_clock: Any = None  # the next tick's handle on the kernel's event loop, while one is due


def _start_clock() -> None:
    """Start the kernel's re-read clock (once; it stops by itself when no panel is shown)."""
    global _clock
    loop = _kernel_loop()
    if loop is None or _clock is not None:
        return
    _clock = loop.call_later(WATCH_S, _clock_tick)


def _clock_tick() -> None:
    # On the kernel's event loop, so never beside a cell or a click (both run on that loop's
    # thread): a look reads and records as a move does.
    global _clock
    panels = list(_displayed)
    loop = _kernel_loop()
    _clock = loop.call_later(WATCH_S, _clock_tick) if panels and loop is not None else None
    for panel in panels:
        try:
            panel._look()
        except Exception:  # one panel's failure must not stop the others' looks: it is logged
            logging.getLogger(__name__).exception("the re-read of lab %s failed", panel.model.name)


def _refresh_fallbacks(*_args: object) -> None:
    """After each cell: a displayed panel that changed gets its stored picture updated."""
    from IPython.display import update_display

    for panel in list(_displayed):
        if panel.model.revision != panel._fallback_revision and panel.model.frame is not None:
            update_display(panel._repr_mimebundle_(), display_id=panel._display_id, raw=True)


def _lesson_moves_on(info: object = None) -> None:
    """Before a lesson's own cell runs: every shown panel stops what a click left running."""
    from ..course import is_lesson_cell

    if not is_lesson_cell(getattr(info, "raw_cell", "") or ""):
        return  # the learner's own cell: they may be driving the lab from code
    for panel in list(_displayed):
        panel.quiesce()


def _watch_cells() -> None:
    global _watching
    if _watching:
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.events.register("pre_run_cell", _lesson_moves_on)
        shell.events.register("post_run_cell", _refresh_fallbacks)
        _watching = True


def _same(a: Any, b: Any) -> bool:
    """Two snapshots of one queue hold the same jobs in the same places (whatever the clock)."""
    return (a.pending, a.active, a.scheduled, a.dead, a.done, a.counts, a.rows) == (
        b.pending,
        b.active,
        b.scheduled,
        b.dead,
        b.done,
        b.counts,
        b.rows,
    )
