"""Does a queue keep memory it should have let go? 10,000 jobs, then 20,000 more, through the
Worker with the keyed consumer, on one private server; the server's ``used_memory`` after
each run, and the bytes retained per extra job.

    python bench/soak.py                 # docs/benchmarks.md's figures (about a minute)
    python bench/soak.py --quick         # 1,000 then 2,000 jobs, with the caps at 500
    python bench/soak.py --json          # the same figures as JSON
    python bench/soak.py --binary /usr/bin/redis-server    # on Redis 7 instead

What a completed job leaves behind is bounded (docs/limits.md): its id in
``emq:{q}:done`` (newest ``keep_done``), its effects-ledger entry (as long as done keeps
the id) and its outbox record (newest ``keep_outbox``). Run 1 fills those caps; run 2
pushes twice as many jobs through, so anything that grows with the job count shows as
bytes retained per extra job: (used_memory after run 2 - after run 1) / jobs in run 2.
The target is at most 20 B per extra job -- retained bytes that do not grow with the job
count. Every run checks that each job was completed exactly once, with one effect.
Each reading is taken once the server has settled (lazy frees done, the figure steady),
with the server's slow log cleared (it keeps the arguments of its 128 latest slow
commands: server bookkeeping, bounded, not the queue's) and the workers' connections
closed; the Lua VM's memory is reported apart by the server and is not in used_memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import redis
from _common import description, machine, machine_line, positive_int, table

import echoq
from echoq import Effects, Queue, Worker, keyed_consumer
from echoq.queue import DEFAULT_KEEP_DONE
from echoq.server import start_server

TARGET_BYTES_PER_EXTRA_JOB = 20
FILL_CHUNK = 1_000


class SoakMiscounted(AssertionError):
    """A run did not complete each of its jobs exactly once: its memory figure would be a lie."""


def settled_used_memory(client: redis.Redis) -> int:
    """used_memory once the server has settled: lazy frees done (they run in a thread) and
    the figure steady over three readings 100 ms apart (the keyspace's hash table shrinks
    in the server's cron after many keys were deleted), or after 5 s."""
    # The slow log keeps the arguments of up to 128 commands slower than 10 ms (a batch of
    # 1,000 enqueues on a loaded machine, say): the server's bookkeeping, not the queue's.
    client.slowlog_reset()
    give_up = time.monotonic() + 5
    readings: list[int] = []
    while True:
        info = client.info("memory")
        if int(info.get("lazyfree_pending_objects", 0)) == 0:
            readings.append(int(info["used_memory"]))
        if (len(readings) >= 3 and len(set(readings[-3:])) == 1) or time.monotonic() > give_up:
            return readings[-1] if readings else int(info["used_memory"])
        time.sleep(0.1)


def key_sizes(queue: Queue, probe: redis.Redis) -> dict[str, int]:
    """MEMORY USAGE of each key of the queue, rows summed together."""
    sizes: dict[str, int] = {}
    for key in queue.keys_in_use():
        name = key.removeprefix(queue.keys.prefix)
        name = "rows" if name.startswith("job:") else name
        sizes[name] = sizes.get(name, 0) + int(probe.memory_usage(key, samples=0) or 0)
    return dict(sorted(sizes.items()))


def run_jobs(queue: Queue, effects: Effects, jobs: int, concurrency: int) -> float:
    """Push ``jobs`` jobs through the Worker, 1,000 at a time (a producer keeping a steady
    backlog, so both runs reach the same peak of live jobs and only what is RETAINED after
    a job finishes can differ). Returns the seconds the workers took."""
    before = queue.snapshot(limit=1).stats.get("completed", 0)
    worked = 0.0
    for start in range(0, jobs, FILL_CHUNK):
        queue.enqueue_many([f"order {n}" for n in range(start, min(jobs, start + FILL_CHUNK))])
        started = time.perf_counter()
        Worker(queue, keyed_consumer(effects), concurrency=concurrency, lease_ms=30_000).work(burst=True)
        worked += time.perf_counter() - started
    snap = queue.snapshot(limit=1)
    completed = snap.stats.get("completed", 0) - before
    if completed != jobs or snap.counts["pending"] or snap.counts["active"] or snap.counts["dead"]:
        raise SoakMiscounted(f"{jobs} jobs in, {completed} completed, {snap.counts} left")
    if effects.duplicates():
        raise SoakMiscounted(f"{effects.duplicates()} duplicate effects")
    return worked


def soak(client: redis.Redis, probe: redis.Redis, runs: list[int], keep: int, concurrency: int) -> list[dict[str, Any]]:
    # Warm the server up (scripts cached, allocator pools in use) on a queue of its own.
    warm = Queue("soak-warm-up", client, keep_done=keep)
    run_jobs(warm, Effects(warm, keep_outbox=keep), 500, concurrency)
    warm.reset()
    queue = Queue("soak", client, keep_done=keep, keep_dead=keep)
    queue.reset()
    effects = Effects(queue, keep_outbox=keep)
    client.connection_pool.disconnect()
    rows = [{"run": "empty queue", "jobs": 0, "total": 0, "used_memory": settled_used_memory(probe), "seconds": 0.0}]
    total = 0
    for n, jobs in enumerate(runs, start=1):
        seconds = run_jobs(queue, effects, jobs, concurrency)
        total += jobs
        client.connection_pool.disconnect()  # the same connections' buffers in every reading
        rows.append(
            {
                "run": f"run {n}",
                "jobs": jobs,
                "total": total,
                "used_memory": settled_used_memory(probe),
                "seconds": round(seconds, 2),
                "keys": key_sizes(queue, probe),
            }
        )
    for before, after in zip(rows, rows[1:], strict=False):
        after["retained"] = after["used_memory"] - rows[0]["used_memory"]
        after["grown"] = after["used_memory"] - before["used_memory"]
        after["per_job"] = round(after["grown"] / after["jobs"], 2)
    queue.reset()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--jobs", type=positive_int, default=10_000, help="jobs in run 1; run 2 has twice as many")
    parser.add_argument("--keep", type=positive_int, default=DEFAULT_KEEP_DONE, help="keep_done/dead/outbox caps")
    parser.add_argument("--concurrency", type=positive_int, default=4, help="worker threads (default 4)")
    parser.add_argument("--quick", action="store_true", help="1,000 then 2,000 jobs, caps at 500")
    parser.add_argument("--binary", type=Path, default=None, help="a redis-server/valkey-server to run instead")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    first, keep = (1_000, 500) if args.quick else (args.jobs, args.keep)

    server = start_server(args.binary)
    try:
        client = echoq.connect(server.url)
        probe = echoq.connect(server.url)
        facts = machine(probe)
        rows = soak(client, probe, [first, 2 * first], keep, args.concurrency)
    finally:
        server.stop()
    per_extra = rows[-1]["per_job"]
    result = {
        "machine": facts,
        "jobs": first,
        "keep": keep,
        "concurrency": args.concurrency,
        "rows": rows,
        "bytes_per_extra_job": per_extra,
        "target_bytes_per_extra_job": TARGET_BYTES_PER_EXTRA_JOB,
        "target_met": per_extra <= TARGET_BYTES_PER_EXTRA_JOB,
    }
    print(json.dumps(result) if args.json else render(result))
    return 0


def render(result: dict[str, Any]) -> str:
    """The report's tables, from what --json printed."""
    rows, first, keep = result["rows"], result["jobs"], result["keep"]
    body = [
        [
            r["run"],
            f"{r['jobs']:,}",
            f"{r['total']:,}",
            f"{r['used_memory']:,}",
            f"{r.get('retained', 0):,}",
            f"{r.get('grown', 0):+,}",
            f"{r['per_job']:.2f}" if "per_job" in r else "",
            f"{r['seconds']:.1f}" if r["seconds"] else "",
        ]
        for r in rows
    ]
    headers = ["after", "jobs", "jobs so far", "used_memory B", "retained B", "grown B", "B per job", "s"]
    names = sorted({k for r in rows[1:] for k in r["keys"]})
    verdict = "met" if result["target_met"] else "NOT met"
    return "\n".join(
        [
            f"echoq soak: {first:,} then {2 * first:,} jobs through the Worker (keyed consumer, "
            f"{result['concurrency']} threads), keep_done = keep_dead = keep_outbox = {keep:,}, one private server",
            f"machine: {machine_line(result['machine'])}",
            "",
            table(headers, body, [False] + [True] * 7),
            "",
            "MEMORY USAGE per key after each run (bytes; rows summed):",
            table(
                ["key", *(r["run"] for r in rows[1:])],
                [[n, *(f"{r['keys'].get(n, 0):,}" for r in rows[1:])] for n in names],
                [False] + [True] * (len(rows) - 1),
            ),
            "",
            f"bytes retained per extra job (run 2): {result['bytes_per_extra_job']:.2f} B; "
            f"target <= {result['target_bytes_per_extra_job']} B: {verdict}",
        ]
    )

if __name__ == "__main__":
    sys.exit(main())
