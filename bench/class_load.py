"""A class on one shared server: N learners clicking through lessons 02-04 at once.

Each simulated learner is a separate process with its own ACL user (``workshop up
--count N``) and clicks the lab panels of lessons 02, 03 and 04 (the models behind the
buttons: claim, complete, reap, fast-forward; redeliver 1-10 times, the fence; start
workers, step the reaper, claim again) with a person's pause between clicks. A click's
time runs from the button's handler start to its result: the move on the server and the
atomic re-read the picture is drawn from. Meanwhile the instructor's dashboard refreshes
every second. At the end the server is searched for cross-talk: a job seen by two
learners, a key of one learner holding another's job, any ACL refusal.

    .venv/bin/python bench/class_load.py                         # 60 learners, 30 s
    .venv/bin/python bench/class_load.py --learners 10 --seconds 10 --json

Target: each learner's click-to-result p95 <= 100 ms, zero cross-talk.
Exit status 1 if any click was refused, a learner failed, or there was cross-talk.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import _workshop
from _common import description, machine, machine_line, median, percentile, table

from echoq.teaching.workshop import board

TARGET_P95_MS = 100.0


def _think(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    return float(low) / 1000, float(high or low) / 1000


def run(learners: int, seconds: float, think: tuple[float, float]) -> dict:
    workshop = _workshop.start_class(learners)
    refreshes: list[float] = []
    stop = threading.Event()

    def instructor() -> None:
        view = board.Board(workshop.instructor(), list(workshop.learners))
        while not stop.wait(1.0):
            started = time.perf_counter()
            board.render(view.read())
            refreshes.append((time.perf_counter() - started) * 1000)

    watcher = threading.Thread(target=instructor, daemon=True)
    try:
        started = time.monotonic()
        reports = _workshop.run_learners(workshop, seconds, think, during=watcher.start)
        elapsed = time.monotonic() - started
        stop.set()
        watcher.join(timeout=10)
        problems = _workshop.cross_talk(workshop, reports)
        facts = machine(workshop.admin())
    finally:
        stop.set()
        _workshop.stop_class(workshop)
    every = [ms for r in reports for ms in r.clicks_ms]
    per_learner = {r.learner: percentile(r.clicks_ms, 0.95) for r in reports if r.clicks_ms}
    return {
        "learners": learners,
        "seconds": seconds,
        "think_ms": [round(think[0] * 1000), round(think[1] * 1000)],
        "elapsed_s": round(elapsed, 1),
        "machine": facts,
        "clicks": len(every),
        "click_ms": {
            "median": median(every) if every else None,
            "p95": percentile(every, 0.95) if every else None,
            "max": max(every) if every else None,
        },
        "learner_p95_ms": {
            "median": median(list(per_learner.values())) if per_learner else None,
            "worst": max(per_learner.values()) if per_learner else None,
            "worst_learner": max(per_learner, key=per_learner.get) if per_learner else None,
        },
        "dashboard_refresh_ms": {
            "count": len(refreshes),
            "median": median(refreshes) if refreshes else None,
            "p95": percentile(refreshes, 0.95) if refreshes else None,
        },
        "refused": [x for r in reports for x in r.refused][:20],
        "errors": [f"{r.learner}: {r.error}" for r in reports if r.error],
        "cross_talk": problems[:20],
        "cross_talk_count": len(problems),
    }


def render(report: dict) -> str:
    c, lp, d = report["click_ms"], report["learner_p95_ms"], report["dashboard_refresh_ms"]
    met = lp["worst"] is not None and lp["worst"] <= TARGET_P95_MS
    clean = not report["cross_talk_count"] and not report["refused"] and not report["errors"]
    rows = [
        ["clicks, all learners", f"{report['clicks']:,}", f"{c['median']:.1f}", f"{c['p95']:.1f}", f"{c['max']:.1f}"],
        [
            "each learner's own p95 (median, worst)",
            f"{report['learners']}",
            f"{lp['median']:.1f}",
            f"{lp['worst']:.1f}",
            "",
        ],
        ["dashboard refresh (every 1 s)", f"{d['count']}", f"{d['median']:.1f}", f"{d['p95']:.1f}", ""],
    ]
    lines = [
        f"class load: {report['learners']} learners (one process and one ACL user each) on one shared server, "
        f"lessons 02-04's moves for {report['seconds']:.0f} s, {report['think_ms'][0]}-{report['think_ms'][1]} ms "
        "between clicks",
        f"machine: {machine_line(report['machine'])}",
        "",
        table(["measure", "count", "median ms", "p95 ms", "max ms"], rows, [False, True, True, True, True]),
        "",
        f"click-to-result p95 <= {TARGET_P95_MS:.0f} ms for every learner: {'met' if met else 'NOT met'} "
        f"(worst {lp['worst']:.1f} ms, {lp['worst_learner']})",
        f"cross-talk: {report['cross_talk_count']} (jobs seen by two learners, keys holding another's job, "
        f"ACL refusals); refused clicks: {len(report['refused'])}; failed learners: {len(report['errors'])}",
    ]
    for problem in report["cross_talk"] + report["refused"] + report["errors"]:
        lines.append(f"  {problem}")
    lines.append("OK: zero cross-talk" if clean else "FAILED: see above")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--learners", type=int, default=60, choices=range(1, 201), metavar="N (1-200)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--think-ms", default="300,1500", help="pause between a learner's clicks, low,high ms")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.seconds <= 600:
        parser.error("--seconds must be between 1 and 600")
    report = run(args.learners, args.seconds, _think(args.think_ms))
    print(json.dumps(report) if args.json else render(report))
    return 0 if not report["cross_talk_count"] and not report["refused"] and not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
