"""Learners writing what the kit never writes, on a real class server: the instructor's
board, scoreboard, dashboard and ``workshop status`` skip it, say how much they skipped,
and go on; the class's figures are counted from the queue, not from learners' numbers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import echoq
from echoq.teaching import progress
from echoq.teaching.workshop import Workshop, admin, board, classroom

HOSTILE = "<img src=x onerror=window.__pwned=1>"


@pytest.fixture(scope="module")
def klass(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workshop]:
    folder = tmp_path_factory.mktemp("hostile") / "class"
    workshop, _ = admin.up(folder, roster=["ada", "bob"], class_name="hostile")
    yield workshop
    admin.down(folder)


def raw_learner(workshop: Workshop, name: str) -> redis.Redis:
    return echoq.connect(workshop.learner_url(name), decode_responses=False)


def poison(workshop: Workshop) -> None:
    """What ada can write: her own record, queues and class-worker records, and the shared
    class queue's keys (in their shapes: tests/test_workshop.py tries every other name)."""
    ada = raw_learner(workshop, "ada")
    keys = classroom.ClassKeys("hostile")
    ada.hset(
        progress.key("ada"),
        mapping={
            f"lesson:{HOSTILE}": "not a number",
            "lesson:02": "1700000000000",
            "lesson:\xff\xfe": b"\xff\xfe\xfd",
            "check:02:claim:submissions": "many",
            "check:02:claim:at": "1",
            "check:03:x:submissions": "2",
            "check:03:x:at": "1",
            "check:03:x:misconception": HOSTILE.encode() + b"\xff",
        },
    )
    ada.hset("emq:{ada.weird}:stats", "enqueued", "1")  # a queue the board discovers ...
    ada.set("emq:{ada.weird}:pending", "not a sorted set")  # ... whose counts answer WRONGTYPE
    ada.hset(f"emq:{{ada.{HOSTILE}}}:stats", "enqueued", "1")  # a key no kit queue has: not a queue name
    ada.hset(classroom.score_key("ada"), mapping={"delivered": "lots", "effects": "-3", "junk": "5"})
    ada.set(classroom.state_key("ada"), f"{HOSTILE} 12")
    ada.hset(echoq.Keyspace(keys.queue).stats, "enqueued", "1000000")  # the queue's own counter: not trusted
    ada.hset(echoq.Keyspace(keys.queue).effects, mapping={"forged-id": "99"})


def test_the_board_skips_and_counts_what_is_not_the_kits_and_shows_the_rest(klass: Workshop) -> None:
    poison(klass)
    ids = classroom.produce(klass.instructor(), 5, klass="hostile")
    data = board.Board(klass.instructor(), list(klass.learners), class_name="hostile").read()
    ada = {lv.learner: lv for lv in data.learners}["ada"]
    assert "02" in ada.lessons and HOSTILE not in ada.lessons  # the good lesson stays, the bad one goes
    assert [c.exercise for c in ada.checks] == ["x"] and ada.checks[0].submissions == 2
    assert data.skipped["progress records"] >= 3 and data.skipped["queues"] == 1 and data.skipped["queue names"] == 1
    sb = data.scoreboard
    # The class's figures come from the queue, for the jobs the instructor produced: ada's
    # counter of a million jobs and her forged effect count nothing.
    assert (sb.jobs, sb.counts["pending"], sb.total.lost, sb.total.effects, sb.total.duplicates) == (5, 5, 0, 0, 0)
    assert set(sb.by_learner) == {"ada", "bob"} and sb.by_learner["bob"].effects == 0
    assert sb.by_learner["ada"].worker == "-" and sb.by_learner["bob"].worker == "-"
    assert sb.skipped["learners' own counts"] == 2 and sb.skipped["learners' worker states"] == 1
    page = board.render(data)
    assert "<img" not in page and "bad entries skipped" in page
    # A job ada takes out of the class queue is lost, and counted so: the count is the queue's.
    raw_learner(klass, "ada").zrem(echoq.Keyspace(klass.class_queue).pending, ids[0])
    assert classroom.read_scoreboard(klass.instructor(), list(klass.learners), klass="hostile").total.lost == 1


def test_workshop_status_reads_bad_data_without_a_traceback(klass: Workshop) -> None:
    poison(klass)
    raw_learner(klass, "bob").set(progress.key("bob"), "a string where a hash belongs")
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_WORKSHOP")}
    done = subprocess.run(
        [sys.executable, "-m", "echoq.teaching", "workshop", "status", "--dir", str(klass.dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "bad entries skipped" in done.stdout and "02" in done.stdout
    raw_learner(klass, "bob").delete(progress.key("bob"))


def test_the_dashboards_refresh_survives_any_failure_and_says_so(klass: Workshop, monkeypatch) -> None:
    from echoq.teaching.workshop import views

    dash = views.Dashboard.for_workshop(klass, refresh_s=0.05)
    try:
        real = dash.board.read

        def broken() -> board.BoardData:
            raise ValueError("invalid literal for int() with base 10: 'lots'")

        monkeypatch.setattr(dash.board, "read", broken)
        deadline = time.monotonic() + 10
        while "could not read the class" not in dash.view.value:
            assert time.monotonic() < deadline, dash.view.value
            time.sleep(0.02)
        assert "ValueError" in dash.view.value and "tries again" in dash.view.value
        monkeypatch.setattr(dash.board, "read", real)
        while "Where the class is" not in dash.view.value:  # the same thread, still refreshing
            assert time.monotonic() < deadline, "the refresh thread died"
            time.sleep(0.02)
        assert dash._thread.is_alive()
    finally:
        dash.close()


def test_a_learner_may_not_write_the_produced_jobs(klass: Workshop) -> None:
    ada = echoq.connect(klass.learner_url("ada"))
    with pytest.raises(echoq.PermissionDenied):
        ada.zadd(classroom.ClassKeys("hostile").produced, {"forged": 1})
    assert Path(klass.dir).is_dir()


def test_one_learners_bad_times_ids_and_100000_fields_cost_only_their_row(klass: Workshop) -> None:
    from echoq.teaching.workshop import export

    ada, bob = raw_learner(klass, "ada"), raw_learner(klass, "bob")
    progress_key = progress.key("bob")
    bob.delete(progress_key)
    with echoq.connect(klass.learner_url("bob")) as honest:  # bob's one real submission
        os.environ["ECHOQ_LEARNER"] = "bob"
        try:
            progress.record_check(honest, "02", "claim", True, None, code="-- bob's")
        finally:
            del os.environ["ECHOQ_LEARNER"]
    history = progress.submissions_key("02", "claim", "ada")
    ada.delete(progress.key("ada"), history)
    ada.hset(progress.key("ada"), mapping={"check:02:claim:submissions": "3", "check:02:claim:at": "1"})
    past_any_date = "99999999999999999"  # 17 digits, a whole number, and no date a gradebook can write
    passed = {"check:03:complete:submissions": "1", "check:03:complete:at": "1", "check:03:complete:passed": "1"}
    passed |= {"check:03:complete:passed_at": past_any_date, "lesson:03": past_any_date}
    ada.hset(progress.key("ada"), mapping=passed)
    for at in ("Infinity", "1e300", "-5", '"soon"'):  # times no submission of the kit has
        ada.lpush(history, f'{{"at": {at}, "passed": false}}')
    bad = {"check:bad lesson!:claim:submissions": "1", "check:bad lesson!:claim:at": "1"}  # no lesson id of the kit's
    ada.hset(progress.key("ada"), mapping=bad)
    people = [(lid, lid, lid) for lid in klass.learners]
    rows = {(r.learner, r.exercise): r for r in export.rows(klass.instructor(), people)}
    assert (rows["bob", "claim"].status, rows["bob", "claim"].last_code) == ("passed", "-- bob's")
    assert (rows["ada", "claim"].tries, rows["ada", "claim"].last_submitted) == (3, "")  # her junk times: skipped
    assert (rows["ada", "complete"].status, rows["ada", "complete"].first_pass) == ("not started", "")
    assert not any(r.lesson == "bad lesson!" for r in rows.values()) and len(rows) == 2 * len(board.exercises_of())
    for n in range(0, 100_000, 10_000):  # a record swelled past what any reader takes in
        ada.hset(progress.key("ada"), mapping={f"junk:{i}": "x" for i in range(n, n + 10_000)})
    reader = board.Board(klass.instructor(), list(klass.learners), class_name="hostile")
    board.render(reader.read())  # the queues found and the catalogue imported, as at the dashboard's first refresh
    started = time.perf_counter()
    data = reader.read()
    page = board.render(data)
    took_ms = (time.perf_counter() - started) * 1000
    assert took_ms <= 200, f"a refresh with 100,000 junk fields took {took_ms:.0f} ms"  # read at most 5,000 of them
    shown = {lv.learner: lv for lv in data.learners}
    assert shown["ada"].lessons == [] and shown["ada"].checks == [] and data.skipped["progress records"] >= 1
    assert [c.exercise for c in shown["bob"].checks] == ["claim"]
    assert "bob" in page
    graded = export.rows(klass.instructor(), people)  # her swelled record costs her rows only
    assert {r.status for r in graded if r.learner == "ada"} == {"not started"}
    assert [r.exercise for r in graded if r.learner == "bob" and r.status == "passed"] == ["claim"]
    ada.delete(progress.key("ada"), history)


def test_a_forged_ledger_or_done_entry_is_shown_as_forged_never_as_duplicates_or_completed(klass: Workshop) -> None:
    keys = classroom.ClassKeys("hostile")
    queue = echoq.Keyspace(klass.class_queue)
    instructor = klass.instructor()
    instructor.delete(keys.produced, queue.pending, queue.done, queue.effects)
    ids = classroom.produce(instructor, 4, klass="hostile")
    # Bob takes a job (the oldest) as his worker would, then forges every trace of it in the
    # class queue consistently: the row gone, the effect counted once, the id in done.
    bob = echoq.connect(klass.learner_url("bob"))
    taken = echoq.Queue(klass.class_queue, bob).claim(lease_ms=60_000)
    assert taken.job_id == ids[0]
    ada = raw_learner(klass, "ada")
    ada.hset(queue.effects, ids[1], 7)  # "6 duplicate effects" that never ran
    ada.zrem(queue.pending, ids[2])  # a job lost ...
    ada.zadd(queue.done, {ids[2]: 1})  # ... made to look completed
    bob.hset(classroom.held_key("bob"), taken.job_id, taken.token)  # what his worker's handler notes
    bob.delete(queue.job(taken.job_id))
    bob.zrem(queue.active, taken.job_id)
    bob.hset(queue.effects, taken.job_id, 1)
    bob.zadd(queue.done, {taken.job_id: 1})
    ada.hset(classroom.ledger_key("ada"), ids[3], "applied")  # her own ledger claiming an effect that never ran
    sb = classroom.read_scoreboard(instructor, list(klass.learners), klass="hostile")
    assert sb.total.duplicates == 0 and sb.total.lost == 2 and sb.completed == 0, sb
    assert sb.forged == {classroom.FORGED_DUPLICATES: 1, classroom.FORGED_DONE: 1} and not sb.ok
    assert sb.disagreements["bob"] == {classroom.DONE_UNRECORDED: [taken.job_id]}, sb.disagreements
    assert sb.disagreements["ada"] == {classroom.NOT_IN_THE_CLASS_LEDGER: [ids[3]]}, sb.disagreements
    assert sb.disagreements["?"] == {classroom.DONE_UNRECORDED: [ids[2]]}, sb.disagreements
    page = board.render(board.Board(instructor, list(klass.learners), class_name="hostile").read())
    assert "written by hand" in page and "no job lost" not in page
    assert "bob's ledger disagrees with the queue: jobs last delivered to them are in done" in page, page
    assert "ada's ledger disagrees with the queue" in page
    ada.delete(classroom.ledger_key("ada"))
    instructor.delete(keys.produced, queue.pending, queue.active, queue.done, queue.effects, classroom.held_key("bob"))
