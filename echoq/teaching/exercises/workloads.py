"""The workloads a real worker meets, as rows the checks of answers that run over time share.

A check that plays one scene, on a queue that goes quiet, passes answers that only a busy
queue shows wrong: a loop whose stalled check runs only when ``claim()`` finds nothing (a dead
worker's job never comes back while jobs keep arriving), an ``extend_lease`` that claims again
when its extension is refused (with a second job pending it takes that job and says True for
the one another worker now holds). So the loop, extend and charge checks each play their answer
under a table of :class:`Scene` rows: a :class:`Workload` (what the queue holds, whether jobs
keep arriving, how long each job's work takes), the fault that comes, and the property that must
hold in it. The workloads are shared; each check's rows pick the ones its answer meets.

A busy workload is kept busy by a :class:`Feeder`, topped up from the check's own polling loop
(never from a thread: the checks fork worker processes), with a bounded number of jobs, so that
pending never runs dry while the scene lasts: a machine slow to poll finds more jobs waiting,
never fewer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from echoq.queue import Queue

__all__ = ["BACKLOG", "BUSY", "Feeder", "IDLE", "STREAM", "Scene", "Workload", "work_ms_of"]


@dataclass(frozen=True)
class Workload:
    """What a queue holds and does while a scene runs."""

    name: str  # 'busy'
    words: str  # what a ✓ or ✗ line says of it
    pending: int = 0  # jobs waiting when the fault comes (beside the job the fault hits)
    arriving: bool = False  # new jobs keep arriving, topping pending up to ``pending``, while the scene runs
    most: int = 0  # the jobs a scene may enqueue in all (a bound, whatever the machine's pace)
    work_ms: tuple[int, int] = (0, 0)  # each job's work, drawn from this range: slow and fast jobs mixed


IDLE = Workload("idle", "an idle queue")
BACKLOG = Workload("backlog", "two more jobs pending", pending=2, most=2)
BUSY = Workload(
    "busy",
    "a queue kept busy (jobs arriving all the while, 16 or more waiting, 5 to 40 ms of work each)",
    pending=16,
    arriving=True,
    most=240,
    work_ms=(5, 40),
)

STREAM = Workload(
    "stream",
    "a stream of orders (8 waiting, more arriving as it ran, every two orders to one card for one amount)",
    pending=8,
    arriving=True,
    most=12,
)


@dataclass(frozen=True)
class Scene:
    """One row of a check's table: the workload, the fault that comes, the property that must
    hold, and the words of its ✓ line (filled in from the run)."""

    name: str  # the property's key in the feedback ('busy')
    workload: Workload
    fault: str  # 'a worker SIGKILLed mid-job'
    holds: str  # 'its job is back and done within RECOVERY_MS of its lease running out'


class Feeder:
    """Jobs for ``queue`` under ``workload``: payloads ``"order <n> <ms> ms"`` (the work each
    takes, drawn from a seeded generator) or made by ``payload``, enqueued in bulk so that
    ``pending`` jobs wait."""

    def __init__(
        self, queue: Queue, workload: Workload, *, seed: int, payload: Callable[[int, int], str] | None = None
    ) -> None:
        self.queue, self.workload = queue, workload
        self.payload = payload or (lambda n, ms: f"order {n} {ms} ms")  # (n-th job, its work in ms) -> payload
        self.rng = random.Random(seed)
        self.ids: list[str] = []

    def _payload(self, n: int) -> str:
        low, high = self.workload.work_ms
        return self.payload(n, self.rng.randint(low, high))

    def fill(self) -> list[str]:
        """Enqueue the workload's pending jobs (up to its bound); returns their ids."""
        return self._add(self.workload.pending)

    def top_up(self) -> int:
        """While jobs keep arriving, bring pending back up to the workload's count (within its
        bound); returns how many arrived."""
        if not self.workload.arriving:
            return 0
        waiting = int(self.queue.client.zcard(self.queue.keys.pending))
        return len(self._add(self.workload.pending - waiting))

    def _add(self, count: int) -> list[str]:
        count = min(count, self.workload.most - len(self.ids))
        if count <= 0:
            return []
        start = len(self.ids)
        ids = self.queue.enqueue_many([self._payload(start + n) for n in range(count)])
        self.ids += ids
        return ids


def work_ms_of(payload: str) -> int:
    """The work a :class:`Feeder` job takes, from its payload (0 for any other payload)."""
    parts = payload.split()
    if len(parts) >= 2 and parts[-1] == "ms" and parts[-2].isdigit():
        return int(parts[-2])
    return 0
