"""The Worker's clean stop, signals, handler time limit and logs, in this process (the worker
command's tests run it as a process of its own: tests/test_worker_command.py).

Every wait is on an event (a handler's, a log record's) with a deadline that only turns a
hang into a failure."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator

import pytest
import redis

import echoq
from echoq import Delivery, InvalidArgument, Worker
from tests.support.helpers import assert_one_place

FAST = {"beat_ms": 20, "idle_wait_ms": 5}
WAIT_S = 30  # a bound against a hang only


class Heard(logging.Handler):
    """Keeps the echoq records, and sets an event when one holds the words waited for."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._waits: list[tuple[str, threading.Event]] = []
        self._lock_ = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_:
            self.records.append(record)
            for words, event in self._waits:
                if words in record.getMessage():
                    event.set()

    def waiter(self, words: str) -> threading.Event:
        event = threading.Event()
        with self._lock_:
            self._waits.append((words, event))
            if any(words in r.getMessage() for r in self.records):
                event.set()
        return event

    def lines(self) -> list[str]:
        return [f"{r.levelname} {r.getMessage()}" for r in self.records]


@pytest.fixture
def heard() -> Iterator[Heard]:
    logger = logging.getLogger("echoq")
    handler = Heard()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_a_handler_that_is_not_callable_is_refused_at_construction(queue: echoq.Queue) -> None:
    with pytest.raises(InvalidArgument, match=r"^handler must be callable, a function that takes a Delivery; got 42$"):
        Worker(queue, 42)  # type: ignore[arg-type]
    for bad in ({"timeout_ms": 0}, {"grace_ms": -1}, {"timeout_ms": True}):
        with pytest.raises(InvalidArgument, match="must be a whole number of milliseconds"):
            Worker(queue, print, **bad)  # type: ignore[arg-type]


def test_the_library_is_quiet_unless_the_program_configures_logging() -> None:
    logger = logging.getLogger("echoq")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert logger.level == logging.NOTSET  # the program's configuration decides what is shown


def test_work_in_the_main_thread_stops_cleanly_on_sigint_and_puts_the_old_handler_back(
    queue: echoq.Queue, heard: Heard
) -> None:
    assert threading.current_thread() is threading.main_thread()
    ids = queue.enqueue_many(["first", "second", "third"])
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    during: list[object] = []
    stopping = heard.waiter("stopping (SIGINT)")

    def handler(delivery: Delivery) -> None:
        if not during:
            during.append(signal.getsignal(signal.SIGINT))
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, mid-job
            assert stopping.wait(WAIT_S)  # the worker heard it while this job runs

    worker = Worker(queue, handler, lease_ms=60_000, prefetch=2, **FAST)
    unhung = threading.Timer(WAIT_S, worker.abandon)  # a signal not handled would hang work()
    unhung.start()
    try:
        report = worker.work()  # not a burst: only the stop ends it
    finally:
        unhung.cancel()
    assert not report.abandoned
    assert during and during[0] not in before  # its own handler, for the run
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert report.completed == 1 and report.given_up == 0
    snap = assert_one_place(queue, set(ids))
    assert snap.counts["done"] == 1 and snap.counts["active"] == 0
    # The jobs claimed and not started went back, their tries too.
    assert report.released == report.claimed - 1
    assert all(queue.job(job_id).attempts == 0 for job_id in snap.pending)


def test_work_in_another_thread_installs_no_handler(queue: echoq.Queue) -> None:
    queue.enqueue("one")
    before = signal.getsignal(signal.SIGINT)
    seen: list[object] = []
    worker = Worker(queue, lambda d: seen.append(signal.getsignal(signal.SIGINT)), **FAST)
    runner = threading.Thread(target=worker.work, kwargs={"burst": True})
    runner.start()
    runner.join(WAIT_S)
    assert seen == [before] and signal.getsignal(signal.SIGINT) == before


def test_the_grace_period_ends_by_giving_the_running_job_back_and_its_late_return_is_dropped(
    queue: echoq.Queue, heard: Heard
) -> None:
    job_id = queue.enqueue("slow").job_id
    started, release, returned = threading.Event(), threading.Event(), threading.Event()
    lease_seen: list[bool] = []

    def handler(delivery: Delivery) -> None:
        if delivery.attempts == 1 and not started.is_set():
            started.set()
            release.wait(WAIT_S)
            lease_seen.append(delivery.lease_lost)
            returned.set()

    worker = Worker(queue, handler, lease_ms=60_000, grace_ms=50, **FAST)
    reports: list[echoq.WorkReport] = []
    runner = threading.Thread(target=lambda: reports.append(worker.work()))
    runner.start()
    assert started.wait(WAIT_S)
    worker.stop()
    runner.join(WAIT_S)
    assert not runner.is_alive()  # it did not wait for the handler
    (report,) = reports
    assert (report.given_up, report.completed) == (1, 0)
    snap = assert_one_place(queue, {job_id})
    assert snap.place_of(job_id) is echoq.JobState.PENDING and queue.job(job_id).attempts == 0
    assert any(line.startswith("WARNING") and job_id in line and "grace period" in line for line in heard.lines())
    # The handler returns now, told its lease is lost; the next run is not disturbed by it.
    release.set()
    again = worker.work(burst=True)
    assert (again.completed, again.stale, again.given_up) == (1, 0, 0)
    assert returned.wait(WAIT_S)  # the given-up handler's thread runs on its own time
    assert lease_seen == [True]
    assert queue.job(job_id) is None


def test_stop_at_once_gives_back_a_running_job_without_waiting_the_grace_period(queue: echoq.Queue) -> None:
    job_id = queue.enqueue("slow").job_id
    started, release = threading.Event(), threading.Event()

    def handler(delivery: Delivery) -> None:
        started.set()
        release.wait(WAIT_S)

    worker = Worker(queue, handler, lease_ms=60_000, grace_ms=600_000, **FAST)
    reports: list[echoq.WorkReport] = []
    runner = threading.Thread(target=lambda: reports.append(worker.work()))
    runner.start()
    assert started.wait(WAIT_S)
    worker.stop()  # ten minutes of grace ...
    worker.stop(0)  # ... cut short
    runner.join(WAIT_S)
    release.set()
    assert not runner.is_alive() and reports[0].given_up == 1
    assert queue.snapshot().place_of(job_id) is echoq.JobState.PENDING


def test_a_handler_past_its_time_limit_is_given_up_retried_and_its_late_completion_refused(
    queue: echoq.Queue, heard: Heard
) -> None:
    job_id = queue.enqueue("charge card").job_id
    second_done, release = threading.Event(), threading.Event()
    told: list[bool] = []

    def handler(delivery: Delivery) -> None:
        if delivery.attempts == 1:
            release.wait(WAIT_S)  # well past the limit
            told.append(delivery.lease_lost)
        else:
            second_done.set()

    fenced = heard.waiter(f"{job_id}: completion refused by the fence")
    worker = Worker(queue, handler, concurrency=2, timeout_ms=100, backoff=echoq.Backoff(base_ms=0), **FAST)
    reports: list[echoq.WorkReport] = []
    runner = threading.Thread(target=lambda: reports.append(worker.work()))
    runner.start()
    assert second_done.wait(WAIT_S)  # the second try ran on the other thread
    release.set()
    assert fenced.wait(WAIT_S)
    worker.stop()
    runner.join(WAIT_S)
    (report,) = reports
    assert (report.timed_out, report.retried, report.completed, report.stale) == (1, 1, 1, 1)
    assert told == [True]  # the late handler could see its job was no longer its own
    assert queue.job(job_id) is None and queue.snapshot().counts["active"] == 0
    lines = heard.lines()
    assert any(line.startswith("WARNING") and "still running after timeout_ms=100" in line for line in lines)


def test_a_failing_handler_is_logged_with_its_traceback_and_job_id_and_no_payload(
    queue: echoq.Queue, heard: Heard
) -> None:
    job_id = queue.enqueue("card 4111 1111 1111 1111").job_id

    def handler(delivery: Delivery) -> None:
        raise RuntimeError("declined")

    Worker(queue, handler, max_attempts=2, backoff=echoq.Backoff(base_ms=0), **FAST).work(burst=True)
    errors = [r for r in heard.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        f"{job_id}: the handler raised (try 1 of 2)",
        f"{job_id}: the handler raised (try 2 of 2)",
    ]
    assert all(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in errors)
    warnings = [r.getMessage() for r in heard.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"{job_id}: retried (try 1 failed); pending again now",
        f"{job_id}: dead-lettered after 2 tries (max_attempts 2): RuntimeError: declined",
    ]
    assert not any("4111" in line for line in heard.lines())


def test_a_busy_worker_writes_no_log_record_per_job(queue: echoq.Queue, heard: Heard) -> None:
    queue.enqueue_many([f"job {n}" for n in range(200)])
    report = Worker(queue, lambda d: None, concurrency=4, **FAST).work(burst=True)
    assert report.completed == 200
    # Its start and its stop; nothing per job, at any level.
    assert [r.levelname for r in heard.records] == ["INFO", "INFO"], heard.lines()


class _Blip(echoq.Queue):
    """The first complete-and-claim call fails as a cut connection would, before it reaches
    the server; the calls after it get through."""

    def __init__(self, queue: echoq.Queue) -> None:
        super().__init__(queue.name, queue.client)
        self.blips = 1

    def complete_many_and_claim(self, claims, **kwargs):  # type: ignore[no-untyped-def]
        if self.blips:
            self.blips -= 1
            raise redis.ConnectionError("Connection reset by peer")
        return super().complete_many_and_claim(claims, **kwargs)


def test_a_lost_server_and_its_return_are_logged(queue: echoq.Queue, heard: Heard) -> None:
    queue.enqueue_many(["one", "two"])
    blip = _Blip(queue)
    report = Worker(blip, lambda d: None, lease_ms=200, **FAST).work(burst=True)
    assert blip.blips == 0 and report.reconnected == 1 and report.completed == 2
    lines = heard.lines()
    lost = [line for line in lines if "does not answer" in line]
    back = [line for line in lines if "answers again" in line]
    said = "the server does not answer (ConnectionError: Connection reset by peer); trying again for up to 1.0 s"
    assert lost == [f"WARNING {said}"]
    assert len(back) == 1 and back[0].startswith("INFO the server answers again after ")


def test_a_worker_whose_every_thread_is_past_its_limit_claims_nothing_and_gives_its_buffer_back(
    queue: echoq.Queue, heard: Heard
) -> None:
    ids = queue.enqueue_many([f"job {n}" for n in range(5)])
    release = threading.Event()
    gave_back = heard.waiter("claimed job(s) not started")
    held = Worker(
        queue,
        lambda d: release.wait(WAIT_S),
        concurrency=1,
        prefetch=4,
        timeout_ms=100,
        backoff=echoq.Backoff(base_ms=0),
        **FAST,
    )
    reports: list[echoq.WorkReport] = []
    runner = threading.Thread(target=lambda: reports.append(held.work()))
    runner.start()
    try:
        assert gave_back.wait(WAIT_S)
        # Its one thread is held: every job, the one retried and the ones given back, is
        # another worker's to take.
        other = Worker(queue, lambda d: None, **FAST).work(burst=True)
        assert other.completed == 5
    finally:
        release.set()
        held.stop()
        runner.join(WAIT_S)
    (report,) = reports
    assert report.timed_out == 1 and report.completed == 0 and report.released == report.claimed - 1
    snap = assert_one_place(queue, set(ids))
    assert snap.counts["done"] == 5
