"""``python -m echoq worker module:function`` as a separate process: what a team meets on
its first day of running it. SIGINT and SIGTERM mid-job (the job completed once, nothing
left leased, stopped within the grace period), a handler still running when the grace
period ends (its job pending again at once, long before its lease would have run out, and
its late completion refused by the fence), a second signal (stops at once), a handler past
its time limit (retried by another thread, its late completion refused), the log lines,
bad options and a bad ``module:function`` (one line, exit 2, nothing written).

The handlers are a module written into the test's folder. A handler says it started with a
line on its stdout and, where the test must hold it, waits for a line on its stdin: every
wait is on an event the child reports, never on a sleep. The child's output is read by two
threads into queues; a deadline only turns a hang into a failure."""

from __future__ import annotations

import os
import queue as queues
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import echoq
from echoq import Complete
from echoq.__main__ import main
from tests.support.helpers import assert_one_place
from tests.support.servers import fresh_name

HANDLERS = '''
import sys

def held(delivery):
    """Say so, then wait for a line on stdin (the test's "go"), then do the effect."""
    print("started", delivery.job_id, delivery.token, delivery.attempts, flush=True)
    sys.stdin.readline()
    with open("effects.txt", "a") as effects:
        effects.write(delivery.job_id + "\\n")

def held_first_try(delivery):
    """The first try waits for the test's line on stdin; later tries return at once."""
    print("started", delivery.job_id, delivery.token, delivery.attempts, flush=True)
    if delivery.attempts == 1:
        sys.stdin.readline()
        print("late handler returns", flush=True)

def fails(delivery):
    raise ValueError("the card was declined")

not_callable = 42
'''
WAIT_S = 60  # a bound against a hang only: every wait ends on an event


class Child:
    """``python -m echoq worker ...`` in ``folder``, its stdout and stderr read line by line."""

    def __init__(self, folder: Path, *args: str) -> None:
        env = dict(os.environ, VALKEY_URL=echoq.server_url())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "echoq", "worker", *args],
            cwd=folder,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout: queues.Queue[str] = queues.Queue()
        self.stderr: list[str] = []
        self._stderr: queues.Queue[str] = queues.Queue()
        for stream, into in ((self.proc.stdout, self.stdout), (self.proc.stderr, self._stderr)):
            threading.Thread(target=_read, args=(stream, into), daemon=True).start()

    def line(self) -> str:
        """The next line the child printed on stdout."""
        try:
            return self.stdout.get(timeout=WAIT_S)
        except queues.Empty:
            raise AssertionError(f"no line on stdout in {WAIT_S} s; stderr: {self._drained()}") from None

    def started(self) -> tuple[str, int, int]:
        """The next ``started JOB token attempts`` line a handler printed."""
        line = self.line()
        word, job_id, token, attempts = line.split()
        assert word == "started", line
        return job_id, int(token), int(attempts)

    def expect(self, words: str) -> str:
        """Wait for the stderr line holding ``words``; every line read is kept in ``stderr``."""
        while True:
            try:
                line = self._stderr.get(timeout=WAIT_S)
            except queues.Empty:
                raise AssertionError(f"no {words!r} on stderr in {WAIT_S} s; stderr: {self.stderr}") from None
            self.stderr.append(line)
            if words in line:
                return line

    def _drained(self) -> list[str]:
        while not self._stderr.empty():
            self.stderr.append(self._stderr.get())
        return self.stderr

    def go(self) -> None:
        """Let one held handler return."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self) -> int:
        code = self.proc.wait(WAIT_S)
        while True:  # the rest of stderr (the reader ends at EOF)
            try:
                self.stderr.append(self._stderr.get(timeout=WAIT_S))
            except queues.Empty:
                break
            if self.stderr[-1] == "":
                self.stderr.pop()
                break
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT_S)


def _read(stream, into: queues.Queue[str]) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        into.put(line.rstrip("\n"))
    into.put("")  # EOF


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "jobs.py").write_text(HANDLERS)
    return tmp_path


@pytest.fixture
def orders(valkey_client) -> Iterator[echoq.Queue]:  # type: ignore[no-untyped-def]
    q = echoq.Queue(fresh_name("orders"), valkey_client)
    yield q
    q.reset()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


def effects(folder: Path) -> list[str]:
    path = folder / "effects.txt"
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_job_lets_the_job_finish_and_complete_and_gives_back_the_rest(
    folder: Path, orders: echoq.Queue, children: list[Child], signum: int
) -> None:
    ids = orders.enqueue_many([f"order {n}" for n in range(4)])
    child = Child(folder, "jobs:held", "--queue", orders.name, "--grace-ms", "30000")
    children.append(child)
    job_id, _token, _attempts = child.started()
    asked = time.monotonic()
    child.signal(signum)
    child.expect(f"stopping ({signal.Signals(signum).name})")
    child.go()  # the handler finishes after the stop: the worker completes it
    assert child.wait() == 0
    took_s = time.monotonic() - asked
    assert took_s < 30  # within the grace period
    assert effects(folder) == [job_id]  # the effect, once
    snap = assert_one_place(orders, set(ids))
    assert snap.counts["active"] == 0 and snap.counts["done"] == 1 and job_id in snap.done
    # Claimed and never started (the prefetch buffer) or never claimed: pending, no try spent.
    assert all(orders.job(other).attempts == 0 for other in ids if other != job_id)
    log = "\n".join(child.stderr)
    assert "1 completed" in log and "stopped" in log


def test_a_handler_still_running_when_the_grace_period_ends_gives_its_job_back_at_once(
    folder: Path, orders: echoq.Queue, children: list[Child]
) -> None:
    job_id = orders.enqueue("charge card").job_id
    child = Child(folder, "jobs:held", "-q", orders.name, "--grace-ms", "200", "--lease-ms", "600000")
    children.append(child)
    _, token, _ = child.started()
    child.signal(signal.SIGINT)
    line = child.expect(job_id)
    assert "still running when the grace period ended" in line and "given back to pending" in line
    assert child.wait() == 0
    # Pending again now, ten minutes before its lease would have run out, the try given back.
    snap = assert_one_place(orders, {job_id})
    assert snap.place_of(job_id) is echoq.JobState.PENDING and snap.counts["active"] == 0
    assert orders.job(job_id).attempts == 0
    # Had the handler gone on to complete (it died with its process), the fence refuses it.
    assert orders.complete(job_id, token) is Complete.STALE
    assert effects(folder) == []


def test_a_second_signal_stops_at_once(folder: Path, orders: echoq.Queue, children: list[Child]) -> None:
    job_id = orders.enqueue("a long job").job_id
    child = Child(folder, "jobs:held", "-q", orders.name, "--grace-ms", "600000")
    children.append(child)
    child.started()
    child.signal(signal.SIGTERM)
    child.expect("stopping (SIGTERM)")
    child.signal(signal.SIGTERM)  # ten minutes of grace left: only the second signal ends it
    child.expect("stopping at once (SIGTERM, a second signal)")
    assert "given back to pending" in child.expect(job_id)
    assert child.wait() == 128 + signal.SIGTERM
    snap = assert_one_place(orders, {job_id})
    assert snap.place_of(job_id) is echoq.JobState.PENDING and orders.job(job_id).attempts == 0


def test_a_handler_past_its_time_limit_is_retried_elsewhere_and_its_late_completion_fenced(
    folder: Path, orders: echoq.Queue, children: list[Child]
) -> None:
    job_id = orders.enqueue("charge card").job_id
    first = Child(folder, "jobs:held_first_try", "-q", orders.name, "--concurrency", "1", "--timeout-ms", "300")
    children.append(first)
    assert first.started() == (job_id, 1, 1)
    first.expect(f"{job_id}: the handler is still running after timeout_ms=300")
    assert "retried (try 1 failed)" in first.expect(job_id)  # through retry: a try spent
    # Its only handler thread is still held, so this worker claims nothing: another takes it.
    second = Child(folder, "jobs:held_first_try", "-q", orders.name, "--burst")
    children.append(second)
    assert second.started() == (job_id, 2, 2)
    assert second.wait() == 0 and "1 completed" in "\n".join(second.stderr)
    first.go()  # the first try's handler returns now, long after its job was given up
    assert first.line() == "late handler returns"
    refused = first.expect(f"{job_id}: completion refused by the fence")
    assert refused.endswith("the handler finished after the job was given up") and "WARNING" in refused
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    assert "0 completed, 1 retried" in "\n".join(first.stderr) and "1 timed out" in "\n".join(first.stderr)
    snap = assert_one_place(orders, {job_id})
    assert job_id in snap.done and snap.counts["active"] == 0


def test_the_log_says_which_server_and_queue_and_each_failure_without_a_password_or_payload(
    folder: Path, orders: echoq.Queue, children: list[Child]
) -> None:
    payload = "card 4111 1111 1111 1111"
    job_id = orders.enqueue(payload).job_id
    child = Child(folder, "jobs:fails", "-q", orders.name, "--max-attempts", "2", "--burst")
    children.append(child)
    assert child.wait() == 0
    log = child.stderr
    first = log[0]
    assert "INFO" in first and f"jobs:fails on queue '{orders.name}'" in first and "Valkey" in first
    assert "***" in first  # the URL, its password hidden
    raised = f"{job_id}: the handler raised (try 1 of 2)"
    failed = [n for n, line in enumerate(log) if "ERROR" in line and raised in line]
    assert failed, log
    trace = log[failed[0] + 1 : failed[0] + 12]
    assert trace[0] == "Traceback (most recent call last):" and "ValueError: the card was declined" in trace
    assert any("WARNING" in line and f"{job_id}: retried (try 1 failed)" in line for line in log)
    assert any("WARNING" in line and f"{job_id}: dead-lettered after 2 tries" in line for line in log)
    assert any("INFO" in line and "stopped: 0 completed, 1 retried, 1 dead-lettered" in line for line in log)
    password = echoq.address.connection_settings(orders.client).get("password")
    text = "\n".join(log)
    assert password and password not in text and payload not in text and "4111" not in text
    assert orders.snapshot().place_of(job_id) is echoq.JobState.DEAD


@pytest.mark.parametrize(
    ("handler", "said"),
    [
        ("jobs", "must be given as module:function"),
        ("nosuch.module:handle", "no module named 'nosuch'"),
        ("jobs:missing", "module 'jobs' has no attribute 'missing'"),
        ("jobs:not_callable", "jobs:not_callable is not callable (int)"),
    ],
)
def test_a_bad_handler_is_one_line_and_exit_2_before_any_server_is_reached(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], handler: str, said: str
) -> None:
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [str(folder), *sys.path])
    monkeypatch.delitem(sys.modules, "jobs", raising=False)
    assert main(["worker", handler, "-q", "orders"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("echoq: ") and said in err, err


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--concurrency", "0"], "--concurrency must be a whole number between 1 and 256, got 0"),
        (["--lease-ms", "0"], "--lease-ms must be a whole number of milliseconds"),
        (["--timeout-ms", "0"], "--timeout-ms must be a whole number of milliseconds"),
        (["--grace-ms", "-1"], "--grace-ms must be a whole number of milliseconds"),
        (["-q", "no spaces"], "'no spaces' is not a valid queue name"),
    ],
)
def test_bad_options_are_one_line_and_exit_2_before_any_server_is_reached(
    capsys: pytest.CaptureFixture[str], option: list[str], said: str
) -> None:
    assert main(["worker", "os:getpid", "-q", "orders", *option]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
