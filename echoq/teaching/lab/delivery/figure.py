"""The Delivery lab's picture: the job's sets (pending, active at its lease deadline, done),
the workers each with its fencing token, the job's row (its ``token``: the fence) and the
effects ledger. The fence's refused complete is drawn where it is refused: at the row."""

from __future__ import annotations

from typing import Any

from .. import words
from ..figure import GridPlace, QueueFigure, TimePlace
from ..frames import Frame
from ..style import FEEDBACK, FONT, MUTED

__all__ = ["DeliveryFigure"]

BAD = FEEDBACK["bad"][1]  # dark vermilion: 9:1 on white


class DeliveryFigure(QueueFigure):
    def build(self) -> None:
        top, bottom = 0.76, 0.42
        self.pending = GridPlace(self, "pending", (0.02, bottom, 0.20, top))
        self.active = TimePlace(self, "active", (0.27, bottom, 0.73, top), span_ms=30_000)
        self.done = GridPlace(self, "done", (0.80, bottom, 0.98, top))
        mid = 0.62
        self.arrow("claim", [(0.203, mid), (0.267, mid)], "claim")
        self.arrow("finish", [(0.733, mid), (0.797, mid)], "finish")
        self.arrow("reap", [(0.36, 0.345), (0.11, 0.345)], rad=-0.15)
        self.ax.text(0.235, 0.298, "lease ran out → reap", fontsize=FONT, ha="center", va="top", color=MUTED)
        self.paths["enqueue"] = [(0.0, top - 0.03), (0.04, top - 0.03)]
        self.workers = self.card((0.02, 0.02, 0.30, 0.25), "workers (fencing tokens)")
        self.workers.set_linespacing(1.2)  # two workers, two lines each, fit the card
        self.arrow("fence", [(0.305, 0.17), (0.415, 0.17)], "complete", label_dy=17)
        self.row = self.card((0.42, 0.02, 0.64, 0.25), "the job's row")
        self.ledger = self.card((0.67, 0.02, 0.98, 0.25), "")
        self.refusal = self.dynamic_text(
            0.405, 0.17, "", fontsize=16, ha="center", va="center", color=BAD, weight="bold"
        )
        self.refusal_words = self.dynamic_text(0.428, 0.045, "", va="center", color=BAD, weight="bold")

    def ledger_key(self, queue: str) -> str:
        return words.fit(f"emq:{{{queue}}}:effects", int((0.31 - self.px(16)) / self.px(6.6)))

    def annotate(self, frame: Frame, now_ms: int) -> bool:
        state: dict[str, Any] = dict(frame.state)
        snap = frame.snapshot
        queue = str(state.get("queue", self.queue))
        fence = state.get("scene") == "fence"
        if fence:
            self.title.set_text(words.fence_title(queue))
        else:
            self.title.set_text(
                words.delivery_title(queue, str(state.get("consumer", "keyed")), int(state.get("deliveries", 3)))
            )
        for place in (self.pending, self.active, self.done):
            place.set_key(f"emq:{{{queue}}}:{place.name}")
            place.show_count(snap.counts[place.name] if snap else 0)
        job = state.get("job")
        workers = state.get("workers") or []
        if isinstance(workers, dict):  # the fence: A and B by name
            lines = [f"{name} · token {w['attempt']}\n  {w['status']}" for name, w in workers.items()]
        else:
            lines = [f"{w['name']} · token {w['attempt']}\n  {w['status']}" for w in workers]
        self.workers.set_text("\n".join(lines) if lines else "none yet")
        row = snap.rows.get(job) if (snap and job) else None
        if job is None:
            self.row.set_text("no job yet")
        elif row is not None:
            self.row.set_text(f"{words.short(job)}\ntoken = {row.token} · {row.state}")
        elif snap is not None and job in snap.done:
            self.row.set_text(f"{words.short(job)}\nretired: the id is\nin done")
        else:
            self.row.set_text(f"{words.short(job)}\n(not listed)")
        refused = state.get("refused")
        if refused and row is not None:
            self.refusal.set_text("✕")
            self.refusal_words.set_text(f"refused {refused['worker']}: {refused['attempt']} ≠ {row.token}")
        else:
            self.refusal.set_text("")
            self.refusal_words.set_text("")
        if fence:
            self.ledger.set_text(f"The fence · step {state.get('fence_step', 0)} of 5\n" + words.FENCE_RULE)
        elif job is not None and snap is not None:
            ran = snap.effects.get(job, 0)
            self.ledger.set_text(
                f"{self.ledger_key(queue)}\n{words.short(job)} → {ran} effect(s)\n"
                + words.delivery_ledger(ran, snap.stats.get("claimed", 0))
            )
        else:
            self.ledger.set_text(f"{self.ledger_key(queue)}\n{words.DELIVERY_NONE_CARD}")
        return False
