"""The lab panels, driven headlessly against the real embedded Valkey.

Each test sets widget values and clicks buttons through their handlers, then checks the
keys on the server AND the words in the readout.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import matplotlib
import pytest
import redis

matplotlib.use("Agg")

import echoq  # noqa: E402
from echoq import scripts  # noqa: E402
from echoq.errors import InvalidArgument  # noqa: E402
from echoq.server import start_server  # noqa: E402
from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, ReapLab, fast_forward  # noqa: E402
from echoq.teaching.lab.model import short  # noqa: E402
from tests.conftest import fresh_name  # noqa: E402
from tests.helpers import wait_for_server_time  # noqa: E402


@pytest.fixture
def name(valkey_client: redis.Redis) -> Iterator[str]:
    queue_name = fresh_name("lab")
    yield queue_name
    for suffix in ("", "-fence", "-racy", "-atomic"):
        echoq.Queue(queue_name + suffix, valkey_client).reset()


def key(name: str, part: str) -> str:
    return f"emq:{{{name}}}:{part}"


# -- the claim lab ------------------------------------------------------------------------------


def test_crash_toggle_leaves_the_job_leased_in_active(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.enqueue_button.click()
    lab.claim_button.click()
    [job_id] = valkey_client.zrange(key(name, "active"), 0, -1)
    lab.crash_toggle.value = True
    lab.finish_button.click()

    assert valkey_client.zrange(key(name, "active"), 0, -1) == [job_id]
    assert valkey_client.zcard(key(name, "pending")) == 0
    assert valkey_client.hget(key(name, "job:" + job_id), "state") == "active"
    assert f"stays leased in {key(name, 'active')}" in lab.readout.value
    assert lab.model.step == "crash" and lab.model.held is None


def test_finish_without_crash_retires_the_job(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.enqueue_button.click()
    lab.claim_button.click()
    lab.finish_button.click()

    assert valkey_client.zcard(key(name, "active")) == 0
    assert valkey_client.zcard(key(name, "done")) == 1
    assert "complete.lua (attempt 1)" in lab.readout.value


def test_reap_after_the_lease_expires_returns_the_job_to_pending(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.model.lease_ms = 20  # a short lease: the test waits on the server's clock, not a sleep
    lab.enqueue_button.click()
    lab.claim_button.click()
    held = lab.model.held
    lab.crash_toggle.value = True
    lab.finish_button.click()
    wait_for_server_time(valkey_client, held.deadline_ms)
    lab.reap_button.click()

    assert valkey_client.zrange(key(name, "pending"), 0, -1) == [held.job_id]
    assert valkey_client.zcard(key(name, "active")) == 0
    assert f"back to {key(name, 'pending')}" in lab.readout.value


def test_reap_before_expiry_moves_nothing_until_fast_forward(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)  # default 10 s lease
    lab.enqueue_button.click()
    lab.claim_button.click()
    lab.crash_toggle.value = True
    lab.finish_button.click()
    lab.reap_button.click()
    assert valkey_client.zcard(key(name, "active")) == 1
    assert "moved nothing" in lab.readout.value

    lab.fast_forward_button.click()
    assert "teaching script" in lab.readout.value
    lab.reap_button.click()
    assert valkey_client.zcard(key(name, "pending")) == 1
    assert valkey_client.zcard(key(name, "active")) == 0


def test_selecting_a_step_shows_its_exact_lua(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.step_picker.value = "reap"
    assert "ZRANGEBYSCORE" in lab.source.value and "reap.lua" in lab.source.value
    lab.step_picker.value = "claim"
    assert "ZPOPMIN" in lab.source.value
    assert lab.model.step_source("finish") == scripts.expanded("complete")
    lab.step_picker.value = "crash"
    assert "runs no script" in lab.source.value


def test_the_claim_figure_shows_the_job_where_the_server_has_it(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.enqueue_button.click()
    lab.claim_button.click()
    lab.redraw()
    active_labels = [t.get_text() for t in lab.figure.slots["active"]]
    assert any(short(lab.model.held.job_id) in text for text in active_labels)
    assert lab.figure.arrows["claim"].get_linewidth() > lab.figure.arrows["reap"].get_linewidth()
    assert lab.canvas.value[:8] == b"\x89PNG\r\n\x1a\n"


def test_claim_with_nothing_pending_says_so(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.claim_button.click()
    assert f"found {key(name, 'pending')} empty" in lab.readout.value
    assert valkey_client.zcard(key(name, "active")) == 0


# -- the delivery lab ---------------------------------------------------------------------------


@pytest.mark.parametrize(("consumer", "deliveries"), [("keyed", 1), ("keyed", 6), ("naive", 6), ("naive", 10)])
def test_delivery_slider_really_redelivers(
    name: str, valkey_client: redis.Redis, consumer: str, deliveries: int
) -> None:
    lab = DeliveryLab(name, client=valkey_client, live=False)
    lab.consumer_picker.value = consumer
    lab.deliveries_slider.value = deliveries
    run = lab.model.run
    assert run.deliveries == deliveries and run.consumer == consumer

    expected_effects = 1 if consumer == "keyed" else deliveries
    stats = valkey_client.hgetall(key(name, "stats"))
    assert int(stats["claimed"]) == deliveries
    assert int(stats.get("reaped", 0)) == deliveries - 1
    assert int(valkey_client.hget(key(name, "effects"), run.job_id)) == expected_effects
    assert valkey_client.llen(key(name, "outbox")) == expected_effects
    assert run.attempts == list(range(1, deliveries + 1))
    assert f"{deliveries} time(s)" in lab.readout.value
    assert f"counts {expected_effects} effect(s)" in lab.readout.value


def test_the_fence_refuses_the_stale_worker_step_by_step(name: str, valkey_client: redis.Redis) -> None:
    lab = DeliveryLab(name, client=valkey_client, live=False)
    fence = name + "-fence"
    for _ in range(4):
        lab.fence_button.click()
    [job_id] = valkey_client.zrange(key(fence, "active"), 0, -1)
    assert valkey_client.hget(key(fence, "job:" + job_id), "attempts") == "2"  # B's token
    assert "STALE" in lab.readout.value and "Refused" in lab.readout.value
    assert "STALE" in lab.fence_log.value

    lab.fence_button.click()
    assert valkey_client.zcard(key(fence, "active")) == 0
    assert valkey_client.zrange(key(fence, "done"), 0, -1) == [job_id]
    assert "COMPLETED" in lab.readout.value


def test_bad_input_is_refused_in_the_readout_and_changes_nothing(name: str, valkey_client: redis.Redis) -> None:
    lab = DeliveryLab(name, client=valkey_client, live=False)
    before = valkey_client.hgetall(key(name, "stats"))
    lab.run(lambda: setattr(lab.model, "deliveries", 11))
    assert "deliveries must be between 1 and 10" in lab.readout.value
    assert valkey_client.hgetall(key(name, "stats")) == before
    with pytest.raises(InvalidArgument, match="advance_ms"):
        fast_forward(lab.model.queue, -5)


# -- the reap lab -------------------------------------------------------------------------------


def test_a_job_that_keeps_stalling_lands_in_dead(name: str, valkey_client: redis.Redis) -> None:
    lab = ReapLab(name, client=valkey_client, live=False)
    lab.model.workers = 1
    lab.model.lease_ms = 1_000
    lab.max_stalled_slider.value = 2  # the second stall is fatal
    lab.start_button.click()
    [job_id] = valkey_client.zrange(key(name, "active"), 0, -1)

    lab.fast_forward_button.click()  # 2 s earlier: the 1 s lease is at the server's now
    lab.step_button.click()
    assert valkey_client.zrange(key(name, "pending"), 0, -1) == [job_id]
    assert valkey_client.hget(key(name, "job:" + job_id), "stalled") == "1"
    assert f"back to {key(name, 'pending')}" in lab.readout.value

    lab.claim_again_button.click()
    lab.fast_forward_button.click()
    lab.step_button.click()
    assert valkey_client.zrange(key(name, "dead"), 0, -1) == [job_id]
    assert valkey_client.zcard(key(name, "pending")) == valkey_client.zcard(key(name, "active")) == 0
    assert f"into {key(name, 'dead')}" in lab.readout.value and "max_stalled=2" in lab.readout.value
    lab.redraw()
    assert lab.figure.labels[0].get_text().endswith("stalled 2")


def test_racy_sweeps_deliver_twice_and_the_atomic_reap_does_not(name: str, valkey_client: redis.Redis) -> None:
    lab = ReapLab(name, client=valkey_client, live=False)
    lab.race_button.click()
    racy, atomic = lab.model.race["two-step"], lab.model.race["atomic"]
    assert racy.duplicate_deliveries == 1 and racy.deliveries == 3
    assert atomic.duplicate_deliveries == 0 and atomic.deliveries == 2
    assert "3 deliveries, 1 duplicate" in lab.readout.value
    assert "2 deliveries, 0 duplicate" in lab.readout.value
    lab.redraw()
    assert [bar.get_height() for bar in lab.figure.race_bars] == [3, 2]


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


# -- throttling and a server that goes away ---------------------------------------------------


def test_a_burst_of_changes_costs_one_redraw_plus_a_trailing_one(name: str, valkey_client: redis.Redis) -> None:
    lab = ClaimLab(name, client=valkey_client, live=False)
    lab.min_redraw_s = 0.5
    lab.redraw()  # starts the throttle interval
    before = lab.redraws
    for step in ["reap", "claim", "finish", "crash", "enqueue"] * 4:
        lab.step_picker.value = step
    assert lab.redraws == before  # all 20 changes fell inside the interval
    give_up = time.monotonic() + 5
    while lab.redraws == before and time.monotonic() < give_up:
        time.sleep(0.01)
    assert lab.redraws == before + 1
    # the trailing redraw drew the LAST value: 'enqueue' lights no arrow
    assert {arrow.get_linewidth() for arrow in lab.figure.arrows.values()} == {1.0}


def test_server_gone_disables_the_buttons_and_reconnect_works(name: str) -> None:
    server = start_server()
    try:
        lab = ClaimLab(name, url=server.url, live=False)
        lab.enqueue_button.click()
        assert lab.model.connected
        server.stop()

        lab.claim_button.click()
        assert "Valkey went away" in lab.readout.value and "press reconnect" in lab.readout.value
        assert "Traceback" not in lab.readout.value
        assert all(control.disabled for control in lab.buttons)
        assert lab.claim_button.disabled and lab.crash_toggle.disabled
        assert not lab.reconnect_button.disabled

        lab.reconnect_button.click()  # still down: stays disconnected, says so
        assert not lab.model.connected and "Valkey went away" in lab.readout.value

        server = start_server()  # Valkey is back (a fresh server, at a new port)
        lab.model.url = server.url
        lab.reconnect_button.click()
        assert lab.model.connected and "Connected to Valkey" in lab.readout.value
        assert not any(control.disabled for control in lab.buttons)
        lab.enqueue_button.click()  # the restarted server kept no data: one job, the new one
        assert lab.model.snapshot.counts["pending"] == 1
        assert "enqueue.lua added" in lab.readout.value
    finally:
        server.stop()


# -- the fleet lab ------------------------------------------------------------------------------


def test_killing_a_worker_mid_job_loses_nothing_and_duplicates_no_effect(name: str, valkey_client: redis.Redis) -> None:
    lab = FleetLab(name, client=valkey_client, live=False)
    try:
        lab.model.job_ms = 1_000  # a kill lands mid-job with a second to spare, even on a loaded machine
        lab.start_button.click()
        lab.model.add_jobs(5)
        victim = lab.model.fleet[0].worker
        give_up = time.monotonic() + 5
        while not victim.in_flight and time.monotonic() < give_up:
            time.sleep(0.002)
        lab.kill_buttons[0].click()
        killed_job = lab.model.fleet[0].killed_job
        assert killed_job is not None and f"{short(killed_job)} stays leased" in lab.readout.value

        give_up = time.monotonic() + 15
        while valkey_client.zcard(key(name, "done")) < 5 and time.monotonic() < give_up:
            time.sleep(0.02)
        lab.model.tick()
        assert killed_job in valkey_client.zrange(key(name, "done"), 0, -1)
        stats = valkey_client.hgetall(key(name, "stats"))
        assert int(stats["stalled"]) >= 1  # the killed worker's job came back through a beat
        assert int(stats["claimed"]) > 5
        effects = valkey_client.hgetall(key(name, "effects"))
        assert len(effects) == 5 and set(effects.values()) == {"1"}
        assert "Lost: 0. Duplicate effects: 0." in lab.clock.value
        assert lab.model.fleet[0].state == "killed"

        lab.restart_buttons[0].click()
        assert lab.model.fleet[0].state == "working"
        assert "restarted worker 1" in lab.readout.value
    finally:
        lab.close()
    assert all(not entry.thread.is_alive() for entry in lab.model.fleet)


@pytest.mark.parametrize("panel", [ClaimLab, DeliveryLab, ReapLab])
def test_a_live_panel_waits_for_its_browser_view_before_drawing(panel, name: str) -> None:
    """An ipympl canvas rendered before its view reports in stays blank in JupyterLab
    (tests/test_browser.py shows it); the panel must leave the first draw to the view."""
    pytest.importorskip("ipympl")
    lab = panel(name, live=True)
    lab.model.reset()
    assert lab.canvas.syncing_data_url and lab.canvas._data_url is None
    assert lab.redraws >= 1  # the artists were updated all the same


@pytest.mark.parametrize("password", ["s3cret", "s3cret#frag", "s3/cret"])
def test_a_readout_never_shows_the_urls_password(name: str, password: str) -> None:
    """Issue 13's finding: a panel that could not reach its server showed the raw URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    lab = ClaimLab(name, url=f"redis://:{password}@127.0.0.1:{port}/0", live=False)
    lab.reconnect_button.click()
    assert not lab.model.connected and "cannot reach" in lab.readout.value
    assert "cret" not in lab.readout.value and "***" in lab.readout.value
