"""A rejected answer's feedback as shown: its lines, the still picture, and the live view.

:func:`bundle` is what a notebook gets for a :class:`~echoq.teaching.exercises.Feedback`
with a picture: text/plain (the lines), text/html (the lines and the picture as an image
with its alt text, which is the ✗ line's own words), image/png, and -- in a kernel with
ipywidgets -- a :class:`JudgedView` whose buttons step the learner's board through its
commands. A frontend without a widget manager (a stored notebook, the course site, GitHub)
shows the HTML; JupyterLab, Notebook 7 and Voila show the view. Everything is drawn here,
when the feedback is displayed: a check that is only judged (a test, a tool) draws nothing.
"""

from __future__ import annotations

import base64
import html
from typing import Any

import ipywidgets as widgets
from traitlets import link

from .figure import figure_for
from .model import JudgedModel, Picture, picture

__all__ = ["JudgedView", "Still", "bundle"]

STEPS = "step through your move's commands: the board on the left shows the queue after each"


class Still:
    """The picture of one feedback, drawn once: its PNG and alt text."""

    def __init__(self, feedback: Any, step: int | None = None) -> None:
        self.picture: Picture = picture(feedback, step)
        self.figure = figure_for(self.picture)
        with self.figure.lock:
            self.figure.show(self.picture)
            self.png = self.figure.png()
        self.width = int(self.figure.fig.bbox.width)

    @property
    def alt(self) -> str:
        return self.picture.alt

    def img(self) -> str:
        return image(self.png, self.alt, self.width)


def image(png: bytes, alt: str, width: int) -> str:
    """An ``<img>`` carrying the picture and its alt text, as wide as drawn at most."""
    data = base64.b64encode(png).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" width="{width}" style="max-width:100%"/>'


def feedback_html(feedback: Any, still: Still) -> str:
    """The feedback's lines with the picture under them, before the hint."""
    page = feedback._repr_html_()
    head, hint, tail = page.rpartition("<p><b>Hint:</b>")
    figure = f'<figure style="margin:4px 0">{still.img()}</figure>'
    if hint:
        return f"{head}{figure}{hint}{tail}"
    return page.removesuffix("</div>") + figure + "</div>"


def bundle(feedback: Any) -> dict[str, Any]:
    still = Still(feedback)
    data: dict[str, Any] = {
        "text/plain": str(feedback),
        "text/html": feedback_html(feedback, still),
        "image/png": base64.b64encode(still.png).decode(),
    }
    if _kernel():
        view = JudgedView(feedback, still)
        shown = view._repr_mimebundle_() or {}
        data.update({k: v for k, v in shown.items() if k != "text/plain"})
    return data


def _kernel() -> bool:
    """True in a Jupyter kernel that can show a widget (ipywidgets installed)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        return False
    if shell is None or not hasattr(shell, "kernel"):
        return False
    import importlib.util

    return importlib.util.find_spec("ipywidgets") is not None


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
