"""docs/WORKSHOP.md, literally: the guide's commands to a class of two in Chromium, and back.

The instructor's commands as the guide gives them (``.venv/bin/python -m echoq.teaching workshop up``,
``... workshop hub``, ``... workshop export --csv``, ``... workshop down``): the class server,
then JupyterHub from PyPI with configurable-http-proxy from npm (``tools/hub-deps.sh``
installs it into build/hub), ``SharedPasswordAuthenticator`` and the class spawner (each
learner's server and kernels as a Unix user of their own, made by ``workshop hub``), all on
127.0.0.1. The roster has a name
in capitals (``Katherine.Johnson@nasa.gov``: the hub lowercases it at login); both learners
log in with the class password, the instructor with the instructor password.

One hub, one browser and one class serve the module's tests, which run in file order
(pytest's own: the project runs no plugin that reorders tests) as the phases of one
workshop, each leaving the class as the next expects:

1. both learners run lessons 00 and 02 (copied into their homes by the hub) and see only
   their own queues;
2. each runs class chaos (one worker, and Run All stops in one line) and a notebook that
   reaches for the other's queue, refused in one line;
3. Ada's kernel, as her own Unix user, is refused every file of the class, Katherine's home
   and her kernels' environment, and has no Terminal;
4. the instructor's dashboard shows both, produces jobs and kills Ada's worker: the kill
   travels over the server, the scoreboard keeps 0 lost and 0 duplicate effects;
5. Katherine's kernels are killed with SIGKILL: the dashboard says "not alive" within
   seconds, and her page says its line is old;
6. a recorded check is a row of the CSV export;
7. the hub stops promptly, the dashboard page says it is disconnected, and ``down`` leaves
   no process of the class behind. Later tests would have no hub.

Skipped with the reason only where node (npm) or Chromium cannot be installed, or where not
run as root (no Unix users can be made); under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

import echoq
from echoq.teaching import heartbeat, learner, progress
from echoq.teaching.workshop import Workshop, classroom
from echoq.teaching.workshop.spawner import system_user
from tests.support.browser import (  # noqa: F401  (fixtures)
    ROOT,
    _free_port,
    _http_status,
    browser,
    chromium,
    new_context,
    no_news,
    poll,
    save_screenshot,
)
from tests.support.hub import (
    READY_S,
    _cannot,
    _descendants,
    alive,
    bring_to_front,
    close_again,
    errors_in,
    finished_outputs,
    give_to,
    kernels_of,
    learner_python,
    proxy_path,
    remove_test_users,
    run_cell,
    run_in_kernel,
    session_user_prefix,
    start_notebook,
    text_of,
)

pytestmark = pytest.mark.browser

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
ROSTER = ["ada", "Katherine.Johnson@nasa.gov"]
ADA, KATHERINE = "ada", learner.from_hub_user(ROSTER[1])  # learner ids: her name made a namespace
LEARNERS = (ADA, KATHERINE)
OTHER = {ADA: KATHERINE, KATHERINE: ADA}
LESSONS = ("00_start_here.ipynb", "02_recoverable_claim.ipynb")
CHAOS = "class_chaos.ipynb"
CHAOS_WORKER_CELL = 1  # `workshop.class_worker()`: "when your worker is killed, run the cell again"
PROBE = "workshop_probe.ipynb"


def probe_cells(other: str) -> list[str]:
    return [
        # What the class worker cell sets up first, without a second worker: class chaos runs one.
        "from echoq.teaching import workshop\n\nworkshop.one_line_errors()",
        f"import echoq\n\necho = echoq.Queue({other + '.lesson-02'!r}).snapshot()",  # someone else's queue
    ]


def guide(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PYTHON, "-m", "echoq.teaching", "workshop", *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done


@dataclass
class Class:
    """The workshop the guide's commands made, and its running hub."""

    folder: Path
    workshop: Workshop
    up: str  # what `workshop up` printed
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str]
    homes: Path  # where the learners' homes are (`workshop hub --homes`)
    prefix: str  # their Unix users' prefix (`workshop hub --user-prefix`)
    below: list[int] = field(default_factory=list)  # the hub's processes, noted before it is stopped

    def unix_user(self, lid: str) -> str:
        """The Unix user the learner's server and kernels run as."""
        return system_user(self.workshop.learners[lid].hub_user, self.prefix)

    def home(self, lid: str) -> Path:
        """Where the learner's notebooks are: their Unix user's home."""
        return Path(pwd.getpwnam(self.unix_user(lid)).pw_dir)

    def password(self, who: str) -> str:
        return (self.folder / "hub" / f"{who}-password").read_text().strip()


@pytest.fixture(scope="module")
def learners_space() -> Iterator[tuple[Path, str, str]]:
    """What learners may reach, outside the test's own folder (mode 0700): their homes and,
    where this Python is not reachable by them, a Python they can run; and the prefix of
    their Unix users. All of it, the users too, removed at the end."""
    if os.geteuid() != 0:
        _cannot("the class hub runs each learner as a Unix user of their own, which needs root")
    remove_test_users()  # those a killed session left behind
    shared = Path(tempfile.mkdtemp(prefix="echoq-hub-"))
    opened: list[tuple[Path, int]] = []  # folders opened for search (CI only), closed again at the end
    prefix = session_user_prefix()
    try:
        shared.chmod(0o755)
        (shared / "home").mkdir(mode=0o755)
        yield shared / "home", learner_python(shared / "python", opened), prefix
    finally:
        remove_test_users(prefix)
        shutil.rmtree(shared, ignore_errors=True)
        close_again(opened)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, chromium: str, learners_space) -> Iterator[Class]:  # noqa: F811
    proxy_path()
    homes, python, prefix = learners_space
    tmp = tmp_path_factory.mktemp("guide")
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_WORKSHOP", "ECHOQ_LEARNER")}
    (tmp / "roster.txt").write_text("\n".join(ROSTER) + "\n")
    folder = tmp / "class"
    up = guide("up", "--dir", str(folder), "--roster", str(tmp / "roster.txt"), "--instructor", "teacher", env=env)
    port = _free_port()
    log = tmp / "hub.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [PYTHON, "-m", "echoq.teaching", "workshop", "hub", "--dir", str(folder), "--port", str(port),
             "--homes", str(homes), "--user-prefix", prefix, "--learner-python", python],  # fmt: skip
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    klass = Class(folder, Workshop.load(folder), up.stdout, url, process, log, env, homes, prefix)
    try:
        deadline = time.monotonic() + READY_S
        while _http_status(klass.url + "/hub/api") != 200:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.1)
        yield klass
    finally:
        # Whatever a failed phase left (proxy, servers, the dashboard service, kernels): end
        # it at once rather than wait for each graceful shutdown; the class data goes with down.
        # Once the hub is reaped its pid may be another process's: only the living are ended.
        below = _descendants(process.pid) if process.poll() is None else []
        for pid in [*below, *klass.below]:
            with contextlib.suppress(ProcessLookupError):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
        process.wait()
        if (folder / "workshop.json").exists():
            subprocess.run(
                [PYTHON, "-m", "echoq.teaching", "workshop", "down", "--dir", str(folder)], env=env, timeout=60
            )


@pytest.fixture(scope="module")
def pages(hub: Class, browser) -> Iterator[dict[str, object]]:  # noqa: F811
    """One browser context per person (their own cookies), each logged in as the guide says:
    learners with their roster name as typed (capitals and all) and the class password, the
    instructor with theirs, straight to the dashboard (no server of their own is spawned)."""
    for lid, other in OTHER.items():
        # Before the learner's server starts: the hub copies the lessons beside it and never
        # overwrites a notebook that is there.
        home = hub.home(lid)  # made by `workshop hub`, with its Unix user, before anyone logs in
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in probe_cells(other)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, home / PROBE)
        no_news(home / ".jupyter" / "lab" / "user-settings")
        give_to(home / PROBE, hub.unix_user(lid))
        give_to(home / ".jupyter", hub.unix_user(lid))
    contexts, found = [], {}
    logins = {ADA: ROSTER[0], KATHERINE: ROSTER[1], "teacher": "teacher"}
    for who, typed in logins.items():
        teacher = who == "teacher"
        context = new_context(browser, 1500 if teacher else 900)  # the whole dashboard in one screenshot
        contexts.append(context)
        page = context.new_page()
        page.goto(f"{hub.url}/hub/login?next={'/services/echoq-dashboard/' if teacher else '/hub/'}")
        page.fill("input[name=username]", typed)
        page.fill("input[name=password]", hub.password("instructor" if teacher else "class"))
        page.click("button[type=submit], input[type=submit]")
        found[who] = page
    for who, page in found.items():
        page.wait_for_url("**/services/echoq-dashboard/**" if who == "teacher" else "**/lab**", timeout=READY_S * 1000)
    yield found
    for context in contexts:
        context.close()


def learner_row(teacher, lid: str):
    """The learner's row in the dashboard's table of learners (their id in bold, first): the
    scoreboard and the ACL's refusals have rows naming them too."""
    return teacher.locator(".echoq-board tr").filter(has=teacher.locator(f"td:first-child > b:text-is('{lid}')"))


def test_up_then_both_learners_run_lessons_00_and_02_and_see_only_their_own_queues(hub: Class, pages) -> None:
    assert "2 learner user(s)" in hub.up
    for lid in LEARNERS:
        for lesson in LESSONS:  # four kernels side by side
            start_notebook(pages[lid], lesson)
    for lesson in LESSONS:
        for lid in LEARNERS:
            outputs = finished_outputs(pages[lid], lesson)
            assert errors_in(outputs) == [], f"{lid} in {lesson}: {errors_in(outputs)}"
            shown = text_of(outputs)
            assert f"This lesson uses the queue '{lid}.lesson-{lesson[:2]}'" in shown
            assert f"{OTHER[lid]}." not in shown and "emq:{lesson-" not in shown  # nobody else's queue, no bare one
    admin = hub.workshop.admin()
    for lid in LEARNERS:
        assert set(progress.read(admin, lid).lessons) >= {"00", "02"}
        assert any(admin.scan_iter(match=f"emq:{{{lid}.lesson-02}}:*", count=1000))
    # Running the lessons knocked on no closed door: the ACL refused them nothing.
    assert [e for e in admin.acl_log(count=100) if e["username"] in LEARNERS] == []
    page = pages[KATHERINE]
    bring_to_front(page, LESSONS[1])
    page.get_by_text(f"This lesson uses the queue '{KATHERINE}.lesson-02'").scroll_into_view_if_needed()
    save_screenshot(page.screenshot(), "workshop-lab-katherine.png")


def test_class_chaos_starts_one_worker_each_and_the_other_ones_queue_is_refused_in_one_line(hub: Class, pages) -> None:
    for lid in LEARNERS:
        start_notebook(pages[lid], PROBE)
        start_notebook(pages[lid], CHAOS)  # opened last: in front, where its worker's line shows
    for lid in LEARNERS:
        # Run All: the class worker starts, the practice part stops in one line (no second worker).
        (error,) = errors_in(finished_outputs(pages[lid], CHAOS))
        assert error.startswith("InvalidArgument: this part is for learners alone"), error
        pages[lid].get_by_text(f"Worker of {lid} running").wait_for(timeout=30_000)
        outputs = finished_outputs(pages[lid], PROBE)
        (error,) = errors_in(outputs)
        assert error.startswith("PermissionDenied: ") and "\n" not in error, error
        (shown,) = [o["traceback"] for cell in outputs for o in cell if o["output_type"] == "error"]
        assert len(shown) == 1 and "\n" not in shown[0], shown  # one line on screen, no traceback
        assert f"emq:{{{OTHER[lid]}.lesson-02}}" in error or "claim" in error or "snapshot" in error, error
    refused = [e for e in hub.workshop.admin().acl_log(count=100) if e["username"] in LEARNERS]
    assert {e["username"] for e in refused} == set(LEARNERS)
    assert all(e["object"].startswith(f"emq:{{{OTHER[e['username']]}.") for e in refused), refused
    instructor = echoq.connect(hub.workshop.instructor_url)
    beats = {lid: heartbeat.parse(instructor.get(heartbeat.alive_key(lid))) for lid in LEARNERS}
    assert all(beats.values()), beats  # Katherine is on the class server too, under her own id


# What a learner's kernel tries against the class's secrets and the other learner: each
# target, read (a file) or listed (a folder); the outcome in one word.
ATTACK = """
import json, os
def attempt(path):
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
        return "READ"
    except PermissionError:
        return "refused"
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "found": {p: attempt(p) for p in TARGETS}}))
"""


def test_adas_kernel_runs_as_her_own_unix_user_and_is_refused_every_secret_and_katherines_home(
    hub: Class, pages
) -> None:
    ada, katherine = hub.unix_user(ADA), hub.unix_user(KATHERINE)
    ada_uid = pwd.getpwnam(ada).pw_uid
    (kernel, *_) = kernels_of(hub.process.pid, hub.workshop.learners[ADA].hub_user)
    her_kernels = kernels_of(hub.process.pid, hub.workshop.learners[KATHERINE].hub_user)
    assert her_kernels and os.stat(f"/proc/{kernel}").st_uid == ada_uid != 0
    assert {os.stat(f"/proc/{pid}").st_uid for pid in her_kernels} == {pwd.getpwnam(katherine).pw_uid}
    # Every file of the class (the workshop folder: state, roster, snippet, the server's config
    # and data, the hub's passwords, database and cookie secret): root's, mode 0600.
    secrets = [Path(d) / f for d, _, files in os.walk(hub.folder) for f in files]
    assert {"workshop.json", "roster.json", "class-password", "instructor-password", "cookie_secret",
            "jupyterhub.sqlite", "server.conf"} <= {p.name for p in secrets}  # fmt: skip
    loose = [f"{p} {p.stat().st_mode & 0o777:o} uid {p.stat().st_uid}" for p in secrets
             if p.stat().st_mode & 0o077 or p.stat().st_uid != os.geteuid()]  # fmt: skip
    assert loose == [], loose
    homes = {lid: hub.home(lid) for lid in LEARNERS}
    assert all(h.stat().st_mode & 0o777 == 0o700 for h in homes.values()), homes
    assert not any(hub.folder in h.parents for h in homes.values())  # no secret in a home, no home by a secret
    targets = [str(p) for p in secrets] + [str(hub.folder), str(homes[KATHERINE]), str(homes[KATHERINE] / PROBE)]
    targets += [f"/proc/{pid}/environ" for pid in her_kernels]
    printed = run_in_kernel(kernel, f"TARGETS = {targets!r}\n{ATTACK}")
    found = json.loads(printed.strip().splitlines()[-1])
    assert found["uid"] == found["euid"] == ada_uid
    assert {p: r for p, r in found["found"].items() if r != "refused"} == {}, printed
    # Her own kernel holds her own URL and nothing of anyone else's (as root reads it).
    environ = Path(f"/proc/{kernel}/environ").read_bytes().decode(errors="replace")
    assert f"VALKEY_URL={hub.workshop.learner_url(ADA)}" in environ.split("\0")
    others = [hub.workshop.learners[KATHERINE].password, hub.workshop.instructor_password, hub.password("class")]
    assert not [word for word in others if word in environ]
    # No Terminal: the learner's server has no terminals API at all.
    status = pages[ADA].evaluate(
        "(url) => fetch(url).then(r => r.status)", f"/user/{hub.workshop.learners[ADA].hub_user}/api/terminals"
    )
    assert status == 404, status


def test_the_dashboard_shows_both_learners_and_drives_class_chaos_with_a_kill(hub: Class, pages) -> None:
    ada, teacher = pages[ADA], pages["teacher"]
    board = teacher.locator(".echoq-board")
    board.wait_for(timeout=READY_S * 1000)
    for lid in LEARNERS:
        teacher.locator(".echoq-board td", has_text=lid).first.wait_for(timeout=30_000)
    refused = [f"emq:{{{lid}.lesson-02}}" for lid in LEARNERS]
    for key in refused:  # the board refreshes every second: one read after the refusals above
        teacher.get_by_text(key).first.wait_for(timeout=30_000)
    rows = board.inner_text()
    assert "00, 02" in rows, rows  # lessons reached, both learners
    assert all(key in rows for key in refused), rows  # refused accesses: who, which key
    # Class chaos: produce jobs, kill Ada's worker from the page; the kill travels over the server.
    teacher.locator(".widget-text input").first.fill("40")
    teacher.get_by_role("button", name="produce jobs").click()
    teacher.get_by_text("Produced 40 jobs").wait_for(timeout=30_000)
    keys = classroom.ClassKeys(hub.workshop.class_name)
    instructor = echoq.connect(hub.workshop.instructor_url)
    poll(lambda: int(instructor.hget(keys.score, f"{ADA}:delivered") or 0) >= 2, 60, "Ada's worker to take 2 jobs")
    teacher.locator("select").first.select_option(ADA)
    teacher.get_by_role("button", name="kill worker", exact=True).click()
    # In Ada's own notebook (its first cell tells of a worker "killed by the instructor" too).
    killed = ada.get_by_text(f"Worker of {ADA} KILLED by the instructor")
    killed.wait_for(timeout=30_000)
    teacher.locator(".echoq-board td.killed", has_text="killed").wait_for(timeout=30_000)

    def drained() -> classroom.Scoreboard | None:
        score = classroom.read_scoreboard(instructor, LEARNERS, klass=hub.workshop.class_name)
        return score if score.jobs and score.completed == score.jobs else None

    score = poll(drained, 90, "the class queue to drain")
    assert score.total.lost == 0 and score.total.duplicates == 0 and score.total.effects == score.jobs
    assert score.by_learner[ADA].worker == "killed" and score.by_learner[KATHERINE].worker == "running"
    teacher.get_by_text(f"{score.jobs} jobs produced, {score.jobs} completed").wait_for(timeout=30_000)
    assert "no job lost, no effect duplicated" in board.inner_text()
    save_screenshot(teacher.screenshot(full_page=True), "workshop-dashboard.png")
    killed.evaluate("e => e.closest('.jp-Cell').scrollIntoView()")  # Run All left the notebook at its end
    save_screenshot(ada.screenshot(), "workshop-lab-ada.png")
    # A learner may not open the instructor's page (a page of her own: hers stays on her lab).
    peek = pages[KATHERINE].context.new_page()
    denied = peek.goto(hub.url + "/services/echoq-dashboard/")
    assert denied is not None and denied.status == 403
    peek.close()


def test_her_kernels_killed_with_sigkill_show_as_not_alive_and_her_page_says_its_line_is_old(hub: Class, pages) -> None:
    ada, katherine, teacher = pages[ADA], pages[KATHERINE], pages["teacher"]
    # Ada rejoins as a killed learner does, so her readout is a running worker's, redrawn
    # while her kernel lives: the line that must not turn old below.
    run_cell(ada, CHAOS, CHAOS_WORKER_CELL)
    ada.get_by_text(f"Worker of {ADA} running").wait_for(timeout=30_000)
    bring_to_front(katherine, CHAOS)  # where her worker's line is, and the note that it is old
    row = learner_row(teacher, KATHERINE)
    row.get_by_text("alive", exact=True).wait_for(timeout=15_000)
    row.get_by_text("running", exact=True).wait_for(timeout=15_000)  # her server, as the hub says
    # Every kernel of hers (lessons 00 and 02, the probe, class chaos) beats her one heartbeat
    # key: she is "not alive" only once all of them are gone.
    instructor = echoq.connect(hub.workshop.instructor_url)
    beat = heartbeat.parse(instructor.get(heartbeat.alive_key(KATHERINE)))
    kernels = kernels_of(hub.process.pid, hub.workshop.learners[KATHERINE].hub_user)
    assert beat is not None and beat.pid in kernels and len(kernels) == len(LESSONS) + 2, (beat, kernels)
    for pid in kernels:
        os.kill(pid, signal.SIGKILL)  # kill -9
    killed = time.monotonic()
    row.get_by_text("not alive").wait_for(timeout=15_000)
    noticed_s = time.monotonic() - killed
    assert noticed_s < heartbeat.TTL_MS / 1000 + 8, noticed_s  # the beat's TTL, then a refresh and a paint
    assert learner_row(teacher, ADA).get_by_text("alive", exact=True).is_visible()
    # Her own page no longer claims her worker runs: its readout says the line is old.
    katherine.get_by_text("the line above is old").wait_for(state="visible", timeout=15_000)
    assert not ada.get_by_text("the line above is old").is_visible()  # Ada's kernel lives


def test_export_csv_holds_a_recorded_check_as_its_one_row(hub: Class, monkeypatch: pytest.MonkeyPatch) -> None:
    with echoq.connect(hub.workshop.learner_url(ADA)) as ada:
        monkeypatch.setenv("ECHOQ_LEARNER", ADA)
        progress.record_check(ada, "02", "claim", False, "deadline-in-the-past", code="-- ada's try")
    out = hub.folder.parent / "attempts.csv"
    guide("export", "--dir", str(hub.folder), "--csv", str(out), env=hub.env)
    assert out.stat().st_mode & 0o777 == 0o600  # every learner's code and verdicts: the instructor's alone
    rows = list(csv.DictReader(io.StringIO(out.read_bytes().decode(), newline="")))
    assert [(r["learner"], r["exercise"], r["misconception"]) for r in rows] == [(ADA, "claim", "deadline-in-the-past")]


def test_the_hub_stops_promptly_the_page_says_disconnected_and_down_leaves_nothing(hub: Class, pages) -> None:
    teacher = pages["teacher"]
    hub.below[:] = _descendants(hub.process.pid)  # the hub itself: its wait below says it ended
    hub.process.send_signal(signal.SIGTERM)  # the instructor's Ctrl-C
    stopping = time.monotonic()
    hub.process.wait(30)
    stop_s = time.monotonic() - stopping
    assert stop_s < 20, f"the hub took {stop_s:.1f} s to stop"  # each server gets 3 s; a hang was 30+ s
    teacher.locator(".echoq-disconnected").wait_for(state="visible", timeout=15_000)
    assert "Disconnected" in teacher.locator(".echoq-disconnected").inner_text()
    down = guide("down", "--dir", str(hub.folder), env=hub.env)
    assert "stopped the class server" in down.stdout
    left = [pid for pid in [*hub.below, hub.workshop.server_pid] if pid and alive(pid)]
    assert left == [], left
    assert [p.name for p in hub.folder.iterdir()] == ["hub"]  # the learners' notebooks, nothing else
