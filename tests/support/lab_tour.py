"""A scripted tour of every lab panel: each panel's model driven through its moves
headlessly (Agg, no animation), so that tests can check every recorded frame: its text
(no collisions, nothing clipped) and its numbers (against the frame's one atomic read).

The Fleet's workers run on threads; the tour waits on the server (polls with deadlines),
never on sleeps of a guessed length.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import redis

from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, RaceLab, ReapLab
from echoq.teaching.lab.view import LabPanel


def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)  # polling the server or a worker's hand, bounded by the deadline
    return False


def claim_tour(lab: ClaimLab) -> Iterator[None]:
    m = lab.model
    m.open()
    for _ in range(3):
        m.enqueue()
        yield
    m.claim()
    yield
    m.claim()  # still holding: refused
    yield
    lab.crash_toggle.value = True
    m.complete()  # a crash
    yield
    m.reap()  # too early
    yield
    m.fast_forward()
    yield
    m.reap()
    yield
    lab.crash_toggle.value = False
    m.claim()
    yield
    m.complete()
    yield
    m.claim()
    yield
    m.fast_forward()
    yield
    lab.crash_toggle.value = True
    m.complete()  # a crash after the lease ran out
    yield
    for _ in range(8):
        m.enqueue()
    m.claim()
    yield
    m.reap()
    yield


def delivery_tour(lab: DeliveryLab) -> Iterator[None]:
    m = lab.model
    m.open()
    m.deliver("keyed", 3)
    yield
    m.deliver("naive", 4)
    yield
    for _ in range(5):
        m.fence_next()
        yield
    m.deliver("keyed", 10)
    yield


def reap_tour(lab: ReapLab) -> Iterator[None]:
    m = lab.model
    m.open()
    m.lease_ms = 1_000
    m.start_workers()
    yield
    m.step_reap()  # nothing expired yet
    yield
    m.fast_forward(None)
    yield
    m.step_reap()
    yield
    m.claim_again()
    yield
    m.fast_forward(None)
    yield
    m.step_reap()  # the second stall: dead at max_stalled 2
    yield
    m.race_demo()
    yield
    m.workers = 8
    m.start_workers()
    yield
    m.fast_forward(None)
    yield
    m.step_reap()
    yield


def fleet_tour(lab: FleetLab) -> Iterator[None]:
    m = lab.model
    m.open()
    m.job_ms, m.lease_ms, m.beat_ms = 400, 800, 100
    m.add_jobs(20)
    yield
    m.start(3)
    yield
    assert _until(lambda: bool(m.fleet[0].worker.in_flight))
    m.kill(1)
    yield
    for _ in range(4):
        m.sample()
        yield
    m.restart(1)
    yield
    lab.path_picker.value = "naive"
    yield
    m.start(3)
    yield
    m.add_jobs(20)
    assert _until(lambda: bool(m.fleet[1].worker.in_flight))
    m.kill(2)
    yield
    m.rate = 5
    for _ in range(3):
        m.sample()
        yield
    m.stop_all()
    yield
    lab.path_picker.value = "reliable"
    m.rate, m.job_ms = 0, 100
    m.start(2)
    yield
    assert _until(lambda: m.read().counts["pending"] == 0, 30)
    m.stop_all()
    yield


def race_tour(lab: RaceLab) -> Iterator[None]:
    m = lab.model
    m.open()
    m.explore("atomic")
    yield
    lab.play(1)
    yield
    m.explore("two-step")
    yield
    lab.play_first("duplicated")
    yield


TOURS: dict[type[LabPanel], Callable[..., Iterator[None]]] = {
    ClaimLab: claim_tour,
    DeliveryLab: delivery_tour,
    ReapLab: reap_tour,
    FleetLab: fleet_tour,
    RaceLab: race_tour,
}


def tour(panel: type[LabPanel], name: str, client: redis.Redis) -> tuple[LabPanel, Iterator[None]]:
    """A panel on queue ``name`` and its tour: each step of the iterator has made a move."""
    lab = panel(name, client=client, live=False, animate=False)
    return lab, TOURS[panel](lab)
