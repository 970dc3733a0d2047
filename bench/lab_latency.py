"""Click-to-picture latency of the lab panels: Valkey moves + redraw on the Agg canvas.

For each panel, time from a control's handler start to the figure redrawn (the handler
runs the move on Valkey, re-reads the queue with one snapshot, updates the artists in
place and the Agg canvas draws). The throttle is off (min_redraw_s=0) so every click
pays its own redraw. Also times the redraw alone, to show where the time goes.

    .venv/bin/python bench/lab_latency.py            # 60 clicks per panel
    .venv/bin/python bench/lab_latency.py --clicks 200

Targets on the 2-core reference machine: median <= 50 ms, p95 <= 100 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator

import matplotlib

matplotlib.use("Agg")

from echoq.teaching.lab import ClaimLab, DeliveryLab, FleetLab, ReapLab  # noqa: E402
from echoq.teaching.lab.views import LabPanel  # noqa: E402


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def timed(clicks: Iterator[Callable[[], None]], count: int) -> list[float]:
    out = []
    for _ in range(count):
        click = next(clicks)
        started = time.perf_counter()
        click()
        out.append((time.perf_counter() - started) * 1000)
    return out


def redraw_only(panel: LabPanel, count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        panel.redraw()
        out.append((time.perf_counter() - started) * 1000)
    return out


def claim_clicks(lab: ClaimLab) -> Iterator[Callable[[], None]]:
    while True:
        yield lab.enqueue_button.click
        yield lab.claim_button.click
        yield lab.finish_button.click


def delivery_clicks(lab: DeliveryLab) -> Iterator[Callable[[], None]]:
    values = [1, 4, 7, 10, 5, 2, 9, 3, 8, 6]  # every slider position; each REALLY redelivers
    while True:
        for v in values:
            yield lambda v=v: setattr(lab.deliveries_slider, "value", v)


def reap_clicks(lab: ReapLab) -> Iterator[Callable[[], None]]:
    while True:
        yield lab.start_button.click
        yield lab.fast_forward_button.click
        yield lab.step_button.click
        yield lab.claim_again_button.click
        yield lab.reset_button.click


def fleet_clicks(lab: FleetLab) -> Iterator[Callable[[], None]]:
    while True:
        yield lab.add_button.click
        yield lab.model.tick  # the live beat's re-read and redraw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=60)
    args = parser.parse_args()
    rows = []
    fleet = FleetLab(live=False)
    panels: list[tuple[str, LabPanel, Iterator[Callable[[], None]], str]] = []
    claim = ClaimLab(live=False)
    panels.append(("ClaimLab", claim, claim_clicks(claim), "enqueue / claim / finish"))
    delivery = DeliveryLab(live=False)
    panels.append(("DeliveryLab", delivery, delivery_clicks(delivery), "slider 1..10 (real redeliveries)"))
    reap = ReapLab(live=False)
    panels.append(("ReapLab", reap, reap_clicks(reap), "start / fast-forward / step / claim again / reset"))
    panels.append(("FleetLab", fleet, fleet_clicks(fleet), "add 20 jobs / beat re-read, 3 workers running"))
    try:
        for name, panel, clicks, what in panels:
            panel.min_redraw_s = 0.0
            if panel is fleet:
                fleet.model.start(3)  # its worker threads run only while the fleet is measured
            timed(clicks, 5)  # warm up: scripts loaded, fonts cached
            total = timed(clicks, args.clicks)
            draw = redraw_only(panel, max(10, args.clicks // 3))
            rows.append((name, what, statistics.median(total), p95(total), statistics.median(draw)))
    finally:
        fleet.close()
    print(f"{args.clicks} clicks per panel; ms from handler start to figure redrawn (Agg)\n")
    print("| panel | clicks | median ms | p95 ms | of which redraw (median ms) |")
    print("|---|---|---|---|---|")
    for name, what, med, high, draw in rows:
        print(f"| {name} | {what} | {med:.1f} | {high:.1f} | {draw:.1f} |")
    worst_med = max(r[2] for r in rows)
    worst_p95 = max(r[3] for r in rows)
    verdict = "met" if worst_med <= 50 and worst_p95 <= 100 else "NOT met"
    print(f"\ntarget median <= 50 ms and p95 <= 100 ms: {verdict} (worst median {worst_med:.1f}, p95 {worst_p95:.1f})")


if __name__ == "__main__":
    main()
