"""Render each lab panel's figure, in a known state reached by real moves, to docs/.

    .venv/bin/python tools/render_docs.py

    .venv/bin/python tools/render_docs.py --redraw   # the same frames drawn again, no server

Writes docs/lab-<panel>.png (the figure at rest) and the pictures' lines in docs/lab.md,
between its two ``pictures`` comments, each with alt text made from the words the panel's
readout and picture use for that frame (``words.still_alt``), never written by hand. Every
state is reached by real moves on the embedded Valkey (no drawing of made-up data); each
picture is the panel's own static fallback, the PNG a notebook stores for readers without
a kernel. The frames drawn are kept in docs/data/pictures.json, so ``--redraw`` (after a
change to how a picture is drawn or worded) and tests/test_lab_pictures.py draw them again:
the committed pictures and alt text are what the code makes of those frames now.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

from echoq.clock import wait_for_server_ms  # noqa: E402
from echoq.queue import Job, JobState, Snapshot  # noqa: E402
from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, RaceLab, ReapLab, words  # noqa: E402
from echoq.teaching.lab.frames import Frame, Lit  # noqa: E402
from echoq.teaching.lab.race.facts import Exploration, Run  # noqa: E402
from echoq.teaching.lab.race.figure import grid  # noqa: E402
from echoq.teaching.lab.race.words import grid_alt  # noqa: E402
from echoq.teaching.lab.view import LabPanel  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"
BEGIN, END = "<!-- pictures: made by tools/render_docs.py -->", "<!-- end of the pictures -->"
RECORD = DOCS / "data" / "pictures.json"
PANELS = {cls.__name__: cls for cls in (ClaimLab, DeliveryLab, FleetLab, RaceLab, ReapLab)}
PICTURES: list[tuple[str, str]] = []  # (file, alt text), in the order drawn
RECORDED: dict[str, dict[str, Any]] = {}  # file -> what it was drawn from (docs/data/pictures.json)


def frame_facts(frame: Frame) -> dict[str, Any]:
    """A frame as JSON: everything its picture and alt text are drawn from."""
    facts = dataclasses.asdict(frame)
    facts["lit"] = {"paths": list(frame.lit.paths), "probe": frame.lit.probe}
    return json.loads(json.dumps(facts))


def frame_of(facts: dict[str, Any]) -> Frame:
    snap = facts["snapshot"]
    if snap is not None:
        rows = {
            job_id: Job(**{**row, "state": JobState(row["state"]) if row["state"] else None})
            for job_id, row in snap["rows"].items()
        }
        snap = Snapshot(**{**snap, "rows": rows})
    lit = Lit(tuple(facts["lit"]["paths"]), facts["lit"]["probe"])
    return Frame(**{**facts, "snapshot": snap, "lit": lit})


def draw(name: str, facts: dict[str, Any]) -> tuple[bytes, str]:
    """A recorded picture drawn again: its PNG and its alt text, as the code makes them now."""
    if "grid" in facts:
        g = facts["grid"]
        ex = Exploration(g["reaper"], [Run((), n, p) for n, p in zip(g["deliveries"], g["places"], strict=True)])
        figure = grid(ex, g["chosen"])
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue(), grid_alt(ex)
    lab = PANELS[facts["panel"]](facts["queue"], live=False, animate=False)
    try:
        frame = frame_of(facts["frame"])
        png = lab.figure.png(frame)
        return png, words.still_alt(lab.figure.heading(), frame.snapshot, frame.readout)
    finally:
        lab.close()


def save(lab: LabPanel, name: str) -> None:
    """The frame the panel shows (the latest, unless the timeline was scrubbed back), drawn on
    a panel of its own from the frame's facts alone: what --redraw and the test draw too."""
    lab.settle()
    frame = lab.model.history.get(lab.player.cursor) or lab.model.frame
    RECORDED[name] = {"panel": type(lab).__name__, "queue": lab.model.name, "frame": frame_facts(frame)}
    png, alt = draw(name, RECORDED[name])
    (DOCS / name).write_bytes(png)
    PICTURES.append((name, alt))


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
    deliveries, places = [r.deliveries for r in ex.runs], [r.place for r in ex.runs]
    facts = {
        "grid": {"reaper": ex.reaper, "deliveries": deliveries, "places": places, "chosen": ex.first("duplicated")}
    }
    RECORDED["lab-race-grid.png"] = facts
    png, alt = draw("lab-race-grid.png", facts)
    (DOCS / "lab-race-grid.png").write_bytes(png)
    PICTURES.append(("lab-race-grid.png", alt))
    lab.model.reset()


def write_lines(page: Path) -> None:
    """The pictures' lines of ``page``, between its two comments, made again."""
    text = page.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    page.write_text(text[:start] + "\n" + lines(PICTURES) + text[end:])


def lines(pictures: list[tuple[str, str]]) -> str:
    return "".join(f"![{alt.replace('[', '(').replace(']', ')')}]({name})\n" for name, alt in pictures)


if __name__ == "__main__":
    DOCS.mkdir(exist_ok=True)
    if "--redraw" in sys.argv[1:]:
        RECORDED.update(json.loads(RECORD.read_text()))
        for name, facts in RECORDED.items():
            png, alt = draw(name, facts)
            (DOCS / name).write_bytes(png)
            PICTURES.append((name, alt))
    else:
        for render in (claim, delivery, reap, fleet, race):
            render()
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(RECORDED, indent=1, ensure_ascii=False) + "\n")
    write_lines(DOCS / "lab.md")
    for png in sorted(DOCS.glob("lab-*.png")):
        print(f"{png.relative_to(DOCS.parent)}: {png.stat().st_size // 1024} KB")
