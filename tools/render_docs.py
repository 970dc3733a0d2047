"""Render each lab panel's figure, in a known state reached by real moves, to docs/.

    .venv/bin/python tools/render_docs.py

Writes docs/lab-<panel>.png (the figure at rest) for docs/lab.md. Every state is reached by
real moves on the embedded Valkey (no drawing of made-up data); each picture is the panel's
own static fallback, the PNG a notebook stores for readers without a kernel.
"""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, ReapLab  # noqa: E402
from echoq.teaching.lab.view import LabPanel  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"


def save(lab: LabPanel, name: str) -> None:
    """The frame the panel shows (the latest, unless the timeline was scrubbed back)."""
    lab.settle()
    frame = lab.model.history.get(lab.player.cursor) or lab.model.frame
    (DOCS / name).write_bytes(lab.figure.png(frame))


def claim() -> None:
    lab = ClaimLab("docs-claim", live=False, animate=False)
    for _ in range(3):
        lab.enqueue_button.click()
    lab.claim_button.click()
    lab.crash_toggle.value = True
    lab.complete_button.click()  # the worker dies mid-job: the job stays leased
    lab.crash_toggle.value = False
    lab.claim_button.click()  # a new worker takes the next job
    save(lab, "lab-claim.png")
    lab.model.reset()


def delivery() -> None:
    lab = DeliveryLab("docs-delivery", live=False, animate=False)
    for _ in range(4):
        lab.fence_button.click()  # ... until the stale worker's complete is refused at the row
    save(lab, "lab-fence.png")
    lab.model.deliver(consumer="keyed", deliveries=6)
    history = lab.model.history
    lab.player.show(history.last_index - 3)  # mid-run: a later delivery, the effect still 1
    save(lab, "lab-delivery.png")
    lab.model.reset()


def reap() -> None:
    lab = ReapLab("docs-reap", live=False, animate=False)
    lab.model.workers = 6
    lab.model.lease_ms = 1_000
    lab.start_button.click()
    lab.fast_forward_button.click()
    lab.fast_forward_button.click()  # four leases expired, two still running
    lab.race_button.click()
    save(lab, "lab-reap.png")
    lab.model.reset()


def fleet() -> None:
    lab = FleetLab("docs-fleet", live=False, animate=False)
    model = lab.model
    try:
        model.job_ms = 600
        lab.start_button.click()
        model.add_jobs(20)
        give_up = time.monotonic() + 5
        while not model.fleet[1].worker.in_flight and time.monotonic() < give_up:
            time.sleep(0.005)
        time.sleep(0.3)  # let worker 2 get into its job before the kill lands
        lab.kill_buttons[1].click()
        for _ in range(8):
            time.sleep(0.1)  # the beat of the samples drawn
            model.sample()
        save(lab, "lab-fleet.png")
    finally:
        lab.close()
        model.reset()


if __name__ == "__main__":
    DOCS.mkdir(exist_ok=True)
    for render in (claim, delivery, reap, fleet):
        render()
    for png in sorted(DOCS.glob("lab-*.png")):
        print(f"{png.relative_to(DOCS.parent)}: {png.stat().st_size // 1024} KB")
