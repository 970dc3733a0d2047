"""What the latency benches share: a worker process for each library, one clock, one producer.

Each worker under test runs in a process of its own (``python bench/_latency.py worker ...``
for ``echoq.Worker``, ``node bench/bullmq/latency.cjs worker ...`` for BullMQ's) and speaks
one JSON line at a time on stdout: ``{"ready": true}`` once it works, ``{"clock": ns}`` for
each ``clock`` line on stdin, ``{"s": [i, attempt, ns, 0]}`` per start when streaming, and
at the end ``{"starts": [...], "counts": {...}}``. A handler's first act is to read the
clock, so a start is the moment the handler began.

The clock: CLOCK_MONOTONIC, one clock for every process of the machine. Python's
``time.monotonic_ns()`` reads it, and on Linux so does node's ``process.hrtime.bigint()``
(libuv's ``uv_hrtime``). :func:`check_same_clock` proves it in each run: a node reading is
taken between two Python readings, and must fall between them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from _common import percentile, register_scripts

ROOT = Path(__file__).resolve().parent.parent
BULLMQ_SOURCE = ROOT / "bench" / "bullmq"
BULLMQ_DIR = ROOT / "build" / "bench-bullmq"
READY_TIMEOUT_S = 60
RESULT_TIMEOUT_S = 300


class BenchmarkMiscounted(AssertionError):
    """A run lost, duplicated or left over jobs: its figures would be a lie."""


# -- figures --------------------------------------------------------------------------------


def summary_ms(values_ns: Sequence[int]) -> dict[str, float]:
    """p50 / p99 / max of a sample of nanoseconds, in milliseconds."""
    if not values_ns:
        return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    return {
        "n": len(values_ns),
        "p50": percentile(values_ns, 0.50) / 1e6,
        "p99": percentile(values_ns, 0.99) / 1e6,
        "max": max(values_ns) / 1e6,
    }


def raw_round_trips(client: redis.Redis, trips: int) -> list[int]:
    """Nanoseconds of each of ``trips`` sequential EVALSHA calls of ``return 1``
    (bench/ceiling.lua, through the library's registry as bench/throughput.py's ceiling):
    the floor any call a worker makes pays (client encode, loopback, server, client decode)."""
    from echoq import scripts

    register_scripts()
    scripts.run(client, "bench/ceiling", [], [])  # loaded: every timed call is an EVALSHA hit
    out = []
    clock = time.monotonic_ns
    for _ in range(trips):
        began = clock()
        scripts.run(client, "bench/ceiling", [], [])
        out.append(clock() - began)
    return out


def idle_round_trips(client: redis.Redis, schedule: Sequence[tuple[float, int, int]]) -> list[int]:
    """The same EVALSHA, one call after each gap of an idle schedule: what one round trip
    costs when the machine was idle before it (a sleeping core, a server asleep in its event
    loop) -- the reference an idle worker's pickup is comparable with."""
    from echoq import scripts

    register_scripts()
    scripts.run(client, "bench/ceiling", [], [])
    out = []
    clock = time.monotonic_ns
    last = 0.0
    for offset_ms, _delay, _fail in schedule:
        time.sleep(max(0.0, (offset_ms - last) / 1000))
        last = offset_ms
        began = clock()
        scripts.run(client, "bench/ceiling", [], [])
        out.append(clock() - began)
    return out


def started_once(result: dict[str, Any], jobs: int, what: str) -> dict[int, int]:
    """Each job's start (index -> ns) from a worker's result, once every job 0 .. jobs-1
    started exactly once, the queue counted ``jobs`` completions and holds nothing else;
    otherwise the run is refused."""
    starts: dict[int, int] = {}
    for i, _attempt, at, _raised in result["starts"]:
        if i in starts:
            raise BenchmarkMiscounted(f"{what}: job {i} started twice")
        starts[i] = at
    counts = result["counts"]
    left = {k: v for k, v in counts.items() if k not in ("completed", "done") and v}
    if sorted(starts) != list(range(jobs)) or counts.get("completed") != jobs or left:
        missing = sorted(set(range(jobs)) - set(starts))[:5]
        raise BenchmarkMiscounted(
            f"{what}: {jobs} jobs, {len(starts)} started (missing {missing or 'none'}), "
            f"{counts.get('completed')} completed, left {left or 'nothing'}"
        )
    return starts


# -- schedules --------------------------------------------------------------------------------

# One job of a schedule: (offset from the producer's start in ms, delay_ms, backoff_ms on a
# first attempt that fails, or 0 for a job that does not fail).
Job = tuple[float, int, int]


def idle_schedule(jobs: int, gap_ms: tuple[float, float] = (10.0, 40.0), seed: int = 25) -> list[Job]:
    """Jobs one at a time, each after a random gap far longer than a pickup: each finds the
    worker idle, waiting for a wake."""
    rng = random.Random(seed)
    offsets, at = [], 0.0
    for _ in range(jobs):
        at += rng.uniform(*gap_ms)
        offsets.append((round(at, 3), 0, 0))
    return offsets


def rate_schedule(jobs: int, per_second: float) -> list[Job]:
    """Jobs at a steady rate (an open-loop producer: it does not wait for the workers)."""
    return [(round(i * 1000 / per_second, 3), 0, 0) for i in range(jobs)]


def enqueue_echoq(queue: Any, schedule: Sequence[Job]) -> tuple[list[int], list[int]]:
    """Enqueue the schedule's jobs on its clock, one call at a time; the ns each call was
    sent and returned. Payload: ``"<index> <fails>"``."""
    sent: list[int] = []
    returned: list[int] = []
    clock = time.monotonic_ns
    t0 = clock()
    for i, (offset_ms, delay_ms, backoff_ms) in enumerate(schedule):
        left = t0 + int(offset_ms * 1e6) - clock()
        if left > 0:
            time.sleep(left / 1e9)
        sent.append(clock())
        queue.enqueue(f"{i} {1 if backoff_ms else 0}", delay_ms=delay_ms)
        returned.append(clock())
    return sent, returned


# -- worker processes --------------------------------------------------------------------------


class WorkerProcess:
    """One worker under test in a process of its own (see the module's docstring)."""

    def __init__(self, argv: list[str], what: str) -> None:
        self.what = what
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._lines: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self._cond:
                self._lines.append(message)
                self._cond.notify_all()
        with self._cond:
            self._lines.append({"eof": True})
            self._cond.notify_all()

    def next(self, key: str, timeout_s: float = RESULT_TIMEOUT_S, after: int = 0) -> tuple[int, dict[str, Any]]:
        """The first message with ``key`` at or after index ``after``: (index, message)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for n in range(after, len(self._lines)):
                    if key in self._lines[n]:
                        return n, self._lines[n]
                    if "eof" in self._lines[n]:
                        raise BenchmarkMiscounted(f"{self.what} ended early: {self.stderr_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchmarkMiscounted(f"{self.what}: no {key!r} within {timeout_s:.0f} s")
                self._cond.wait(left)

    def messages(self, key: str) -> list[dict[str, Any]]:
        with self._cond:
            return [m for m in self._lines if key in m]

    def wait_for(self, key: str, count: int, timeout_s: float) -> list[dict[str, Any]]:
        """Wait until ``count`` messages with ``key`` arrived."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                found = [m for m in self._lines if key in m]
                if len(found) >= count:
                    return found
                if self._lines and "eof" in self._lines[-1]:
                    raise BenchmarkMiscounted(f"{self.what} ended early: {self.stderr_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchmarkMiscounted(f"{self.what}: {len(found)} of {count} {key!r} in {timeout_s:.0f} s")
                self._cond.wait(left)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def ready(self) -> None:
        self.next("ready", READY_TIMEOUT_S)

    def result(self, timeout_s: float = RESULT_TIMEOUT_S) -> dict[str, Any]:
        _, message = self.next("starts", timeout_s)
        self.proc.wait(timeout=30)
        return message

    def kill(self) -> int:
        """SIGKILL, as a crash; returns the monotonic ns just before the signal."""
        at = time.monotonic_ns()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return at

    def stderr_tail(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return (self.proc.stderr.read().strip() or f"exit {self.proc.returncode}")[-400:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def echoq_worker(url: str, queue: str, **options: Any) -> WorkerProcess:
    argv = [sys.executable, str(Path(__file__).resolve()), "worker", url, queue, json.dumps(options)]
    return WorkerProcess(argv, f"echoq.Worker c{options.get('concurrency', 1)} on {queue}")


def bullmq_worker(url: str, queue: str, **options: Any) -> WorkerProcess:
    argv = ["node", str(BULLMQ_SOURCE / "latency.cjs"), "worker", str(BULLMQ_DIR), url, queue, json.dumps(options)]
    return WorkerProcess(argv, f"BullMQ Worker c{options.get('concurrency', 1)} on {queue}")


def enqueue_node(
    url: str, queue: str, schedule: Sequence[Job], workdir: Path, echoq_queue: Any | None = None
) -> tuple[list[int], list[int]]:
    """The producer both libraries share (bench/bullmq/latency.cjs, one node process):
    BullMQ's ``Queue.add``, or -- given ``echoq_queue`` -- echoq's enqueue.lua by EVALSHA with
    the keys and arguments ``Queue.enqueue`` sends (ids minted here, in schedule order)."""
    plan: dict[str, Any] = {"jobs": list(schedule)}
    if echoq_queue is not None:
        from echoq import scripts

        ids = echoq_queue.new_job_ids(len(schedule))
        scripts.preload(echoq_queue.client)  # the producer calls enqueue.lua by its SHA alone
        plan["echoq"] = {
            "sha": scripts.sha("enqueue"),
            "ids": ids,
            "keys": [echoq_queue.script_keys("enqueue", job_id) for job_id in ids],
            "keep_given_ms": echoq_queue.keep_given_ms,  # ids the producer gave, as Queue.enqueue sends
        }
    path = workdir / f"{queue}.schedule.json"
    path.write_text(json.dumps(plan))
    producer = WorkerProcess(
        ["node", str(BULLMQ_SOURCE / "latency.cjs"), "enqueue", str(BULLMQ_DIR), url, queue, str(path)],
        f"producer on {queue}",
    )
    try:
        producer.ready()
        producer.send("go")
        _, done = producer.next("returned")
        return [int(x) for x in done["sent"]], [int(x) for x in done["returned"]]
    finally:
        producer.close()
        path.unlink(missing_ok=True)


def check_same_clock(samples: int = 5) -> int:
    """Prove node's process.hrtime.bigint() is Python's time.monotonic_ns() clock: each node
    reading must fall between the Python readings taken just before and after asking for
    it. Returns the widest bracket in ns; raises when a reading falls outside."""
    probe = WorkerProcess(
        [
            "node",
            "-e",
            'require("readline").createInterface({input: process.stdin}).on("line", () => '
            'process.stdout.write(JSON.stringify({clock: Number(process.hrtime.bigint())}) + "\\n"))',
        ],
        "node clock probe",
    )
    try:
        widest, after = 0, 0
        for n in range(samples + 1):
            before = time.monotonic_ns()
            probe.send("clock")
            after_index, message = probe.next("clock", 30, after)
            end = time.monotonic_ns()
            after = after_index + 1
            if n == 0:
                continue  # node's first answer includes its start-up
            if not before <= int(message["clock"]) <= end:
                raise BenchmarkMiscounted(
                    f"node's clock ({message['clock']}) is not Python's monotonic clock ({before}..{end}): "
                    "the latency figures would compare two clocks"
                )
            widest = max(widest, end - before)
        return widest
    finally:
        probe.close()


def bullmq_missing() -> str | None:
    """Why BullMQ cannot run here, or None (installs it into build/ as bench/throughput.py does)."""
    if shutil.which("node") is None:
        return "node is not on PATH"
    import throughput

    return throughput.bullmq_ready(lambda message: print(f"  {message}", file=sys.stderr, flush=True))


# -- the echoq worker process ------------------------------------------------------------------


def _echoq_worker_main(url: str, name: str, options: dict[str, Any]) -> None:
    import echoq
    from echoq import Backoff, Queue, Worker

    queue = Queue(name, echoq.connect(url))
    out = threading.Lock()
    starts: list[list[int]] = []
    seen: dict[int, int] = {}
    enough = threading.Event()
    expect = int(options.get("expect", 0))
    hold, stream = bool(options.get("hold")), bool(options.get("stream"))

    def say(message: dict[str, Any]) -> None:
        with out:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def handler(delivery: Any) -> None:
        started = time.monotonic_ns()
        index, fails = delivery.payload.split()
        i = int(index)
        with out:
            attempt = seen[i] = seen.get(i, 0) + 1
            entry = [i, attempt, started, 0]
            starts.append(entry)
            if expect and len(starts) >= expect:
                enough.set()
        if stream:
            say({"s": entry})
        if hold:
            threading.Event().wait()
        if fails == "1" and attempt == 1:
            entry[3] = time.monotonic_ns()
            raise RuntimeError("first attempt fails")

    settings: dict[str, Any] = {"concurrency": int(options.get("concurrency", 1))}
    for key in ("lease_ms", "beat_ms", "idle_wait_ms", "extend_every_ms", "max_attempts"):
        if key in options:
            settings[key] = int(options[key])
    if "backoff_ms" in options:
        settings["backoff"] = Backoff(base_ms=int(options["backoff_ms"]), factor=1.0)
    worker = Worker(queue, handler, **settings)

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "clock":
                say({"clock": time.monotonic_ns()})
            elif line.strip() == "stop":
                enough.set()

    def stopper() -> None:
        enough.wait()
        worker.stop()

    threading.Thread(target=commands, daemon=True).start()
    threading.Thread(target=stopper, daemon=True).start()
    say({"ready": True})
    worker.work()
    snap = queue.snapshot(limit=1)
    counts = dict(snap.counts) | {"completed": snap.stats.get("completed", 0)}
    say({"starts": starts, "counts": counts})


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "worker":
        _echoq_worker_main(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
    else:
        sys.exit("usage: python bench/_latency.py worker <url> <queue> <options JSON>")
