"""Render each lab panel's figure, in a known state, to docs/<panel>.png (for the README).

    .venv/bin/python tools/render_docs.py

Every state is reached by real moves on the embedded Valkey (no drawing of made-up data).
"""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, ReapLab  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"


def claim() -> None:
    lab = ClaimLab("docs-claim", live=False)
    for _ in range(3):
        lab.enqueue_button.click()
    lab.claim_button.click()
    lab.crash_toggle.value = True
    lab.finish_button.click()  # the worker dies mid-job: the job stays leased
    lab.save_png(DOCS / "lab-claim.png")
    lab.model.reset()


def delivery() -> None:
    lab = DeliveryLab("docs-delivery", live=False)
    lab.consumer_picker.value = "keyed"
    lab.deliveries_slider.value = 6
    lab.save_png(DOCS / "lab-delivery.png")
    lab.model.reset()


def reap() -> None:
    lab = ReapLab("docs-reap", live=False)
    lab.model.workers = 4
    lab.model.lease_ms = 2_000
    lab.start_button.click()
    lab.fast_forward_button.click()  # the first lease reaches the server's now
    lab.step_button.click()  # it goes back to pending, stalled 1
    lab.race_button.click()
    lab.save_png(DOCS / "lab-reap.png")
    lab.model.reset()


def fleet() -> None:
    lab = FleetLab("docs-fleet", live=False)
    model = lab.model
    try:
        model.job_ms = 100
        lab.start_button.click()
        model.add_jobs(40)
        give_up = time.monotonic() + 5
        while not model.fleet[1].worker.in_flight and time.monotonic() < give_up:
            time.sleep(0.005)
        lab.kill_buttons[1].click()
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            model.tick()
            if model.snapshot.counts["done"] == 40:
                break
            time.sleep(0.1)  # the beat of the samples drawn
        for _ in range(5):
            model.tick()
            time.sleep(0.1)
        lab.save_png(DOCS / "lab-fleet.png")
    finally:
        lab.close()
        model.reset()


if __name__ == "__main__":
    DOCS.mkdir(exist_ok=True)
    for render in (claim, delivery, reap, fleet):
        render()
    for png in sorted(DOCS.glob("lab-*.png")):
        print(f"{png.relative_to(DOCS.parent)}: {png.stat().st_size // 1024} KB")
