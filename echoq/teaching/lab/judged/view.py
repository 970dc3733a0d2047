"""The live view of a rejected answer's feedback: its lines, its picture, and -- for a move
compared with the reference -- buttons and a slider that step the learner's board through the
commands its move sent (the model's ``step``), redrawn at each."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
from traitlets import link

from .figure import figure_for
from .model import JudgedModel
from .still import Still, image

__all__ = ["JudgedView"]

STEPS = "step through your move's commands: the board on the left shows the queue after each"


class JudgedView(widgets.VBox):
    """The live view: the feedback's lines, its picture, and (for a move) buttons and a slider
    that set which of the learner's commands the left board is at."""

    def __init__(self, feedback: Any, still: Still | None = None) -> None:
        self.model = JudgedModel(feedback)
        self.still = still or Still(feedback)
        self.image = widgets.HTML(self.still.img())
        children: list[Any] = [widgets.HTML(feedback._repr_html_()), self.image]
        if self.model.steps:
            self.back_button = widgets.Button(description="back", icon="step-backward", tooltip="the command before")
            self.forward_button = widgets.Button(description="forward", icon="step-forward", tooltip="the next command")
            self.slider = widgets.IntSlider(
                value=self.model.step,
                min=0,
                max=self.model.steps,
                description="command",
                layout=widgets.Layout(width="340px"),
            )
            self.back_button.on_click(lambda _b: self.model.back())
            self.forward_button.on_click(lambda _b: self.model.forward())
            link((self.slider, "value"), (self.model, "step"))
            self.model.observe(self._redraw, "step")
            controls = [self.back_button, self.forward_button, self.slider, widgets.HTML(html.escape(STEPS))]
            children.append(widgets.HBox(controls, layout=widgets.Layout(flex_flow="row wrap")))
        super().__init__(children)

    def _redraw(self, _change: object = None) -> None:
        shown = self.model.picture()
        figure = figure_for(shown)
        with figure.lock:
            figure.show(shown)
            png = figure.png()
        self.image.value = image(png, shown.alt, int(figure.fig.bbox.width))
