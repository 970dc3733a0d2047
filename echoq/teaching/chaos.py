"""The chaos lab: real worker processes, real SIGKILLs, and an audit of every job.

:func:`run_chaos` (and ``python -m echoq.teaching chaos``) enqueues ``jobs`` jobs, starts
``workers`` worker processes (``python -m echoq.teaching worker``), and kills them two ways until
every job is settled (completed or dead-lettered):

* from inside: on a ``kill_rate`` fraction of deliveries a worker SIGKILLs itself at a
  random fault point -- after the claim, mid-job, or after the effect but before complete;
* from outside: every ``kill_every_s`` seconds on average the supervisor SIGKILLs a random
  worker, wherever it happens to be -- once a job has settled since its last such kill, so
  that on a slow machine, where a restarted worker takes longer than that to start, the
  kills cannot stop all work.

Every dead worker is restarted. While it runs, the supervisor samples the queue in one
atomic read and checks that every job is in exactly one place: per id, up to
``PER_ID_LIMIT`` jobs; above that it checks that the sets' sizes add up, and the report
says so. At the end it stops its workers (SIGTERM: a worker it stops is never counted as
failing), audits every id -- deliveries, effects and duplicate effects (from the effects
ledger), dead letters and their reasons, and LOST jobs -- and removes its queue (or, with
``keep_queue``, says where it is kept). A worker process that dies on its own (not by a
SIGKILL of the run, not stopped by it) is a failure, reported with its last line.
The reliable path (leased claim, keyed effect, fenced complete, stalled check) must report
lost 0 and duplicate effects 0. ``naive=True`` runs the cautionary pop-and-process loop
instead (``echoq.teaching.contrasts.naive_pop``) and loses the jobs its killed workers held.
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

from ..address import describe_client
from ..clock import server_now_ms
from ..effects import Effects
from ..errors import EchoqError
from ..limits import BOUNDS, check, fraction, whole
from ..queue import Queue, _text
from ..worker import Backoff, Checkpoint, Delivery, Worker, keyed_consumer
from . import learner
from .contrasts import apply_every
from .faults import CrashMode, CrashPlan, checkpoints

__all__ = ["ChaosReport", "run_chaos", "worker_main"]

KILL_FIELD = "chaos_kill_"  # + crash point: stats counters the workers bump before dying
# The audit finds every completed id in emq:{q}:done and every dead one in emq:{q}:dead, so
# a chaos queue remembers as many as the library allows, and a run takes at most that many.
KEEP_DONE = BOUNDS["keep_done"][1]
KEEP_DEAD = BOUNDS["keep_dead"][1]
# Up to this many jobs each sample lists every id of every set (one MULTI/EXEC) and checks
# each job is in exactly one; above it a sample checks only that the sets' sizes add up.
PER_ID_LIMIT = 100_000
# A run gives up, with its report, once this many workers have died on their own.
FAILURES_TO_GIVE_UP = 5


@dataclass
class Sample:
    """One invariant check during the run (seconds since start, counts, violations)."""

    t_s: float
    pending: int
    active: int
    scheduled: int
    done: int
    dead: int
    nowhere: int  # known jobs in no place (and not yet accounted for); per-id samples only
    doubled: int  # known jobs in two places at once; per-id samples only
    per_id: bool = True  # False: only the sizes were checked (their sum must be the job count)


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
    invariant_check: str = "per-id"  # what each sample checked: 'per-id', 'counts' (above PER_ID_LIMIT), 'none'
    timed_out: bool = False
    stopped_at_end: int = 0  # workers the run itself stopped (SIGTERM) when it was over: not failures
    worker_failures: int = 0  # worker processes that died on their own (not a kill of the run)
    worker_failure_examples: list[str] = field(default_factory=list)
    gave_up: str | None = None  # why the run stopped before every job settled
    queue_kept: str | None = None  # where the queue was left, and why; None: removed
    timeline: list[Sample] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing lost, no effect twice, everything settled, every sample one place per job,
        no worker failing on its own."""
        return (
            self.lost == 0
            and self.duplicate_effects == 0
            and not self.timed_out
            and self.unsettled == 0
            and self.invariant_violations == 0
            and self.worker_failures == 0
            and self.gave_up is None
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
            f"  invariant samples    {self.invariant_samples} taken, " + self._invariant_words(),
            f"  workers              {self.stopped_at_end} stopped by the run at its end (not failures); "
            f"{self.worker_failures} died on their own"
            + (f": {self.worker_failure_examples[-1]}" if self.worker_failure_examples else ""),
            f"  elapsed              {self.elapsed_s:.1f} s"
            + ("  (TIMED OUT: no job settled for the timeout)" if self.timed_out else "")
            + (f"  (GAVE UP: {self.gave_up})" if self.gave_up else ""),
            "  queue                "
            + (f"kept: {self.queue_kept}" if self.queue_kept else f"removed (emq:{{{self.queue}}}:*)"),
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
                    (f"{self.worker_failures} worker(s) died on their own", self.worker_failures),
                    (f"gave up: {self.gave_up}", self.gave_up),
                )
                if bad
            )
        )
        return "\n".join(lines + [verdict])

    def _invariant_words(self) -> str:
        if self.mode == "naive":
            return "per-id check skipped: a popped job is in no place by design; only the final audit counts"
        if self.invariant_check == "counts":
            return (
                f"ids NOT checked per sample (more than {PER_ID_LIMIT:,} jobs): in each, the sets' sizes were "
                f"checked to add up to {self.jobs}; {self.invariant_violations} did not. The audit below checks "
                "every id once, at the end"
            )
        return f"each checking every id: {self.invariant_violations} with a job in no place or in two"


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
        self.external: set[int] = set()  # pids the supervisor SIGKILLed at random moments
        self.stopping: set[int] = set()  # pids the supervisor stopped at the end

    def spawn(self, slot: int) -> None:
        c, r = self.config, self.report
        seed = r.seed * 1_000_003 + self.spawned
        self.spawned += 1
        argv = [sys.executable, "-m", "echoq.teaching", "worker", "--queue", r.queue, "--lease-ms", str(r.lease_ms)]
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
        """Account for every worker that exited; restart it unless the run is settled. Only a
        worker that died on its own -- not SIGKILLed by the run (a kill), not stopped by it at
        the end, not exiting cleanly -- is a failure."""
        for slot, proc in enumerate(self.procs):
            if proc is None or proc.poll() is None:
                continue
            if proc.pid in self.stopping:
                self.report.stopped_at_end += 1
            elif proc.returncode == -signal.SIGKILL:
                self.report.kills += 1
                if proc.pid in self.external:
                    self.report.kills_external += 1
            elif proc.returncode != 0:
                tail = (self.logdir / f"worker-{slot}.log").read_text(errors="replace").strip().splitlines()
                self.report.worker_failures += 1
                examples = self.report.worker_failure_examples
                examples[:] = (examples + [tail[-1][:200] if tail else f"exit status {proc.returncode}"])[-5:]
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
        """Stop every worker: SIGTERM (a worker finishes the job in hand), then SIGKILL after
        10 s. Whatever they exit with, they were stopped by the run: never failures."""
        self.reap_children(settled=True)  # exits that happened before the stop are what they were
        for proc in self.procs:
            if proc is not None:
                self.stopping.add(proc.pid)
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


def _sample(queue: Queue, known: set[str] | None, jobs: int, started: float) -> Sample:
    """One atomic look at the queue. With ``known``, every id of every set is listed (one
    MULTI/EXEC: nothing moves in between) and each known job must be in exactly one set;
    without, the five sets' sizes must add up to ``jobs``."""
    k = queue.keys
    pipe = queue.client.pipeline(transaction=True)
    for key in (k.pending, k.active, k.scheduled, k.done, k.dead):
        if known is not None:
            pipe.zrange(key, 0, -1)
        else:
            pipe.zcard(key)
    found = pipe.execute()
    if known is None:
        sizes = [int(n) for n in found]
        off = sum(sizes) != jobs
        return Sample(round(time.monotonic() - started, 3), *sizes, nowhere=int(off), doubled=0, per_id=False)
    seen: Counter[str] = Counter()
    for members in found:
        seen.update(_text(m) for m in members)
    doubled = sum(1 for n in seen.values() if n > 1)
    nowhere = len(known - seen.keys())
    return Sample(round(time.monotonic() - started, 3), *(len(m) for m in found), nowhere, doubled)


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
    keep_queue: bool = False,
) -> ChaosReport:
    """Run the chaos lab and return its report (see the module docstring). ``timeout_s``:
    give up when no job has settled for that long (a stuck run), however long the whole run
    takes on a busy machine. ``keep_queue``: leave the queue on the server for a look
    afterwards (the report says where); by default every run removes it."""
    whole("workers", workers, 1, 64)
    whole("jobs", jobs, 1, KEEP_DONE)
    fraction("kill_rate", kill_rate, 0.0, 1.0)
    fraction("kill_every_s", kill_every_s, 0.0, 3_600.0)
    whole("lease_ms", lease_ms, 10, BOUNDS["lease_ms"][1], unit="of milliseconds")
    check("max_stalled", max_stalled)
    whole("work_ms", work_ms, 0, 60_000, unit="of milliseconds")
    whole("beat_ms", beat_ms, 1, 60_000, unit="of milliseconds")
    fraction("sample_every_s", sample_every_s, 0.01, 60.0)
    fraction("timeout_s", timeout_s, 1.0, 86_400.0)
    points = checkpoints(kill_at)
    from ..server import connect, server_url

    url = url or server_url()
    seed = random.randrange(1_000_000) if seed is None else seed
    queue = Queue(
        queue_name or learner.queue_name(f"chaos-{os.getpid()}-{seed}"),
        connect(url),
        keep_done=KEEP_DONE,
        keep_dead=KEEP_DEAD,
    )
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
    report.invariant_check = "none" if naive else ("per-id" if jobs <= PER_ID_LIMIT else "counts")
    try:
        queue.reset()
        _run(queue, url, report, points, work_ms, beat_ms, sample_every_s, timeout_s, progress)
    finally:
        if keep_queue:
            report.queue_kept = f"emq:{{{queue.name}}}:* on {describe_client(queue.client)} (keep_queue)"
        else:
            try:
                queue.reset()
            except EchoqError as exc:
                report.queue_kept = f"emq:{{{queue.name}}}:* (it could not be removed: {exc})"
        queue.client.close()
    return report


def _run(
    queue: Queue,
    url: str,
    report: ChaosReport,
    points: tuple[Checkpoint, ...],
    work_ms: int,
    beat_ms: int,
    sample_every_s: float,
    timeout_s: float,
    progress: bool,
) -> None:
    jobs, naive = report.jobs, report.mode == "naive"
    sup = _Supervisor(queue, url, {"work_ms": work_ms, "beat_ms": beat_ms, "kill_at": points}, report)
    enqueued_ms = server_now_ms(queue.client)
    ids: list[str] = []
    for start in range(0, jobs, 1000):
        ids += queue.enqueue_many([f"job {n}" for n in range(start, min(jobs, start + 1000))])
    known = set(ids) if report.invariant_check == "per-id" else None

    from tqdm import tqdm

    bar = tqdm(
        total=jobs, desc=f"chaos ({report.mode})", unit="job", file=sys.stderr, disable=not progress, mininterval=0.2
    )
    started = time.monotonic()
    next_kill = started + (sup.rng.expovariate(1 / report.kill_every_s) if report.kill_every_s else float("inf"))
    next_sample = started
    last_progress, least_waiting = started, jobs
    settled_at_kill = 0
    try:
        for slot in range(report.workers):
            sup.spawn(slot)
        while True:
            now = time.monotonic()
            c = queue.snapshot(limit=1).counts
            waiting = c["pending"] + c["active"] + c["scheduled"]
            if jobs - waiting > bar.n:
                bar.update(jobs - waiting - bar.n)
            if waiting == 0:
                break
            if waiting < least_waiting:
                last_progress, least_waiting = now, waiting
            elif now - last_progress > timeout_s:
                report.timed_out = True
                break
            if report.worker_failures >= FAILURES_TO_GIVE_UP:
                report.gave_up = f"{report.worker_failures} workers died on their own"
                break
            if now >= next_sample:
                sample = _sample(queue, None if naive else known, jobs, started)
                report.timeline.append(sample)
                # Listing every id costs the server and this process time: sample no more
                # than a fifth of the time, so the check does not slow the run it watches.
                next_sample = time.monotonic() + max(sample_every_s, 4 * (time.monotonic() - now))
            if now >= next_kill and jobs - waiting > settled_at_kill:
                sup.kill_one()
                settled_at_kill = jobs - waiting
                next_kill = now + sup.rng.expovariate(1 / report.kill_every_s)
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
    # SIGTERM is how the chaos run stops its workers: honour it from the first moment, even
    # before the worker exists (a worker restarted just before the run ended gets it early).
    stop_requested: list[Worker] = []
    stopped = False

    def on_sigterm(*_: Any) -> None:
        nonlocal stopped
        stopped = True
        for worker in stop_requested:
            worker.stop()

    signal.signal(signal.SIGTERM, on_sigterm)
    queue = Queue(queue_name, keep_done=KEEP_DONE, keep_dead=KEEP_DEAD)
    effects = Effects(queue, keep_outbox=BOUNDS["keep_outbox"][1])
    rng = random.Random(seed)

    def work(delivery: Delivery | None = None) -> str:
        if work_ms:
            time.sleep(rng.uniform(0, work_ms) / 1000)  # stands in for the job's real work
        return f"t={int(time.time() * 1000)}"

    def note_kill(point: Checkpoint) -> None:
        queue.client.hincrby(queue.keys.stats, KILL_FIELD + point.value, 1)

    if naive:
        return _naive_loop(queue, effects, rng, kill_rate, kill_at, work, note_kill, burst, lambda: stopped)

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
    stop_requested.append(worker)
    if stopped:
        return asdict(worker.report)
    report = worker.work(burst=burst)
    return asdict(report)


def _naive_loop(queue, effects, rng, kill_rate, kill_at, work, note_kill, burst, stopping) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """CONTRAST: pop-and-process. A kill between the pop and the effect loses the job."""
    from .contrasts import naive_pop

    processed = 0
    while not stopping():
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
        apply_every(effects, job_id, record)
        processed += 1
        die_at(Checkpoint.AFTER_EFFECT)  # nothing to complete: the pop already removed it
    return {"processed": processed}
