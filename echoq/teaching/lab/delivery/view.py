"""The Delivery lab's panel: deliveries and consumer settings, 'deliver', the fence."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
from traitlets import link

from ..view import LabPanel
from . import words
from .figure import DeliveryFigure
from .model import DeliveryModel

__all__ = ["DeliveryLab"]


class DeliveryLab(LabPanel):
    """Redeliver one job 1..10 times for real; count effects, naive vs JOB-id-keyed; the fence."""

    def __init__(
        self, name: str | None = None, *, live: bool | None = None, animate: bool = True, **connect: Any
    ) -> None:
        model = DeliveryModel(name, **connect)
        self.deliveries_slider = self.setting(
            widgets.IntSlider(value=model.deliveries, min=1, max=10, description="deliveries", continuous_update=False)
        )
        link((self.deliveries_slider, "value"), (model, "deliveries"))
        self.consumer_picker = self.setting(
            widgets.ToggleButtons(
                options=[("JOB-id-keyed", "keyed"), ("naive", "naive")],
                value=model.consumer,
                description="consumer",
                tooltips=["the effect runs once per JOB id", "the effect runs on every delivery"],
            )
        )
        link((self.consumer_picker, "value"), (model, "consumer"))
        self.deliver_button = self.button(
            "deliver", model.deliver, "deliver one fresh job that many times: claim, effect, crash, reap ... complete"
        )
        self.deliver_button.button_style = "primary"
        self.fence_button = self.button("fence: next step", model.fence_next, "one real step of a stale completion")
        self.fence_log = widgets.HTML()
        super().__init__(
            model,
            DeliveryFigure(model.name),
            [
                widgets.HBox([self.deliveries_slider, self.consumer_picker, self.deliver_button]),
                widgets.HBox([self.fence_button]),
                self.fence_log,
            ],
            live=live,
            animate=animate,
        )
        model.observe(self._show_fence, "revision")
        self._show_fence()

    def _show_fence(self, _change: object = None) -> None:
        log = self.model.fence_log  # type: ignore[attr-defined]
        if not log:
            self.fence_log.value = f"<i>{html.escape(words.fence_idle())}</i>"
            return
        items = "".join(f"<li>{html.escape(line.split('. ', 1)[1])}</li>" for line in log)
        self.fence_log.value = f'<ol style="font-size:14px">{items}</ol>'
