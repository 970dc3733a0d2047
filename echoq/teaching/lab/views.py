"""The panels a notebook displays in one line: ``ClaimLab()``, ``DeliveryLab()``, ``ReapLab()``.

Each panel is an ``ipywidgets.VBox`` bound to a model from :mod:`echoq.lab.model`:
controls are linked to the model's traits, buttons call its moves, and the panel redraws
its figure when the model has a fresh snapshot. The readout beside the figure says in
words what the last move did and where every job is, naming the keys.

With ipympl active (``%matplotlib widget``) the figure is a live canvas; otherwise it is
shown as an image refreshed after each move. Redraws are throttled (``min_redraw_s``) so a
control moved many times in a row costs at most one redraw per interval, plus one at the
end. A server that went away disables every button but ``reconnect``.
"""

from __future__ import annotations

import html
import io
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
import matplotlib
from traitlets import TraitError, link

from ...errors import EchoqError, InvalidArgument
from .figures import ClaimFigure, DeliveryFigure, FleetFigure, LabFigure, ReapFigure
from .model import CLAIM_STEPS, ClaimModel, DeliveryModel, FleetModel, LabModel, ReapModel

__all__ = ["LabPanel", "ClaimLab", "DeliveryLab", "ReapLab", "FleetLab", "ipympl_active"]


def ipympl_active() -> bool:
    """True when the notebook asked for live figures (``%matplotlib widget``)."""
    backend = str(matplotlib.rcParams["backend"]).lower()
    return "ipympl" in backend or backend == "widget"


class LabPanel(widgets.VBox):
    """A figure with its readout beside it, controls below; bound to one model."""

    def __init__(
        self,
        model: LabModel,
        figure: LabFigure,
        controls: list[widgets.Widget],
        *,
        live: bool | None = None,
        min_redraw_s: float = 0.1,
        clock_s: float | None = None,
    ) -> None:
        self.model = model
        self.figure = figure
        self.live = ipympl_active() if live is None else live
        self.min_redraw_s = min_redraw_s
        self.redraws = 0
        self._draw_lock = threading.RLock()
        self._last_draw = 0.0
        self._trailing: threading.Timer | None = None
        self.readout = widgets.HTML(layout=widgets.Layout(width="330px"))
        self.clock = widgets.HTML()
        self.reconnect_button = widgets.Button(description="reconnect", icon="plug", tooltip="connect to Valkey again")
        self.reconnect_button.on_click(lambda _b: self.model.reconnect())
        self.reset_button = self.button("reset", self.model.reset, "delete this panel's keys and start afresh")
        self.canvas = self._canvas()
        # Wrap: where the notebook is narrower than figure + readout, the readout goes below
        # the figure instead of being cut off on the right.
        picture = widgets.HBox(
            [self.canvas, self.readout], layout=widgets.Layout(align_items="flex-start", flex_flow="row wrap")
        )
        footer = widgets.HBox([self.clock, self.reset_button, self.reconnect_button])
        super().__init__([picture, *controls, footer])
        model.observe(self._show_readout, "readout")
        model.observe(self._show_clock, "clock")
        model.observe(self._connection_changed, "connected")
        model.observe(self._model_changed, "revision")
        self._show_readout()
        self._show_clock()
        self._connection_changed()
        self.redraw()
        if clock_s and self.live:
            self._start_clock(clock_s)

    # -- building blocks ----------------------------------------------------------------

    @property
    def buttons(self) -> list[widgets.Widget]:
        """Every control that acts on the server (disabled while Valkey is away)."""
        return [w for w in self._controls() if isinstance(w, widgets.DOMWidget) and hasattr(w, "disabled")]

    def _controls(self) -> list[widgets.Widget]:
        found: list[widgets.Widget] = []

        def walk(w: widgets.Widget) -> None:
            if w is self.reconnect_button or w is self.canvas:
                return
            if isinstance(w, widgets.Box):
                for child in w.children:
                    walk(child)
            elif isinstance(w, widgets.ValueWidget | widgets.Button):
                found.append(w)

        for child in self.children:
            walk(child)
        return found

    def button(self, label: str, move: Callable[[], Any], tooltip: str = "") -> widgets.Button:
        button = widgets.Button(description=label, tooltip=tooltip or label)
        button.on_click(lambda _b: self.run(move))
        return button

    def run(self, move: Callable[[], Any]) -> None:
        """Run a move from a control; any refusal ends up in the readout, never a traceback."""
        try:
            move()
        except (EchoqError, TraitError) as exc:
            self.model.readout = f"refused: {exc}"

    def _canvas(self) -> widgets.Widget:
        fig = self.figure.fig
        if self.live:
            from ipympl.backend_nbagg import _Backend_ipympl

            # ipympl's own path (what pyplot.figure uses), with interactive mode off so the
            # canvas is not also queued for display on its own at the end of the cell.
            with matplotlib.rc_context({"interactive": False}):
                manager = _Backend_ipympl.new_figure_manager_given_figure(id(fig), fig)
            canvas = manager.canvas
            canvas.header_visible = False
            canvas.footer_visible = False
            canvas.toolbar_visible = False
            canvas.resizable = False
            return canvas
        return widgets.Image(format="png")

    # -- model -> widgets ---------------------------------------------------------------

    def _show_readout(self, _change: object = None) -> None:
        self.readout.value = (
            f'<div style="font-size:0.95em;line-height:1.35"><b>readout</b> · {html.escape(self.model.readout)}</div>'
        )

    def _show_clock(self, _change: object = None) -> None:
        self.clock.value = f"<code>{html.escape(self.model.clock)}</code>"

    def _connection_changed(self, _change: object = None) -> None:
        connected = self.model.connected
        for control in self.buttons:
            control.disabled = not connected
        self.reconnect_button.disabled = connected
        self.reconnect_button.button_style = "" if connected else "warning"

    def _model_changed(self, _change: object = None) -> None:
        self.request_redraw()

    # -- drawing ------------------------------------------------------------------------

    def request_redraw(self) -> None:
        """Redraw now, or once at the end of the current throttle interval."""
        with self._draw_lock:
            wait = self._last_draw + self.min_redraw_s - time.monotonic()
            if wait <= 0:
                self.redraw()
            elif self._trailing is None:
                self._trailing = threading.Timer(wait, self._trailing_redraw)
                self._trailing.daemon = True
                self._trailing.start()

    def _trailing_redraw(self) -> None:
        with self._draw_lock:
            self._trailing = None
            self.redraw()

    def redraw(self) -> None:
        """Update the figure's artists from the model and show the result."""
        with self._draw_lock:
            self.figure.update(self.model.picture())  # type: ignore[attr-defined]
            self._publish()

    def save_png(self, path: Any) -> None:
        """Redraw from the model and save the figure (the docs' renders use this)."""
        with self._draw_lock:
            self.redraw()
            self.figure.png(path)

    def _publish(self) -> None:
        self._last_draw = time.monotonic()
        self.redraws += 1
        if not self.live:
            # The Agg canvas has just drawn (draw_idle draws at once on Agg): encode its pixels.
            from PIL import Image

            canvas = self.figure.fig.canvas
            buffer = io.BytesIO()
            Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).save(
                buffer, format="png", compress_level=1
            )
            self.canvas.value = buffer.getvalue()

    def _start_clock(self, period_s: float) -> None:
        """Re-read the queue on a beat so the lease countdown runs (live figures only)."""
        me = weakref.ref(self)

        def beat() -> None:
            while True:
                time.sleep(period_s)  # a display refresh rate, not synchronisation
                panel = me()
                if panel is None or panel._closed:
                    return
                panel.model.tick()
                del panel

        self._closed = False
        threading.Thread(target=beat, daemon=True, name=f"echoq-lab-clock-{self.model.name}").start()

    _closed = False

    def close(self) -> None:
        self._closed = True
        super().close()


class ClaimLab(LabPanel):
    """The recoverable claim: enqueue, claim, finish or crash, reap; the Lua of each step."""

    def __init__(self, name: str | None = None, *, live: bool | None = None, **connect: Any) -> None:
        model = ClaimModel(name, **connect)
        self.enqueue_button = self.button("enqueue", model.enqueue, "enqueue.lua: a new job into pending")
        self.claim_button = self.button(
            "claim", model.claim, "claim.lua: oldest pending job into active, under a lease"
        )
        self.finish_button = self.button("finish", model.finish, "complete.lua, or a crash when the toggle is on")
        self.reap_button = self.button("reap", model.reap, "reap.lua: expired leases back to pending")
        self.fast_forward_button = self.button(
            "fast-forward", model.fast_forward, "teaching script: pull lease deadlines to the server's now"
        )
        self.crash_toggle = widgets.ToggleButton(
            value=False, description="crash mid-job", icon="bolt", tooltip="when on, finish kills the worker instead"
        )
        link((self.crash_toggle, "value"), (model, "crash"))
        self.lease_slider = widgets.IntSlider(
            value=model.lease_ms // 1000, min=1, max=60, description="lease (s)", continuous_update=False
        )
        self.lease_slider.observe(
            lambda change: self.run(lambda: setattr(model, "lease_ms", change["new"] * 1000)), "value"
        )
        self.step_picker = widgets.ToggleButtons(options=list(CLAIM_STEPS), value=model.step, description="step")
        self.step_picker.style.button_width = "90px"
        link((self.step_picker, "value"), (model, "step"))
        self.source = widgets.HTML()
        row = widgets.HBox(
            [self.enqueue_button, self.claim_button, self.finish_button, self.crash_toggle, self.reap_button]
        )
        super().__init__(
            model,
            ClaimFigure(model.picture()),
            [row, widgets.HBox([self.lease_slider, self.fast_forward_button]), self.step_picker, self.source],
            live=live,
            clock_s=0.5,
        )
        model.observe(self._show_source, "step")
        model.observe(lambda _c: None if model.busy else self.request_redraw(), ["step", "crash"])
        self._show_source()

    def _show_source(self, _change: object = None) -> None:
        step = self.model.step  # type: ignore[attr-defined]
        text = self.model.step_source(step)  # type: ignore[attr-defined]
        self.source.value = (
            f"<details open><summary>the move <b>{html.escape(step)}</b> runs</summary>"
            f'<pre style="font-size:0.8em;max-height:16em;overflow:auto">{html.escape(text)}</pre></details>'
        )


class DeliveryLab(LabPanel):
    """Redeliver one job 1..10 times for real; count effects, naive vs JOB-id-keyed; the fence."""

    def __init__(self, name: str | None = None, *, live: bool | None = None, **connect: Any) -> None:
        model = DeliveryModel(name, **connect)
        self.deliveries_slider = widgets.IntSlider(
            value=model.deliveries, min=1, max=10, description="deliveries", continuous_update=False
        )
        link((self.deliveries_slider, "value"), (model, "deliveries"))
        self.consumer_picker = widgets.ToggleButtons(
            options=[("JOB-id-keyed", "keyed"), ("naive", "naive")], value=model.consumer, description="consumer"
        )
        link((self.consumer_picker, "value"), (model, "consumer"))
        self.fence_button = self.button("fence: next step", model.fence_next, "one real step of a stale completion")
        self.fence_log = widgets.HTML()
        super().__init__(
            model,
            DeliveryFigure(model.picture()),
            [widgets.HBox([self.deliveries_slider, self.consumer_picker]), self.fence_button, self.fence_log],
            live=live,
        )
        model.observe(self._show_fence, "fence_step")
        self._show_fence()

    def _show_fence(self, _change: object = None) -> None:
        log = self.model.fence_log  # type: ignore[attr-defined]
        if not log:
            self.fence_log.value = "<i>The fence: press 'next step' to let a stale worker try to complete.</i>"
            return
        items = "".join(f"<li>{html.escape(line.split('. ', 1)[1])}</li>" for line in log)
        self.fence_log.value = f"<ol>{items}</ol>"


class ReapLab(LabPanel):
    """Crashed workers' leases on a time axis; step the reap; max_stalled; the race."""

    def __init__(self, name: str | None = None, *, live: bool | None = None, **connect: Any) -> None:
        model = ReapModel(name, **connect)
        self.start_button = self.button("start workers", model.start_workers, "jobs claimed by workers that crash")
        self.claim_again_button = self.button("claim again", model.claim_again, "new workers take the pending jobs")
        self.step_button = self.button("step the reap", model.step_reap, "one stalled_check.lua sweep")
        self.fast_forward_button = self.button(
            "fast-forward 2 s", model.fast_forward, "teaching script: every live lease 2 s earlier"
        )
        self.race_button = self.button("race", model.race_demo, "two overlapping sweeps: two-step vs atomic")
        self.max_stalled_slider = widgets.IntSlider(value=model.max_stalled, min=1, max=5, description="max_stalled")
        link((self.max_stalled_slider, "value"), (model, "max_stalled"))
        model.observe(lambda _c: self.request_redraw(), "max_stalled")
        row = widgets.HBox(
            [self.start_button, self.claim_again_button, self.fast_forward_button, self.step_button, self.race_button]
        )
        super().__init__(model, ReapFigure(model.picture()), [row, self.max_stalled_slider], live=live, clock_s=0.5)

    def redraw(self) -> None:
        picture = self.model.picture()  # type: ignore[attr-defined]
        moves = frozenset(picture.moved.items())
        if self.live and moves and moves != self._animated:
            self._animated = moves
            # Animate the jobs moving lane to lane; the last frame is the real state.
            threading.Thread(target=self._animate, args=(picture,), daemon=True).start()
            return
        super().redraw()

    _animated: frozenset = frozenset()

    def _animate(self, picture: Any) -> None:
        with self._draw_lock:
            for progress in (0.2, 0.4, 0.6, 0.8):
                self.figure.update(picture, progress)  # type: ignore[call-arg]
                time.sleep(0.04)  # frame pacing for the eye
            self.figure.update(self.model.picture())  # type: ignore[attr-defined]
            self._publish()


class FleetLab(LabPanel):
    """Workers on a beat: kill and restart each, set the job rate, watch nothing get lost.

    The workers are threads in this kernel and a kill is simulated (the job in hand is
    abandoned mid-job, as a killed process would leave it); lesson 05's chaos run kills
    real processes.
    """

    def __init__(self, name: str | None = None, *, workers: int = 3, live: bool | None = None, **connect: Any) -> None:
        if not 1 <= workers <= 4:
            raise InvalidArgument(f"workers must be between 1 and 4 (the figure lists four), got {workers!r}")
        model = FleetModel(name, **connect)
        self.workers = workers
        self.start_button = self.button(
            f"start {workers} workers", lambda: model.start(workers), "threads running echoq.Worker"
        )
        self.add_button = self.button("add 20 jobs", model.add_jobs, "enqueue 20 jobs at once")
        self.stop_button = self.button("stop all", model.stop_all, "graceful stop: finish jobs in hand, claim no more")
        self.rate_slider = widgets.IntSlider(
            value=model.rate, min=0, max=50, description="jobs / s", continuous_update=False
        )
        link((self.rate_slider, "value"), (model, "rate"))
        self.kill_buttons = [
            self.button(f"kill w{slot}", lambda slot=slot: model.kill(slot), "simulated kill, mid-job")
            for slot in range(1, workers + 1)
        ]
        self.restart_buttons = [
            self.button(f"restart w{slot}", lambda slot=slot: model.restart(slot), "a fresh worker in this slot")
            for slot in range(1, workers + 1)
        ]
        for b in self.kill_buttons:
            b.button_style = "danger"
        super().__init__(
            model,
            FleetFigure(model.picture()),
            [
                widgets.HBox([self.start_button, self.add_button, self.rate_slider, self.stop_button]),
                widgets.HBox(self.kill_buttons),
                widgets.HBox(self.restart_buttons),
            ],
            live=live,
            clock_s=0.25,
        )

    def close(self) -> None:
        self.model.stop_all()  # type: ignore[attr-defined]
        super().close()
