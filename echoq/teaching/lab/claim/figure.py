"""The Claim lab's picture: pending → active (at lease deadlines) → done; crash; reap."""

from __future__ import annotations

from typing import Any

from ..figure import GridPlace, QueueFigure, TimePlace
from ..frames import Frame
from ..style import FONT, MUTED
from . import words

__all__ = ["ClaimFigure"]


class ClaimFigure(QueueFigure):
    def build(self) -> None:
        top, bottom = 0.76, 0.30
        self.pending = GridPlace(self, "pending", (0.02, bottom, 0.235, top))
        self.active = TimePlace(
            self, "active", (0.30, bottom, 0.70, top), key_suffix=" · at lease deadline", span_ms=10_000
        )
        self.done = GridPlace(self, "done", (0.765, bottom, 0.98, top))
        mid = 0.60
        self.arrow("claim", [(0.238, mid), (0.297, mid)], "claim")
        self.arrow("complete", [(0.703, mid), (0.762, mid)], "complete")
        self.arrow("reap", [(0.40, bottom - 0.085), (0.12, bottom - 0.085)], rad=-0.25)
        self.ax.text(0.235, 0.075, "reap → pending (lease ran out)", fontsize=FONT, ha="center", color=MUTED)
        self.arrow("crash", [(0.60, bottom - 0.085), (0.60, 0.135)])
        self.paths["enqueue"] = [(0.0, top - 0.03), (0.05, top - 0.03)]
        self.paths["fast-forward"] = [(0.68, bottom + 0.02), (self.active.now_x + 0.01, bottom + 0.02)]
        self.worker = self.dynamic_text(0.625, 0.09, "", ha="center", va="center", weight="bold")

    def annotate(self, frame: Frame, now_ms: int) -> bool:
        state: dict[str, Any] = dict(frame.state)
        lease_ms = int(state.get("lease_ms", 10_000))
        self.title.set_text(words.title(bool(state.get("crash")), lease_ms))
        snap = frame.snapshot
        for place in (self.pending, self.active, self.done):
            place.show_count(snap.counts[place.name] if snap else 0)
        self.worker.set_text(words.worker(str(state.get("worker", "idle")), state.get("held")))
        return self.active.set_span(lease_ms)
