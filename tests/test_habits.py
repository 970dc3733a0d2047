"""A learner's habits must not break a lesson: interrupting a cell, losing the server, an ACL
refusal, re-running cells. Kernel-level (jupyter_client), fast; the browser test of the same
habits is in tests/test_browser_habits.py."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from jupyter_client.manager import KernelManager

from echoq import server
from echoq.errors import PermissionDenied, ServerUnavailable
from echoq.server import start_server
from echoq.teaching import course
from tests.support.helpers import ANSI, run_in_own_loop, throwaway_env


@pytest.fixture
def dead_embedded(monkeypatch: pytest.MonkeyPatch):
    """This process's embedded server, as one that has stopped (without stopping the real one)."""
    dead = start_server()
    dead.kill()
    monkeypatch.setattr(server, "_throwaway", dead)
    monkeypatch.delenv("VALKEY_URL", raising=False)
    monkeypatch.setenv("ECHOQ_VALKEY", "throwaway")
    monkeypatch.setattr(course, "_started", "04")
    monkeypatch.setattr(course, "_setup", None)  # a class worker cell run earlier in this process would name itself
    yield dead
    dead.stop()


def test_a_lost_embedded_server_says_so_and_which_cell_to_run(dead_embedded) -> None:
    refused = redis.ConnectionError(f"Error 111 connecting to 127.0.0.1:{dead_embedded.port}. Connection refused.")
    name, line = course.explain(refused)
    assert name == "ServerUnavailable" and "\n" not in line
    assert "has stopped" in line and 'course.start("04")' in line and "Connection refused" in line


@pytest.mark.server
def test_a_lost_class_server_never_advises_leaving_the_class(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = start_server()
    gone.kill()
    monkeypatch.setenv("VALKEY_URL", gone.url)
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    monkeypatch.setattr(course, "_started", "03")
    monkeypatch.setattr(course, "_setup", None)
    library_line = ServerUnavailable(
        f"lost Valkey at {gone.url} (Error 111 connecting); is the server still running? Reconnect with "
        "echoq.connect(), or fix VALKEY_URL, or unset it to use your user server (python -m echoq server start)"
    )
    for exc in (library_line, redis.ConnectionError("Error 111 connecting"), KeyboardInterrupt()):
        name, line = course.explain(exc)
        assert name == "ServerUnavailable" and "instructor" in line and 'course.start("03")' in line
        assert "VALKEY_URL" not in line and "embedded" not in line
    gone.stop()


@pytest.mark.server
def test_class_chaos_errors_point_to_its_own_cell_and_keep_the_learner_in_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from echoq.teaching.workshop import views

    gone = start_server()
    gone.kill()
    monkeypatch.setenv("VALKEY_URL", gone.url)
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    monkeypatch.setattr(course, "_setup", None)
    views.one_line_errors()  # what class_worker() installs
    name, line = course.explain(redis.ConnectionError("Error 111 connecting"))
    assert name == "ServerUnavailable" and "workshop.class_worker()" in line and "instructor" in line
    assert "VALKEY_URL" not in line
    gone.stop()


def test_an_acl_refusal_on_the_class_server_points_to_the_learners_own_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VALKEY_URL", "redis://ada:pw@127.0.0.1:1/0")
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    monkeypatch.setattr(course, "_started", "02")
    refusal = PermissionDenied(
        "enqueue.lua: user 'ada' may not use the key emq:{bob.x}:pending (the server's ACL said: NOPERM); "
        "use a queue this user may touch, or ask whoever runs the server to grant user 'ada' ~emq:{bob.x}:*"
    )
    name, line = course.explain(refusal)
    assert name == "PermissionDenied" and "emq:{bob.x}:pending" in line and "'ada.<name>'" in line
    assert "instructor" in line and "grant" not in line and "VALKEY_URL" not in line
    name, line = course.explain(redis.exceptions.NoPermissionError("No permissions to access a key"))
    assert name == "PermissionDenied" and "No permissions" in line and "instructor" in line


@pytest.mark.server
def test_an_interrupt_with_the_server_running_says_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VALKEY_URL", raising=False)
    monkeypatch.setenv("ECHOQ_VALKEY", "throwaway")
    server.connect()  # this process's throwaway server, running
    name, line = course.explain(KeyboardInterrupt())
    assert name == "KeyboardInterrupt" and "still there" in line and "re-run this cell" in line


@pytest.mark.server
def test_a_url_mistake_keeps_its_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VALKEY_URL", raising=False)
    monkeypatch.setenv("ECHOQ_VALKEY", "throwaway")
    server.connect()
    mistake = ServerUnavailable("VALKEY_URL 'redis://x' is not a URL this kit understands; use redis://")
    assert course.explain(mistake) == ("ServerUnavailable", str(mistake))
    assert course.explain(ValueError("a learner's own bug")) is None  # keeps its traceback


def test_a_lesson_cell_whose_setup_is_gone_says_which_cells_to_run(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import json

    cells = [{"cell_type": "code", "source": ["assert q.snapshot().counts['pending'] == 1"], "metadata": {}}]
    (tmp_path / "09_habits.ipynb").write_text(json.dumps({"cells": cells}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.setattr(course, "_started", "09")
    assert course.is_lesson_cell("assert q.snapshot().counts['pending'] == 1\n")
    assert not course.is_lesson_cell("assert q.snapshot().counts['pending'] == 2")  # the learner's own
    name, line = course.explain(AssertionError(), at_top_level=True)
    assert name == "RunFirst" and "Run All Above Selected Cell" in line and "(AssertionError)" in line
    name, line = course.explain(NameError("name 'q' is not defined", name="q"), at_top_level=True)
    assert name == "RunFirst" and "uses 'q'" in line
    assert course.explain(KeyError("x"), at_top_level=False) is None  # raised inside a function: its traceback


# -- in a real kernel ---------------------------------------------------------------------------


@contextmanager
def kernel(**env: str) -> Iterator[KernelManager]:
    base = throwaway_env("VALKEY_URL", "ECHOQ_LEARNER")
    manager = KernelManager(kernel_name="python3")
    manager.kernel_spec.argv[0] = sys.executable  # this venv's interpreter
    manager.start_kernel(env={**base, **env})
    try:
        yield manager
    finally:
        manager.shutdown_kernel(now=True)


def run(manager: KernelManager, code: str, *, interrupt_after: str | None = None, timeout: float = 60) -> dict:
    """Execute ``code``; returns {'error': (ename, evalue, traceback) | None, 'stdout': str}.
    With ``interrupt_after``, interrupt the kernel once that text has been printed."""
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=timeout)
        msg_id = client.execute(code)
        out, error = [], None
        while True:
            msg = client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
                if interrupt_after and interrupt_after in "".join(out):
                    manager.interrupt_kernel()
                    interrupt_after = None
            elif kind == "error":
                error = (content["ename"], ANSI.sub("", content["evalue"]), content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                return {"error": error, "stdout": "".join(out)}
    finally:
        client.stop_channels()


@pytest.mark.server
def test_interrupting_a_lesson_cell_keeps_the_server_and_says_so_in_one_line() -> None:
    with kernel() as manager:
        setup = run(manager, 'from echoq.teaching import course\nlesson = course.start("00", quiet=True)')
        assert setup["error"] is None, setup
        run(manager, 'q = lesson.queue; job = q.enqueue("keep me").job_id')
        started = run(
            manager,
            "from echoq import Worker\nbusy = lesson.fresh_queue('busy')\n"
            "worker = course.in_background(Worker(busy, lambda d: None, lease_ms=5_000))",
        )
        assert started["error"] is None, started
        long = run(manager, "import time\nprint('running', flush=True)\ntime.sleep(60)", interrupt_after="running")
        name, line, traceback = long["error"]
        assert (name, len(traceback)) == ("KeyboardInterrupt", 1) and "still there" in line, long
        after = run(manager, "print(q.snapshot().place_of(job))")
        assert after["error"] is None and after["stdout"].strip() == "pending", after
        # A Worker working in the background rode out the interrupt: it takes new jobs.
        worked = run(manager, "print(worker.wait_done(busy, busy.enqueue_many(['a', 'b']), timeout_s=30))")
        assert worked["error"] is None and "all 2 jobs done" in worked["stdout"], worked


@pytest.mark.server
def test_a_lost_server_in_a_lesson_kernel_is_one_line_naming_the_setup_cell() -> None:
    with kernel() as manager:
        run(manager, 'from echoq.teaching import course\nlesson = course.start("01", quiet=True)')
        run(manager, "from echoq import server\nserver._throwaway.kill()")
        lost = run(manager, 'lesson.queue.enqueue("x")')
        name, line, traceback = lost["error"]
        assert (name, len(traceback)) == ("ServerUnavailable", 1), lost
        assert 'course.start("01")' in line and "has stopped" in line
        again = run(manager, 'lesson = course.start("01", quiet=True)\nprint(lesson.queue.enqueue("x").outcome)')
        assert again["error"] is None and again["stdout"].strip() == "enqueued", again


# -- a Worker in the background of a lesson ------------------------------------------------------


@pytest.mark.server
def test_a_background_worker_is_judged_by_every_job_done_and_a_second_start_replaces_the_first() -> None:
    from echoq import Queue, Worker

    queue = Queue("habits-background", server.connect())
    queue.reset()
    ids = queue.enqueue_many([f"job {n}" for n in range(30)])
    first = course.in_background(Worker(queue, lambda delivery: None, lease_ms=5_000, beat_ms=100))
    assert course.in_background(second := Worker(queue, lambda delivery: None, lease_ms=5_000)) is not first
    assert not first.working and first.failure is None  # stopped, not left competing for the jobs
    background = course._background[queue.name]
    assert background.worker is second
    assert background.wait_done(queue, ids, timeout_s=30).startswith("all 30 jobs done")
    background.stop()
    assert not background.working
    assert "the Worker has stopped (it was stopped)" in background.wait_done(queue, ids, timeout_s=30)
    with pytest.raises(course.LessonCheckFailed, match="the Worker stopped before the jobs were done"):
        background.wait_done(queue, [*ids, *queue.enqueue_many(["left behind"])], timeout_s=30)


@pytest.mark.server
def test_a_background_worker_that_lost_its_server_says_so() -> None:
    from echoq import Queue, Worker

    own = start_server()
    queue = Queue("habits-lost", server.connect(own.url))
    ids = queue.enqueue_many(["a", "b"])
    own.kill()
    background = course.in_background(Worker(queue, lambda delivery: None, lease_ms=200, beat_ms=50))
    try:
        with pytest.raises((course.LessonCheckFailed, ServerUnavailable)) as failed:
            background.wait_done(queue, ids, timeout_s=30)
        assert "\n" not in str(failed.value)
    finally:
        background.stop()
        own.stop()


# -- labs: what a click started stops when the lesson moves on; outside changes are drawn -------


@pytest.fixture
def lab_name() -> Iterator[str]:
    from echoq import Queue
    from tests.support.servers import fresh_name

    name = fresh_name("habits-lab")
    yield name
    Queue(name, server.connect()).reset()


@pytest.mark.server
def test_a_fleet_started_by_a_click_stops_when_a_lesson_cell_starts_and_one_started_by_a_cell_goes_on(
    lab_name: str,
) -> None:
    from echoq.teaching.lab import FleetLab

    lab = FleetLab(lab_name, live=False)
    try:
        lab.model.open()
        lab.start_button.click()
        assert lab.runs_by_itself()
        assert lab.quiesce() and not lab.runs_by_itself()
        assert "stopped" in lab.model.readout.lower()
        lab.model.start(2)  # from a cell: the next cell may be waiting for it
        assert not lab.quiesce() and lab.runs_by_itself()
    finally:
        lab.close()
    assert not lab.model.running  # closing a lab stops its workers


@pytest.mark.server
def test_a_lab_shown_again_closes_the_one_shown_before_on_its_queue(lab_name: str) -> None:
    from echoq.teaching.lab import FleetLab

    first = FleetLab(lab_name, live=False)
    first._ipython_display_()
    first.model.start(2)
    second = FleetLab(lab_name, live=False)
    try:
        second._ipython_display_()
        assert not first.model.running and first.player._closed.is_set()
    finally:
        first.close()
        second.close()


@pytest.mark.server
def test_a_reset_from_elsewhere_is_drawn_on_the_next_look(lab_name: str) -> None:
    from echoq import Queue
    from echoq.teaching.lab import ClaimLab

    lab = ClaimLab(lab_name, live=False)
    try:
        lab.model.open()
        lab.model.enqueue()
        assert not lab._look()  # nothing changed outside it
        Queue(lab_name, server.connect()).reset()  # another tab's reset
        assert lab._look()
        assert lab.model.frame.snapshot.counts["pending"] == 0 and "outside this panel" in lab.model.readout
    finally:
        lab.close()


@pytest.mark.server
def test_the_kernels_clock_looks_at_every_shown_lab(lab_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-read clock runs on the kernel's event loop (here a real tornado loop, as the
    kernel's is), needs no browser, and stops when no lab is shown."""
    import asyncio

    from tornado.ioloop import IOLoop

    from echoq import Queue
    from echoq.teaching.lab import ClaimLab, view

    lab = ClaimLab(lab_name, live=False)
    looks: list[bool] = []

    async def main() -> None:
        monkeypatch.setattr(view, "_kernel_loop", IOLoop.current)
        monkeypatch.setattr(view, "_clock", None)
        original = lab._look
        monkeypatch.setattr(lab, "_look", lambda: looks.append(original()) or looks[-1])
        lab.model.open()
        view._displayed.add(lab)
        view._start_clock()
        Queue(lab_name, server.connect()).enqueue("from another process")
        deadline = time.monotonic() + 30
        while "outside this panel" not in lab.model.readout and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert lab.model.frame.snapshot.counts["pending"] == 1 and "outside this panel" in lab.model.readout
        view._displayed.discard(lab)
        while view._clock is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert view._clock is None  # nothing shown: the clock stopped by itself

    try:
        run_in_own_loop(main)
    finally:
        lab.close()
    assert True in looks and view.WATCH_S <= 1.0


@pytest.mark.server
def test_the_stored_picture_of_a_lab_says_it_is_still(lab_name: str) -> None:
    from echoq.teaching.lab import ClaimLab
    from echoq.teaching.lab.view import STILL

    lab = ClaimLab(lab_name, live=False)
    try:
        lab.model.open()
        bundle = lab.fallback()
        assert STILL in bundle["text/plain"] and "the live lab needs this cell run" in bundle["text/html"]
    finally:
        lab.close()


@pytest.mark.server
def test_only_a_lesson_cell_stops_what_a_click_started(lab_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from echoq.teaching.lab import FleetLab, view

    lab = FleetLab(lab_name, live=False)
    try:
        lab._ipython_display_()
        lab.start_button.click()
        monkeypatch.setattr(course, "is_lesson_cell", lambda source: source == "the lesson's cell")
        view._lesson_moves_on(SimpleNamespace(raw_cell="the learner's own cell"))
        assert lab.runs_by_itself()  # they may be driving the lab from code
        view._lesson_moves_on(SimpleNamespace(raw_cell="the lesson's cell"))
        assert not lab.runs_by_itself()
    finally:
        lab.close()
