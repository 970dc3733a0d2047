"""The truth test, for every panel: every number and label a frame shows (its figure and
its readout) is what the frame's one atomic read of the server says -- Fleet lost and done,
Delivery effect or skip, Claim lease state, Reap stall counts, every place's count and
every marker's place, where on the time axis a lease is drawn and in which order the
other places hold their jobs -- for every frame of a scripted tour
(tests/support/lab_tour.py), with a thread burning CPU meanwhile. Where nothing else
moves the queue, the frame's read is also checked against a fresh atomic read of the
server after the move."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import matplotlib
import pytest
import redis

matplotlib.use("Agg")

import echoq  # noqa: E402
from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, RaceLab, ReapLab, words  # noqa: E402
from echoq.teaching.lab.frames import Frame, Lit  # noqa: E402
from echoq.teaching.lab.view import LabPanel  # noqa: E402
from tests.support.lab_tour import TOURS, tour  # noqa: E402
from tests.support.servers import fresh_name  # noqa: E402

PLACES = ("pending", "active", "done", "dead")


@pytest.fixture
def loaded() -> Iterator[None]:
    """A thread that competes for the GIL for the whole test, in bursts longer than the
    interpreter's switch interval (5 ms), so the lab's threads are preempted at arbitrary
    points; the pauses between bursts halve the CPU it takes from the tests running beside it."""
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            sum(i * i for i in range(150_000))  # about 6 ms of Python, longer than a switch interval
            stop.wait(0.006)

    thread = threading.Thread(target=burn, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def same_read(a: echoq.Snapshot, b: echoq.Snapshot) -> bool:
    keep = ("pending", "active", "scheduled", "dead", "done", "counts", "stats", "rows", "effects")
    return all(getattr(a, k) == getattr(b, k) for k in keep)


def check_common(lab: LabPanel, frame: Frame) -> None:
    snap = frame.snapshot
    figure = lab.figure
    for place in PLACES:
        drawn = getattr(figure, place, None)
        if drawn is not None:
            assert drawn.count.get_text() == words.count(snap.counts[place]), (place, frame.index)
    for job_id, spot in figure.spots(frame, snap.now_ms).items():
        if spot.style in PLACES:
            assert job_id in getattr(snap, spot.style), (job_id, spot.style, frame.index)
        if spot.style == "active":
            left = snap.active[job_id] - snap.now_ms
            lease = spot.label.splitlines()[1]
            assert lease.startswith("-") == (left <= 0), (spot.label, left)  # the lease's state, as read
            assert (spot.x < figure.active.now_x) == (left <= 0), (job_id, left)  # in the expired zone iff expired
            assert abs(spot.x - on_axis(figure, left)) <= figure.px(3) + 1e-9, (job_id, left, spot.x)
    # pending and done: in the read's order (oldest pending first), row by row
    for place in ("pending", "done"):
        if getattr(figure, place, None) is None:
            continue
        spots = figure.spots(frame, snap.now_ms)
        drawn = [spots[j] for j in getattr(snap, place) if j in spots]
        assert [(round(-s.y, 6), s.x) for s in drawn] == sorted((round(-s.y, 6), s.x) for s in drawn), place
    for place in ("pending", "active"):
        if f"{lab.model.keys(place)} holds" in frame.readout:
            assert f"{lab.model.keys(place)} holds {snap.counts[place]}" in frame.readout


def on_axis(figure, ms_left: int) -> float:
    """Where the picture's own time axis puts a lease with ``ms_left`` to run, read from the
    axis as drawn: the "server now" line and the tick at the axis' far end ("+9 s"), at
    one scale on both sides of now; a lease past the axis' ends waits at that end."""
    active = figure.active
    [now] = [t for t in figure.ax.texts if t.get_text() == words.NOW]
    far = max(active.ticks, key=lambda t: t.get_position()[0])
    seconds = float(far.get_text().strip("+ s"))
    now_x, far_x = now.get_position()[0], far.get_position()[0]
    x = now_x + (far_x - now_x) * ms_left / (seconds * 1000)
    return min(active.right, max(active.left, x))


def check_claim(lab: ClaimLab, frame: Frame, _previous: Frame | None) -> None:
    snap = frame.snapshot
    text = lab.figure.worker.get_text()
    held = re.search(r"holds JOB…(\w{4}) · token (\d+)", text)
    if held:
        [job_id] = [j for j in snap.active if j.endswith(held.group(1))]
        assert snap.rows[job_id].token == int(held.group(2))
    if frame.move == "crash":
        [(job_id, deadline)] = snap.active.items()
        expired = deadline <= snap.now_ms
        assert ("past its deadline" in frame.readout) == expired, frame.readout
        assert ("stays leased" in frame.readout) == (not expired), frame.readout


def check_delivery(lab: DeliveryLab, frame: Frame, previous: Frame | None) -> None:
    snap, state = frame.snapshot, frame.state
    job = state.get("job")
    if state.get("scene") != "delivery" or job is None:
        return
    ran = snap.effects.get(job, 0)
    ledger = lab.figure.ledger.get_text()
    assert f"→ {ran} effect(s)" in ledger
    claimed = snap.stats.get("claimed", 0)
    assert f"{claimed} deliver" in ledger and f" · {claimed - ran} skipped" in ledger
    row = snap.rows.get(job)
    if row is not None:
        assert f"token = {row.token}" in lab.figure.row.get_text()
    if frame.lit == Lit.moved("claim"):
        assert previous is not None and previous.state.get("job") == job
        did_run = ran > previous.snapshot.effects.get(job, 0)  # the effect ran at this delivery
        worker = lab.figure.workers.get_text().splitlines()[-1]
        assert ("SKIPPED" in frame.readout) == (not did_run), frame.readout
        assert ("ran the effect" in frame.readout) == did_run, frame.readout
        assert ("SKIPPED" in worker) == (not did_run) and ("ran the effect" in worker) == did_run, worker


def check_reap(lab: ReapLab, frame: Frame, _previous: Frame | None) -> None:
    snap = frame.snapshot
    for job_id, spot in lab.figure.spots(frame, snap.now_ms).items():
        stall = re.search(r"st (\d+)", spot.label)
        assert (int(stall.group(1)) if stall else 0) == snap.rows[job_id].stalled, (job_id, spot.label)


def check_fleet(lab: FleetLab, frame: Frame, _previous: Frame | None) -> None:
    snap, state = frame.snapshot, frame.state
    stats, c = snap.stats, snap.counts
    path = state["running_path"]
    since = {k: stats.get(k, 0) - stats.get(f"lab:run:{k}", 0) for k in ("enqueued", "completed", "naive_popped")}
    if path == "naive":
        lost = stats.get("lab:lost", 0) - stats.get("lab:run:lab:lost", 0)
        run = f"This run: enqueued {since['enqueued']}, popped {since['naive_popped']}."
    else:
        placed = c["pending"] + c["active"] + c["scheduled"] + c["dead"] + stats.get("completed", 0)
        lost = stats.get("enqueued", 0) - placed - stats.get("naive_popped", 0)
        run = f"This run: enqueued {since['enqueued']}, completed {since['completed']}."
    text = frame.readout
    assert f"Lost: {lost}." in text and lab.figure.verdict_big.get_text().startswith(f"lost {lost} "), text
    assert f"active {c['active']}, done {c['done']}, dead {c['dead']}." in text, text
    assert f"{lab.model.keys('pending')} {c['pending']}," in text
    assert run in text, text
    killed = re.search(r"JOB…(\w{4}) \(token \d+\) (stays leased|is in \S+ past its lease deadline)", text)
    if frame.move.startswith("kill") and killed:
        [deadline] = [d for j, d in snap.active.items() if j.endswith(killed.group(1))]
        assert (killed.group(2) == "stays leased") == (deadline > snap.now_ms), text  # the lease's state, as read
    for line in lab.figure.workers.get_text().splitlines():
        held = re.search(r"holds (\w{4})", line)
        if held:
            [job_id] = [j for j in [*snap.active, *snap.pending, *snap.done] if j.endswith(held.group(1))] or [None]
            if path == "naive":
                assert job_id is None, line  # popped: in no set
            else:
                assert job_id in snap.active, line


def check_race(lab: RaceLab, frame: Frame, _previous: Frame | None) -> None:
    step = frame.state.get("step")
    if step and 0 < step["n"] <= len(step["order"]):
        assert frame.readout.startswith(step["order"][step["n"] - 1] + ":") or frame.readout.startswith(
            step["order"][step["n"] - 1] + " "
        ), (frame.readout, step)  # the frame tells the command that was just sent
    counts = frame.state.get("counts")
    if counts:
        caption = lab.figure.caption.get_text()
        for outcome, n in counts.items():  # the race's question always; the other outcomes when any
            if n or outcome in ("once", "duplicated"):
                assert f"{outcome} {n}" in caption, (outcome, caption)
            else:
                assert outcome not in caption, (outcome, caption)


CHECKS = {
    ClaimLab: check_claim,
    DeliveryLab: check_delivery,
    ReapLab: check_reap,
    FleetLab: check_fleet,
    RaceLab: check_race,
}


@pytest.mark.parametrize("panel", list(TOURS), ids=lambda p: p.__name__)
def test_every_number_and_label_of_every_frame_is_the_servers(
    panel: type[LabPanel], valkey_client: redis.Redis, loaded: None
) -> None:
    name = fresh_name("truth")
    lab, steps = tour(panel, name, valkey_client)
    model = lab.model
    fresh_reads = 0
    try:
        for _ in steps:
            frame = model.frame
            quiet = not getattr(model, "running", False)
            if quiet and frame.snapshot is not None:
                queue = echoq.Queue(str(frame.state.get("queue", name)), valkey_client)
                assert same_read(frame.snapshot, queue.snapshot(limit=1000)), f"frame {frame.index} ({frame.move})"
                fresh_reads += 1
        assert fresh_reads >= 3
        frames = [f for f in model.history.all() if f.snapshot is not None]
        assert len(frames) >= 10
        for previous, frame in zip([None, *frames], frames, strict=False):
            with lab.figure.lock:
                lab.figure.pose(None, frame)
                check_common(lab, frame)
                CHECKS[panel](lab, frame, previous)
    finally:
        lab.close()
        if hasattr(model, "shutdown"):
            model.shutdown()
        for suffix in ("", "-fence", "-racy", "-atomic"):
            echoq.Queue(name + suffix, valkey_client).reset()


def test_a_fleet_worker_is_drawn_holding_only_a_job_its_frames_read_puts_in_its_hand(
    valkey_client: redis.Redis,
) -> None:
    """The workers' hands are read just after the snapshot: a job claimed in between is
    still pending in the frame's read, so the frame must not also draw it in a hand."""
    import dataclasses

    name = fresh_name("hands")
    lab = FleetLab(name, client=valkey_client, live=False, animate=False)
    try:
        lab.model.add_jobs(3)
        frame = lab.model.frame
        [first, *_] = frame.snapshot.pending
        worker = {"slot": 1, "state": "working", "job": first, "token": 1, "killed_job": None}
        for path in ("reliable", "naive"):
            raced = dataclasses.replace(frame, state={**frame.state, "running_path": path, "workers": [worker]})
            spots = lab.figure.spots(raced, raced.snapshot.now_ms)
            lab.figure.pose(None, raced)
            assert spots[first].style == "pending" and "w1" not in spots[first].label
            assert "holds" not in lab.figure.workers.get_text(), path
    finally:
        lab.close()
        echoq.Queue(name, valkey_client).reset()
