"""The chaos lab: real worker processes, real SIGKILLs, and an audit of every job.

:func:`run_chaos` (and ``python -m echoq chaos``) enqueues ``jobs`` jobs, starts
``workers`` worker processes (``python -m echoq worker``), and kills them two ways until
every job is settled (completed or dead-lettered):

* from inside: on a ``kill_rate`` fraction of deliveries a worker SIGKILLs itself at a
  random fault point -- after the claim, mid-job, or after the effect but before complete;
* from outside: every ``kill_every_s`` seconds on average the supervisor SIGKILLs a random
  worker, wherever it happens to be.

Every dead worker is restarted. While it runs, the supervisor samples the queue with the
atomic snapshot and checks that every job is in exactly one place. At the end it counts
deliveries, effects and duplicate effects (from the effects ledger), dead letters and
their reasons, and LOST jobs: jobs whose effect never ran and that are not dead-lettered.
The reliable path (leased claim, keyed effect, fenced complete, stalled check) must report
lost 0 and duplicate effects 0. ``naive=True`` runs the cautionary pop-and-process loop
instead (``echoq.contrasts.naive_pop``) and loses the jobs its killed workers held.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..clock import server_now_ms
from ..effects import Effects
from ..errors import EchoqError
from ..limits import BOUNDS, check, fraction, whole
from ..queue import Queue, _text
from ..worker import Backoff, Checkpoint, Delivery, Worker, keyed_consumer
from . import learner
from .faults import CrashMode, CrashPlan, checkpoints

__all__ = ["ChaosReport", "run_chaos", "worker_main"]

KILL_FIELD = "chaos_kill_"  # + crash point: stats counters the workers bump before dying
# The audit finds every completed id in emq:{q}:done, so a chaos queue remembers as many as
# the library allows, and a run takes at most that many jobs.
KEEP_DONE = BOUNDS["keep_done"][1]


@dataclass
class Sample:
    """One invariant check during the run (seconds since start, counts, violations)."""

    t_s: float
    pending: int
    active: int
    scheduled: int
    done: int
    dead: int
    nowhere: int  # known jobs in no place (and not yet accounted for)
    doubled: int  # known jobs in two places at once


@dataclass
class ChaosReport:
    mode: str  # 'reliable' or 'naive'
    queue: str
    jobs: int
    workers: int
    seed: int
    lease_ms: int
    max_stalled: int
    kill_rate: float
    kill_every_s: float
    deliveries: int = 0
    redeliveries: int = 0
    kills: int = 0  # worker processes that died by SIGKILL
    kills_by_point: dict[str, int] = field(default_factory=dict)  # self-kills at fault points
    kills_external: int = 0  # SIGKILLs the supervisor sent at random moments
    restarts: int = 0
    completed: int = 0
    effects: int = 0
    duplicate_effects: int = 0
    dead: int = 0
    dead_reasons: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    lost_examples: list[str] = field(default_factory=list)
    unsettled: int = 0  # still waiting when the run timed out
    settle_p50_ms: float | None = None
    settle_p99_ms: float | None = None
    elapsed_s: float = 0.0
    invariant_samples: int = 0
    invariant_violations: int = 0  # samples in which some job was in no place, or in two
    timed_out: bool = False
    timeline: list[Sample] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing lost, no effect twice, everything settled, every sample one place per job."""
        return (
            self.lost == 0
            and self.duplicate_effects == 0
            and not self.timed_out
            and self.unsettled == 0
            and self.invariant_violations == 0
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok}

    def format(self) -> str:
        def ms(value: float | None) -> str:
            return "n/a" if value is None else f"{value:,.0f} ms"

        points = ", ".join(f"{k} {v}" for k, v in sorted(self.kills_by_point.items())) or "none"
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.dead_reasons.items())) or "none"
        lines = [
            f"chaos run ({self.mode}): {self.jobs} jobs, {self.workers} workers, lease {self.lease_ms} ms, "
            f"max_stalled {self.max_stalled}, kill rate {self.kill_rate}/delivery + "
            + (f"one every {self.kill_every_s} s" if self.kill_every_s else "no random kills")
            + f", seed {self.seed}",
            f"  jobs                 {self.jobs}",
            f"  deliveries           {self.deliveries}",
            f"  kills                {self.kills} (at fault points: {points}; at random moments: "
            f"{self.kills_external}); restarts {self.restarts}",
            f"  redeliveries         {self.redeliveries}",
            f"  completed            {self.completed}",
            f"  effects              {self.effects}",
            f"  duplicate effects    {self.duplicate_effects}",
            f"  dead-lettered        {self.dead} ({reasons})",
            f"  lost                 {self.lost}"
            + (f"  e.g. {', '.join(self.lost_examples[:3])}" if self.lost else ""),
            f"  time to settle       p50 {ms(self.settle_p50_ms)}, p99 {ms(self.settle_p99_ms)}",
            f"  invariant samples    {self.invariant_samples} taken, "
            + (
                "per-id check skipped: a popped job is in no place by design"
                if self.mode == "naive"
                else f"{self.invariant_violations} with a job in no place or in two"
            ),
            f"  elapsed              {self.elapsed_s:.1f} s" + ("  (TIMED OUT)" if self.timed_out else ""),
        ]
        verdict = (
            "OK: no job lost, no effect duplicated"
            if self.ok
            else "FAILED: "
            + "; ".join(
                what
                for what, bad in (
                    (f"{self.lost} job(s) lost", self.lost),
                    (f"{self.duplicate_effects} duplicate effect(s)", self.duplicate_effects),
                    (f"{self.unsettled} job(s) unsettled", self.unsettled or self.timed_out),
                    (
                        f"{self.invariant_violations} sample(s) with a job in no place or in two",
                        self.invariant_violations,
                    ),
                )
                if bad
            )
        )
        return "\n".join(lines + [verdict])


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Supervisor:
    def __init__(self, queue: Queue, url: str, config: dict[str, Any], report: ChaosReport) -> None:
        self.queue = queue
        self.url = url
        self.config = config
        self.report = report
        self.rng = random.Random(report.seed)
        self.spawned = 0
        self.logdir = Path(tempfile.mkdtemp(prefix="echoq-chaos-"))
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * report.workers
        self.external: set[int] = set()  # pids the supervisor killed
        self.abnormal: list[str] = []

    def spawn(self, slot: int) -> None:
        c, r = self.config, self.report
        seed = r.seed * 1_000_003 + self.spawned
        self.spawned += 1
        argv = [sys.executable, "-m", "echoq", "worker", "--queue", r.queue, "--lease-ms", str(r.lease_ms)]
        argv += ["--max-stalled", str(r.max_stalled), "--kill-rate", str(r.kill_rate), "--seed", str(seed)]
        argv += ["--work-ms", str(c["work_ms"]), "--beat-ms", str(c["beat_ms"]), "--quiet"]
        argv += ["--kill-at", ",".join(p.value for p in c["kill_at"])]
        if r.mode == "naive":
            argv.append("--naive")
        env = dict(os.environ, VALKEY_URL=self.url)  # the password travels in env, not argv
        log = open(self.logdir / f"worker-{slot}.log", "wb")  # noqa: SIM115 - the child owns it
        self.procs[slot] = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
        log.close()

    def reap_children(self, settled: bool) -> None:
        for slot, proc in enumerate(self.procs):
            if proc is None or proc.poll() is None:
                continue
            if proc.returncode == -signal.SIGKILL:
                self.report.kills += 1
                if proc.pid in self.external:
                    self.report.kills_external += 1
            elif proc.returncode != 0:
                tail = (self.logdir / f"worker-{slot}.log").read_text(errors="replace").strip().splitlines()
                self.abnormal.append(tail[-1] if tail else f"exit status {proc.returncode}")
                if len(self.abnormal) >= 5:
                    raise EchoqError(f"chaos workers keep failing on their own: {self.abnormal[-1]}")
            self.procs[slot] = None
            if not settled:
                self.report.restarts += 1
                self.spawn(slot)

    def kill_one(self) -> None:
        alive = [p for p in self.procs if p is not None and p.poll() is None]
        if alive:
            victim = self.rng.choice(alive)
            self.external.add(victim.pid)
            victim.send_signal(signal.SIGKILL)

    def shutdown(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        give_up = time.monotonic() + 10
        for proc in self.procs:
            if proc is None:
                continue
            try:
                proc.wait(max(0.1, give_up - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.reap_children(settled=True)
        for path in self.logdir.iterdir():
            path.unlink()
        self.logdir.rmdir()


def _sample(queue: Queue, known: set[str] | None, started: float) -> Sample:
    snap = queue.snapshot(limit=10_000)
    c = snap.counts
    nowhere = doubled = 0
    if known is not None:
        seen: Counter[str] = Counter()
        for members in (snap.pending, snap.active, snap.scheduled, snap.dead, snap.done):
            seen.update(iter(members))  # ids only: a dict's update would add its scores
        doubled = sum(1 for n in seen.values() if n > 1)
        nowhere = len(known - seen.keys())
    return Sample(
        round(time.monotonic() - started, 3),
        c["pending"],
        c["active"],
        c["scheduled"],
        c["done"],
        c["dead"],
        nowhere,
        doubled,
    )


def run_chaos(
    *,
    workers: int = 4,
    jobs: int = 2000,
    kill_rate: float = 0.01,
    kill_every_s: float = 0.5,
    kill_at: tuple[Checkpoint | str, ...] = tuple(Checkpoint),
    lease_ms: int = 500,
    max_stalled: int = 4,
    seed: int | None = None,
    naive: bool = False,
    work_ms: int = 2,
    beat_ms: int = 100,
    sample_every_s: float = 0.1,
    timeout_s: float = 120.0,
    progress: bool = False,
    url: str | None = None,
    queue_name: str | None = None,
) -> ChaosReport:
    """Run the chaos lab and return its report (see the module docstring)."""
    whole("workers", workers, 1, 64)
    whole("jobs", jobs, 1, KEEP_DONE)
    fraction("kill_rate", kill_rate, 0.0, 1.0)
    fraction("kill_every_s", kill_every_s, 0.0, 3_600.0)
    whole("lease_ms", lease_ms, 10, BOUNDS["lease_ms"][1], unit="of milliseconds")
    check("max_stalled", max_stalled)
    whole("work_ms", work_ms, 0, 60_000, unit="of milliseconds")
    whole("beat_ms", beat_ms, 1, 60_000, unit="of milliseconds")
    fraction("timeout_s", timeout_s, 1.0, 86_400.0)
    points = checkpoints(kill_at)
    from ..server import connect, server_url

    url = url or server_url()
    seed = random.randrange(1_000_000) if seed is None else seed
    queue = Queue(queue_name or learner.queue_name(f"chaos-{os.getpid()}-{seed}"), connect(url), keep_done=KEEP_DONE)
    queue.reset()
    report = ChaosReport(
        "naive" if naive else "reliable",
        queue.name,
        jobs,
        workers,
        seed,
        lease_ms,
        max_stalled,
        kill_rate,
        kill_every_s,
    )
    sup = _Supervisor(queue, url, {"work_ms": work_ms, "beat_ms": beat_ms, "kill_at": points}, report)
    enqueued_ms = server_now_ms(queue.client)
    ids: list[str] = []
    for start in range(0, jobs, 1000):
        ids += queue.enqueue_many([f"job {n}" for n in range(start, min(jobs, start + 1000))])
    known = set(ids) if jobs <= 10_000 else None  # per-id checks fit in one snapshot

    from tqdm import tqdm

    bar = tqdm(
        total=jobs, desc=f"chaos ({report.mode})", unit="job", file=sys.stderr, disable=not progress, mininterval=0.2
    )
    started = time.monotonic()
    next_kill = started + (sup.rng.expovariate(1 / kill_every_s) if kill_every_s else float("inf"))
    next_sample = started
    try:
        for slot in range(workers):
            sup.spawn(slot)
        while True:
            now = time.monotonic()
            c = queue.snapshot(limit=1).counts
            waiting = c["pending"] + c["active"] + c["scheduled"]
            if jobs - waiting > bar.n:
                bar.update(jobs - waiting - bar.n)
            if waiting == 0:
                break
            if now - started > timeout_s:
                report.timed_out = True
                break
            if now >= next_sample:
                sample = _sample(queue, known if not naive else None, started)
                report.timeline.append(sample)
                next_sample = now + sample_every_s
            if now >= next_kill:
                sup.kill_one()
                next_kill = now + sup.rng.expovariate(1 / kill_every_s)
            sup.reap_children(settled=False)
            time.sleep(0.01)  # the supervisor's own pace, not a synchronisation
    finally:
        bar.close()
        sup.shutdown()
    report.elapsed_s = round(time.monotonic() - started, 2)
    if naive:
        # A naive worker's job is in no place while it works, so the per-id check cannot
        # tell in-flight from lost there: it is only counted at the end, below.
        for sample in report.timeline:
            sample.nowhere = sample.doubled = 0
    report.invariant_samples = len(report.timeline)
    report.invariant_violations = sum(1 for s in report.timeline if s.nowhere or s.doubled)
    _audit(queue, ids, enqueued_ms, report)
    queue.reset()
    queue.client.close()
    return report


def _audit(queue: Queue, ids: list[str], enqueued_ms: int, report: ChaosReport) -> None:
    k = queue.keys
    client = queue.client
    stats = {_text(f): int(v) for f, v in client.hgetall(k.stats).items()}
    effects = Effects(queue)
    counts = effects.counts()
    report.effects = sum(counts.values())
    report.duplicate_effects = effects.duplicates()
    report.completed = stats.get("completed", 0)
    report.kills_by_point = {
        f[len(KILL_FIELD) :]: v for f, v in sorted(stats.items()) if f.startswith(KILL_FIELD) and v
    }
    report.deliveries = stats.get("claimed", 0) + stats.get("naive_popped", 0)

    done = dict(client.zrange(k.done, 0, -1, withscores=True))
    dead = dict(client.zrange(k.dead, 0, -1, withscores=True))
    waiting = set(client.zrange(k.pending, 0, -1)) | set(client.zrange(k.active, 0, -1))
    waiting |= set(client.zrange(k.scheduled, 0, -1))
    report.dead = len(dead)
    pipe = client.pipeline(transaction=False)
    for job_id in dead:
        pipe.hget(k.job(job_id), "reason")
    report.dead_reasons = dict(Counter(_text(r or "unknown") for r in pipe.execute()))
    if report.mode == "naive":
        # The naive loop completes nothing: a job it took counts as handled if its effect ran.
        lost = [j for j in ids if counts.get(j, 0) == 0 and j not in dead and j not in waiting]
    else:
        # On the reliable path a job ends in done or dead or is still waiting; anywhere else
        # (even with its effect applied) it fell out of the queue, and that is a loss.
        lost = [j for j in ids if j not in done and j not in dead and j not in waiting]
    report.lost = len(lost)
    report.lost_examples = lost[:5]
    report.unsettled = len(waiting)
    # Every job that left the queue was delivered at least once; deliveries beyond that
    # first one per job are redeliveries.
    report.redeliveries = max(0, report.deliveries - (len(ids) - len(waiting)))

    settle: list[float] = [score - enqueued_ms for score in list(done.values()) + list(dead.values())]
    if report.mode == "naive":
        # Nothing is completed on the naive path; an effect's record carries its time.
        for record in effects.outbox():
            _job, _, at = record.partition(" t=")
            if at.isdigit():
                settle.append(int(at) - enqueued_ms)
    report.settle_p50_ms = _quantile(settle, 0.50)
    report.settle_p99_ms = _quantile(settle, 0.99)


# -- the worker process ----------------------------------------------------------------------


def worker_main(
    *,
    queue_name: str,
    lease_ms: int = 500,
    max_stalled: int = 4,
    max_attempts: int = 5,
    concurrency: int = 1,
    kill_rate: float = 0.0,
    kill_at: tuple[Checkpoint, ...] = tuple(Checkpoint),
    seed: int | None = None,
    work_ms: int = 0,
    beat_ms: int = 100,
    naive: bool = False,
    burst: bool = False,
) -> dict[str, Any]:
    """One worker process: consume ``queue_name`` with the keyed consumer until SIGTERM
    (or, with ``burst``, until drained). On a ``kill_rate`` fraction of deliveries it
    SIGKILLs itself at a random fault point, counting the point first in the stats hash."""
    fraction("kill_rate", kill_rate, 0.0, 1.0)
    queue = Queue(queue_name, keep_done=KEEP_DONE)
    effects = Effects(queue)
    rng = random.Random(seed)

    def work(delivery: Delivery | None = None) -> str:
        if work_ms:
            time.sleep(rng.uniform(0, work_ms) / 1000)  # stands in for the job's real work
        return f"t={int(time.time() * 1000)}"

    def note_kill(point: Checkpoint) -> None:
        queue.client.hincrby(queue.keys.stats, KILL_FIELD + point.value, 1)

    if naive:
        return _naive_loop(queue, effects, rng, kill_rate, kill_at, work, note_kill, burst)

    crashes = CrashPlan(kill_at, CrashMode.KILL, rate=kill_rate, seed=seed, on_crash=note_kill)
    worker = Worker(
        queue,
        keyed_consumer(effects, work),
        concurrency=concurrency,
        lease_ms=lease_ms,
        max_stalled=max_stalled,
        max_attempts=max_attempts,
        backoff=Backoff(base_ms=10, cap_ms=1_000),
        beat_ms=beat_ms,
        idle_wait_ms=10,
        hooks=crashes if kill_rate else None,
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    report = worker.work(burst=burst)
    return asdict(report)


def _naive_loop(queue, effects, rng, kill_rate, kill_at, work, note_kill, burst) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """CONTRAST: pop-and-process. A kill between the pop and the effect loses the job."""
    from .contrasts import naive_pop

    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    processed = 0
    while not stopping:
        popped = naive_pop(queue)
        if popped is None:
            if burst:
                break
            time.sleep(0.01)  # idle poll
            continue
        job_id, _payload = popped
        point = rng.choice(kill_at) if kill_rate and rng.random() < kill_rate else None

        def die_at(here: Checkpoint, point: Checkpoint | None = point) -> None:
            if point is here:
                note_kill(here)
                os.kill(os.getpid(), signal.SIGKILL)

        die_at(Checkpoint.AFTER_CLAIM)  # popped: the job is now only in this process
        record = work()
        die_at(Checkpoint.MID_JOB)
        effects.apply_every(job_id, record)
        processed += 1
        die_at(Checkpoint.AFTER_EFFECT)  # nothing to complete: the pop already removed it
    return {"processed": processed}
