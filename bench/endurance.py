"""Endurance: a million jobs through 4 Worker processes, one of them SIGKILLed every few
seconds. Does anything drift -- throughput, the server's memory, a client's memory -- and
is every job's effect there exactly once (beyond the redeliveries the queue recorded)?

    python bench/endurance.py                   # 1,000,000 jobs (several minutes; the page says how long)
    python bench/endurance.py --jobs 100000     # a shorter look
    python bench/endurance.py --quick           # 5,000 jobs, a crash per tenth: the test's size
    python bench/endurance.py --json            # the same figures as JSON
    python bench/endurance.py --plot docs/benchmarks-latency-endurance.png

One private server holds the queue and nothing else; a second one holds the effects, so
the first one's ``used_memory`` is the queue's alone. Four worker processes run
``echoq.Worker`` at concurrency 4, lease 2 s (extended every 2/3 s: extension on) and
``max_stalled=100`` (a job caught in several crashes is recovered each time, not
dead-lettered: this run is about loss, not the stall limit). The handler's effect is
``SETBIT seen <job index> 1`` on the effects server; a bit that was already set is a
repeated effect, counted. Three times in every tenth of the jobs (``--crashes-per-tenth``;
spaced by jobs completed, so every tenth carries as many) one of the workers 1-3 (in
turn) is SIGKILLed and started again; worker 0 is never killed, so its RSS is the client
memory followed over the whole run. This process is the producer: it keeps at most
20,000 jobs pending (``enqueue_many``, 1,000 per call), so the queue's peak does not
grow with the job count.

The crashes land in the first 60% of each tenth: the last one leaves several seconds of
work for its jobs to come back in (the drain's tail is not drift).
Recorded every second: jobs completed, the server's used_memory, worker 0's RSS. Reported:
throughput per tenth of the run (100,000 jobs of a million; last / first should be >= 0.9)
and, per tenth, where the time went: CPU per job of each party (the queue's server, the
effects server, the workers, the producer), script calls per job, the cores this run got
and the cores the rest of the machine took (a shared machine's other load shows there,
not in the cost per job),
used_memory once drained (done trimmed to its cap, ``keep_done``) against the empty
queue's before the run, per job (target <= 20 B), worker 0's RSS first / last, and the
invariants: every job completed, every effect there, repeated effects <= the redeliveries
the queue recorded (stalled + unstarted + reaped), nothing pending, active, scheduled or
dead. A run that breaks one is refused, not reported.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from _common import description, load_average, machine, machine_line, median, positive_int, table
from soak import settled_used_memory

import echoq
from echoq import Queue, Worker
from echoq.server import start_server

PROCESSES = 4
CONCURRENCY = 4
LEASE_MS = 2_000
MAX_STALLED = 100
BACKLOG = 20_000
FILL = 1_000
DEFAULT_JOBS = 1_000_000
QUICK_JOBS = 5_000
# 30 over the million: one about every 3 s at this machine's rate.
DEFAULT_CRASHES_PER_TENTH = 3
QUICK_BACKLOG = 300  # the producer stays behind, so crashes land while jobs flow
TARGET_BYTES_PER_JOB = 20
TARGET_FLAT = 0.9
SEEN, REPEATS = "endurance:seen", "endurance:repeats"


class EnduranceMiscounted(AssertionError):
    """A job lost, an effect missing or repeated beyond the recorded redeliveries."""


def _worker(url: str, effects_url: str, name: str) -> None:
    queue = Queue(name, echoq.connect(url))
    effects = echoq.connect(effects_url)

    def handler(delivery: Any) -> None:
        if effects.setbit(SEEN, int(delivery.payload), 1):
            effects.incr(REPEATS)

    worker = Worker(queue, handler, concurrency=CONCURRENCY, lease_ms=LEASE_MS, max_stalled=MAX_STALLED)
    # SIGTERM stops it gracefully (Worker.stop may run in a signal handler). Not a
    # multiprocessing.Event: a process SIGKILLed while waiting on one leaves its Condition
    # expecting a waiter that never wakes, and set() then blocks for ever.
    signal.signal(signal.SIGTERM, lambda _signo, _frame: worker.stop())
    worker.work()


def server_cpu_s(client: Any) -> float:
    """The server's own CPU seconds (user + sys) from its INFO cpu."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def script_calls(client: Any) -> int:
    """Script calls (EVALSHA and EVAL) the server has run since it started."""
    stats = client.info("commandstats")
    return sum(int(stats[k]["calls"]) for k in ("cmdstat_evalsha", "cmdstat_eval") if k in stats)


def process_cpu_s(pid: int) -> float:
    """A live process's CPU seconds (utime + stime) from /proc; 0 where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_cpu_s() -> tuple[float, float]:
    """CPU seconds every core of the machine spent busy, and stolen by the hypervisor, since boot
    (/proc/stat; zeros elsewhere). Busy less this run's own processes is what others took."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def crash_marks(jobs: int, per_tenth: int, blocks: int = 10) -> list[int]:
    """The completed counts at which a worker is killed: ``per_tenth`` in every tenth of the
    run, spread evenly inside it. Spaced by jobs, not by the clock, so that every tenth
    carries as many crashes whatever its rate (by the clock a slow tenth would get more,
    and be slower for it). They land in the first 60% of each tenth, at the same places in
    every one: the last tenth's last crash leaves 4% of the jobs, several seconds of work,
    for the killed worker's jobs to come back in (a lease and a stalled check) while the
    others work, as in every other tenth, rather than being waited for at the end."""
    tenth = jobs / blocks
    return [round(tenth * (k + 0.6 * (i + 0.5) / per_tenth)) for k in range(blocks) for i in range(per_tenth)]


def run(
    jobs: int, crashes_per_tenth: int, progress_bar: bool, sample_s: float = 1.0, backlog: int = BACKLOG
) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    server, effects_server = start_server(), start_server()
    name = "endurance"
    began = time.monotonic()
    try:
        client = echoq.connect(server.url)
        effects = echoq.connect(effects_server.url)
        probe = echoq.connect(server.url)
        facts = machine(client)
        facts["load_before"] = load_average()
        queue = Queue(name, client)
        # Warm up: the scripts cached and the allocator's pools in use before the first reading.
        queue.enqueue_many([str(i) for i in range(FILL)])
        while queue.claim_many(100, 60_000):
            pass
        queue.reset()
        client.connection_pool.disconnect()
        memory_start = settled_used_memory(probe)

        def spawn() -> Any:
            process = context.Process(target=_worker, args=(server.url, effects_server.url, name), daemon=True)
            process.start()
            return process

        workers = [spawn() for _ in range(PROCESSES)]
        killed_cpu = 0.0  # CPU seconds of the workers SIGKILLed so far, read just before each kill

        def sample() -> dict[str, float]:
            # Every figure read now, the completed count with them: a count read before the
            # producer's fill would credit the jobs done meanwhile to the next interval, at no
            # time and no CPU.
            now = time.monotonic()
            busy, steal = machine_cpu_s()
            sizes = probe.pipeline(transaction=False)
            sizes.hget(queue.keys.stats, "completed")
            for key in (queue.keys.done, queue.keys.active):
                sizes.zcard(key)
            completed_now, done_size, active_size = sizes.execute()
            return {
                "t": round(now - t0, 3),
                "completed": int(completed_now or 0),
                "used_memory": int(probe.info("memory")["used_memory"]),
                "rss0": rss_bytes(workers[0].pid),
                "server_cpu": server_cpu_s(probe),
                "calls": script_calls(probe),
                "effects_cpu": server_cpu_s(effects),
                "workers_cpu": killed_cpu + sum(process_cpu_s(w.pid) for w in workers),
                "producer_cpu": sum(os.times()[:2]),
                "machine_busy": busy,
                "machine_steal": steal,
                "done": done_size,
                "active": active_size,
            }

        bar = None
        if progress_bar:
            from tqdm import tqdm

            bar = tqdm(total=jobs, unit="job", unit_scale=True, file=sys.stderr, desc="endurance")
        samples: list[dict[str, float]] = []
        crashes: list[float] = []
        enqueued = 0
        marks = crash_marks(jobs, crashes_per_tenth)
        victim = 0
        # The clock starts before the first job is enqueued: the first tenth's time includes
        # the producer's first fill, during which the workers already complete jobs.
        t0 = time.monotonic()
        samples.append(sample())
        next_sample = t0 + sample_s
        completed = 0
        while completed < jobs:
            snap = queue.snapshot(limit=1)
            completed = int(snap.stats.get("completed", 0))
            pending = snap.counts["pending"]
            while enqueued < jobs and pending < backlog:
                n = min(FILL, backlog, jobs - enqueued)
                queue.enqueue_many([str(i) for i in range(enqueued, enqueued + n)])
                enqueued += n
                pending += n
            now = time.monotonic()
            if now >= next_sample:
                samples.append(sample())
                next_sample = now + sample_s
            if marks and completed >= marks[0]:
                marks.pop(0)
                victim = victim % (PROCESSES - 1) + 1
                killed_cpu += process_cpu_s(workers[victim].pid)
                os.kill(workers[victim].pid, signal.SIGKILL)
                workers[victim].join()
                crashes.append(round(now - t0, 3))
                workers[victim] = spawn()
            if bar is not None:
                bar.update(completed - bar.n)
            time.sleep(0.05)
        samples.append(sample())
        seconds = samples[-1]["t"]
        if bar is not None:
            bar.update(jobs - bar.n)
            bar.close()
        for process in workers:
            os.kill(process.pid, signal.SIGTERM)
        for process in workers:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        snap = queue.snapshot(limit=1)
        stats = snap.stats
        seen = int(effects.bitcount(SEEN))
        repeats = int(effects.get(REPEATS) or 0)
        redelivered = sum(int(stats.get(k, 0)) for k in ("stalled", "unstarted", "reaped"))
        left = {k: v for k, v in snap.counts.items() if k != "done" and v}
        if int(stats.get("completed", 0)) != jobs or seen != jobs or left or repeats > redelivered:
            raise EnduranceMiscounted(
                f"{jobs} jobs: {stats.get('completed')} completed, {seen} effects, {repeats} repeated effects "
                f"for {redelivered} recorded redeliveries, left {left}"
            )
        client.connection_pool.disconnect()
        memory_end = settled_used_memory(probe)
        done_bytes = int(probe.memory_usage(queue.keys.done, samples=0) or 0)
        facts["load_after"] = load_average()
    finally:
        server.stop()
        effects_server.stop()
    blocks = block_rates(samples, jobs)
    costs = block_costs(samples, jobs, crashes)
    rss = [s["rss0"] for s in samples if s["rss0"]]
    return {
        "machine": facts,
        "jobs": jobs,
        "processes": PROCESSES,
        "concurrency": CONCURRENCY,
        "lease_ms": LEASE_MS,
        "crashes_per_tenth": crashes_per_tenth,
        "sample_s": sample_s,
        "crashes": len(crashes),
        "crash_times": crashes,
        "seconds": round(seconds, 2),
        "wall_seconds": round(time.monotonic() - began, 2),
        "rate": jobs / seconds,
        "block_rates": blocks,
        "block_costs": costs,
        "flat": blocks[-1] / blocks[0] if blocks and blocks[0] else None,
        # CPU per job, first tenth / last: above 1 if the queue costs more per job as it runs.
        "cost_growth": costs[-1]["us_per_job"] / costs[0]["us_per_job"] if costs and costs[0]["us_per_job"] else None,
        # The same, less at the mercy of one noisy tenth on a shared machine.
        "flat_median_of_three": median(blocks[-3:]) / median(blocks[:3]) if len(blocks) >= 6 else None,
        "memory_start": memory_start,
        "memory_end": memory_end,
        "retained_per_job": (memory_end - memory_start) / jobs,
        "done_bytes": done_bytes,
        "keep_done": queue.keep_done,
        "rss_first": rss[0] if rss else None,
        # once the first tenth is done: the imports, pools and buffers a worker grows into are in
        "rss_after_first_tenth": next((s["rss0"] for s in samples if s["completed"] >= jobs / 10 and s["rss0"]), None),
        "rss_last": rss[-1] if rss else None,
        "rss_max": max(rss) if rss else None,
        "completed": jobs,
        "effects": seen,
        "repeated_effects": repeats,
        "redeliveries": redelivered,
        "stats": {k: int(v) for k, v in stats.items()},
        "samples": samples,
        "targets": {
            "flat": TARGET_FLAT,
            "bytes_per_job": TARGET_BYTES_PER_JOB,
        },
    }


def block_times(samples: list[dict[str, float]], jobs: int, blocks: int = 10) -> list[float]:
    """When the completed count crossed each tenth of the jobs (0 .. 10 tenths),
    interpolated between the one-second samples."""
    marks = [jobs * k / blocks for k in range(blocks + 1)]
    times = []
    for mark in marks:
        for before, after in zip(samples, samples[1:], strict=False):
            if before["completed"] <= mark <= after["completed"]:
                span = after["completed"] - before["completed"]
                frac = (mark - before["completed"]) / span if span else 0.0
                times.append(before["t"] + frac * (after["t"] - before["t"]))
                break
        else:
            times.append(samples[0]["t"] if mark <= samples[0]["completed"] else samples[-1]["t"])
    return times


def block_rates(samples: list[dict[str, float]], jobs: int, blocks: int = 10) -> list[float]:
    """Jobs/s over each tenth of the run."""
    times = block_times(samples, jobs, blocks)
    return [(jobs / blocks) / (b - a) if b > a else 0.0 for a, b in zip(times, times[1:], strict=False)]


def value_at(samples: list[dict[str, float]], field: str, at: float) -> float:
    """A cumulative field (CPU seconds) at time ``at``, interpolated between samples."""
    for before, after in zip(samples, samples[1:], strict=False):
        if before["t"] <= at <= after["t"]:
            span = after["t"] - before["t"]
            frac = (at - before["t"]) / span if span else 0.0
            return before[field] + frac * (after[field] - before[field])
    return samples[0][field] if at <= samples[0]["t"] else samples[-1][field]


COST_FIELDS = ("server_cpu", "effects_cpu", "workers_cpu", "producer_cpu")


def block_costs(
    samples: list[dict[str, float]], jobs: int, crash_times: list[float], blocks: int = 10
) -> list[dict[str, float]]:
    """Per tenth of the run, where its time went: CPU µs per job of the queue's server, the
    effects server, the four workers and the producer; the cores this run used and the
    cores the rest of the machine took (busy less this run's, and stolen by the hypervisor);
    the crashes that landed in it. A queue that slowed as it ran would show a cost per job
    that grows; a machine that got busier shows the others' cores grow instead."""
    if not samples or any(f not in samples[0] for f in (*COST_FIELDS, "machine_busy")):
        return []
    times = block_times(samples, jobs, blocks)
    per_block = jobs / blocks
    out = []
    last = len(times) - 2
    for n, (a, b) in enumerate(zip(times, times[1:], strict=False)):
        seconds = b - a
        row: dict[str, float] = {"seconds": seconds}
        ours = 0.0
        for field in COST_FIELDS:
            used = value_at(samples, field, b) - value_at(samples, field, a)
            row[field.replace("_cpu", "_us_per_job")] = used / per_block * 1e6
            ours += used
        busy = value_at(samples, "machine_busy", b) - value_at(samples, "machine_busy", a)
        steal = value_at(samples, "machine_steal", b) - value_at(samples, "machine_steal", a)
        row["cores_ours"] = ours / seconds if seconds > 0 else 0.0
        row["cores_others"] = max(0.0, busy - ours) / seconds if seconds > 0 else 0.0
        row["cores_stolen"] = steal / seconds if seconds > 0 else 0.0
        row["calls_per_job"] = (value_at(samples, "calls", b) - value_at(samples, "calls", a)) / per_block
        row["us_per_job"] = ours / per_block * 1e6
        # The block edges are read off samples; a crash before the first edge or after the last
        # (a sample delayed by a busy machine) is still in the first or the last tenth of the jobs.
        low, high = (float("-inf") if n == 0 else a), (float("inf") if n == last else b)
        row["crashes"] = sum(1 for t in crash_times if low <= t < high)
        inside = [s for s in samples if a <= s["t"] <= b]
        row["done_max"] = max((s["done"] for s in inside), default=0)
        row["active_max"] = max((s["active"] for s in inside), default=0)
        out.append(row)
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = report["samples"]
    t = [s["t"] for s in samples]
    rate = [0.0] + [
        (b["completed"] - a["completed"]) / (b["t"] - a["t"]) if b["t"] > a["t"] else 0.0
        for a, b in zip(samples, samples[1:], strict=False)
    ]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(t, rate, lw=1, color="tab:blue", label="jobs/s")
    for at in report["crash_times"]:
        top.axvline(at, color="tab:red", lw=0.4, alpha=0.4)
    top.set_ylabel(f"jobs/s (per {report['sample_s']:g} s)")
    if samples and "machine_busy" in samples[0]:
        # The cores the rest of the machine took: on a shared machine the rate follows them.
        others = [0.0] + [
            max(0.0, (b["machine_busy"] - a["machine_busy"]) - sum(b[f] - a[f] for f in COST_FIELDS))
            / (b["t"] - a["t"])
            if b["t"] > a["t"]
            else 0.0
            for a, b in zip(samples, samples[1:], strict=False)
        ]
        cores = top.twinx()
        cores.plot(t, others, lw=1, color="tab:orange", alpha=0.8)
        cores.set_ylabel("cores the rest of the machine took", color="tab:orange")
        cores.set_ylim(0, max(2.0, max(others)))
    top.set_title(
        f"{report['jobs']:,} jobs, {report['processes']} Worker processes, {report['crashes']} SIGKILLs "
        f"({report['crashes_per_tenth']} per tenth of the jobs, red lines)"
    )
    bottom.plot(t, [s["used_memory"] / 2**20 for s in samples], label="server used_memory", color="tab:green")
    bottom.plot(t, [s["rss0"] / 2**20 for s in samples], label="worker 0 RSS (never killed)", color="tab:purple")
    bottom.set_ylabel("MiB")
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def cost_rows(costs: list[dict[str, float]]) -> list[list[str]]:
    if not costs:
        return []
    rows = [
        ("server µs/job", "server_us_per_job", "{:.1f}"),
        ("effects server µs/job", "effects_us_per_job", "{:.1f}"),
        ("workers µs/job", "workers_us_per_job", "{:.0f}"),
        ("producer µs/job", "producer_us_per_job", "{:.1f}"),
        ("all of this run, µs/job", "us_per_job", "{:.0f}"),
        ("script calls/job", "calls_per_job", "{:.3f}"),
        ("cores: this run", "cores_ours", "{:.2f}"),
        ("cores: the rest of the machine", "cores_others", "{:.2f}"),
        ("cores: stolen (hypervisor)", "cores_stolen", "{:.2f}"),
        ("crashes", "crashes", "{:.0f}"),
    ]
    return [[label, *[fmt.format(c[key]) for c in costs]] for label, key, fmt in rows]


def render(report: dict[str, Any]) -> str:
    facts = report["machine"]
    blocks = report["block_rates"]
    mib = 2**20
    lines = [
        f"Endurance: {report['jobs']:,} jobs, {report['processes']} Worker processes (c{report['concurrency']}, "
        f"lease {report['lease_ms']:,} ms, extension on), {report['crashes']} SIGKILLed "
        f"({report['crashes_per_tenth']} per tenth of the jobs, one every "
        f"{report['seconds'] / max(1, report['crashes']):.1f} s on average); "
        f"{report['seconds']:.0f} s, {report['rate']:,.0f} jobs/s overall",
        f"machine: {machine_line(facts)}; load average {facts['load_before']} before, {facts['load_after']} after",
        "",
        table(
            ["tenth of the run", *[str(n) for n in range(1, len(blocks) + 1)]],
            [["jobs/s", *[f"{r:,.0f}" for r in blocks]], *cost_rows(report.get("block_costs") or [])],
            right=[False, *[True] * len(blocks)],
        ),
        "",
        table(
            ["figure", "value", "target"],
            [
                ["throughput, last tenth / first", f"{report['flat']:.2f}", f">= {report['targets']['flat']}"],
                [
                    "CPU per job (every process of this run), last tenth / first",
                    "" if report.get("cost_growth") is None else f"{report['cost_growth']:.2f}",
                    "",
                ],
                [
                    "throughput, median of the last three tenths / of the first three",
                    "" if report["flat_median_of_three"] is None else f"{report['flat_median_of_three']:.2f}",
                    "",
                ],
                [
                    "server used_memory, empty queue before -> drained after",
                    f"{report['memory_start'] / mib:.2f} -> {report['memory_end'] / mib:.2f} MiB",
                    "",
                ],
                [
                    "retained per job (done at its cap of "
                    f"{report['keep_done']:,} ids: {report['done_bytes'] / 1024:,.0f} KiB)",
                    f"{report['retained_per_job']:.2f} B",
                    f"<= {report['targets']['bytes_per_job']} B",
                ],
                [
                    "worker 0 RSS: first sample, after the first tenth -> last (max)",
                    f"{report['rss_first'] / mib:.1f}, {(report['rss_after_first_tenth'] or 0) / mib:.1f} -> "
                    f"{report['rss_last'] / mib:.1f} MiB ({report['rss_max'] / mib:.1f})",
                    "flat",
                ],
                ["jobs completed / effects applied", f"{report['completed']:,} / {report['effects']:,}", "all"],
                [
                    "repeated effects / redeliveries recorded",
                    f"{report['repeated_effects']:,} / {report['redeliveries']:,}",
                    "repeats <= redeliveries",
                ],
            ],
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--jobs", type=positive_int, help=f"jobs (default {DEFAULT_JOBS:,})")
    parser.add_argument(
        "--crashes-per-tenth", type=positive_int, help="SIGKILLs in each tenth of the jobs (default 3; --quick 1)"
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS:,} jobs, a crash every 0.5 s")
    parser.add_argument("--plot", type=Path, help="save a PNG of throughput and memory over time here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    jobs = args.jobs or (QUICK_JOBS if args.quick else DEFAULT_JOBS)
    per_tenth = args.crashes_per_tenth or (1 if args.quick else DEFAULT_CRASHES_PER_TENTH)
    if args.quick:
        report = run(jobs, per_tenth, not args.no_progress, sample_s=0.2, backlog=QUICK_BACKLOG)
    else:
        report = run(jobs, per_tenth, not args.no_progress)
    if args.plot:
        plot(report, args.plot)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
