"""The Fleet lab's model: workers on a beat consuming one queue, kills and restarts, a
producer, a pace slow enough to watch; and the naive pop-and-process fleet, the contrast.

Every number the panel shows comes from one atomic snapshot:

* **reliable path**: lost = enqueued − (pending + active + scheduled + dead + completed
  + popped by a naive run), all read in the same script (``snapshot.lua`` reads the sets
  and the stats hash at once), so a sample can never catch a job between two places: it
  is 0 unless a job really fell out of the reliable path. A job an earlier naive run
  popped (``naive_pop.lua`` counts it in ``naive_popped``, in the same script that pops
  it) left the queue on that run's path, not this one's.
* **naive path**: a popped job is in no set; if its worker dies before the effect, no copy
  is left anywhere and Valkey cannot know. The lab can, because the lab does the killing:
  a kill that destroys a job in hand adds one to the stats hash (``lab:lost``), and the
  next snapshot reads it with everything else.
* **this run**: ``start`` writes the counters as they stand (``lab:run:*`` in the same
  stats hash) while no worker and no producer runs; a frame shows the counters minus
  those, so each run's numbers are its own, still from the frame's one snapshot.

The workers are threads in this kernel and a kill is simulated: :meth:`echoq.Worker.abandon`
(the job in hand is neither completed nor given back, exactly as a killed process leaves
it). Real process kills are the chaos runner's (``python -m echoq.teaching chaos``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from traitlets import Int, Unicode, validate

from ....effects import Effects
from ....errors import InvalidArgument
from ....limits import check, whole
from ....queue import Queue, Snapshot
from ....worker import Worker, keyed_consumer
from ...contrasts import apply_every, naive_pop
from ..frames import Lit
from ..model import GONE, LabModel, Said
from . import words

__all__ = ["FleetModel", "FleetWorker", "NaiveWorker", "Tally", "tally", "LOST_FIELD", "POPPED_FIELD", "PATHS"]

LOST_FIELD = "lab:lost"  # in emq:{q}:stats: jobs a lab kill destroyed on the naive path
POPPED_FIELD = "naive_popped"  # in emq:{q}:stats: naive_pop.lua counts each job it pops
RUN_FIELDS = ("enqueued", "completed", POPPED_FIELD, LOST_FIELD)  # "lab:run:<name>": the counters at start
PATHS = ("reliable", "naive")


@dataclass(frozen=True)
class Tally:
    """The numbers a frame shows for the current run, all from its one snapshot."""

    lost: int
    duplicates: int | None  # None on the naive path: nothing is delivered twice there
    enqueued: int  # this run
    completed: int  # this run (the naive path completes nothing: its done jobs are popped ones)
    popped: int  # this run, naive path only


def tally(snap: Snapshot, path: str) -> Tally:
    stats = snap.stats

    def run(name: str) -> int:
        return stats.get(name, 0) - stats.get(f"lab:run:{name}", 0)

    enqueued, completed, popped = run("enqueued"), run("completed"), run(POPPED_FIELD)
    if path == "naive":
        return Tally(run(LOST_FIELD), None, enqueued, completed, popped)
    c = snap.counts
    placed = c["pending"] + c["active"] + c["scheduled"] + c["dead"] + stats.get("completed", 0)
    lost = stats.get("enqueued", 0) - placed - stats.get(POPPED_FIELD, 0)
    duplicates = sum(1 for n in snap.effects.values() if n > 1)
    return Tally(max(0, lost), duplicates, enqueued, completed, popped)


@dataclass
class Held:
    """A naive worker's job in hand (the only copy, in memory)."""

    job_id: str
    token: int | None = None


class NaiveWorker:
    """CONTRAST: pop-and-process on a thread, with :class:`echoq.Worker`'s controls
    (``work``, ``stop``, ``abandon``, ``in_flight``). ``naive_pop.lua`` takes the job out
    of Valkey; the effect runs on it after ``pace()`` seconds of work; nothing is completed."""

    def __init__(self, queue: Queue, effects: Effects, pace: Any) -> None:
        self.queue, self.effects, self.pace = queue, effects, pace
        self._lock = threading.Lock()
        self._held: str | None = None
        self._stopping = threading.Event()
        self._killed = threading.Event()

    @property
    def in_flight(self) -> list[Held]:
        with self._lock:
            return [Held(self._held)] if self._held else []

    def stop(self) -> None:
        self._stopping.set()

    def abandon(self) -> str | None:
        """Die now; returns the job that was in hand (its only copy dies with the worker)."""
        with self._lock:
            self._killed.set()
            held, self._held = self._held, None
        return held

    def work(self) -> None:
        while not self._stopping.is_set() and not self._killed.is_set():
            with self._lock:
                if self._killed.is_set():
                    return
                popped = naive_pop(self.queue)
                if popped is not None:
                    self._held = popped[0]
            if popped is None:
                self._killed.wait(0.05)  # nothing pending: an idle poll
                continue
            self._killed.wait(self.pace())  # the job's work; a kill cuts it short
            with self._lock:
                if self._killed.is_set():
                    return  # the job died with the worker: abandon() handed it to the lab
                apply_every(self.effects, popped[0], "naive")
                self._held = None


@dataclass
class FleetWorker:
    """One lab worker: an :class:`echoq.Worker` (or, on the naive path, a NaiveWorker) on its thread."""

    slot: int
    worker: Any
    thread: threading.Thread
    stop_signal: threading.Event
    state: str = "working"  # working / killed / stopped / failed
    killed_job: str | None = None


class FleetModel(LabModel):
    """Workers on a beat (stalled check, then drain) consuming one queue; kill and restart
    them; a producer; a pace slow enough to see a kill land mid-job."""

    kind = "fleet"
    setting_words = words.SETTINGS
    settings = ("job_ms", "rate", "path", "lease_ms", "beat_ms")
    job_ms = Int(1_000, help="the pace: how long each job's work takes, in milliseconds (200..5000)")
    rate = Int(0, help="jobs the producer enqueues per second while the fleet runs, 0..10")
    path = Unicode("reliable", help="'reliable' (Worker, keyed effects) or 'naive' (pop-and-process)")
    lease_ms = Int(3_000, help="each claim's lease; a live worker extends it, a killed one cannot")
    beat_ms = Int(500, help="how often each worker runs the stalled check")

    def __init__(self, name: str | None = None, **kw: Any) -> None:
        self.fleet: list[FleetWorker] = []
        self.running_path = "reliable"
        self._producer: threading.Thread | None = None
        self._producing = threading.Event()
        self._made = 0
        self._numbering = threading.Lock()  # the producer thread and a click both number jobs
        super().__init__(name, **kw)

    @validate("job_ms")
    def _pace(self, proposal: dict[str, Any]) -> int:
        return whole("job_ms", proposal["value"], 50, 5_000, unit="of milliseconds")

    @validate("rate")
    def _rate(self, proposal: dict[str, Any]) -> int:
        return whole("rate", proposal["value"], 0, 10, unit="of jobs per second")

    @validate("path")
    def _path(self, proposal: dict[str, Any]) -> str:
        if proposal["value"] not in PATHS:
            raise InvalidArgument(f"path must be 'reliable' or 'naive', got {proposal['value']!r}")
        return str(proposal["value"])

    @validate("lease_ms")
    def _lease(self, proposal: dict[str, Any]) -> int:
        return check("lease_ms", proposal["value"])

    @validate("beat_ms")
    def _beat(self, proposal: dict[str, Any]) -> int:
        return whole("beat_ms", proposal["value"], 10, 60_000, unit="of milliseconds")

    # -- what the frames keep -----------------------------------------------------------------

    def read(self) -> Snapshot:
        assert self.queue is not None
        return self.queue.snapshot(limit=1000)  # the effects of up to 1000 done jobs: duplicates

    def state(self) -> dict[str, Any]:
        workers = []
        for entry in self.fleet:
            hand = entry.worker.in_flight if entry.state == "working" else []
            job = hand[0].job_id if hand else None
            token = getattr(hand[0], "token", None) if hand else None
            workers.append(
                {
                    "slot": entry.slot,
                    "state": entry.state,
                    "job": job,
                    "token": token,
                    "killed_job": entry.killed_job,
                }
            )
        return {"workers": workers, "running_path": self.running_path, "producing": self.producing}

    def describe(self, snapshot: Snapshot | None, state: dict[str, Any]) -> str:
        if snapshot is None:
            return ""
        running_path = str(state.get("running_path", "reliable"))
        t = tally(snapshot, running_path)
        workers = state.get("workers", [])
        alive = sum(1 for w in workers if w["state"] == "working")
        said = words.tally(snapshot, t, running_path, alive, len(workers), self.keys)
        chosen = str(state.get("path", running_path))
        if chosen != running_path:
            # Said in every frame until it is true, so a sample never hides it.
            said += " " + words.path_pending(chosen, running_path, alive > 0)
        return said

    @property
    def lost(self) -> int:
        frame = self.frame
        if frame is None or frame.snapshot is None:
            return 0
        return tally(frame.snapshot, str(frame.state.get("running_path", "reliable"))).lost

    @property
    def duplicates(self) -> int | None:
        frame = self.frame
        if frame is None or frame.snapshot is None:
            return 0
        return tally(frame.snapshot, str(frame.state.get("running_path", "reliable"))).duplicates

    @property
    def producing(self) -> bool:
        alive = self._producer is not None and self._producer.is_alive() and not self._producing.is_set()
        return alive and self.rate > 0

    @property
    def running(self) -> bool:
        """True while something changes the queue without a click (workers, the producer)."""
        with self._lock:
            producer = self._producer is not None and self._producer.is_alive()
            return producer or any(e.state == "working" for e in self.fleet)

    def refresh(self) -> None:
        """Re-read the queue now (a frame, as the browser's clock does)."""
        self.sample()

    def setup(self) -> None:
        self.shutdown()
        self.fleet = []
        self._made = 0

    # -- moves ------------------------------------------------------------------------------

    def add_jobs(self, count: int = 20) -> bool:
        whole("count", count, 1, 1000)

        def run() -> Said:
            self._enqueue(count)
            return words.added(count, self.keys("pending"))

        return self.act("add jobs", run, lit=Lit.moved("enqueue"))

    def _enqueue(self, count: int) -> None:
        assert self.queue is not None
        with self._numbering:
            start = self._made
            self._made += count
        self.queue.enqueue_many([f"fleet job {start + i + 1}" for i in range(count)])

    def start(self, workers: int = 3) -> bool:
        """(Re)start ``workers`` workers on the chosen path (stopping any running first)."""
        whole("workers", workers, 1, 4)

        def run() -> Said:
            self.shutdown()
            self._mark_run()
            with self._lock:
                self.running_path = self.path
                self.fleet = [self._spawn(slot) for slot in range(1, workers + 1)]
            self._start_producer()
            return words.started(workers, self.path, self.beat_ms, self.job_ms), Lit.moved("workers")

        return self.act("start", run)

    def kill(self, slot: int) -> bool:
        """Simulated kill (``worker.abandon()``): the job in hand is abandoned mid-job."""

        def run() -> Said:
            assert self.queue is not None
            entry = self._entry(slot)
            if entry.state != "working":
                return words.not_working(slot, entry.state), Lit.probed("kill")
            before = entry.worker.in_flight
            lost = entry.worker.abandon()
            entry.stop_signal.set()
            with self._lock:
                entry.state = "killed"
            job_id = token = None
            if self.running_path == "naive":
                job_id = lost
                if lost is not None:
                    # The only copy was in the worker's memory: the lab records what it destroyed.
                    self.queue.client.hincrby(self.queue.keys.stats, LOST_FIELD, 1)
            elif before:
                job_id, token = before[0].job_id, before[0].token
            entry.killed_job = job_id  # the thread unwinds by itself: abandoned, it says nothing more
            if self.running_path == "naive" or job_id is None:
                return words.killed(slot, job_id, token, self.keys("active"), self.running_path), Lit.moved("kill")
            # Where the killed worker's lease stands, in the frame's own read.
            snap = self.read()
            deadline = snap.active.get(job_id)
            left = None if deadline is None else deadline - snap.now_ms
            said = words.killed(slot, job_id, token, self.keys("active"), self.running_path, left)
            self.record(f"kill {slot}", said, lit=Lit.moved("kill"), snapshot=snap)
            return None

        return self.act(f"kill {slot}", run)

    def restart(self, slot: int) -> bool:
        def run() -> Said:
            entry = self._entry(slot)
            if entry.state == "working":
                return words.still_working(slot), Lit.probed("workers")
            entry.thread.join(timeout=5)
            with self._lock:
                self.fleet[self.fleet.index(entry)] = self._spawn(slot)
            return words.restarted(slot), Lit.moved("workers")

        return self.act(f"restart {slot}", run)

    def stop_all(self) -> bool:
        """Stop the producer and every worker gracefully (the jobs in hand finish)."""

        def run() -> Said:
            with self._lock:
                n = sum(1 for entry in self.fleet if entry.state == "working")
            self.shutdown()
            return words.stopped(n, len(self.fleet)), Lit.probed("workers")

        return self.act("stop all", run)

    def _mark_run(self) -> None:
        """Write the counters as they stand as this run's zero (``lab:run:*``). Called with
        no worker and no producer running, so nothing of this panel moves them meanwhile."""
        assert self.queue is not None
        stats = self.read().stats
        self.queue.client.hset(
            self.queue.keys.stats, mapping={f"lab:run:{name}": stats.get(name, 0) for name in RUN_FIELDS}
        )

    # -- threads ----------------------------------------------------------------------------

    def _start_producer(self) -> None:
        # It runs with the fleet and enqueues at ``rate`` jobs/s (none at 0): the slider
        # is only a setting, read here on every job.
        self._producing.clear()
        self._producer = threading.Thread(target=self._produce, daemon=True, name=f"echoq-lab-producer-{self.name}")
        self._producer.start()

    def _produce(self) -> None:
        while not self._producing.is_set():
            rate = self.rate
            if rate > 0:
                try:
                    self._enqueue(1)
                except GONE:
                    return
            self._producing.wait(1 / rate if rate else 0.2)  # the producer's pace, not synchronisation

    def _stop_producer(self) -> None:
        self._producing.set()
        if self._producer is not None:
            self._producer.join(timeout=5)
        self._producer = None

    def _spawn(self, slot: int) -> FleetWorker:
        assert self.queue is not None
        stop_signal = threading.Event()
        queue = Queue(self.name, self.queue.client)
        effects = Effects(queue)
        if self.path == "naive":
            worker: Any = NaiveWorker(queue, effects, lambda: self.job_ms / 1000)
        else:

            def work(_delivery: object) -> None:
                stop_signal.wait(self.job_ms / 1000)  # the job's work, at the lab's pace; a kill cuts it short

            worker = Worker(
                queue, keyed_consumer(effects, work), lease_ms=self.lease_ms, beat_ms=self.beat_ms, idle_wait_ms=50
            )
        entry = FleetWorker(slot, worker, threading.Thread(), stop_signal)

        def run() -> None:
            try:
                worker.work()
            except GONE:
                with self._lock:
                    entry.state = "failed"
                return
            with self._lock:
                if entry.state == "working":
                    entry.state = "stopped"

        entry.thread = threading.Thread(target=run, daemon=True, name=f"echoq-lab-worker-{self.name}-{slot}")
        entry.thread.start()
        return entry

    def _entry(self, slot: int) -> FleetWorker:
        for entry in self.fleet:
            if entry.slot == slot:
                return entry
        raise InvalidArgument(words.no_worker(slot))

    def shutdown(self) -> None:
        """Stop the producer and every worker and wait for their threads; records nothing."""
        self._stop_producer()
        for entry in self.fleet:
            entry.worker.stop()
        for entry in self.fleet:
            entry.thread.join(timeout=10)
            with self._lock:
                if entry.state == "working":
                    entry.state = "stopped"
