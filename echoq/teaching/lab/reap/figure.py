"""The Reap lab's picture: pending (oldest first), the active set on the server's clock
(expired leases in their own zone, never stacked), the dead set; stall counts on every
marker; the race of two reapers."""

from __future__ import annotations

from typing import Any

from ..figure import GridPlace, QueueFigure, Spot, TimePlace
from ..frames import Frame
from ..style import FONT, MUTED
from ..words import tag
from . import words

__all__ = ["ReapFigure"]


class ReapFigure(QueueFigure):
    def build(self) -> None:
        top, bottom = 0.76, 0.36
        self.pending = GridPlace(self, "pending", (0.02, bottom, 0.22, top), label_lines=2)
        self.active = TimePlace(
            self,
            "active",
            (0.28, bottom, 0.72, top),
            key_suffix=" · at lease deadline",
            span_ms=9_000,
            extra_line=True,
        )
        self.dead = GridPlace(self, "dead", (0.78, bottom, 0.98, top), label_lines=2)
        mid = 0.64
        self.arrow("claim", [(0.223, mid), (0.277, mid)], "claim")
        self.arrow("reap", [(0.37, bottom - 0.075), (0.12, bottom - 0.075)], rad=-0.25)
        self.ax.text(0.22, 0.165, "stall < max_stalled: recovered", fontsize=FONT, ha="center", color=MUTED)
        self.arrow("dead", [(0.60, bottom - 0.075), (0.88, bottom - 0.075)], rad=0.25)
        self.ax.text(0.76, 0.165, "stall = max_stalled: dead-lettered", fontsize=FONT, ha="center", color=MUTED)
        self.paths["enqueue"] = [(0.0, top - 0.03), (0.04, top - 0.03)]
        self.paths["fast-forward"] = [(0.70, bottom + 0.02), (self.active.now_x + 0.01, bottom + 0.02)]
        self.paths["sweep"] = [(self.active.now_x, top - 0.01), (self.active.now_x, bottom + 0.01)]
        self.paths["race"] = [(0.40, 0.02), (0.60, 0.02)]
        self.caption = self.dynamic_text(0.02, 0.075, "", va="center")
        self.race_text = self.dynamic_text(0.50, 0.075, "", va="center")

    def spots(self, frame: Frame, now_ms: int) -> dict[str, Spot]:
        snap = frame.snapshot
        if snap is None:
            return {}

        def stalled(job_id: str) -> str:
            row = snap.rows.get(job_id)
            return words.stalled_label(row.stalled) if row else ""

        def two_lines(job_id: str) -> str:
            extra = stalled(job_id)
            return f"{tag(job_id)}\n{extra}" if extra else tag(job_id)

        out = self.pending.spots([(j, two_lines(j)) for j in snap.pending], snap.counts["pending"])
        out.update(self.active.spots([(j, d - now_ms, stalled(j)) for j, d in snap.active.items()]))
        out.update(self.dead.spots([(j, two_lines(j)) for j in snap.dead], snap.counts["dead"]))
        return out

    def annotate(self, frame: Frame, now_ms: int) -> bool:
        state: dict[str, Any] = dict(frame.state)
        max_stalled = int(state.get("max_stalled", 2))
        self.title.set_text(words.title(max_stalled))
        snap = frame.snapshot
        for place in (self.pending, self.active, self.dead):
            place.show_count(snap.counts[place.name] if snap else 0)
        longest = int(state.get("lease_ms", 3_000)) * int(state.get("workers", 3))
        self.caption.set_text(
            f"st n: the job's stall count (row field 'stalled').\nThe sweep dead-letters at st {max_stalled}."
        )
        race = state.get("race") or {}
        if race:
            racy, atomic = race["two-step"], race["atomic"]
            self.race_text.set_text(
                "race, 2 overlapping sweeps, 1 crashed job:\n"
                f"two-step reapers: {racy['deliveries']} deliveries, {racy['duplicates']} duplicate\n"
                f"atomic reap.lua: {atomic['deliveries']} deliveries, {atomic['duplicates']} duplicate"
            )
        else:
            self.race_text.set_text(
                "race: press 'race' to run two overlapping sweeps,\ntwo-step vs the atomic reap.lua"
            )
        return self.active.set_span(max(3_000, longest))
