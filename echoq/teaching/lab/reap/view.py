"""The Reap lab's panel."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
from traitlets import link

from ..view import LabPanel
from .figure import ReapFigure
from .model import ReapModel

__all__ = ["ReapLab"]


class ReapLab(LabPanel):
    """Crashed workers' leases on the server's clock; step the reap; max_stalled; the race."""

    def __init__(
        self, name: str | None = None, *, live: bool | None = None, animate: bool = True, **connect: Any
    ) -> None:
        model = ReapModel(name, **connect)
        self.start_button = self.button("start workers", model.start_workers, "jobs claimed by workers that crash")
        self.claim_again_button = self.button("claim again", model.claim_again, "new workers take the pending jobs")
        self.step_button = self.button("step the reap", model.step_reap, "one stalled_check.lua sweep")
        self.step_button.button_style = "primary"
        self.fast_forward_button = self.button(
            "fast-forward 2 s", model.fast_forward, "teaching script: every live lease 2 s earlier"
        )
        self.race_button = self.button("race", model.race_demo, "two overlapping sweeps: two-step vs atomic")
        self.max_stalled_slider = self.setting(
            widgets.IntSlider(value=model.max_stalled, min=1, max=5, description="max_stalled", continuous_update=False)
        )
        link((self.max_stalled_slider, "value"), (model, "max_stalled"))
        row = widgets.HBox(
            [self.start_button, self.claim_again_button, self.fast_forward_button, self.step_button, self.race_button],
            layout=widgets.Layout(flex_flow="row wrap"),
        )
        super().__init__(model, ReapFigure(model.name), [row, self.max_stalled_slider], live=live, animate=animate)
