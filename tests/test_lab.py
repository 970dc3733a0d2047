"""The lab panels, driven headlessly against the real embedded Valkey.

Each test clicks the panels' buttons (or calls their models' moves), then checks the keys
on the server AND the words in the readout AND the picture drawn (the frame's markers, the
figure's text). Animations are off (``animate=False``) except where a test is about them.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import hashlib
import html
import io
import itertools
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import matplotlib
import pytest
import redis

matplotlib.use("Agg")

import echoq  # noqa: E402
from echoq import scripts  # noqa: E402
from echoq.server import start_server  # noqa: E402
from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, ReapLab, fast_forward, style, words  # noqa: E402
from echoq.teaching.lab.fleet.model import LOST_FIELD, FleetModel  # noqa: E402
from echoq.teaching.lab.frames import Lit  # noqa: E402
from echoq.teaching.lab.view import LabPanel  # noqa: E402
from echoq.teaching.lab.words import short  # noqa: E402
from tests.support.helpers import wait_for_server_time  # noqa: E402
from tests.support.servers import fresh_name  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PANELS = [ClaimLab, DeliveryLab, ReapLab, FleetLab]


@pytest.fixture
def name(valkey_client: redis.Redis) -> Iterator[str]:
    queue_name = fresh_name("lab")
    yield queue_name
    for suffix in ("", "-fence", "-racy", "-atomic"):
        echoq.Queue(queue_name + suffix, valkey_client).reset()


def key(name: str, part: str) -> str:
    return f"emq:{{{name}}}:{part}"


def shown(lab: LabPanel) -> str:
    """The readout's words as the page shows them (tags stripped)."""
    lab.settle()
    return html.unescape(re.sub(r"<[^>]+>", "", lab.readout.value))


def place_of_marker(lab: LabPanel, job_id: str) -> str | None:
    """Where the figure draws ``job_id`` in the latest frame (the marker's style: its place)."""
    frame = lab.model.frame
    spot = lab.figure.spots(frame, frame.server_now_ms()).get(job_id)
    return spot.style if spot else None


# -- the claim lab ------------------------------------------------------------------------------


def test_crash_toggle_leaves_the_job_leased_in_active(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)
    lab.enqueue_button.click()
    lab.claim_button.click()
    [job_id] = valkey_client.zrange(key(name, "active"), 0, -1)
    lab.crash_toggle.value = True
    lab.complete_button.click()

    assert valkey_client.zrange(key(name, "active"), 0, -1) == [job_id]
    assert valkey_client.zcard(key(name, "pending")) == 0
    assert valkey_client.hget(key(name, "job:" + job_id), "state") == "active"
    assert f"stays leased in {key(name, 'active')}" in shown(lab)
    assert lab.model.step == "crash" and lab.model.held is None
    assert place_of_marker(lab, job_id) == "active"
    assert lab.figure.arrows["crash"].get_linewidth() > lab.figure.arrows["reap"].get_linewidth()
    assert "crashed mid-job" in lab.figure.worker.get_text()
    assert "crash mid-job ON" in lab.figure.title.get_text()


def test_a_crash_after_the_lease_ran_out_says_the_job_is_reapable(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)
    lab.enqueue_button.click()
    lab.claim_button.click()
    lab.fast_forward_button.click()  # the lease's deadline pulled to the server's now
    [(job_id, deadline)] = valkey_client.zrange(key(name, "active"), 0, -1, withscores=True)
    wait_for_server_time(valkey_client, int(deadline) + 1)
    lab.crash_toggle.value = True
    lab.complete_button.click()
    text = shown(lab)
    assert "stays leased" not in text and "until its lease runs out" not in text, text
    assert "past its deadline" in text and "the next reap returns it to pending" in text
    snap = lab.model.frame.snapshot
    assert snap.active[job_id] <= snap.now_ms  # the words and the frame's read agree
    lab.reap_button.click()
    assert valkey_client.zrange(key(name, "pending"), 0, -1) == [job_id]


def test_live_after_scrubbing_jumps_to_the_present_at_once(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.model.open()
    for _ in range(6):
        lab.enqueue_button.click()
    lab.settle()
    lab.timeline.set_state({"value": lab.model.history.first_index})  # scrubbed back to the start
    assert lab.player.cursor == lab.model.history.first_index
    lab.live_button.click()
    # No replay of the recorded moves: the picture, the readout and the enabled moves are
    # the present's the moment live is pressed.
    assert lab.player.cursor == lab.model.history.last_index and not lab.player.running
    assert lab.figure.pending.count.get_text() == words.count(6)
    assert lab.model.frame.readout in html.unescape(lab.readout.value)
    assert not any(control.disabled for control in lab.buttons)
    lab.close()


def test_complete_without_crash_completes_the_job(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)
    lab.enqueue_button.click()
    lab.claim_button.click()
    [job_id] = valkey_client.zrange(key(name, "active"), 0, -1)
    lab.complete_button.click()

    assert valkey_client.zcard(key(name, "active")) == 0
    assert valkey_client.zcard(key(name, "done")) == 1
    assert "complete.lua (token 1)" in shown(lab)
    assert place_of_marker(lab, job_id) == "done"


def test_reap_after_the_lease_expires_returns_the_job_to_pending(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)
    lab.model.lease_ms = 20  # a short lease: the test waits on the server's clock, not a sleep
    lab.enqueue_button.click()
    lab.claim_button.click()
    held = lab.model.held
    lab.crash_toggle.value = True
    lab.complete_button.click()
    wait_for_server_time(valkey_client, held.deadline_ms)
    lab.reap_button.click()

    assert valkey_client.zrange(key(name, "pending"), 0, -1) == [held.job_id]
    assert valkey_client.zcard(key(name, "active")) == 0
    assert f"back to {key(name, 'pending')}" in shown(lab)
    assert place_of_marker(lab, held.job_id) == "pending"


def test_reap_before_expiry_moves_nothing_until_fast_forward(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)  # default 10 s lease
    lab.enqueue_button.click()
    lab.claim_button.click()
    lab.crash_toggle.value = True
    lab.complete_button.click()
    lab.reap_button.click()
    assert valkey_client.zcard(key(name, "active")) == 1
    assert "moved nothing" in shown(lab)

    lab.fast_forward_button.click()
    assert "teaching script" in shown(lab)
    lab.reap_button.click()
    assert valkey_client.zcard(key(name, "pending")) == 1
    assert valkey_client.zcard(key(name, "active")) == 0


def test_selecting_a_step_shows_its_exact_lua(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)
    lab.step_picker.value = "reap"
    assert "ZRANGEBYSCORE" in lab.source.value and "reap.lua" in lab.source.value
    lab.step_picker.value = "claim"
    assert "ZPOPMIN" in lab.source.value
    assert lab.model.step_source("complete") == scripts.expanded("complete")
    lab.step_picker.value = "crash"
    assert "runs no script" in lab.source.value


def test_claim_with_nothing_pending_says_so(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)
    lab.claim_button.click()
    assert f"found {key(name, 'pending')} empty" in shown(lab)
    assert valkey_client.zcard(key(name, "active")) == 0


# -- the delivery lab ---------------------------------------------------------------------------


@pytest.mark.parametrize(("consumer", "deliveries"), [("keyed", 1), ("keyed", 6), ("naive", 10)])
def test_deliver_really_redelivers(name: str, valkey_client: redis.Redis, consumer: str, deliveries: int) -> None:
    lab = DeliveryLab(name, client=valkey_client, live=False, animate=False)
    lab.consumer_picker.value = consumer
    lab.deliveries_slider.value = deliveries
    assert lab.model.run is None  # a setting changes nothing on the server: 'deliver' does
    lab.deliver_button.click()
    run = lab.model.run
    assert run.deliveries == deliveries and run.consumer == consumer

    expected_effects = 1 if consumer == "keyed" else deliveries
    stats = valkey_client.hgetall(key(name, "stats"))
    assert int(stats["claimed"]) == deliveries
    assert int(stats.get("reaped", 0)) == deliveries - 1
    assert int(valkey_client.hget(key(name, "effects"), run.job_id)) == expected_effects
    assert valkey_client.llen(key(name, "outbox")) == expected_effects
    assert run.attempts == list(range(1, deliveries + 1))
    assert f"{deliveries} time(s)" in shown(lab)
    assert f"counts {expected_effects} effect(s)" in shown(lab)
    # Every step of the run is a frame: the animation shows each delivery.
    moves = [f for f in lab.model.history.all() if f.move == "deliver"]
    assert len(moves) == 1 + 2 * deliveries
    assert f"→ {expected_effects} effect(s)" in lab.figure.ledger.get_text()
    assert f"{deliveries} deliver" in lab.figure.ledger.get_text()
    assert f" · {deliveries - expected_effects} skipped" in lab.figure.ledger.get_text()
    # Each delivery's frame says, in the readout and in its worker's box, whether the
    # effect ran: the keyed consumer's ledger skips it on every delivery but the first.
    claims = [f for f in moves if f.lit == Lit.moved("claim")]
    assert len(claims) == deliveries
    for k, frame in enumerate(claims, start=1):
        ran = consumer == "naive" or k == 1
        lab.figure.pose(None, frame)
        box = lab.figure.workers.get_text().splitlines()[-1]
        assert ("the worker ran the effect" in frame.readout) == ran, frame.readout
        assert ("SKIPPED" in frame.readout) == (not ran), frame.readout
        assert ("ran the effect" in box) == ran and ("SKIPPED" in box) == (not ran), box


def test_the_fence_refuses_the_stale_worker_and_draws_it(name: str, valkey_client: redis.Redis) -> None:
    lab = DeliveryLab(name, client=valkey_client, live=False, animate=False)
    fence = name + "-fence"
    for _ in range(4):
        lab.fence_button.click()
    [job_id] = valkey_client.zrange(key(fence, "active"), 0, -1)
    assert valkey_client.hget(key(fence, "job:" + job_id), "token") == "2"  # B's token
    assert "STALE" in shown(lab) and "Refused" in shown(lab)
    assert "STALE" in lab.fence_log.value
    # The picture: both workers with their tokens, the row's token, the refusal at the row.
    figure = lab.figure
    assert "A · token 1" in figure.workers.get_text() and "B · token 2" in figure.workers.get_text()
    assert "token = 2" in figure.row.get_text()
    assert figure.refusal.get_text() == "✕" and "1 ≠ 2" in figure.refusal_words.get_text()
    assert figure.arrows["fence"].get_linewidth() > figure.arrows["claim"].get_linewidth()
    assert place_of_marker(lab, job_id) == "active"

    lab.fence_button.click()
    assert valkey_client.zcard(key(fence, "active")) == 0
    assert valkey_client.zrange(key(fence, "done"), 0, -1) == [job_id]
    assert "COMPLETED" in shown(lab)
    assert figure.refusal.get_text() == "" and place_of_marker(lab, job_id) == "done"


def test_bad_input_is_refused_in_the_readout_and_changes_nothing(name: str, valkey_client: redis.Redis) -> None:
    lab = DeliveryLab(name, client=valkey_client, live=False, animate=False)
    lab.deliver_button.click()
    before = valkey_client.hgetall(key(name, "stats"))
    lab.run(lambda: setattr(lab.model, "deliveries", 11))
    assert "deliveries must be a whole number between 1 and 10" in shown(lab)
    assert "Traceback" not in lab.readout.value
    assert valkey_client.hgetall(key(name, "stats")) == before
    with pytest.raises(echoq.InvalidArgument, match="advance_ms"):
        fast_forward(lab.model.queue, -5)


# -- the reap lab -------------------------------------------------------------------------------


def test_a_job_that_keeps_stalling_lands_in_dead(name: str, valkey_client: redis.Redis) -> None:
    lab = ReapLab(name, client=valkey_client, live=False, animate=False)
    lab.model.workers = 1
    lab.model.lease_ms = 1_000
    lab.max_stalled_slider.value = 2  # the second stall is fatal
    lab.start_button.click()
    [job_id] = valkey_client.zrange(key(name, "active"), 0, -1)

    lab.fast_forward_button.click()  # 2 s earlier: the 1 s lease is at the server's now
    lab.step_button.click()
    assert valkey_client.zrange(key(name, "pending"), 0, -1) == [job_id]
    assert valkey_client.hget(key(name, "job:" + job_id), "stalled") == "1"
    assert f"back to {key(name, 'pending')}" in shown(lab)
    frame = lab.model.frame
    assert lab.figure.spots(frame, frame.server_now_ms())[job_id].label.endswith("st 1")

    lab.claim_again_button.click()
    lab.fast_forward_button.click()
    lab.step_button.click()
    assert valkey_client.zrange(key(name, "dead"), 0, -1) == [job_id]
    assert valkey_client.zcard(key(name, "pending")) == valkey_client.zcard(key(name, "active")) == 0
    assert f"into {key(name, 'dead')}" in shown(lab) and "max_stalled=2" in shown(lab)
    assert place_of_marker(lab, job_id) == "dead"
    assert lab.figure.arrows["dead"].get_linewidth() > lab.figure.arrows["reap"].get_linewidth()


def test_a_move_lights_every_path_it_took_and_a_probe_lights_none(name: str, valkey_client: redis.Redis) -> None:
    lab = ReapLab(name, client=valkey_client, live=False, animate=False)
    lab.model.open()
    frame, figure = lab.model.frame, lab.figure
    width = {n: a.get_linewidth() for n, a in figure.arrows.items()}
    figure.pose(frame, dataclasses.replace(frame, lit=Lit.moved("reap", "dead")), 0.5)
    lit = {n for n, a in figure.arrows.items() if a.get_linewidth() > width["claim"]}
    assert lit == {"reap", "dead"}
    moved_at = figure.pulse.get_offsets()[0].copy()
    figure.pose(frame, dataclasses.replace(frame, lit=Lit.probed("reap")), 0.5)
    assert all(a.get_linewidth() == width["claim"] for a in figure.arrows.values())
    assert figure.pulse.get_offsets()[0].tolist() != moved_at.tolist()  # a probe's pulse lags, then turns back
    lab.close()


@pytest.mark.parametrize(
    ("consumer", "deliveries", "said"),
    [
        ("keyed", 0, "deliveries must be a whole number between 1 and 10, got 0."),
        ("keyed", 11, "deliveries must be a whole number between 1 and 10, got 11."),
        ("magic", 3, "consumer must be 'keyed' or 'naive', got 'magic'."),
    ],
)
def test_a_bad_delivery_is_refused_in_the_readout_and_changes_nothing(
    name: str, valkey_client: redis.Redis, consumer: str, deliveries: int, said: str
) -> None:
    lab = DeliveryLab(name, client=valkey_client, live=False, animate=False)
    assert lab.model.deliver(consumer="naive", deliveries=2)
    before = (lab.model.consumer, lab.model.deliveries, lab.model.run, valkey_client.hgetall(key(name, "stats")))
    assert not lab.model.deliver(consumer=consumer, deliveries=deliveries)  # no traceback: the readout says
    assert shown(lab).endswith(f"deliver refused: {said} Nothing changed."), shown(lab)
    after = (lab.model.consumer, lab.model.deliveries, lab.model.run, valkey_client.hgetall(key(name, "stats")))
    assert after == before
    lab.close()


def test_racy_sweeps_deliver_twice_and_the_atomic_reap_does_not(name: str, valkey_client: redis.Redis) -> None:
    lab = ReapLab(name, client=valkey_client, live=False, animate=False)
    lab.race_button.click()
    racy, atomic = lab.model.race["two-step"], lab.model.race["atomic"]
    assert racy.duplicate_deliveries == 1 and racy.deliveries == 3
    assert atomic.duplicate_deliveries == 0 and atomic.deliveries == 2
    assert "3 deliveries, 1 duplicate" in shown(lab)
    assert "2 deliveries, 0 duplicate" in shown(lab)
    assert "two-step reapers: 3 deliveries" in lab.figure.race_text.get_text()


def test_expired_leases_never_stack_and_their_labels_stay_readable(name: str, valkey_client: redis.Redis) -> None:
    lab = ReapLab(name, client=valkey_client, live=False, animate=False)
    lab.model.workers = 8
    lab.model.lease_ms = 50
    lab.start_button.click()
    wait_for_server_time(valkey_client, lab.model.snapshot.now_ms + 8 * 50 + 1)
    lab.model.workers = 2
    lab.model.lease_ms = 1_000
    lab.start_button.click()  # two live leases beside eight expired ones
    frame = lab.model.frame
    spots = lab.figure.spots(frame, frame.server_now_ms())
    active = [s for j, s in spots.items() if j in frame.snapshot.active]
    assert (
        len(active)
        + (int(lab.figure.active.overflow.get_text()[1:].split()[0]) if lab.figure.active.overflow.get_text() else 0)
        == 10
    )
    assert len({(round(s.x, 4), round(s.y, 4)) for s in active}) == len(active)  # no two markers on one spot
    lab.figure.draw(frame)
    renderer = lab.figure.fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in lab.figure.labels if t.get_text()]
    assert len(boxes) >= len(active)
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), "two marker labels overlap"
    now_x = lab.figure.active.now_x
    expired = [j for j, d in frame.snapshot.active.items() if d <= frame.snapshot.now_ms]
    assert len(expired) == 8
    assert all(spots[j].x < now_x for j in expired if j in spots)  # expired: left of the server's now
    assert all(spots[j].x > now_x for j in frame.snapshot.active if j not in expired)


def test_fast_forward_pulls_live_deadlines_to_now_and_no_earlier(queue: echoq.Queue) -> None:
    queue.enqueue_many(["a", "b"])
    long, short_lease = queue.claim(lease_ms=60_000), queue.claim(lease_ms=5)
    wait_for_server_time(queue.client, short_lease.deadline_ms + 1)
    now, moved = fast_forward(queue, 10_000)
    assert moved == 1  # the expired lease is left alone
    assert queue.client.zscore(queue.keys.active, long.job_id) == pytest.approx(long.deadline_ms - 10_000)
    assert queue.client.zscore(queue.keys.active, short_lease.job_id) == short_lease.deadline_ms
    now, moved = fast_forward(queue)
    assert moved == 1 and queue.client.zscore(queue.keys.active, long.job_id) == now
    assert set(queue.reap()) == {long.job_id, short_lease.job_id}


# -- a server that goes away, and no I/O where there should be none --------------------------


def test_server_gone_disables_the_buttons_and_reconnect_works(name: str) -> None:
    server = start_server()
    try:
        lab = ClaimLab(name, url=server.url, live=False, animate=False)
        lab.enqueue_button.click()
        assert lab.model.connected
        server.stop()

        lab.claim_button.click()
        assert "Valkey went away" in shown(lab) and "press reconnect" in shown(lab)
        assert "Traceback" not in lab.readout.value
        assert server.password not in lab.readout.value
        assert all(control.disabled for control in lab.buttons)
        assert lab.claim_button.disabled and lab.crash_toggle.disabled
        assert not lab.reconnect_button.disabled

        lab.reconnect_button.click()  # still down: stays disconnected, says so
        assert not lab.model.connected and "Valkey went away" in shown(lab)

        server = start_server()  # Valkey is back (a fresh server, at a new port)
        lab.model.url = server.url
        lab.reconnect_button.click()
        assert lab.model.connected and "Connected to Valkey" in shown(lab)
        assert server.password not in lab.readout.value and "***" in lab.readout.value
        assert not any(control.disabled for control in lab.buttons)
        lab.enqueue_button.click()  # the restarted server kept no data: one job, the new one
        assert lab.model.snapshot.counts["pending"] == 1
        assert "enqueue.lua added" in shown(lab)
    finally:
        server.stop()


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p.__name__)
def test_constructors_and_settings_do_no_io(panel: type[LabPanel], name: str) -> None:
    """A panel is built, and its settings changed, without a word to the server: the
    server here does not even exist. Moves (and showing the panel) connect."""
    server = start_server()
    url = server.url
    server.stop()
    lab = panel(name, url=url, live=False)
    model = lab.model
    for setting in model.settings:
        value = getattr(model, setting)
        setattr(model, setting, value if isinstance(value, str) else value + 1)
    assert not model.opened and not model.connected and model.queue is None
    assert len(model.history) == 0 and "Not connected yet" in model.readout
    lab.close()


@pytest.mark.server
def test_models_import_no_widget_or_plot_library() -> None:
    probe = (
        "import sys\n"
        "import echoq.teaching.lab.claim.model, echoq.teaching.lab.delivery.model\n"
        "import echoq.teaching.lab.reap.model, echoq.teaching.lab.fleet.model, echoq.teaching.lab.race.model\n"
        "bad = [m for m in ('ipywidgets', 'matplotlib', 'ipympl', 'IPython') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


# -- the fleet lab ------------------------------------------------------------------------------


def test_killing_a_worker_mid_job_loses_nothing_and_duplicates_no_effect(name: str, valkey_client: redis.Redis) -> None:
    lab = FleetLab(name, client=valkey_client, live=False, animate=False)
    model = lab.model
    try:
        model.job_ms = 1_000  # the lab's default pace: a kill lands mid-job with time to spare
        model.lease_ms = 1_000
        model.beat_ms = 100
        lab.start_button.click()
        model.add_jobs(5)
        victim = model.fleet[0].worker
        give_up = time.monotonic() + 5
        while not victim.in_flight and time.monotonic() < give_up:
            time.sleep(0.002)
        lab.kill_buttons[0].click()
        killed_job = model.fleet[0].killed_job
        assert killed_job is not None and f"{short(killed_job)} (token 1) stays leased" in shown(lab)
        assert place_of_marker(lab, killed_job) == "active"

        give_up = time.monotonic() + 20
        while valkey_client.zcard(key(name, "done")) < 5 and time.monotonic() < give_up:
            time.sleep(0.05)
        model.sample()
        assert killed_job in valkey_client.zrange(key(name, "done"), 0, -1)
        stats = valkey_client.hgetall(key(name, "stats"))
        # The killed worker's job came back through a beat: as a stall, or as unstarted when the
        # kill landed before its start was confirmed to the server.
        assert int(stats.get("stalled", 0)) + int(stats.get("unstarted", 0)) >= 1
        assert int(stats["claimed"]) > 5
        effects = valkey_client.hgetall(key(name, "effects"))
        assert len(effects) == 5 and set(effects.values()) == {"1"}
        assert "Lost: 0. Duplicate effects: 0." in shown(lab)
        assert model.fleet[0].state == "killed"
        assert lab.figure.verdict_big.get_text() == "lost 0 · duplicate effects 0"

        lab.restart_buttons[0].click()
        assert model.fleet[0].state == "working"
        assert "restarted worker 1" in shown(lab)
        lab.stop_button.click()
        assert "stopped all 3 running worker(s)" in shown(lab) and "0 of 3 workers alive" in shown(lab)
    finally:
        lab.close()
    assert all(not entry.thread.is_alive() for entry in model.fleet)


def _hold_jobs(model: FleetModel, slots: list[int]) -> None:
    give_up = time.monotonic() + 10
    while not all(model.fleet[s - 1].worker.in_flight for s in slots) and time.monotonic() < give_up:
        time.sleep(0.005)  # polling the workers' hands, bounded by the deadline
    assert all(model.fleet[s - 1].worker.in_flight for s in slots)


def test_each_run_of_the_fleet_counts_its_own_losses(name: str, valkey_client: redis.Redis) -> None:
    """A naive run that truly lost 2 jobs, then a reliable run: the reliable run shows
    lost 0 (the naive run's popped jobs left on that run's path), and a second naive run
    starts from 0 too; the readout and the verdict say the same number."""
    lab = FleetLab(name, client=valkey_client, live=False, animate=False, workers=2)
    model = lab.model
    try:
        model.path, model.job_ms = "naive", 5_000  # a kill lands mid-job with time to spare
        model.add_jobs(6)
        model.start(2)
        _hold_jobs(model, [1, 2])
        model.kill(1)
        model.kill(2)
        assert _shown_lost(model) == 2 and lab.figure.verdict_big.get_text().startswith("lost 2 ")
        model.stop_all()
        assert "no worker was running" in model.readout

        model.path, model.job_ms = "reliable", 200
        model.start(2)
        assert _shown_lost(model) == 0 and lab.figure.verdict_big.get_text() == "lost 0 · duplicate effects 0"
        assert "This run: enqueued 0, completed 0." in model.readout
        model.add_jobs(2)
        give_up = time.monotonic() + 20
        while valkey_client.zcard(key(name, "pending")) + valkey_client.zcard(key(name, "active")) and (
            time.monotonic() < give_up
        ):
            time.sleep(0.02)
        model.stop_all()
        assert _shown_lost(model) == 0 and "completed 6." in model.readout  # the 4 left + the 2 added

        model.path = "naive"
        model.start(2)
        assert _shown_lost(model) == 0 and "This run: enqueued 0, popped 0." in model.readout
    finally:
        lab.close()


def test_a_kill_after_the_lease_ran_out_says_the_job_is_past_its_deadline(name: str, valkey_client) -> None:
    lab = FleetLab(name, client=valkey_client, live=False, animate=False, workers=1)
    model = lab.model
    try:
        model.job_ms, model.lease_ms = 5_000, 60_000  # the worker extends its lease only every 20 s or so
        model.add_jobs(1)
        model.start(1)
        _hold_jobs(model, [1])
        _now, moved = fast_forward(model.queue)  # the lease's deadline pulled to the server's now
        assert moved == 1
        model.kill(1)
        text = shown(lab)
        assert "stays leased" not in text and "past its lease deadline" in text, text
        [(job_id, deadline)] = model.frame.snapshot.active.items()
        assert deadline <= model.frame.snapshot.now_ms and short(job_id) in text
    finally:
        lab.close()


def test_the_path_toggle_says_it_waits_for_start_in_every_frame(name: str, valkey_client: redis.Redis) -> None:
    lab = FleetLab(name, client=valkey_client, live=False, animate=False)
    model = lab.model
    try:
        model.job_ms = 200
        model.start(3)
        lab.path_picker.value = "naive"
        assert "still runs reliable: press 'start' to switch" in shown(lab)
        model.sample()  # the browser's clock, a moment later: the note stays
        assert "still runs reliable: press 'start' to switch" in shown(lab)
        assert "reliable" in lab.figure.title.get_text()  # the picture shows the path that runs
        model.start(3)
        assert "still runs" not in shown(lab) and "naive" in lab.figure.title.get_text()
    finally:
        lab.close()


def test_stop_all_counts_only_the_workers_that_were_running(name: str, valkey_client: redis.Redis) -> None:
    lab = FleetLab(name, client=valkey_client, live=False, animate=False)
    try:
        lab.model.job_ms = 200
        lab.start_button.click()
        lab.kill_buttons[1].click()
        lab.stop_button.click()
        assert "stopped the 2 running worker(s) of 3 and the producer" in shown(lab)
    finally:
        lab.close()


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p.__name__)
def test_during_a_move_the_picture_shows_the_frame_the_readout_shows(panel, name: str, valkey_client) -> None:
    """Every animation frame published writes the counts, workers and verdict of the very
    frame whose words the readout shows at that moment (never one frame's numbers beside
    another's words)."""
    lab = panel(name, client=valkey_client, live=False)
    figure = lab.figure

    def marks() -> list[str]:
        return [t.get_text() for t in figure.marks if hasattr(t, "get_text")]

    published: list[tuple[str, list[str]]] = []
    publish = lab.player._publish
    lab.player._publish = lambda frame: (published.append((lab.readout.value, marks())), publish(frame))
    try:
        model = lab.model
        model.open()
        lab.settle()
        if isinstance(lab, FleetLab):
            model.job_ms = 5_000
            model.add_jobs(4)
            model.start(2)
            lab.settle()
            _hold_jobs(model, [1])
            lab.kill_buttons[0].click()
        elif isinstance(lab, ClaimLab):
            lab.enqueue_button.click()
            lab.settle()
            lab.claim_button.click()
        elif isinstance(lab, DeliveryLab):
            lab.deliveries_slider.value = 2
            lab.deliver_button.click()
        else:
            lab.start_button.click()
        assert lab.settle()
        frames = model.history.all()
        with figure.lock:
            at_rest = {}
            for frame in frames:
                figure.pose(None, frame)
                at_rest[frame.index] = (html.escape(frame.readout), marks())
        # A move was animated, and each one played every frame it planned unless a newer move cut it
        # short: 18 frames, or at least 6 where a loaded machine made the player shorten a move to
        # stay within a second of the server. Every frame drawn was published.
        moves = [t for t in lab.player.transitions if not t.still]
        shown = [(t.frames, t.steps, t.cut) for t in moves]
        assert moves and all(t.cut or t.frames == t.steps for t in moves), shown
        assert max(t.frames for t in moves) >= 6, shown
        assert len(published) >= sum(t.frames for t in lab.player.transitions)
        for readout, drawn in published:
            told = [i for i, (words_, _m) in at_rest.items() if words_ in readout]
            assert told, readout
            assert drawn == at_rest[told[-1]][1], (readout, drawn)
        if isinstance(lab, FleetLab):
            assert "✕ w1  killed" in figure.workers.get_text()
    finally:
        lab.close()


def _shown_lost(model: FleetModel) -> int:
    found = re.search(r"Lost: (\d+)\.", model.readout)
    assert found, model.readout
    return int(found.group(1))


def _kill_mid_job(model: FleetModel, slot: int) -> None:
    """Kill worker ``slot`` while it holds a job (waiting a moment for one, on the lab's pace)."""
    entry = model.fleet[slot - 1]
    give_up = time.monotonic() + 0.5
    while not entry.worker.in_flight and time.monotonic() < give_up:
        time.sleep(0.005)
    model.kill(slot)


def test_the_fleet_never_shows_a_loss_that_did_not_happen(valkey_client: redis.Redis) -> None:
    """The truth test: a producer and kills for 10 s, the readout sampled 100 times. The
    reliable fleet shows lost 0 in every sample; the naive fleet's shown loss equals the
    final audit (counted from the ledger and the sets, not from the lab's counter)."""
    fleets = {path: FleetModel(fresh_name(f"truth-{path}"), client=valkey_client) for path in ("reliable", "naive")}
    try:
        for path, model in fleets.items():
            model.path, model.job_ms, model.rate, model.lease_ms, model.beat_ms = path, 120, 8, 600, 100
            assert model.start(3)
        shown_lost: dict[str, list[int]] = {path: [] for path in fleets}
        started = time.monotonic()
        for n in range(100):
            wake = started + (n + 1) * 0.1
            while time.monotonic() < wake:
                time.sleep(0.01)  # the sampling pace of the test, not a synchronisation
            for path, model in fleets.items():
                if n % 3 == 1:
                    slot = 1 + (n // 3) % 3
                    if model.fleet[slot - 1].state == "working":
                        _kill_mid_job(model, slot)
                    else:
                        model.restart(slot)
                assert model.sample()
                shown_lost[path].append(_shown_lost(model))
        assert time.monotonic() - started >= 10
        assert len(shown_lost["reliable"]) == 100 and set(shown_lost["reliable"]) == {0}

        # Settle: no new jobs; restart every dead worker; wait until nothing waits or runs.
        for model in fleets.values():
            model.rate = 0
            for entry in model.fleet:
                if entry.state != "working":
                    model.restart(entry.slot)
        for model in fleets.values():
            give_up = time.monotonic() + 30
            while time.monotonic() < give_up:
                model.sample()
                c = model.snapshot.counts
                if c["pending"] + c["active"] + c["scheduled"] == 0:
                    break
                time.sleep(0.05)
            model.stop_all()
            model.sample()

        reliable, naive = fleets["reliable"], fleets["naive"]
        r_stats = valkey_client.hgetall(reliable.keys("stats"))
        r_effects = valkey_client.hgetall(reliable.keys("effects"))
        completed, dead = int(r_stats["completed"]), valkey_client.zcard(reliable.keys("dead"))
        assert int(r_stats["enqueued"]) == completed + dead  # every job ended somewhere
        # every completed job's effect ran once; a dead-lettered one's may have run before its kill
        assert completed <= len(r_effects) <= completed + dead and set(r_effects.values()) == {"1"}
        # the kills did strand jobs, and they came back (started or not before the kill)
        assert int(r_stats.get("stalled", 0)) + int(r_stats.get("unstarted", 0)) > 0
        assert _shown_lost(reliable) == 0

        n_stats = valkey_client.hgetall(naive.keys("stats"))
        audit = (
            int(n_stats["enqueued"])
            - valkey_client.zcard(naive.keys("pending"))
            - valkey_client.zcard(naive.keys("scheduled"))
            - valkey_client.zcard(naive.keys("dead"))
            - valkey_client.hlen(naive.keys("effects"))
        )
        assert audit > 0, "the kills landed mid-job: the naive fleet lost jobs"
        assert _shown_lost(naive) == audit == int(n_stats[LOST_FIELD])
        assert shown_lost["naive"] == sorted(shown_lost["naive"])  # it only grows, kill by kill
        assert max(shown_lost["naive"]) <= audit
    finally:
        for model in fleets.values():
            model.shutdown()
            model.queue.reset()


# -- animation and time control ------------------------------------------------------------------


def _frames_during(lab: LabPanel, click) -> tuple[list[str], object]:
    """Click, and collect every distinct picture published until the animation is over."""
    pictures: list[str] = []
    lab.canvas.observe(lambda change: pictures.append(hashlib.sha1(change["new"].encode()).hexdigest()), "value")
    lab.settle()
    count = len(lab.player.transitions)
    click()
    assert lab.settle()
    return pictures, lab.player.transitions[count:]


# Each kind of move on each panel: a marker appears, a marker travels set to set, a script
# runs and moves nothing (a probe). bench/lab_latency.py plays every move and reports its frames.
MOVES = {
    "ClaimLab": ["enqueue_button", "claim_button", "reap_button"],
    "DeliveryLab": ["fence_button", "deliver_button"],
    "ReapLab": ["start_button", "step_button"],
    "FleetLab": ["add_button", "start_button", "stop_button"],
}


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p.__name__)
def test_moves_animate_tokens_from_set_to_set(panel: type[LabPanel], name: str, valkey_client) -> None:
    lab = panel(name, client=valkey_client, live=False)
    lab.model.open()
    lab.speed_picker.value = 2.0  # the same frames, twice as fast: a quicker test
    if isinstance(lab, DeliveryLab):
        lab.deliveries_slider.value = 1
    try:
        for attr in MOVES[panel.__name__]:
            control = getattr(lab, attr)
            control = control[0] if isinstance(control, list) else control
            pictures, transitions = _frames_during(lab, control.click)
            transitions = [t for t in transitions if not t.still]
            assert transitions, f"{attr}: no animation"
            assert not transitions[-1].cut, f"{attr}: the last move was cut short"
            for t in transitions:
                if t.cut:  # a newer frame came while it played: the picture went on to that one
                    continue
                if t.steps < lab.figure.steps:  # a catch-up, shortened to keep within the second
                    assert t.frames >= 6, f"{attr}: {t.frames} frames"
                    continue
                assert t.frames >= 10, f"{attr}: {t.frames} frames"
                assert t.seconds >= lab.figure.transition_s / 2 * 0.9, f"{attr}: {t.seconds:.2f} s"
            assert len(set(pictures)) >= 10, f"{attr}: only {len(set(pictures))} distinct pictures"
        # the schedule (what a quiet machine shows): figure.steps frames over figure.transition_s at speed 1
        assert lab.figure.steps >= 10 and 0.3 <= lab.figure.transition_s <= 1.0
    finally:
        lab.close()
        if isinstance(lab, FleetLab):
            lab.model.shutdown()


def test_after_a_burst_from_code_the_picture_shows_the_servers_present(name: str, valkey_client) -> None:
    """Lesson 03's cell: ten deliveries driven from code, far faster than the picture can
    animate them. The picture jumps to the newest frame instead of replaying them one by
    one: every move that starts after the burst goes to the newest frame, and what is drawn
    then is what the server holds."""
    lab = DeliveryLab(name, client=valkey_client, live=False)
    lab.model.open()
    try:
        lab.settle()
        known = len(lab.player.transitions)
        lab.model.deliver(consumer="naive", deliveries=5)
        lab.model.deliver(consumer="keyed", deliveries=5)
        newest = lab.model.history.last_index
        assert newest - lab.model.history.first_index >= 20  # every step is on the timeline
        assert lab.settle()  # a bound against a hang: no figure about time
        after = [t for t in lab.player.transitions[known:] if t.started >= lab.model.frame.at_s]
        assert all(t.to_index == newest for t in after), [t.to_index for t in after]
        assert sum(t.skipped for t in lab.player.transitions[known:]) > 0  # it jumped
        snap = echoq.Queue(name, valkey_client).snapshot()
        [job] = snap.done
        assert lab.player.cursor == newest and lab.model.frame.snapshot.effects == snap.effects
        assert f"→ {snap.effects[job]} effect(s)" in lab.figure.ledger.get_text()  # 1, not 5
        text = shown(lab)
        assert lab.model.frame.readout in text
        # The note on what was skipped rides the frame right after the jump; a frame the
        # player animated after that (a loaded machine paces the two bursts differently) has
        # its own words, and replay is still offered.
        jumped = lab.player.jumped
        if jumped is not None and lab.model.frame.index == jumped[1] + 1:
            assert "press replay" in text
        assert not lab.replay_button.disabled
    finally:
        lab.close()


def test_the_fleet_s_picture_and_readout_follow_the_server_within_a_second_while_it_animates(
    name: str, valkey_client
) -> None:
    """Workers running and a sample every tick (the browser's clock) while the picture
    animates: every move goes to the newest frame recorded when it began, and is planned to
    end by ``AIM_S`` after that frame's recording (or, already later, within ``MIN_MOVE_S``),
    the readout turning to it half way. The plan is what the player decides, so load cannot
    fail this; what a loaded machine makes of the plan is bench/lab_latency.py's figure."""
    from echoq.teaching.lab.player import AIM_S, LAG_S, MIN_MOVE_S

    lab = FleetLab(name, client=valkey_client, live=False)
    told: list[tuple[int, float]] = []
    shown_by_player = lab.player._shown

    def spy(frame, settled=True):  # type: ignore[no-untyped-def]
        told.append((frame.index, time.monotonic()))
        shown_by_player(frame, settled)

    lab.player._shown = spy
    model = lab.model
    model.open()
    try:
        lab.settle()
        known = len(lab.player.transitions)
        model.job_ms = 300
        assert model.start(3) and model.add_jobs(20)
        until = time.monotonic() + 3.0
        while time.monotonic() < until:
            model.sample()  # what the browser's clock does, every tick
            time.sleep(lab.tick_ms / 1000)  # the tick's pace, not a synchronisation
        model.stop_all()
        assert lab.settle()  # a bound against a hang: no figure about time
        frames = {f.index: f for f in model.history.all()}
        moves = [t for t in lab.player.transitions[known:] if not t.still]
        assert len(moves) >= 3 and told
        for t in moves:
            newest = max(i for i, f in frames.items() if f.at_s <= t.started)
            assert t.to_index >= newest, (t.to_index, newest)  # to the present, never through the backlog
            planned_end = t.started + (t.steps - 1) * t.period
            bound = max(frames[t.to_index].at_s + AIM_S, t.started + MIN_MOVE_S) + (t.first - t.started)
            assert planned_end <= bound + 1e-3, (t.to_index, planned_end - frames[t.to_index].at_s)
        assert AIM_S + MIN_MOVE_S / 2 <= LAG_S  # the plan leaves room for drawing late
        assert {i for i, _ in told} >= {t.to_index for t in moves}  # the readout told every frame moved to
    finally:
        lab.player._shown = shown_by_player
        model.stop_all()
        lab.close()
        model.shutdown()


def test_replay_plays_the_moves_the_picture_jumped_over_then_follows_again(name: str, valkey_client) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.model.open()
    lab.speed_picker.value = 2.0
    try:
        lab.settle()
        for _ in range(4):
            lab.model.enqueue()
        assert lab.settle()
        first, last = lab.player.jumped
        known = len(lab.player.transitions)
        lab.replay_button.click()
        assert not lab.player.following and all(c.disabled for c in lab.buttons)  # the past: read-only
        assert lab.settle() and lab.player.following and lab.player.jumped is None
        played = [t.to_index for t in lab.player.transitions[known:]]
        assert played == list(range(first, last + 2)), played  # each jumped move, in order, then the landing
        assert lab.player.cursor == lab.model.history.last_index and "live" in shown(lab)
        assert not any(c.disabled for c in lab.buttons)
    finally:
        lab.close()


def test_a_token_travels_between_its_places(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)
    lab.enqueue_button.click()
    lab.claim_button.click()
    history = lab.model.history
    a, b = history.get(history.last_index - 1), history.latest()
    [job_id] = b.snapshot.active
    start = lab.figure.spots(a, a.server_now_ms())[job_id]
    end = lab.figure.spots(b, b.server_now_ms())[job_id]
    xs = []
    for k in range(1, 12):
        lab.figure.pose(a, b, k / 11)
        offsets = [o for s in lab.figure.scatters.values() for o in s.get_offsets() if o[0] == o[0]]
        xs.append(min(offsets, key=lambda o: abs(o[1] - (start.y + (end.y - start.y) * 0.5)))[0])
    assert start.style == "pending" and end.style == "active"
    assert xs == sorted(xs) and xs[-1] > xs[0]  # it crosses from pending (left) to active (right)


def test_scrubbing_back_shows_the_recorded_moment_read_only(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False, animate=False)
    lab.enqueue_button.click()
    enqueued = lab.model.frame
    lab.claim_button.click()
    lab.crash_toggle.value = True
    lab.complete_button.click()
    assert lab.timeline.max == lab.model.history.last_index

    lab.timeline.set_state({"value": enqueued.index})  # as the browser sends a drag of the slider
    text = shown(lab)
    assert enqueued.readout in text and "read-only" in text
    assert all(control.disabled for control in lab.buttons)  # the past cannot be changed
    assert "crash mid-job off" in lab.figure.title.get_text()  # the title of that moment
    lab.enqueue_button.click()  # a click that reached a disabled button anyway changes nothing
    assert lab.model.history.last_index == lab.timeline.max

    lab.live_button.click()
    assert "live" in shown(lab) and lab.model.frame.readout in shown(lab)
    assert not any(control.disabled for control in lab.buttons)
    assert "crash mid-job ON" in lab.figure.title.get_text()


def test_pause_holds_the_picture_and_step_moves_one_frame(name: str, valkey_client: redis.Redis) -> None:
    lab = ReapLab(name, client=valkey_client, live=False)
    lab.model.open()
    lab.settle()
    lab.pause_button.click()
    at = lab.player.cursor
    assert "paused" in shown(lab)
    lab.model.start_workers()  # recorded (two frames), not shown: the picture is held
    lab.settle()
    assert lab.player.cursor == at and "2 newer frames recorded" in shown(lab)
    lab.advance_button.click()
    lab.settle()
    assert lab.player.cursor == at + 1 and lab.model.history.get(at + 1).readout in shown(lab)
    lab.live_button.click()
    lab.settle()
    assert lab.player.cursor == lab.model.history.last_index
    lab.speed_picker.value = 0.5
    assert lab.player.speed == 0.5


# -- clean states, every button, the words ----------------------------------------------------------


def _press_everything(lab: LabPanel) -> list[str]:
    """Click every button of a panel once; return the names whose click left the readout unchanged."""
    silent = []
    buttons = [w for w in _walk(lab) if w.__class__.__name__ == "Button"]
    order = sorted(buttons, key=lambda b: b.description in ("pause", "step", "reset", "reconnect", "live"))
    for button in order:
        assert lab.settle(), f"the picture did not catch up before {button.description!r}"
        before = lab.readout.value
        button.click()
        assert lab.settle(), f"the picture did not catch up after {button.description!r}"
        if lab.readout.value == before:
            silent.append(button.description)
        if button.description in ("pause", "step"):
            lab.live_button.click()
    return silent


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p.__name__)
def test_every_button_updates_the_readout(panel: type[LabPanel], name: str, valkey_client) -> None:
    lab = panel(name, client=valkey_client, live=False, animate=False)
    try:
        if isinstance(lab, FleetLab):
            lab.model.job_ms = 200
        assert _press_everything(lab) == []
    finally:
        lab.close()


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p.__name__)
def test_title_readout_figure_and_controls_agree(panel: type[LabPanel], name: str, valkey_client) -> None:
    lab = panel(name, client=valkey_client, live=False, animate=False)
    try:
        lab.model.open()
        for setting in lab.model.settings:
            value = getattr(lab.model, setting)
            if isinstance(value, bool):
                setattr(lab.model, setting, not value)
        if isinstance(lab, ReapLab):
            lab.max_stalled_slider.value = 3
            lab.start_button.click()
        frame = lab.model.frame
        lab.settle()
        assert frame.readout in shown(lab)  # the readout is the frame's
        snap = frame.snapshot
        for place in ("pending", "active", "done", "dead"):
            drawn = getattr(lab.figure, place, None)
            if drawn is not None:
                assert drawn.count.get_text() == words.count(snap.counts[place])
        if isinstance(lab, ReapLab):
            assert "max_stalled = 3" in lab.figure.title.get_text() and lab.model.max_stalled == 3
        if isinstance(lab, ClaimLab):
            assert "crash mid-job ON" in lab.figure.title.get_text() and lab.crash_toggle.value
    finally:
        lab.close()


def test_the_lessons_leave_every_lab_clean_after_run_all(valkey_client: redis.Redis, monkeypatch) -> None:
    """Run the cells of lessons 02-05 that build or drive a lab, in order (as Run All does),
    then look at each lab: no setting left on, no job left mid-move, workers stopped, and the
    readout, title and figure telling one story."""
    # As in a kernel under nbval: %matplotlib widget, and no browser view to draw for.
    monkeypatch.setattr("echoq.teaching.lab.view.ipympl_active", lambda: True)
    labs: dict[str, LabPanel] = {}
    for path in sorted((ROOT / "notebooks").glob("0[2-5]_*.ipynb")):
        cells = [c["source"] for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        setup = "\n".join(line for line in "".join(cells[0]).splitlines() if not line.startswith("%"))
        namespace: dict[str, object] = {}
        exec(compile(setup, f"{path.name}[setup]", "exec"), namespace)  # noqa: S102
        for source in cells[1:]:
            code = "".join(source)
            if (
                "Lab(" in code
                or "lab.model" in code
                or "fleet.model" in code
                or "m = fleet" in code
                or re.search(r"^(?:assert )?m\.", code, re.M)
            ):
                if "exercises." in code or "run_chaos" in code:
                    continue
                tree = ast.parse(code)
                exec(compile(tree, f"{path.name}[lab]", "exec"), namespace)  # noqa: S102
        for value in namespace.values():
            if isinstance(value, LabPanel):
                labs[path.name] = value
    assert len(labs) == 4, sorted(labs)
    for lesson, lab in labs.items():
        lab.settle()
        assert lab.live and lab.figure.frames_drawn == 0  # nothing was drawn for nobody
        lab.figure.pose(None, lab.model.frame)  # what the picture would show: its title, counts
        model = lab.model
        frame = model.frame
        assert frame is not None and frame.readout == model.readout and model.readout in shown(lab), lesson
        assert not getattr(model, "crash", False), f"{lesson}: crash left on"
        if isinstance(lab, ClaimLab):
            assert frame.snapshot.counts["active"] == 0 or model.held is not None, (
                f"{lesson}: an unclaimed job in active"
            )
        if isinstance(lab, ReapLab):
            assert f"max_stalled = {model.max_stalled}" in lab.figure.title.get_text(), lesson
        if isinstance(lab, FleetLab):
            assert not model.running, f"{lesson}: workers left running"
            assert "0 of" in model.readout or not model.fleet, lesson
    for lab in labs.values():
        lab.close()
        lab.model.queue.reset()


# -- accessibility ------------------------------------------------------------------------------


def test_the_palette_stays_apart_for_colour_blind_eyes_and_every_place_has_its_own_shape() -> None:
    places = ["pending", "active", "done", "dead", "scheduled"]
    for vision in ("protanopia", "deuteranopia", "tritanopia"):
        for a, b in itertools.combinations(places, 2):
            distance = style.delta_e(
                style.simulate(style.PLACES[a].colour, vision), style.simulate(style.PLACES[b].colour, vision)
            )
            assert distance >= 15, f"{a} and {b} look alike with {vision} (ΔE {distance:.1f})"
    markers = [style.PLACES[p].marker for p in style.PLACES]
    assert len(set(markers)) == len(markers)


def test_text_colours_reach_4_5_to_1_in_light_and_dark_themes() -> None:
    # The readout's pills carry their own background: the same pair in either theme.
    for kind, (fg, bg) in style.FEEDBACK.items():
        assert style.contrast(fg, bg) >= 4.5, kind
    # Figure text sits on the figure's own white paper (the canvas is an image).
    for colour in (style.INK, style.MUTED, style.FEEDBACK["bad"][1]):
        assert style.contrast(colour, style.PAPER) >= 4.5


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p.__name__)
def test_text_is_10_pt_or_more_and_the_readout_is_a_live_region(
    panel: type[LabPanel], name: str, valkey_client
) -> None:
    lab = panel(name, client=valkey_client, live=False, animate=False)
    try:
        lab.model.open()
        lab.settle()
        texts = [t for t in lab.figure.fig.findobj(matplotlib.text.Text) if t.get_text()]
        assert texts and min(t.get_fontsize() for t in texts) >= 10
        assert 'role="status"' in lab.readout.value and 'aria-live="polite"' in lab.readout.value
        assert re.search(r'<img [^>]*alt="[^"]{20,}"', lab.canvas.value)  # the still picture has alt text
        assert all(b.description for b in _walk(lab) if b.__class__.__name__ == "Button")  # names for the keyboard
    finally:
        lab.close()


# -- the static fallback, and no idle cost ----------------------------------------------------------


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p.__name__)
def test_a_panel_carries_its_picture_and_readout_for_readers_without_a_kernel(panel, name: str, valkey_client) -> None:
    lab = panel(name, client=valkey_client, live=False, animate=False)
    try:
        lab.model.open()
        bundle = lab._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        png = base64.b64decode(bundle["image/png"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        from PIL import Image

        assert Image.open(io.BytesIO(png)).size == (int(lab.figure.fig.bbox.width), int(lab.figure.fig.bbox.height))
        assert lab.model.readout in bundle["text/plain"] and not bundle["text/plain"].startswith(panel.__name__)
        assert re.search(r'<img src="data:image/png;base64,[^"]+" alt="[^"]{20,}"', bundle["text/html"])
        assert "readout" in bundle["text/html"]
    finally:
        lab.close()


@pytest.mark.server
def test_a_saved_notebook_shows_each_labs_last_state(tmp_path: Path) -> None:
    """Executed like Run All (nbclient), a lab displayed in one cell and driven in the next is
    stored with the LAST state's picture and readout, not the first, nor a widget repr."""
    import nbformat
    from nbclient import NotebookClient

    queue_name = fresh_name("nb-lab")
    cells = [
        "%matplotlib widget\nfrom echoq.teaching.lab import ClaimLab",
        f"lab = ClaimLab({queue_name!r})\nlab",
        "lab.model.enqueue(), lab.model.enqueue()",
        "lab.model.reset()\nlab.model.enqueue()",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    [output] = nb.cells[1].outputs
    data = output["data"]
    assert "image/png" in data and "text/html" in data
    assert "enqueue.lua added" in data["text/plain"] and "holds 1" in data["text/plain"]
    assert "ClaimLab(" not in data["text/plain"]
    echoq.Queue(queue_name).reset()


def test_an_idle_panel_runs_nothing(name: str, valkey_client: redis.Redis) -> None:
    before = {t.name for t in threading.enumerate()}
    labs = [p(f"{name}-{i}", client=valkey_client, live=False) for i, p in enumerate(PANELS)]
    for lab in labs:
        lab.model.open()
    for lab in labs:
        lab.settle()
    lab_threads = [t.name for t in threading.enumerate() if t.name not in before and t.name.startswith("echoq")]
    assert lab_threads == []  # no clock, no animation, no worker: nothing runs until a click
    for lab in labs:
        assert not lab._ticker.playing or lab.figure.time_dependent(lab.model.frame)
        lab.close()
        lab.model.queue.reset()


@pytest.mark.parametrize("panel", [ClaimLab, DeliveryLab, ReapLab])
def test_a_live_panel_waits_for_its_browser_view_before_drawing(panel, name: str) -> None:
    """An ipympl canvas with no browser view draws nothing (under nbval there never is one)."""
    pytest.importorskip("ipympl")
    lab = panel(name, live=True)
    drawn = lab.figure.frames_drawn
    lab.model.reset()
    lab.settle()
    assert lab.canvas.syncing_data_url and lab.canvas._data_url is None
    assert lab.figure.frames_drawn == drawn and not lab.player.transitions
    lab.close()


@pytest.mark.parametrize("notebook", ["present.ipynb", "02_", "03_", "04_", "05_"])
def test_committed_labs_show_their_picture_and_readout(notebook: str) -> None:
    """present.ipynb and the lessons, as committed, read without a kernel: each lab is a picture
    with alt text and its readout, not a widget repr (GitHub and nbviewer cannot run widgets)."""
    (path,) = (
        sorted((ROOT / "notebooks").glob(f"{notebook}*.ipynb"))
        if notebook.endswith("_")
        else [ROOT / "notebooks" / notebook]
    )
    nb = json.loads(path.read_text())
    shown_labs = [
        output["data"]
        for cell in nb["cells"]
        if cell["cell_type"] == "code" and (notebook == "present.ipynb" or "Lab(" in "".join(cell["source"]))
        for output in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in output.get("data", {})
    ]
    lab_cells = sum(1 for c in nb["cells"] if c["cell_type"] == "code" and "Lab(" in "".join(c["source"]))
    assert shown_labs and len(shown_labs) == (4 if notebook == "present.ipynb" else lab_cells), path.name
    for data in shown_labs:
        assert base64.b64decode(data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
        html_text = "".join(data["text/html"])
        assert re.search(r'<img src="data:image/png;base64,[^"]+" alt="[^"]{20,}"', html_text)
        assert "A still picture of this lab" in html_text  # a reader never takes it for the live lab
        plain = "".join(data["text/plain"])
        assert "readout: " in plain and "Lab(children" not in plain
    assert "widgets" not in nb["metadata"]  # the state is stripped: the pictures stand alone


@pytest.mark.parametrize("password", ["s3cret", "s3cret#frag", "s3/cret"])
def test_a_readout_never_shows_the_urls_password(name: str, password: str) -> None:
    """A panel that cannot reach its server says so without the URL (it holds the password)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    lab = ClaimLab(name, url=f"redis://:{password}@127.0.0.1:{port}/0", live=False)
    lab.reconnect_button.click()
    text = shown(lab)
    assert not lab.model.connected and "cannot reach" in text, text
    assert "cret" not in text and "***" in text, text
