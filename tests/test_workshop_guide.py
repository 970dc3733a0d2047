"""docs/WORKSHOP.md, literally: the guide's commands to a class of two in Chromium, and back.

The instructor's commands as the guide gives them (``.venv/bin/python -m echoq.teaching workshop up``,
``... workshop hub``, ``... workshop export --csv``, ``... workshop down``), a roster with a
name in capitals (``Katherine.Johnson@nasa.gov``: the hub lowercases it at login), both
learners logged in with the class password and running class chaos's notebook, copied into
their homes by the hub. Then a learner's kernel is killed with SIGKILL and the dashboard
must say so within seconds; the hub is stopped and must end promptly, the dashboard page
must say it is disconnected; ``down`` must leave no process of the class behind.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import echoq
from echoq.teaching import heartbeat, learner, progress
from echoq.teaching.workshop import Workshop
from tests.support.browser import ROOT, _free_port, _http_status, browser, chromium, new_context  # noqa: F401  (fixtures)
from tests.support.hub import _descendants, alive, errors_in, finished_outputs, proxy_path, start_notebook

pytestmark = pytest.mark.browser

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
ROSTER = ["ada", "Katherine.Johnson@nasa.gov"]
READY_S = 90.0


def guide(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PYTHON, "-m", "echoq.teaching", "workshop", *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_guide_runs_a_class_of_two_and_tears_it_down_with_nothing_left(tmp_path: Path, browser) -> None:  # noqa: F811
    proxy_path()
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_WORKSHOP", "ECHOQ_LEARNER")}
    (tmp_path / "roster.txt").write_text("\n".join(ROSTER) + "\n")
    folder = tmp_path / "class"
    up = guide("up", "--dir", str(folder), "--roster", str(tmp_path / "roster.txt"), "--instructor", "teacher", env=env)
    assert "2 learner user(s)" in up.stdout
    workshop = Workshop.load(folder)
    katherine = learner.from_hub_user("Katherine.Johnson@nasa.gov")
    port = _free_port()
    log = (tmp_path / "hub.log").open("wb")
    hub = subprocess.Popen(
        [PYTHON, "-m", "echoq.teaching", "workshop", "hub", "--dir", str(folder), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    below: list[int] = []
    contexts = []
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + READY_S
        while _http_status(url + "/hub/api") != 200:
            assert hub.poll() is None and time.monotonic() < deadline, (tmp_path / "hub.log").read_text()[-3000:]
            time.sleep(0.1)
        passwords = {
            "learner": (folder / "hub" / "class-password").read_text().strip(),
            "teacher": (folder / "hub" / "instructor-password").read_text().strip(),
        }
        pages = {}
        for name in [*ROSTER, "teacher"]:
            context = new_context(browser, 1000)
            contexts.append(context)
            page = context.new_page()
            where = "/services/echoq-dashboard/" if name == "teacher" else "/hub/"
            page.goto(f"{url}/hub/login?next={where}")
            page.fill("input[name=username]", name)  # as the learner types it, capitals and all
            page.fill("input[name=password]", passwords["teacher" if name == "teacher" else "learner"])
            page.click("button[type=submit], input[type=submit]")
            pages[name] = page
        for name in ROSTER:
            pages[name].wait_for_url("**/lab**", timeout=READY_S * 1000)
            start_notebook(pages[name], "class_chaos.ipynb")  # copied into their home by the hub
        for name in ROSTER:
            # Run All: the class worker starts, the practice part stops in one line (no second worker).
            (error,) = errors_in(finished_outputs(pages[name], "class_chaos.ipynb"))
            assert error.startswith("InvalidArgument: this part is for learners alone"), error
        instructor = echoq.connect(workshop.instructor_url)
        beats = {lid: heartbeat.parse(instructor.get(heartbeat.alive_key(lid))) for lid in ("ada", katherine)}
        assert all(beats.values()), beats  # Katherine is on the class server, under her own id
        with echoq.connect(workshop.learner_url("ada")) as ada:
            os.environ["ECHOQ_LEARNER"] = "ada"
            try:
                progress.record_check(ada, "02", "claim", False, "deadline-in-the-past", code="-- ada's try")
            finally:
                del os.environ["ECHOQ_LEARNER"]
        teacher = pages["teacher"]
        teacher.locator(".echoq-board").wait_for(timeout=READY_S * 1000)
        row = teacher.locator(".echoq-board tr", has_text=katherine).last
        row.get_by_text("alive", exact=True).wait_for(timeout=15_000)
        row.get_by_text("running", exact=True).wait_for(timeout=15_000)  # her server, as the hub says
        below = [hub.pid, *_descendants(hub.pid)]
        os.kill(beats[katherine].pid, signal.SIGKILL)  # kill -9 her kernel
        killed = time.monotonic()
        row.get_by_text("not alive").wait_for(timeout=15_000)
        noticed_s = time.monotonic() - killed
        assert noticed_s < heartbeat.TTL_MS / 1000 + 8, noticed_s  # the beat's TTL, then a refresh and a paint
        assert teacher.locator(".echoq-board tr", has_text="ada").last.get_by_text("alive", exact=True).is_visible()
        # Her own page no longer claims her worker runs: its readout says the line is old.
        pages[ROSTER[1]].get_by_text("the line above is old").wait_for(state="visible", timeout=15_000)
        assert not pages["ada"].get_by_text("the line above is old").is_visible()  # ada's kernel lives
        out = tmp_path / "attempts.csv"
        guide("export", "--dir", str(folder), "--csv", str(out), env=env)
        rows = list(csv.DictReader(io.StringIO(out.read_bytes().decode(), newline="")))
        assert [(r["learner"], r["exercise"], r["misconception"]) for r in rows] == [
            ("ada", "claim", "deadline-in-the-past")
        ]
        hub.send_signal(signal.SIGTERM)  # the instructor's Ctrl-C
        stopping = time.monotonic()
        hub.wait(30)
        stop_s = time.monotonic() - stopping
        assert stop_s < 20, f"the hub took {stop_s:.1f} s to stop"  # each server gets 3 s; a hang was 30+ s
        teacher.locator(".echoq-disconnected").wait_for(state="visible", timeout=15_000)
        assert "Disconnected" in teacher.locator(".echoq-disconnected").inner_text()
        down = guide("down", "--dir", str(folder), env=env)
        assert "stopped the class server" in down.stdout
        left = [pid for pid in [*below, workshop.server_pid] if pid and alive(pid)]
        assert left == [], left
        assert [p.name for p in folder.iterdir()] == ["hub"]  # the learners' notebooks, nothing else
    finally:
        for context in contexts:
            context.close()
        for pid in [hub.pid, *below, *_descendants(hub.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        hub.wait()
        log.close()
        if (folder / "workshop.json").exists():
            subprocess.run(
                [PYTHON, "-m", "echoq.teaching", "workshop", "down", "--dir", str(folder)], env=env, timeout=60
            )
