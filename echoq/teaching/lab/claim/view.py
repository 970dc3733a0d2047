"""The Claim lab's panel: the buttons and settings bound to a :class:`ClaimModel`."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
from traitlets import link

from ..view import LabPanel
from .figure import ClaimFigure
from .model import CLAIM_STEPS, ClaimModel

__all__ = ["ClaimLab"]


class ClaimLab(LabPanel):
    """The recoverable claim: enqueue, claim, complete or crash, reap; the Lua of each step."""

    def __init__(
        self, name: str | None = None, *, live: bool | None = None, animate: bool = True, **connect: Any
    ) -> None:
        model = ClaimModel(name, **connect)
        self.enqueue_button = self.button("enqueue", model.enqueue, "enqueue.lua: a new job into pending")
        self.claim_button = self.button(
            "claim", model.claim, "claim.lua: oldest pending job into active, under a lease"
        )
        self.complete_button = self.button("complete", model.complete, "complete.lua, or a crash when the toggle is on")
        self.reap_button = self.button("reap", model.reap, "reap.lua: expired leases back to pending")
        self.fast_forward_button = self.button(
            "fast-forward", model.fast_forward, "teaching script: pull lease deadlines to the server's now"
        )
        self.crash_toggle = self.setting(
            widgets.ToggleButton(
                value=model.crash,
                description="crash mid-job",
                icon="bolt",
                tooltip="when on, complete kills the worker instead of completing",
            )
        )
        link((self.crash_toggle, "value"), (model, "crash"))
        self.lease_slider = self.setting(
            widgets.IntSlider(
                value=model.lease_ms // 1000, min=1, max=60, description="lease (s)", continuous_update=False
            )
        )
        link((self.lease_slider, "value"), (model, "lease_ms"), transform=(lambda s: s * 1000, lambda ms: ms // 1000))
        self.step_picker = widgets.ToggleButtons(
            options=list(CLAIM_STEPS), value=model.step, description="read the Lua of"
        )
        self.step_picker.style.button_width = "112px"  # "fast-forward" whole
        link((self.step_picker, "value"), (model, "step"))
        self.source = widgets.HTML()
        moves = widgets.HBox(
            [self.enqueue_button, self.claim_button, self.complete_button, self.crash_toggle, self.reap_button],
            layout=widgets.Layout(flex_flow="row wrap"),
        )
        super().__init__(
            model,
            ClaimFigure(model.name),
            [moves, widgets.HBox([self.lease_slider, self.fast_forward_button]), self.step_picker, self.source],
            live=live,
            animate=animate,
        )
        model.observe(self._show_source, "step")
        self._show_source()

    def _show_source(self, _change: object = None) -> None:
        step = self.model.step  # type: ignore[attr-defined]
        text = self.model.step_source(step)  # type: ignore[attr-defined]
        self.source.value = (
            f"<details><summary>the Lua of <b>{html.escape(step)}</b>, exactly as the server runs it</summary>"
            f'<pre style="font-size:13px;max-height:18em;overflow:auto">{html.escape(text)}</pre></details>'
        )
