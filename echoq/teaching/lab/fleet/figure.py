"""The Fleet lab's picture: pending, the active set at lease deadlines (each marker labelled
with the worker that holds it), done and dead; the workers; the verdict, lost and
duplicate effects, from the same snapshot as the markers."""

from __future__ import annotations

from typing import Any

from ..figure import GridPlace, QueueFigure, Spot, TimePlace
from ..frames import Frame
from ..style import FEEDBACK, FONT, INK, MUTED, TITLE
from ..words import tag
from . import words
from .model import tally

__all__ = ["FleetFigure"]

BAD = FEEDBACK["bad"][1]
LINE = 18.9  # px between two lines of a card's 10 pt text (linespacing 1.35)


class FleetFigure(QueueFigure):
    def build(self) -> None:
        top, bottom = 0.78, 0.37
        self.pending = GridPlace(self, "pending", (0.02, bottom, 0.22, top))
        self.active = TimePlace(
            self, "active", (0.27, bottom, 0.66, top), key_suffix=" · at lease deadline", span_ms=3_000
        )
        self.done = GridPlace(self, "done", (0.71, 0.63, 0.98, top))
        self.dead = GridPlace(self, "dead", (0.71, bottom, 0.98, 0.48))
        mid = 0.66
        self.arrow("claim", [(0.223, mid), (0.267, mid)], "claim")
        self.arrow("complete", [(0.663, 0.72), (0.707, 0.72)])
        self.arrow("reap", [(0.36, 0.305), (0.12, 0.305)], rad=-0.12)
        self.ax.text(0.37, 0.297, "a live worker's beat: expired → pending", fontsize=FONT, va="center", color=MUTED)
        self.paths["enqueue"] = [(0.0, top - 0.03), (0.04, top - 0.03)]
        self.workers_top = 0.255
        self.workers = self.card((0.02, 0.02, 0.62, self.workers_top), "workers (threads in this kernel)")
        self.paths["kill"] = [(0.30, self.workers_top), (0.40, bottom)]
        self.paths["workers"] = [(0.15, self.workers_top), (0.12, bottom)]
        self.verdict = self.card((0.66, 0.02, 0.98, self.workers_top), "")
        self.verdict.set_y(0.165)  # under the big verdict line, never behind it
        self.verdict_big = self.dynamic_text(0.675, 0.225, "", fontsize=TITLE, weight="bold", va="top")

    def _hands(self, frame: Frame) -> dict[str, int]:
        return {w["job"]: w["slot"] for w in self._workers(frame) if w.get("job")}

    @staticmethod
    def _workers(frame: Frame) -> list[dict[str, Any]]:
        """The frame's workers, a hand kept only if the frame's snapshot agrees with it.

        The workers' hands are read just after the snapshot; a worker may claim (or pop) a
        job in between. At the snapshot's moment that job was still pending: the picture
        shows the worker without it rather than one job in two places."""
        snap = frame.snapshot
        path = str(frame.state.get("running_path", "reliable"))
        out = []
        for w in frame.state.get("workers", []):
            job = w.get("job")
            if job and snap is not None:
                placed = job in snap.pending or job in snap.done or job in snap.dead
                if (path == "naive" and (placed or job in snap.active)) or (path != "naive" and job not in snap.active):
                    w = {**w, "job": None, "token": None}
            out.append(w)
        return out

    def spots(self, frame: Frame, now_ms: int) -> dict[str, Spot]:
        snap = frame.snapshot
        if snap is None:
            return {}
        hands = self._hands(frame)
        out = self.pending.spots([(j, tag(j)) for j in snap.pending], snap.counts["pending"])
        out.update(
            self.active.spots([(j, d - now_ms, f"w{hands[j]}" if j in hands else "") for j, d in snap.active.items()])
        )
        out.update(self.done.spots([(j, tag(j)) for j in snap.done], snap.counts["done"]))
        out.update(self.dead.spots([(j, tag(j)) for j in snap.dead], snap.counts["dead"]))
        path = str(frame.state.get("running_path", "reliable"))
        if path == "naive":
            # A popped job is in no set: it is drawn in its worker's hand, the only place it is.
            x = 0.60
            for i, w in enumerate(self._workers(frame)):
                if w.get("job"):
                    y = self.workers_top - self.py(24 + (i + 0.55) * LINE)
                    out[w["job"]] = Spot(x, y, "held", "")
            lost = tally(snap, path).lost
            for n in range(min(lost, 10)):
                out[f"lost:{n}"] = Spot(0.68 + n * self.px(26), 0.06, "lost", "")
        return out

    def annotate(self, frame: Frame, now_ms: int) -> bool:
        state: dict[str, Any] = dict(frame.state)
        path = str(state.get("running_path", state.get("path", "reliable")))
        self.title.set_text(
            words.title(
                path,
                int(state.get("job_ms", 1_000)),
                int(state.get("rate", 0)),
                bool(state.get("producing")),
            )
        )
        snap = frame.snapshot
        for place in (self.pending, self.active, self.done, self.dead):
            place.show_count(snap.counts[place.name] if snap else 0)
        workers = self._workers(frame)
        lines = [
            words.worker(w["slot"], w["state"], w.get("job"), w.get("token"), path, w.get("killed_job"))
            for w in workers
        ]
        self.workers.set_text("\n".join(lines) if lines else words.NO_WORKERS)
        if snap is None:
            self.verdict_big.set_text("")
            self.verdict.set_text("")
        else:
            t = tally(snap, path)
            self.verdict_big.set_text(words.verdict(t.lost, t.duplicates))
            self.verdict_big.set_color(BAD if t.lost or t.duplicates else INK)
            run = f"completed {t.completed}" if path == "reliable" else f"popped {t.popped}"
            self.verdict.set_text(
                f"this run: enqueued {t.enqueued} · {run}\n"
                + ("lost = enqueued − all places" if path == "reliable" else "lost = jobs a kill destroyed")
            )
        return self.active.set_span(int(state.get("lease_ms", 3_000)))
