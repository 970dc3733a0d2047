"""The lab panels: click-to-first-frame latency, the animation each move plays, and the
CPU an idle panel costs.

For each panel, a control is clicked and timed from the handler's start to the first
animation frame drawn and encoded for the widget (the move ran on Valkey, one snapshot was
read, the frame recorded, the first tween drawn on the Agg canvas and encoded as a PNG).
Then the rest of the move's animation plays out (its frames and duration are reported) and
the next click waits for it.

    .venv/bin/python bench/lab_latency.py              # 40 clicks per panel, idle CPU over 30 s
    .venv/bin/python bench/lab_latency.py --clicks 100 --idle-s 60
    .venv/bin/python bench/lab_latency.py --idle-s 0   # latency only
    .venv/bin/python bench/lab_latency.py --burst 20 --clicks 0 --idle-s 0   # the burst case only

Burst: ``--burst N`` moves driven from code back to back (N enqueues on the Claim lab; on
the Delivery lab lesson 03's cell, five naive and five keyed deliveries, 22 frames), then
the time from the last move's return until the picture shows the newest frame at rest and
its counts equal a fresh read of the server. Without the jump to the present it took one
animation per move (0.74 s each).

Idle cost: a kernel runs notebooks/present.ipynb (four panels displayed, %matplotlib
widget) with no browser attached; its CPU time is read from /proc over ``--idle-s``.

Targets on the 2-core reference machine: median <= 50 ms, p95 <= 100 ms to the first
frame; at least 10 frames over 0.3-1.0 s per move; an idle panel about 0.1% of a core (its
re-read clock); a burst of 20 moves shown as the server holds it <= 1 s after the last move.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import matplotlib
from _common import description, machine, machine_line

matplotlib.use("Agg")

from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, ReapLab  # noqa: E402
from echoq.teaching.lab.view import LabPanel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
Click = Callable[[], None]


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def claim_clicks(lab: ClaimLab) -> Iterator[Click]:
    while True:
        yield lab.enqueue_button.click
        yield lab.claim_button.click
        yield lab.complete_button.click


def delivery_clicks(lab: DeliveryLab) -> Iterator[Click]:
    deliveries = [1, 4, 7, 10, 5, 2, 9, 3, 8, 6]  # every count; each click REALLY redelivers
    while True:
        for n in deliveries:
            yield lambda n=n: lab.model.deliver(deliveries=n)  # what 'deliver' does with the slider at n
            yield lab.fence_button.click


def reap_clicks(lab: ReapLab) -> Iterator[Click]:
    while True:
        yield lab.start_button.click
        yield lab.fast_forward_button.click
        yield lab.step_button.click
        yield lab.claim_again_button.click
        yield lab.reset_button.click


def fleet_clicks(lab: FleetLab) -> Iterator[Click]:
    while True:
        yield lab.add_button.click
        yield lab.kill_buttons[0].click
        yield lab.restart_buttons[0].click
        yield lab.model.sample  # the browser clock's re-read, 3 workers running


def measure(lab: LabPanel, clicks: Iterator[Click], count: int) -> dict[str, list[float]]:
    first_ms, frames, seconds = [], [], []
    for _ in range(count):
        lab.settle()
        known = len(lab.player.transitions)
        click = next(clicks)
        started = time.perf_counter()
        click()
        if not lab.settle(60):
            raise RuntimeError("the animation did not finish within a minute")
        moves = lab.player.transitions[known:]
        if not moves:
            continue
        first_ms.append((moves[0].first - started) * 1000)
        animated = [t for t in moves if not t.still]  # a still frame (nothing moved) is drawn once
        frames += [t.frames for t in animated]
        seconds += [t.seconds for t in animated]
    return {"first_ms": first_ms, "frames": frames, "seconds": seconds}


def burst(lab: LabPanel, moves: Callable[[], None], count: int) -> dict[str, list[float]]:
    """``count`` bursts: the seconds from the last move's return to the picture at rest on
    the newest frame, its counts checked against a fresh read of the server."""
    caught_up_s, frames = [], []
    queue = lab.model.queue
    assert queue is not None
    for _ in range(count):
        lab.settle()
        before = lab.model.history.last_index
        moves()
        ended = time.perf_counter()
        newest = lab.model.history.last_index
        while lab.player.running or lab.player.cursor < newest:
            if time.perf_counter() - ended > 60:
                raise RuntimeError("the picture did not catch up within a minute")
            time.sleep(0.002)  # polling the player's flags, bounded above
        caught_up_s.append(time.perf_counter() - ended)
        frames.append(newest - before)
        snap = queue.snapshot()
        for place in ("pending", "active", "done"):
            drawn = getattr(lab.figure, place, None)
            if (
                drawn is not None
                and drawn.count.get_text() != f"{snap.counts[place]} job{'' if snap.counts[place] == 1 else 's'}"
            ):
                raise RuntimeError(
                    f"the picture shows {place} {drawn.count.get_text()!r}, the server {snap.counts[place]}"
                )
    return {"caught_up_s": caught_up_s, "frames": frames}


def fleet_follow(lab: FleetLab, seconds: float) -> list[float]:
    """The Fleet running (3 workers, 20 jobs at a time) and re-read on the browser's clock
    (a sample every ``tick_ms``); every 20 ms, how long ago the oldest frame the readout has
    not yet shown was recorded: how far the readout is behind the server (0 when it shows
    the newest frame)."""
    told: list[int] = [-1]
    shown = lab._shown

    def spy(frame, settled=True):  # type: ignore[no-untyped-def]
        told[0] = frame.index
        shown(frame, settled)

    lab.player._shown = spy
    model = lab.model
    model.job_ms = 300
    model.start(3)
    lags: list[float] = []
    started = next_tick = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            now = time.monotonic()
            if now >= next_tick:
                if model.read().counts["pending"] < 5:
                    model.add_jobs(20)
                model.sample()  # what the browser's clock does
                next_tick = now + lab.tick_ms / 1000
            unseen = model.history.get(told[0] + 1)
            lags.append(0.0 if unseen is None else time.monotonic() - unseen.at_s)
            time.sleep(0.02)  # the sampling period of this measurement
    finally:
        model.stop_all()
        lab.player._shown = shown
    return lags


def idle_cpu(seconds: float) -> dict[str, float]:
    """A kernel that ran present.ipynb (four panels shown, no browser): its CPU over ``seconds``."""
    import nbformat
    from jupyter_client.manager import start_new_kernel

    nb = nbformat.read(ROOT / "notebooks" / "present.ipynb", as_version=4)
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        for cell in nb.cells:
            if cell.cell_type == "code":
                reply = kc.execute_interactive(cell.source, timeout=120, output_hook=lambda _msg: None)
                if reply["content"]["status"] != "ok":
                    raise RuntimeError(f"present.ipynb failed in kernel: {reply['content']}")
        pid = kc.execute_interactive(
            "import os; print(os.getpid())", output_hook=lambda _m: None, user_expressions={"pid": "os.getpid()"}
        )["content"]["user_expressions"]["pid"]["data"]["text/plain"]
        stat = Path(f"/proc/{int(pid)}/stat")
        tick = os.sysconf("SC_CLK_TCK")

        def cpu_s() -> float:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

        time.sleep(2)  # let the display settle
        before, started = cpu_s(), time.monotonic()
        time.sleep(seconds)  # the measurement window: nothing else happens in the kernel
        used, wall = cpu_s() - before, time.monotonic() - started
        return {"seconds": wall, "cpu_s": used, "percent_of_a_core": 100 * used / wall}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--clicks", type=int, default=40, help="clicks per panel")
    parser.add_argument("--idle-s", type=float, default=30.0, help="idle CPU window in seconds (0: skip)")
    parser.add_argument("--burst", type=int, default=20, help="moves per burst from code (0: skip)")
    parser.add_argument("--bursts", type=int, default=10, help="bursts per panel")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    claim, delivery, reap, fleet = (
        ClaimLab(live=False),
        DeliveryLab(live=False),
        ReapLab(live=False),
        FleetLab(live=False),
    )
    panels: list[tuple[str, LabPanel, Iterator[Click], str]] = [
        ("ClaimLab", claim, claim_clicks(claim), "enqueue / claim / complete"),
        ("DeliveryLab", delivery, delivery_clicks(delivery), "deliver 1..10 times (real) / fence step"),
        ("ReapLab", reap, reap_clicks(reap), "start / fast-forward / step / claim again / reset"),
        ("FleetLab", fleet, fleet_clicks(fleet), "add 20 / kill / restart / sample, 3 workers"),
    ]
    rows, bursts, follow = [], [], []
    try:
        for name, panel, clicks, what in panels:
            panel.model.open()
            if args.clicks <= 0:
                continue
            if panel is fleet:
                fleet.model.start(3)  # its worker threads run only while the fleet is measured
            measure(panel, clicks, 4)  # warm up: scripts loaded, fonts cached
            figures = measure(panel, clicks, args.clicks)
            rows.append({"panel": name, "clicks": what, **figures})
            if panel is fleet:
                fleet.model.stop_all()
        if args.burst > 0:

            def enqueues() -> None:
                for _ in range(args.burst):
                    claim.model.enqueue()

            def lesson_03() -> None:
                delivery.model.deliver(consumer="naive", deliveries=5)
                delivery.model.deliver(consumer="keyed", deliveries=5)

            burst(claim, enqueues, 2)  # warm up
            bursts.append(
                {"panel": "ClaimLab", "moves": f"{args.burst} enqueues", **burst(claim, enqueues, args.bursts)}
            )
            bursts.append(
                {
                    "panel": "DeliveryLab",
                    "moves": "lesson 03: 5 + 5 deliveries",
                    **burst(delivery, lesson_03, args.bursts),
                }
            )
            follow = fleet_follow(fleet, 15.0)
    finally:
        fleet.close()
        for _, panel, _, _ in panels:
            panel.settle()
            panel.model.queue.reset()
    idle = idle_cpu(args.idle_s) if args.idle_s > 0 else None

    report = {
        "machine": machine(),
        "clicks": args.clicks,
        "burst": args.burst,
        "bursts": args.bursts,
        "tick_ms": fleet.tick_ms,
        "rows": rows,
        "burst_runs": bursts,
        "fleet_follow": follow,
        "idle": idle,
    }
    print(json.dumps(report) if args.json else render(report))
    return 0


def render(report: dict[str, Any]) -> str:
    """The report's tables, from what --json printed."""
    rows, bursts, follow, idle = report["rows"], report["burst_runs"], report["fleet_follow"], report["idle"]
    out = [f"machine: {machine_line(report['machine'])}", ""]
    if bursts:
        out += [
            f"{report['bursts']} bursts per panel: moves from code, then until the picture equals the server",
            "",
            "| panel | burst | frames recorded | caught up s (median / max) |",
            "|---|---|---:|---:|",
        ]
        for b in bursts:
            out.append(
                f"| {b['panel']} | {b['moves']} | {statistics.median(b['frames']):.0f} | "
                f"{statistics.median(b['caught_up_s']):.2f} / {max(b['caught_up_s']):.2f} |"
            )
        if follow:
            out.append(
                f"| FleetLab | 3 workers running, a sample every {report['tick_ms']} ms, 15 s | {len(follow)} looks | "
                f"readout behind {statistics.median(follow):.2f} / {max(follow):.2f} |"
            )
        worst = max([max(b["caught_up_s"]) for b in bursts] + [max(follow, default=0.0)])
        verdict = "met" if worst <= 1 else "NOT met"
        out += ["", f"burst: picture equals the server <= 1 s after the last move: {verdict} (worst {worst:.2f} s)", ""]
    if rows:
        out += [
            f"{report['clicks']} clicks per panel; Agg canvas, each frame encoded as PNG for the widget",
            "",
            "| panel | clicks | first frame median ms | p95 ms | frames per move (min / median) "
            "| move s (median / max) |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in rows:
            out.append(
                f"| {r['panel']} | {r['clicks']} | {statistics.median(r['first_ms']):.1f} | {p95(r['first_ms']):.1f} | "
                f"{min(r['frames'])} / {statistics.median(r['frames']):.0f} | "
                f"{statistics.median(r['seconds']):.2f} / {max(r['seconds']):.2f} |"
            )
        worst_med = max(statistics.median(r["first_ms"]) for r in rows)
        worst_p95 = max(p95(r["first_ms"]) for r in rows)
        fewest = min(min(r["frames"]) for r in rows)
        verdict = "met" if worst_med <= 50 and worst_p95 <= 100 else "NOT met"
        out += [
            "",
            f"first frame: median <= 50 ms and p95 <= 100 ms: {verdict} "
            f"(worst median {worst_med:.1f} ms, worst p95 {worst_p95:.1f} ms); fewest frames in a move: {fewest}",
        ]
    if idle is not None:
        out.append(
            f"idle kernel with the four panels of present.ipynb, no browser: {idle['cpu_s']:.2f} s of CPU "
            f"in {idle['seconds']:.0f} s = {idle['percent_of_a_core']:.2f}% of a core"
        )
    return "\n".join(out).rstrip()

if __name__ == "__main__":
    sys.exit(main())
