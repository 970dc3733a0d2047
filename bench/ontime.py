"""On time: how late do delayed jobs and retries (after their backoff) start? echoq vs BullMQ.

    python bench/ontime.py              # the figures of docs/benchmarks-latency.md (about 25 s)
    python bench/ontime.py --quick      # a rough look
    python bench/ontime.py --json       # the same figures as JSON

One private server; for each library and concurrency (c1, c8) a worker process at its
defaults but concurrency (and the retry backoff) takes the same schedule from the same
producer (one node process, see bench/latency.py): jobs 5 to 30 ms apart, half of them
enqueued with a delay of 50 to 500 ms (echoq ``enqueue(delay_ms=...)``, BullMQ ``add(...,
{delay})``), the other half failing on their first attempt and retried after a fixed
backoff of 200 ms (echoq ``Backoff(base_ms=200, factor=1)``, BullMQ ``{attempts: 2,
backoff: {type: 'fixed', delay: 200}}``).

Lateness = the handler starting - the moment the job was due, on CLOCK_MONOTONIC:
for a delayed job due = the moment its enqueue was SENT + its delay (the server stamps it
a little later, so this overstates lateness by up to one round trip); for a retry due =
the moment the first attempt's handler raised + the backoff (this includes the call that
gives the job back). Every job must start exactly as often as planned (once, or twice
for a retry) and nothing may be left.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import description, load_average, machine, machine_line, table
from _latency import (
    BenchmarkMiscounted,
    Job,
    bullmq_missing,
    bullmq_worker,
    echoq_worker,
    enqueue_echoq,
    enqueue_node,
    raw_round_trips,
    summary_ms,
)

import echoq
from echoq import Queue
from echoq.server import start_server

BACKOFF_MS = 200
DELAY_MS = (50, 500)
GAP_MS = (5.0, 30.0)
FULL_JOBS = 200
QUICK_JOBS = 8
QUICK_DELAY_MS, QUICK_BACKOFF_MS = (20, 100), 50
CONCURRENCIES = (1, 8)
SETTLE_S = 0.2


def schedule(jobs: int, delays: tuple[int, int], backoff_ms: int, seed: int = 25) -> list[Job]:
    rng = random.Random(seed)
    plan: list[Job] = []
    at = 0.0
    for i in range(jobs):
        at += rng.uniform(*GAP_MS)
        if i % 2 == 0:
            plan.append((round(at, 3), rng.randint(*delays), 0))
        else:
            plan.append((round(at, 3), 0, backoff_ms))
    return plan


def measure(
    system: str, url: str, client: Any, name: str, concurrency: int, plan: list[Job], workdir: Path, node: bool
) -> dict[str, Any]:
    retried = sum(1 for _o, _d, b in plan if b)
    backoff_ms = max(b for _o, _d, b in plan)
    expect = len(plan) + retried
    if system == "echoq":
        worker = echoq_worker(url, name, concurrency=concurrency, expect=expect, backoff_ms=backoff_ms)
    else:
        worker = bullmq_worker(url, name, concurrency=concurrency, expect=expect, fail_first=True)
    try:
        worker.ready()
        time.sleep(SETTLE_S)
        if system == "echoq" and not node:
            sent, _returned = enqueue_echoq(Queue(name, client), plan)
        else:
            sent, _returned = enqueue_node(url, name, plan, workdir, Queue(name, client) if system == "echoq" else None)
        result = worker.result()
    finally:
        worker.close()
    runs: dict[int, list[tuple[int, int, int]]] = {}
    for i, attempt, at, raised in result["starts"]:
        runs.setdefault(i, []).append((attempt, at, raised))
    counts = result["counts"]
    left = {k: v for k, v in counts.items() if k not in ("completed", "done") and v}
    planned = {i: (2 if b else 1) for i, (_o, _d, b) in enumerate(plan)}
    if {i: len(r) for i, r in runs.items()} != planned or counts["completed"] != len(plan) or left:
        raise BenchmarkMiscounted(f"{worker.what}: starts per job differ from the plan, or left {left}, {counts}")
    if system == "echoq":
        Queue(name, client).reset()
    delayed, retries = [], []
    for i, (_offset, delay_ms, backoff_ms) in enumerate(plan):
        ordered = sorted(runs[i])
        if backoff_ms:
            (_a1, _t1, raised), (_a2, again, _r2) = ordered
            retries.append(again - (raised + backoff_ms * 1_000_000))
        else:
            delayed.append(ordered[0][1] - (sent[i] + delay_ms * 1_000_000))
    return {"delayed": summary_ms(delayed), "retried": summary_ms(retries)}


def run(jobs: int, quick: bool, with_bullmq: bool, progress: Any) -> dict[str, Any]:
    skipped = bullmq_missing() if with_bullmq else "left out (--no-bullmq)"
    systems = ["echoq"] + (["bullmq"] if skipped is None else [])
    server = start_server()
    workdir = Path(tempfile.mkdtemp(prefix="echoq-ontime-"))
    delays, backoff_ms = (QUICK_DELAY_MS, QUICK_BACKOFF_MS) if quick else (DELAY_MS, BACKOFF_MS)
    plan = schedule(jobs, delays, backoff_ms)
    rows = []
    try:
        client = echoq.connect(server.url)
        facts = machine(client)
        facts["load_before"] = load_average()
        rt = summary_ms(raw_round_trips(client, 500))
        for concurrency in CONCURRENCIES:
            for system in systems:
                progress(f"{system} c{concurrency}: {len(plan)} jobs")
                name = f"ontime-{system}-{concurrency}"
                lateness = measure(system, server.url, client, name, concurrency, plan, workdir, skipped is None)
                rows.append({"system": system, "concurrency": concurrency, **lateness})
        facts["load_after"] = load_average()
        client.close()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    by = {(r["system"], r["concurrency"]): r for r in rows}
    ratios = {}
    if skipped is None:
        for concurrency in CONCURRENCIES:
            for kind in ("delayed", "retried"):
                mine, theirs = by[("echoq", concurrency)][kind], by[("bullmq", concurrency)][kind]
                ratios[f"{kind}_c{concurrency}_p99_vs_bullmq"] = mine["p99"] / theirs["p99"] if theirs["p99"] else None
    return {
        "machine": facts,
        "jobs": jobs,
        "backoff_ms": backoff_ms,
        "delay_ms": list(delays),
        "round_trip_ms": rt,
        "rows": rows,
        "ratios": ratios,
        "bullmq_skipped": skipped,
    }


def render(report: dict[str, Any]) -> str:
    facts = report["machine"]
    lo, hi = report["delay_ms"]
    lines = [
        f"On time: lateness of delayed jobs ({lo}-{hi} ms) and retries (fixed {report['backoff_ms']} ms backoff),"
        f" {report['jobs']} jobs per run (half each)",
        f"machine: {machine_line(facts)}; load average {facts['load_before']} before, {facts['load_after']} after",
        f"raw round trip (EVALSHA 'return 1'): p50 {report['round_trip_ms']['p50'] * 1000:.0f} µs",
        "",
    ]
    rows = []
    for r in report["rows"]:
        for kind in ("delayed", "retried"):
            s = r[kind]
            ratio = (
                report["ratios"].get(f"{kind}_c{r['concurrency']}_p99_vs_bullmq") if r["system"] == "echoq" else None
            )
            rows.append(
                [
                    f"{'echoq.Worker' if r['system'] == 'echoq' else 'BullMQ 5 Worker'} c{r['concurrency']}",
                    kind,
                    str(s["n"]),
                    f"{s['p50']:.2f}",
                    f"{s['p99']:.2f}",
                    f"{s['max']:.2f}",
                    "" if ratio is None else f"{ratio:.2f}",
                ]
            )
    lines.append(
        table(
            ["worker", "jobs", "n", "late p50 ms", "late p99 ms", "late max ms", "p99 / BullMQ p99"],
            rows,
            right=[False, False, True, True, True, True, True],
        )
    )
    if report["bullmq_skipped"]:
        lines.append(f"\nBullMQ skipped: {report['bullmq_skipped']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS} jobs per run, shorter delays")
    parser.add_argument("--jobs", type=int, help=f"jobs per run (default {FULL_JOBS})")
    parser.add_argument("--no-bullmq", action="store_true", help="leave BullMQ out")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    jobs = args.jobs or (QUICK_JOBS if args.quick else FULL_JOBS)
    if jobs < 2:
        parser.error("--jobs must be >= 2 (half delayed, half retried)")

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    report = run(jobs, args.quick, not args.no_bullmq, progress)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
