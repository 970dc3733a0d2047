"""Render each lab panel's figure, in a known state reached by real moves, to docs/.

    .venv/bin/python tools/render_docs.py

Writes docs/lab-<panel>.png (the figure at rest) and the pictures' lines in docs/lab.md,
between its two ``pictures`` comments, each with alt text made from the words the panel's
readout and picture use for that frame (``words.still_alt``), never written by hand. Every
state is reached by real moves on the embedded Valkey (no drawing of made-up data); each
picture is the panel's own static fallback, the PNG a notebook stores for readers without
a kernel.
"""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from echoq.clock import wait_for_server_ms  # noqa: E402
from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, RaceLab, ReapLab, words  # noqa: E402
from echoq.teaching.lab.race.figure import grid  # noqa: E402
from echoq.teaching.lab.race.words import grid_alt  # noqa: E402
from echoq.teaching.lab.view import LabPanel  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"
BEGIN, END = "<!-- pictures: made by tools/render_docs.py -->", "<!-- end of the pictures -->"
PICTURES: list[tuple[str, str]] = []  # (file, alt text), in the order drawn


def save(lab: LabPanel, name: str) -> None:
    """The frame the panel shows (the latest, unless the timeline was scrubbed back)."""
    lab.settle()
    frame = lab.model.history.get(lab.player.cursor) or lab.model.frame
    (DOCS / name).write_bytes(lab.figure.png(frame))
    PICTURES.append((name, words.still_alt(lab.figure.heading(), frame.snapshot, frame.readout)))


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
    # Three leases run out while three still run: each expired one drawn at its deadline,
    # a second apart (fast-forward would pull them all to the server's now).
    wait_for_server_ms(lab.model.queue.client, lab.model.snapshot.now_ms + 3_500)
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


def race() -> None:
    lab = RaceLab("docs-race", live=False, animate=False)
    lab.model.explore("two-step")
    lab.play_first("duplicated")  # its last frame: two workers hold the job
    save(lab, "lab-race.png")
    ex = lab.model.exploration
    assert ex is not None
    grid(ex, ex.first("duplicated")).savefig(DOCS / "lab-race-grid.png", format="png", dpi=100)
    PICTURES.append(("lab-race-grid.png", grid_alt(ex)))
    lab.model.reset()


def write_lines(page: Path) -> None:
    """The pictures' lines of ``page``, between its two comments, made again."""
    text = page.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    lines = "".join(f"![{alt.replace('[', '(').replace(']', ')')}]({name})\n" for name, alt in PICTURES)
    page.write_text(text[:start] + "\n" + lines + text[end:])


if __name__ == "__main__":
    DOCS.mkdir(exist_ok=True)
    for render in (claim, delivery, reap, fleet, race):
        render()
    write_lines(DOCS / "lab.md")
    for png in sorted(DOCS.glob("lab-*.png")):
        print(f"{png.relative_to(DOCS.parent)}: {png.stat().st_size // 1024} KB")
