"""The Delivery lab's picture: the job's sets (pending, active at its lease deadline, done),
the workers each with its fencing token, the job's row (its ``token``: the fence) and the
effects ledger. The fence's refused complete is drawn where it is refused: at the row."""

from __future__ import annotations

from typing import Any

from ..figure import GridPlace, QueueFigure, TimePlace
from ..frames import Frame
from ..style import FEEDBACK, FONT, MUTED
from . import words

__all__ = ["DeliveryFigure"]

BAD = FEEDBACK["bad"][1]  # dark vermilion: 9:1 on white


class DeliveryFigure(QueueFigure):
    def build(self) -> None:
        top, bottom = 0.76, 0.42
        self.pending = GridPlace(self, "pending", (0.02, bottom, 0.20, top))
        self.active = TimePlace(self, "active", (0.27, bottom, 0.70, top), span_ms=30_000)
        self.done = GridPlace(self, "done", (0.77, bottom, 0.98, top))
        mid = 0.62
        self.arrow("claim", [(0.203, mid), (0.267, mid)], "claim")
        self.arrow("complete", [(0.703, mid), (0.767, mid)], "complete")
        self.arrow("reap", [(0.36, 0.345), (0.11, 0.345)], rad=-0.15)
        self.ax.text(0.235, 0.298, "lease ran out → reap", fontsize=FONT, ha="center", va="top", color=MUTED)
        self.paths["enqueue"] = [(0.0, top - 0.03), (0.04, top - 0.03)]
        self.workers = self.card((0.02, 0.02, 0.30, 0.25), "workers (fencing tokens)")
        self.workers.set_linespacing(1.2)  # two workers, two lines each, fit the card
        self.arrow("fence", [(0.305, 0.17), (0.39, 0.17)], "complete", label_dy=17)
        self.row = self.card((0.42, 0.02, 0.64, 0.25), "the job's row")
        self.ledger = self.card((0.67, 0.02, 0.98, 0.25), "")
        self.ledger.set_linespacing(1.2)  # a learner's long queue name wraps its key over three lines
        self.other_keys.append(("effects", 0.31 - self.px(16)))
        self.refusal = self.dynamic_text(
            0.404, 0.17, "", fontsize=16, ha="center", va="center", color=BAD, weight="bold"
        )
        self.refusal_words = self.dynamic_text(0.428, 0.045, "", va="center", color=BAD, weight="bold")

    def ledger_key(self, queue: str) -> str:
        return self.key_label(queue, "effects")

    def annotate(self, frame: Frame, now_ms: int) -> bool:
        state: dict[str, Any] = dict(frame.state)
        snap = frame.snapshot
        queue = str(state.get("queue", self.queue))
        fence = state.get("scene") == "fence"
        if fence:
            self.title.set_text(words.fence_title())
        else:
            self.title.set_text(words.title(str(state.get("consumer", "keyed")), int(state.get("deliveries", 3))))
        moved = self.show_queue(queue)  # the fence plays on a queue of its own: its keys may wrap otherwise
        for place in (self.pending, self.active, self.done):
            place.show_count(snap.counts[place.name] if snap else 0)
        job = state.get("job")
        workers = state.get("workers") or []
        named = workers.items() if isinstance(workers, dict) else ((w["name"], w) for w in workers)  # the fence: A, B
        self.workers.set_text(words.workers_card([(name, w["token"], w["status"]) for name, w in named]))
        row = snap.rows.get(job) if (snap and job) else None
        in_done = snap is not None and job is not None and job in snap.done
        self.row.set_text(words.row_card(job, row, in_done))
        refused = state.get("refused")
        if refused and row is not None:
            self.refusal.set_text("✕")
            self.refusal_words.set_text(words.refusal(refused["worker"], refused["token"], row.token))
        else:
            self.refusal.set_text("")
            self.refusal_words.set_text("")
        if fence:
            self.ledger.set_text(words.fence_card(int(state.get("fence_step", 0))))
        elif job is not None and snap is not None:
            ran = snap.effects.get(job, 0)
            self.ledger.set_text(words.ledger_card(self.ledger_key(queue), job, ran, snap.stats.get("claimed", 0)))
        else:
            self.ledger.set_text(f"{self.ledger_key(queue)}\n{words.NONE_CARD}")
        return moved
