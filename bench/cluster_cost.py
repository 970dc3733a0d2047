"""A cost model of the cluster: what does a job cost each master, and what would N masters take?

    python bench/cluster_cost.py             # the figures of docs/benchmarks-latency.md (about a minute)
    python bench/cluster_cost.py --quick     # a rough look
    python bench/cluster_cost.py --json      # the same figures as JSON

On a 2-core machine three masters cannot show their scale-out (bench/cluster_scale.py
measures the ratio, and says why it stays near 1 here). This bench measures what does not
depend on the core count, on two real clusters started for the run (no replicas): one
master holding every slot, and three masters.

* **Server CPU per job**, from each master's own ``INFO cpu`` (used_cpu_user + sys) before
  and after a drain: the same queues (``--queues``, dealt evenly over the three masters by
  hash tag) filled with no-op jobs and drained by one process per queue, with echoq.Worker
  and with claim_many + complete_many_and_claim (``batch``: 50 jobs per call), on one master
  and on three; the two clusters interleaved over the rounds, the median round reported. On
  three masters each master's CPU is divided by the jobs of the queues it serves.
* **Like for like**, the check: each master of three drained of its own queues alone (the
  other two idle), against the single master drained of the same queues by as many
  processes: the same jobs per call, the same clients per master, the same number of busy
  processes on the machine's cores. With every queue at once the two setups differ in
  more than sharding: one master serves six clients and gets through about twice the calls
  per turn of its event loop (``eventloop_cycles``, printed as calls per loop turn) that
  each of three serving two does, and three servers instead of one share the 2 cores with
  the clients. Those figures stay in the table; the check is the like-for-like ratio.
* **Calls per job** and **cross-slot calls**: ``INFO commandstats`` and ``INFO errorstats``
  of every node after ``CONFIG RESETSTAT``: CROSSSLOT errors must be 0 (every script's keys
  share one queue's hash tag), and MOVED/ASK redirections are counted too.
* **Share of jobs per master for N queues** named ``q-0`` .. ``q-{N-1}`` (no hand placement:
  where CRC16 puts them), for N = 1 .. 48, against the even share 1/3 -- with equal load
  per queue, the busiest master's share is what bounds the cluster.

The model: a master that has a core to itself completes at most 1e6 / (server µs per job)
jobs/s; with N masters and the busiest one serving a share s of the jobs, the cluster
completes at most (1e6 / server µs per job) / s -- N times one master's when s = 1/N --
provided the clients keep up: each job costs the clients ``client µs per job`` of CPU, so
the clients need (client µs / server µs) cores per saturated master. On this machine all
of it shares 2 cores: the bound here is 2e6 / (server + client µs per job). The check: the
server CPU per job on three masters, like for like, is within 10% of one master's
(sharding adds no work per job), which is what makes the N-master prediction linear.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _common import description, machine, machine_line, median, positive_int, table
from cluster_scale import PROCESS_TIMEOUT_S, _drain, queue_names

import echoq
from echoq import Keyspace, Queue
from echoq.teaching.cluster import LocalCluster, Node, start_cluster

DEFAULT_QUEUES = 6
DEFAULT_ROUNDS = 3
DEFAULT_JOBS = {"worker": 2_000, "batch": 10_000}  # per queue
SHARE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 24, 48)
TOLERANCE = 0.10


class BenchmarkMiscounted(AssertionError):
    """A run did not complete exactly the jobs it was given: its CPU per job would be a lie."""


def server_cpu_s(node: Node) -> float:
    with node.client() as client:
        info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def client_cpu_s(results: list[tuple[Any, ...]]) -> float:
    return sum(r[4] for r in results)


def stats_of(node: Node) -> dict[str, int]:
    """The script calls and the errors worth counting that this node saw since its last RESETSTAT."""
    with node.client() as client:
        commands = client.info("commandstats")
        errors = client.info("errorstats")
        loops = int(client.info("stats").get("eventloop_cycles", 0))
    calls = sum(int(v["calls"]) for k, v in commands.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))
    return {
        "script_calls": calls,
        # Turns of the server's event loop: a turn's fixed cost (epoll_wait, its housekeeping)
        # is shared by the calls it serves.
        "loops": loops,
        "crossslot": int(errors.get("errorstat_CROSSSLOT", {}).get("count", 0)),
        "moved": int(errors.get("errorstat_MOVED", {}).get("count", 0)),
        "ask": int(errors.get("errorstat_ASK", {}).get("count", 0)),
    }


def drain(cluster: LocalCluster, names: list[str], path: str, jobs: int) -> dict[str, Any]:
    """Fill each queue with ``jobs`` jobs, drain with one process per queue; CPU per master."""
    client = echoq.connect(cluster.url)
    for name in names:
        queue = Queue(name, client, keep_done=0)
        queue.reset()
        for start in range(0, jobs, 1_000):
            queue.enqueue_many([""] * min(1_000, jobs - start))
    masters = cluster.masters()
    owner = {name: cluster.master_of(Keyspace(name)).name for name in names}
    for node in masters:
        with node.client() as c:
            c.config_resetstat()
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(names) + 1)
    results = context.Queue()
    url = cluster.url
    workers = [context.Process(target=_drain, args=(url, n, path, barrier, results), daemon=True) for n in names]
    for w in workers:
        w.start()
    try:
        barrier.wait(PROCESS_TIMEOUT_S)
        before = {node.name: server_cpu_s(node) for node in masters}
        reports = [results.get(timeout=PROCESS_TIMEOUT_S) for _ in workers]
        after = {node.name: server_cpu_s(node) for node in masters}
    finally:
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
    for name, completed, *_ in reports:
        counts = Queue(name, client).snapshot(limit=1).counts
        left = {place: n for place, n in counts.items() if place != "done" and n}
        if completed != jobs or left:
            raise BenchmarkMiscounted(f"{name}: {jobs} jobs, {completed} completed, left over {left or 'nothing'}")
        Queue(name, client).reset()
    client.close()
    stats = {node.name: stats_of(node) for node in masters}
    per_master = []
    for node in masters:
        served = sum(jobs for name in names if owner[name] == node.name)
        cpu = after[node.name] - before[node.name]
        per_master.append(
            {
                "master": node.name,
                "jobs": served,
                "cpu_s": cpu,
                "us_per_job": 1e6 * cpu / served if served else None,
                **stats[node.name],
            }
        )
    total_jobs = jobs * len(names)
    wall = max(r[3] for r in reports) - min(r[2] for r in reports)
    return {
        "jobs": total_jobs,
        "seconds": wall,
        "server_us_per_job": 1e6 * sum(m["cpu_s"] for m in per_master) / total_jobs,
        "client_us_per_job": 1e6 * client_cpu_s(reports) / total_jobs,
        "calls_per_job": sum(m["script_calls"] for m in per_master) / total_jobs,
        "calls_per_loop": sum(m["script_calls"] for m in per_master) / max(1, sum(m["loops"] for m in per_master)),
        "crossslot": sum(m["crossslot"] for m in per_master),
        "moved": sum(m["moved"] + m["ask"] for m in per_master),
        "masters": per_master,
    }


def alone(one: LocalCluster, three: LocalCluster, names: list[str], path: str, jobs: int) -> dict[int, dict[str, Any]]:
    """Like for like: each master of three drained of its own queues alone (the other two
    idle), and the single master drained of the same queues by the same number of
    processes, one after the other: the same jobs per call, the same clients per master and
    the same number of processes sharing the machine's cores. Only the serving master's CPU
    counts. What is left between the two is what sharding adds per job."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(three.master_of(Keyspace(name)).name, []).append(name)
    totals = {m: {"jobs": 0, "cpu_s": 0.0, "script_calls": 0, "loops": 0} for m in (1, 3)}
    for group in groups.values():
        for masters, cluster in ((1, one), (3, three)):
            for m in drain(cluster, group, path, jobs)["masters"]:
                if m["jobs"]:
                    for key in totals[masters]:
                        totals[masters][key] += m[key]
    return {
        masters: {
            "jobs": t["jobs"],
            "server_us_per_job": 1e6 * t["cpu_s"] / t["jobs"],
            "calls_per_loop": t["script_calls"] / max(1, t["loops"]),
        }
        for masters, t in totals.items()
    }


def shares(three: LocalCluster) -> list[dict[str, Any]]:
    """For N queues q-0 .. q-{N-1}: the share of them (of jobs, at equal load) each master serves."""
    masters = [node.name for node in three.masters()]
    owner = {n: three.master_of(Keyspace(f"q-{n}")).name for n in range(max(SHARE_COUNTS))}
    out = []
    for count in SHARE_COUNTS:
        tally = dict.fromkeys(masters, 0)
        for n in range(count):
            tally[owner[n]] += 1
        busiest = max(tally.values()) / count
        out.append({"queues": count, "per_master": sorted(tally.values(), reverse=True), "busiest_share": busiest})
    return out


def run(queues: int, rounds: int, jobs: dict[str, int], progress: Callable[[str], None]) -> dict[str, Any]:
    with ThreadPoolExecutor(2) as pool:
        starting = [pool.submit(start_cluster, masters=n, replicas=0, replace=False) for n in (1, 3)]
    one, three = (f.result() for f in starting)
    try:
        names = queue_names(three, queues)
        with one.masters()[0].client() as probe:
            facts = machine(probe)
        runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
        alone_runs: dict[str, list[dict[int, dict[str, Any]]]] = {}
        for round_no in range(1, rounds + 1):
            for path in jobs:
                for masters, cluster in ((1, one), (3, three)):
                    progress(f"round {round_no}/{rounds}: {path} on {masters} master(s)")
                    runs.setdefault((path, masters), []).append(drain(cluster, names, path, jobs[path]))
                progress(f"round {round_no}/{rounds}: {path}, each master alone against one master")
                alone_runs.setdefault(path, []).append(alone(one, three, names, path, jobs[path]))
        share_rows = shares(three)
    finally:
        one.stop()
        three.stop()
    cores = facts["cores"]
    paths: dict[str, Any] = {}
    for path in jobs:
        chosen = {}
        for masters in (1, 3):
            mine = runs[(path, masters)]
            order = sorted(range(len(mine)), key=lambda i: mine[i]["server_us_per_job"])
            chosen[masters] = mine[order[len(mine) // 2]] | {
                "server_us_per_job_rounds": [r["server_us_per_job"] for r in mine]
            }
        s1 = chosen[1]["server_us_per_job"]
        c1 = chosen[1]["client_us_per_job"]
        # The check: like for like, each master alone against one master (same clients per master).
        like = alone_runs[path]
        ratio = median([r[3]["server_us_per_job"] / r[1]["server_us_per_job"] for r in like])
        # All queues at once: on 2 cores, 3 servers and every client process share them.
        at_once = median(
            [
                b["server_us_per_job"] / a["server_us_per_job"]
                for a, b in zip(runs[(path, 1)], runs[(path, 3)], strict=True)
            ]
        )
        saturate = 1e6 / s1
        predictions = []
        for n in (1, 2, 3, 4, 6, 8):
            share = 1 / n
            predictions.append(
                {
                    "masters": n,
                    "server_bound_jobs_s": saturate / share,
                    "client_cores_needed": n * c1 / s1,
                }
            )
        paths[path] = {
            "one": chosen[1],
            "three": chosen[3],
            "three_vs_one_server_us_ratio": ratio,
            "alone": {
                str(m): {
                    "jobs": like[0][m]["jobs"],
                    "server_us_per_job": median([r[m]["server_us_per_job"] for r in like]),
                    "server_us_per_job_rounds": [r[m]["server_us_per_job"] for r in like],
                    "calls_per_loop": median([r[m]["calls_per_loop"] for r in like]),
                }
                for m in (1, 3)
            },
            "three_vs_one_all_at_once_ratio": at_once,
            "within_tolerance": abs(ratio - 1) <= TOLERANCE,
            "one_master_saturates_at": saturate,
            "client_cores_per_master": c1 / s1,
            "this_machine_bound_jobs_s": cores * 1e6 / (s1 + c1),
            "predictions": predictions,
            "crossslot": sum(r["crossslot"] for key, rs in runs.items() if key[0] == path for r in rs),
            "moved": sum(r["moved"] for key, rs in runs.items() if key[0] == path for r in rs),
        }
    return {
        "machine": facts,
        "queues": queues,
        "rounds": rounds,
        "jobs_per_queue": jobs,
        "paths": paths,
        "shares": share_rows,
        "tolerance": TOLERANCE,
    }


def render(report: dict[str, Any]) -> str:
    facts = report["machine"]
    lines = [
        f"Cluster cost model: {report['queues']} queues (dealt evenly over three masters), one process per queue, "
        f"median of {report['rounds']} round(s)",
        f"machine: {machine_line(facts)}",
        "Server CPU from each master's INFO cpu; client CPU of the worker processes. µs per job.",
        "",
    ]
    rows = []
    for path, p in report["paths"].items():
        for masters, key in ((1, "one"), (3, "three")):
            r = p[key]
            per_master = ", ".join(f"{m['us_per_job']:.1f}" for m in r["masters"] if m["us_per_job"] is not None)
            rows.append(
                [
                    path,
                    str(masters),
                    f"{r['jobs']:,}",
                    f"{r['jobs'] / r['seconds']:,.0f}",
                    f"{r['server_us_per_job']:.1f}",
                    per_master,
                    f"{r['client_us_per_job']:.1f}",
                    f"{r['calls_per_job']:.3f}",
                    f"{r['calls_per_loop']:.2f}",
                    str(r["crossslot"]),
                    str(r["moved"]),
                ]
            )
    lines.append(
        table(
            [
                "path",
                "masters",
                "jobs",
                "jobs/s here",
                "server µs/job",
                "each master",
                "client µs/job",
                "calls/job",
                "calls/loop turn",
                "CROSSSLOT",
                "MOVED/ASK",
            ],
            rows,
            right=[False, True, True, True, True, False, True, True, True, True, True],
        )
    )
    lines += [
        "",
        "Like for like: each master of three drained of its own queues alone, against the single master "
        "drained of the same queues by as many processes (the serving master's CPU only):",
        "",
    ]
    like_rows = []
    for path, p in report["paths"].items():
        one, three = p["alone"]["1"], p["alone"]["3"]

        def with_rounds(r: dict[str, Any]) -> str:
            return f"{r['server_us_per_job']:.1f} ({', '.join(f'{v:.1f}' for v in r['server_us_per_job_rounds'])})"

        like_rows.append(
            [
                path,
                f"{one['jobs']:,}",
                with_rounds(one),
                with_rounds(three),
                f"{one['calls_per_loop']:.2f} / {three['calls_per_loop']:.2f}",
                f"{p['three_vs_one_server_us_ratio']:.2f}",
                f"{p['three_vs_one_all_at_once_ratio']:.2f}",
            ]
        )
    lines.append(
        table(
            [
                "path",
                "jobs",
                "1 master µs/job (rounds)",
                "each of 3 alone µs/job (rounds)",
                "calls/loop turn 1 / 3",
                "3 / 1 like for like",
                "3 / 1 all queues at once",
            ],
            like_rows,
            right=[False, True, True, True, True, True, True],
        )
    )
    lines += ["", "Share of jobs per master, N queues q-0 .. q-{N-1} at equal load (even: 0.33):", ""]
    lines.append(
        table(
            ["queues", "queues per master", "busiest share", "cluster / one master (server-bound)"],
            [
                [
                    str(s["queues"]),
                    " / ".join(map(str, s["per_master"])),
                    f"{s['busiest_share']:.2f}",
                    f"{1 / s['busiest_share']:.2f}x",
                ]
                for s in report["shares"]
            ],
            right=[True, False, True, True],
        )
    )
    lines += ["", "The model (each master with a core to itself, clients enough):"]
    for path, p in report["paths"].items():
        verdict = "within" if p["within_tolerance"] else "NOT within"
        lines.append(
            f"- {path}: server CPU per job, 3 masters / 1 like for like = {p['three_vs_one_server_us_ratio']:.2f} "
            f"({verdict} {report['tolerance']:.0%}; all queues at once on this machine: "
            f"{p['three_vs_one_all_at_once_ratio']:.2f}); one master saturates near "
            f"{p['one_master_saturates_at']:,.0f} jobs/s; "
            f"N masters near N x that at an even share, bounded by the busiest master's share otherwise; each "
            f"saturated master needs {p['client_cores_per_master']:.1f} cores of these Python clients. On this "
            f"machine ({facts['cores']} cores for everything) the bound is "
            f"{p['this_machine_bound_jobs_s']:,.0f} jobs/s: "
            f"CPU, shared. Cross-slot calls: {p['crossslot']}; MOVED/ASK: {p['moved']}."
        )
    preds = next(iter(report["paths"].values()))["predictions"]
    lines += ["", "Predicted server-bound throughput, " + next(iter(report["paths"])) + " path:", ""]
    lines.append(
        table(
            ["masters", "jobs/s (server-bound)", "client cores needed"],
            [[str(p["masters"]), f"{p['server_bound_jobs_s']:,.0f}", f"{p['client_cores_needed']:.1f}"] for p in preds],
            right=[True, True, True],
        )
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--queues", type=positive_int, default=DEFAULT_QUEUES, help="queues (and processes)")
    parser.add_argument("--rounds", type=positive_int, help=f"interleaved rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--jobs", type=positive_int, help="jobs per queue for both paths")
    parser.add_argument("--quick", action="store_true", help="few jobs, one round")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)
    if args.jobs:
        jobs = dict.fromkeys(DEFAULT_JOBS, args.jobs)
    elif args.quick:
        jobs = {path: n // 20 for path, n in DEFAULT_JOBS.items()}
    else:
        jobs = dict(DEFAULT_JOBS)

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    report = run(args.queues, rounds, jobs, progress)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
