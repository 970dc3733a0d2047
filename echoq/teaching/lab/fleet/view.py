"""The Fleet lab's panel."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
from traitlets import link

from ....errors import InvalidArgument
from ..view import LabPanel
from .figure import FleetFigure
from .model import FleetModel

__all__ = ["FleetLab"]


class FleetLab(LabPanel):
    """Workers on a beat: kill and restart each, a producer, a pace; watch nothing get lost.

    The workers are threads in this kernel and a kill is simulated (``worker.abandon()``:
    the job in hand is abandoned mid-job, as a killed process leaves it); lesson 05's chaos
    run kills real processes. The path picker switches to the naive pop-and-process fleet.
    """

    tick_ms = 500

    def __init__(
        self,
        name: str | None = None,
        *,
        workers: int = 3,
        live: bool | None = None,
        animate: bool = True,
        **connect: Any,
    ) -> None:
        if not 1 <= workers <= 4:
            raise InvalidArgument(f"workers must be between 1 and 4 (the figure lists four), got {workers!r}")
        model = FleetModel(name, **connect)
        self.workers = workers
        self.start_button = self.button(
            f"start {workers} workers", lambda: model.start(workers), "threads running echoq.Worker on the chosen path"
        )
        self.start_button.button_style = "primary"
        self.add_button = self.button("add 20 jobs", model.add_jobs, "enqueue 20 jobs at once")
        self.stop_button = self.button("stop all", model.stop_all, "graceful stop: finish jobs in hand, claim no more")
        self.pace_slider = self.setting(
            widgets.FloatSlider(
                value=model.job_ms / 1000,
                min=0.2,
                max=3.0,
                step=0.1,
                description="s per job",
                continuous_update=False,
                tooltip="the pace: how long each job's work takes",
            )
        )
        link(
            (self.pace_slider, "value"),
            (model, "job_ms"),
            transform=(lambda s: int(round(s * 1000)), lambda ms: ms / 1000),
        )
        self.rate_slider = self.setting(
            widgets.IntSlider(value=model.rate, min=0, max=10, description="jobs / s", continuous_update=False)
        )
        link((self.rate_slider, "value"), (model, "rate"))
        self.path_picker = self.setting(
            widgets.ToggleButtons(
                options=[("reliable", "reliable"), ("naive (contrast)", "naive")],
                value=model.path,
                description="path",
                tooltips=["claim under a lease, keyed effects", "pop-and-process: a kill loses the job"],
            )
        )
        link((self.path_picker, "value"), (model, "path"))
        self.kill_buttons = [
            self.button(
                f"kill w{slot}", lambda slot=slot: model.kill(slot), "simulated kill (worker.abandon()), mid-job"
            )
            for slot in range(1, workers + 1)
        ]
        for b in self.kill_buttons:
            b.button_style = "danger"
        self.restart_buttons = [
            self.button(f"restart w{slot}", lambda slot=slot: model.restart(slot), "a fresh worker in this slot")
            for slot in range(1, workers + 1)
        ]
        super().__init__(
            model,
            FleetFigure(model.name),
            [
                widgets.HBox([self.start_button, self.add_button, self.stop_button, self.path_picker]),
                widgets.HBox([self.pace_slider, self.rate_slider]),
                widgets.HBox([*self.kill_buttons, *self.restart_buttons]),
            ],
            live=live,
            animate=animate,
        )

    def runs_by_itself(self) -> bool:
        return bool(self.model.running)  # type: ignore[attr-defined]

    def close(self) -> None:
        if hasattr(self, "model"):
            self.model.shutdown()  # type: ignore[attr-defined]
        super().close()
