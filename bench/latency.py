"""Pickup latency: from ``enqueue`` returning to the handler starting, echoq.Worker vs BullMQ's.

    python bench/latency.py              # the figures of docs/benchmarks-latency.md (about 3.5 minutes)
    python bench/latency.py --quick      # a rough look
    python bench/latency.py --json       # the same figures as JSON

One private valkey-server; for each load level -- an idle worker (jobs one at a time, 10 to
40 ms apart, so each finds the worker waiting for a wake) and steady rates of 10, 100,
1,000 and 5,000 jobs/s -- four workers are measured one after another, each in a process
of its own with its defaults but concurrency: echoq.Worker c1, BullMQ's Worker c1,
echoq.Worker c8, BullMQ's Worker c8. The producer is the same for both: one node process
(bench/bullmq/latency.cjs) sending on the same schedule, each call at its moment without
waiting for the ones before to return (open loop: it never waits for the workers nor for
its own replies, so both libraries are offered the same rate) -- echoq's enqueue.lua by EVALSHA with the keys
and arguments ``Queue.enqueue`` sends, BullMQ's ``Queue.add`` -- so neither side's figures
depend on how fast its own language's client sends. (Without node, echoq alone is measured,
with this process as the producer.)

Latency of a job = the moment its handler started - the moment its ``enqueue`` (``add``)
returned, both read from CLOCK_MONOTONIC: one clock for every process on the machine,
which Python's ``time.monotonic_ns()`` and node's ``process.hrtime.bigint()`` both read (the
run proves it: a node reading taken between two Python readings falls between them).
Under load the producer may read its reply late, after the handler began: such a job's
latency is negative. The table also gives the latency from the moment the enqueue was
SENT ("from call"): never negative, an upper bound that includes the enqueue's own trip.

The reference, in the same run before each level: the raw round trip, sequential EVALSHA
of ``return 1`` from this process. Targets: an idle echoq.Worker starts a job at p50 within
2x that round trip's p50, at p99 within 5 ms; at every level echoq's p99 is at or below
BullMQ's at the same concurrency. Every run checks that each job started exactly once and
nothing is left in the queue.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import description, load_average, machine, machine_line, median, table
from _latency import (
    Job,
    bullmq_missing,
    bullmq_worker,
    check_same_clock,
    echoq_worker,
    enqueue_echoq,
    enqueue_node,
    idle_round_trips,
    idle_schedule,
    rate_schedule,
    raw_round_trips,
    started_once,
    summary_ms,
)

import echoq
from echoq import Queue
from echoq.server import start_server

RATES = (10, 100, 1_000, 5_000)
# Jobs per level: about 2 to 4 seconds each, and 20 s at 10 jobs/s, whose p99 would
# otherwise be the largest of a few dozen samples; the full run takes about 3.5 minutes.
FULL_JOBS = {"idle": 150, 10: 200, 100: 400, 1_000: 3_000, 5_000: 10_000}
QUICK_JOBS = {"idle": 12, 10: 5, 100: 30, 1_000: 100, 5_000: 200}
CONCURRENCIES = (1, 8)
TRIPS = 500  # raw round trips per level
SETTLE_S = 0.2  # after a worker says ready: its first beat and first empty claim are behind it
TARGET_IDLE_P50_X_RT = 2.0
TARGET_IDLE_P99_MS = 5.0


def schedule_for(level: str | int, jobs: int) -> list[Job]:
    return idle_schedule(jobs) if level == "idle" else rate_schedule(jobs, float(level))


def measure(
    system: str,
    url: str,
    client: Any,
    name: str,
    concurrency: int,
    schedule: list[Job],
    workdir: Path,
    node_producer: bool,
) -> dict:
    """One worker at one level: the latency of each job, checked for loss and duplicates."""
    start = echoq_worker if system == "echoq" else bullmq_worker
    worker = start(url, name, concurrency=concurrency, expect=len(schedule))
    try:
        worker.ready()
        time.sleep(SETTLE_S)
        if system == "echoq" and not node_producer:
            sent, returned = enqueue_echoq(Queue(name, client), schedule)
        else:
            sent, returned = enqueue_node(
                url, name, schedule, workdir, Queue(name, client) if system == "echoq" else None
            )
        result = worker.result()
    finally:
        worker.close()
    starts = started_once(result, len(schedule), worker.what)
    if system == "echoq":
        Queue(name, client).reset()
    waits = [starts[i] - returned[i] for i in range(len(schedule))]
    span_s = (returned[-1] - returned[0]) / 1e9
    row = summary_ms(waits)
    row["achieved_per_s"] = (len(schedule) - 1) / span_s if span_s > 0 and len(schedule) > 1 else None
    row["enqueue_ms_p50"] = summary_ms([b - a for a, b in zip(sent, returned, strict=True)])["p50"]
    # From the moment the enqueue was sent: never negative, and an upper bound (it includes the
    # enqueue's own round trip). From its return, a producer slow to read its reply (a loaded
    # machine) makes a start look earlier than the return: a handler may begin first.
    row["from_sent"] = summary_ms([starts[i] - sent[i] for i in range(len(schedule))])
    return row


def run(levels: list[str | int], jobs: dict[str | int, int], with_bullmq: bool, progress: Any) -> dict[str, Any]:
    skipped = None if not with_bullmq else bullmq_missing()
    if not with_bullmq:
        skipped = "left out (--no-bullmq)"
    systems = ["echoq"] + (["bullmq"] if skipped is None else [])
    server = start_server()
    workdir = Path(tempfile.mkdtemp(prefix="echoq-latency-"))
    try:
        client = echoq.connect(server.url)
        facts = machine(client)
        facts["load_before"] = load_average()
        facts["clock"] = "CLOCK_MONOTONIC (time.monotonic_ns / process.hrtime.bigint)"
        facts["producer"] = (
            "one node process, each call sent on the schedule (echoq: EVALSHA enqueue.lua; BullMQ: Queue.add)"
            if skipped is None
            else "this Python process, Queue.enqueue one call at a time"
        )
        if skipped is None:
            facts["clock_check_bracket_us"] = round(check_same_clock() / 1e3, 1)
        rows: list[dict[str, Any]] = []
        idle_trips: dict[str, float] | None = None
        round_trips: dict[str, dict[str, float]] = {}
        counter = itertools.count()
        for level in levels:
            trips = raw_round_trips(client, TRIPS)
            round_trips[str(level)] = summary_ms(trips)
            schedule = schedule_for(level, jobs[level])
            if level == "idle":
                progress(f"idle: raw round trips after the same gaps, {len(schedule)} calls")
                idle_trips = summary_ms(idle_round_trips(client, schedule))
            for concurrency in CONCURRENCIES:
                for system in systems:
                    progress(f"{level}: {system} c{concurrency}, {len(schedule)} jobs")
                    name = f"lat-{system}-{concurrency}-{next(counter)}"
                    row = measure(system, server.url, client, name, concurrency, schedule, workdir, skipped is None)
                    rows.append({"level": str(level), "system": system, "concurrency": concurrency, **row})
        facts["load_after"] = load_average()
        client.close()
    finally:
        server.stop()
        for leftover in workdir.iterdir():
            leftover.unlink()
        workdir.rmdir()
    rt_p50 = median([r["p50"] for r in round_trips.values()])
    by = {(r["level"], r["system"], r["concurrency"]): r for r in rows}
    targets: dict[str, Any] = {}
    idle = by.get(("idle", "echoq", 1))
    if idle is not None:
        targets["idle_p50_vs_round_trip"] = {
            "what": "idle echoq.Worker c1 p50 / raw EVALSHA round trip p50 (back to back)",
            "value": idle["p50"] / rt_p50,
            "at_most": TARGET_IDLE_P50_X_RT,
        }
        if idle_trips is not None:
            targets["idle_p50_vs_idle_round_trip"] = {
                "what": "idle echoq.Worker c1 p50 / raw EVALSHA round trip p50 after the same idle gaps",
                "value": idle["p50"] / idle_trips["p50"],
                "at_most": TARGET_IDLE_P50_X_RT,
            }
        targets["idle_p99_ms"] = {
            "what": "idle echoq.Worker c1 p99, ms",
            "value": idle["p99"],
            "at_most": TARGET_IDLE_P99_MS,
        }
    if skipped is None:
        for level in levels:
            for concurrency in CONCURRENCIES:
                mine, theirs = by[(str(level), "echoq", concurrency)], by[(str(level), "bullmq", concurrency)]
                targets[f"p99_{level}_c{concurrency}_vs_bullmq"] = {
                    "what": f"{level}{'' if level == 'idle' else ' jobs/s'}, c{concurrency}: echoq p99 / BullMQ p99",
                    "value": mine["p99"] / theirs["p99"],
                    "at_most": 1.0,
                }
    for target in targets.values():
        target["met"] = target["value"] <= target["at_most"]
    return {
        "machine": facts,
        "levels": [str(level) for level in levels],
        "jobs": {str(k): v for k, v in jobs.items() if k in levels},
        "round_trip_ms": round_trips,
        "round_trip_p50_ms": rt_p50,
        "idle_round_trip_ms": idle_trips,
        "rows": rows,
        "targets": targets,
        "bullmq_skipped": skipped,
    }


def render(report: dict[str, Any]) -> str:
    facts = report["machine"]
    rt = report["round_trip_p50_ms"]
    systems = sorted({r["system"] for r in report["rows"]}, key=lambda s: s != "echoq")
    by = {(r["level"], r["system"], r["concurrency"]): r for r in report["rows"]}
    lines = [
        "echoq pickup latency: enqueue returned -> handler started, one private server, CLOCK_MONOTONIC",
        f"machine: {machine_line(facts)}; load average {facts['load_before']} before, {facts['load_after']} after",
        f"raw round trip (sequential EVALSHA 'return 1'): p50 {rt * 1000:.0f} µs (median over levels)"
        + (
            f"; clock check: node's readings within Python's, brackets <= {facts['clock_check_bracket_us']} µs"
            if "clock_check_bracket_us" in facts
            else ""
        ),
    ]
    idle_rt = report["idle_round_trip_ms"]
    if idle_rt:
        lines.append(
            "the same round trip after the idle schedule's gaps (one call, 10-40 ms apart): "
            f"p50 {idle_rt['p50'] * 1000:.0f} µs, p99 {idle_rt['p99'] * 1000:.0f} µs"
            " -- what waking an idle machine costs any call"
        )
    lines += [
        f"producer: {facts['producer']}",
        "Absolute figures move with the machine's load; compare the ratios, measured side by side in this run.",
        "",
    ]
    headers = ["load", "worker", "jobs", "achieved /s", "p50 ms", "p99 ms", "max ms", "p50 / RT", "p99 / BullMQ p99"]
    headers += ["from call: p50", "p99"]
    body = []
    for level in report["levels"]:
        for concurrency in (1, 8):
            for system in systems:
                r = by.get((level, system, concurrency))
                if r is None:
                    continue
                other = by.get((level, "bullmq", concurrency))
                ratio = f"{r['p99'] / other['p99']:.2f}" if system == "echoq" and other else ""
                rate = "" if level == "idle" or r["achieved_per_s"] is None else f"{r['achieved_per_s']:,.0f}"
                body.append(
                    [
                        level if level == "idle" else f"{int(level):,}/s",
                        f"{'echoq.Worker' if system == 'echoq' else 'BullMQ 5'} c{concurrency}",
                        f"{r['n']:,}",
                        rate,
                        f"{r['p50']:.2f}",
                        f"{r['p99']:.2f}",
                        f"{r['max']:.2f}",
                        f"{r['p50'] / rt:.1f}",
                        ratio,
                        f"{r['from_sent']['p50']:.2f}",
                        f"{r['from_sent']['p99']:.2f}",
                    ]
                )
    lines.append(table(headers, body, right=[False, False, *[True] * 9]))
    if report["bullmq_skipped"]:
        lines += ["", f"BullMQ rows skipped: {report['bullmq_skipped']}"]
    lines += ["", "Targets, each measured within this run:"]
    for target in report["targets"].values():
        verdict = "met" if target["met"] else "NOT met"
        lines.append(f"- {target['what']}: {target['value']:.2f}, target <= {target['at_most']}: {verdict}")
    return "\n".join(lines)


def parse_levels(text: str) -> list[str | int]:
    levels: list[str | int] = []
    for part in text.split(","):
        part = part.strip()
        if part == "idle":
            levels.append("idle")
        elif part.isdigit() and int(part) in RATES:
            levels.append(int(part))
        else:
            raise argparse.ArgumentTypeError(f"{part!r}: levels are idle and {', '.join(map(str, RATES))}")
    return levels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="a few jobs per level: a rough look")
    parser.add_argument("--levels", type=parse_levels, default=["idle", *RATES], help="e.g. idle,100,5000")
    parser.add_argument("--no-bullmq", action="store_true", help="leave BullMQ out (no node, or no npm registry)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    report = run(args.levels, QUICK_JOBS if args.quick else FULL_JOBS, not args.no_bullmq, progress)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
