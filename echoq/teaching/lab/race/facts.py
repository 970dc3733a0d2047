"""What a race run is, as facts: the steps of one interleaving, a run's outcome, and an
exploration of every interleaving of one reaper kind. The model makes them; the sentences
(:mod:`.words`) and the figure read them."""

from __future__ import annotations

from dataclasses import dataclass, field

# What a run did to the job, in the library's own places (see Run.outcome).
OUTCOMES = ("once", "duplicated", "dead-lettered", "late", "lost")
WRONG = OUTCOMES[1:]  # every outcome but "once": the job was not delivered exactly once
ACTOR = {"A": "reaper A", "B": "reaper B", "W": "worker W"}


@dataclass(frozen=True)
class Step:
    actor: str  # "A" or "B" (a reaper), "W" (the worker)
    command: str  # what it sends: "ZREM", "reap.lua", "claim.lua" ...

    def __str__(self) -> str:
        return f"{ACTOR[self.actor]}: {self.command}"


@dataclass(frozen=True)
class Run:
    """One interleaving, as run: its steps in order, and what the server said after it."""

    order: tuple[Step, ...]
    deliveries: int  # live deliveries of the job after the crash (the worker's and the last one's)
    place: str  # where the job was when the last worker asked ("nowhere" if in no set)

    @property
    def outcome(self) -> str:
        """Delivered **once** after the crash; **duplicated** (two live workers hold it);
        not delivered, and **dead-lettered** (a claim found its row at odds with its place
        and moved it to dead as corrupt: it waits there for a requeue), **late** (still in
        active under its expired lease, or in pending: the next reap or claim brings it
        back, so it is not lost), or **lost** (in no set: nothing can find it again)."""
        if self.deliveries:
            return "once" if self.deliveries == 1 else "duplicated"
        if self.place == "dead":
            return "dead-lettered"
        return "lost" if self.place == "nowhere" else "late"


@dataclass
class Exploration:
    """Every interleaving of one reaper kind, run; ``runs[k]`` is interleaving k."""

    reaper: str
    runs: list[Run] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(OUTCOMES, 0)
        for run in self.runs:
            out[run.outcome] += 1
        return out

    def first(self, outcome: str) -> int | None:
        """The number of the first interleaving with this outcome, if any."""
        return next((k for k, run in enumerate(self.runs) if run.outcome == outcome), None)
