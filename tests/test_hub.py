"""A workshop in a real JupyterHub: two learners and the instructor, in Debian's Chromium.

Everything is real and on 127.0.0.1: the class server from ``python -m echoq.teaching workshop up``
(its users, its roster and its JupyterHub snippet), JupyterHub from PyPI with
configurable-http-proxy from npm (``tools/hub-deps.sh`` installs it into build/hub),
DummyAuthenticator, and ``SimpleLocalProcessSpawner`` (a local process per user, no system
users needed). One hub and one browser serve every test of this module.

Ada and Grace log in, each runs lessons 00 and 02 and sees only their own queues; each
reaches for the other's queue and gets one PermissionDenied line; each starts a class-chaos
worker. The instructor opens the dashboard (a JupyterHub service), sees both learners,
produces jobs and kills Ada's worker; the kill travels over the server and the scoreboard
keeps 0 lost and 0 duplicate effects. Skipped with the reason only where node (npm) or
Chromium cannot be installed; under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

import echoq
from echoq.teaching import progress
from echoq.teaching.workshop import Workshop, classroom
from echoq.teaching.workshop.admin import FREE_PORT_SOURCE
from tests.support.browser import (  # noqa: F401  (fixtures)
    ROOT,
    _free_port,
    _http_status,
    browser,
    chromium,
    new_context,
    save_screenshot,
)
from tests.support.hub import (
    PANEL,
    PROXY,
    READY_S,
    _descendants,
    errors_in,
    finished_outputs,
    proxy_path,
    start_notebook,
    text_of,
)

LEARNERS = ("ada", "grace")
LESSONS = ("00_start_here.ipynb", "02_recoverable_claim.ipynb")


def probe_cells(other: str) -> list[str]:
    return [
        "from echoq.teaching import workshop\n\nworkshop.class_worker()",
        f"import echoq\n\necho = echoq.Queue({other + '.lesson-02'!r}).snapshot()",  # someone else's queue
    ]


@dataclass
class Hub:
    url: str
    workshop: Workshop
    process: subprocess.Popen[bytes]
    log: Path
    started_s: float

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def hub_config(tmp: Path, workshop: Workshop, port: int) -> str:
    return f"""
import sys
c = get_config()  # noqa: F821
load_subconfig({str(workshop.dir / "jupyterhub_echoq.py")!r})  # noqa: F821  (written by workshop up)
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
# Ports below the range outgoing connections take theirs from, as `workshop hub` picks them.
{FREE_PORT_SOURCE}
c.JupyterHub.hub_port = _echoq_free_port()
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{{_echoq_free_port()}}"
c.Spawner.pre_spawn_hook = lambda spawner: setattr(spawner, "port", _echoq_free_port())
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.ConfigurableHTTPProxy.pid_file = {str(tmp / "proxy.pid")!r}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(tmp / "home" / "{username}")!r}
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = [
    *(["--allow-root"] if {os.geteuid() == 0} else []),
    "--LabApp.expose_app_in_browser=True",
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = {int(READY_S)}
c.Spawner.http_timeout = {int(READY_S)}
c.Spawner.interrupt_timeout = 2
c.Spawner.term_timeout = 2
c.JupyterHub.db_url = "sqlite:///{tmp / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(tmp / "cookie_secret")!r}
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[Hub]:  # noqa: F811
    proxy_path()
    tmp = tmp_path_factory.mktemp("hub")
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_WORKSHOP", "ECHOQ_LEARNER")}
    (tmp / "roster.txt").write_text("\n".join(LEARNERS) + "\n")
    # The instructor's own command, as docs/WORKSHOP.md gives it.
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "echoq.teaching",
            "workshop",
            "up",
            "--dir",
            str(tmp / "class"),
            "--roster",
            str(tmp / "roster.txt"),
        ]
        + ["--instructor", "teacher"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert up.returncode == 0, up.stderr
    workshop = Workshop.load(tmp / "class")
    for name, other in zip(LEARNERS, reversed(LEARNERS), strict=True):
        home = tmp / "home" / name
        home.mkdir(parents=True)
        for lesson in LESSONS:
            shutil.copy(ROOT / "notebooks" / lesson, home / lesson)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in probe_cells(other)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, home / "workshop_probe.ipynb")
        # No "get notified about Jupyter news?" toast over the page (and no fetch: we are offline).
        toast = home / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
        toast.mkdir(parents=True)
        (toast / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    port = _free_port()
    (tmp / "jupyterhub_config.py").write_text(hub_config(tmp, workshop, port))
    log = tmp / "hub.log"
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(tmp / "jupyterhub_config.py")],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=tmp,
            env=env,
            start_new_session=True,
        )
    running = Hub(f"http://127.0.0.1:{port}", workshop, process, log, 0.0)
    deadline = time.monotonic() + READY_S
    while _http_status(running.url + "/hub/api") != 200:
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"JupyterHub did not come up on 127.0.0.1:{port}; its log:\n{running.log_tail()}")
        time.sleep(0.1)
    running.started_s = time.perf_counter() - started
    try:
        yield running
    finally:
        # Everything below the hub is ours (proxy, servers, the dashboard service, kernels):
        # end it at once rather than wait for each graceful shutdown; the class data goes with down.
        for pid in [process.pid, *_descendants(process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()
        subprocess.run(
            [sys.executable, "-m", "echoq.teaching", "workshop", "down", "--dir", str(workshop.dir)],
            env=env,
            timeout=60,
        )


@pytest.fixture(scope="module")
def pages(hub: Hub, browser) -> Iterator[dict[str, object]]:  # noqa: F811
    """One browser context per person (their own cookies), each logged in."""
    contexts, found = [], {}
    # Learners land in their own JupyterLab; the instructor goes straight to the dashboard
    # (no server of their own is spawned).
    landing = {name: f"/user/{name}/lab" for name in LEARNERS} | {"teacher": "/services/echoq-dashboard/"}
    for name, where in landing.items():
        tall = name == "teacher"  # the whole dashboard in one screenshot (Voila scrolls inside the page)
        context = new_context(browser, 1500 if tall else 900)
        contexts.append(context)
        page = context.new_page()
        page.goto(hub.url + "/hub/login" + ("?next=" + where if name == "teacher" else ""))
        page.fill("input[name=username]", name)
        page.fill("input[name=password]", "any")  # DummyAuthenticator: any password
        page.click("button[type=submit], input[type=submit]")
        found[name] = page
    for name, page in found.items():
        page.wait_for_url(f"**{landing[name]}**", timeout=READY_S * 1000)
    yield found
    for context in contexts:
        context.close()


PROBE = "workshop_probe.ipynb"


@pytest.fixture(scope="module")
def running(pages) -> dict[str, object]:
    """Both learners' lessons 00 and 02, started at once: four kernels side by side."""
    for name in LEARNERS:
        for notebook in LESSONS:
            start_notebook(pages[name], notebook)
    return pages


def test_two_learners_run_lessons_00_and_02_and_see_only_their_own_queues(hub: Hub, running) -> None:
    pages = running
    for lesson in LESSONS:
        for name, other in zip(LEARNERS, reversed(LEARNERS), strict=True):
            outputs = finished_outputs(pages[name], lesson)
            assert errors_in(outputs) == [], f"{name} in {lesson}: {errors_in(outputs)}"
            shown = text_of(outputs)
            number = lesson[:2]
            assert f"This lesson uses the queue '{name}.lesson-{number}'" in shown
            assert f"{other}." not in shown and "emq:{lesson-" not in shown  # nobody else's queue, no bare one
    admin = hub.workshop.admin()
    for name in LEARNERS:
        assert set(progress.read(admin, name).lessons) >= {"00", "02"}
        assert any(admin.scan_iter(match=f"emq:{{{name}.lesson-02}}:*", count=1000))
    # Running the lessons knocked on no closed door: the ACL refused them nothing.
    assert [e for e in admin.acl_log(count=100) if e["username"] in LEARNERS] == []
    grace = pages["grace"]
    grace.evaluate(f"(path) => {{ {PANEL} window.jupyterapp.shell.activateById(panel(path).id); }}", LESSONS[1])
    grace.get_by_text("This lesson uses the queue 'grace.lesson-02'").scroll_into_view_if_needed()
    save_screenshot(grace.screenshot(), "workshop-lab-grace.png")


def test_each_learner_is_refused_the_other_ones_queue_in_one_line(hub: Hub, running) -> None:
    pages = running
    for name in LEARNERS:
        start_notebook(pages[name], PROBE)
    for name, other in zip(LEARNERS, reversed(LEARNERS), strict=True):
        outputs = finished_outputs(pages[name], PROBE)
        (error,) = errors_in(outputs)
        assert error.startswith("PermissionDenied: ") and "\n" not in error, error
        (shown,) = [o["traceback"] for cell in outputs for o in cell if o["output_type"] == "error"]
        assert len(shown) == 1 and "\n" not in shown[0], shown  # one line on screen, no traceback
        assert f"emq:{{{other}.lesson-02}}" in error or "claim" in error or "snapshot" in error, error
        pages[name].get_by_text(f"Worker of {name} running").wait_for(timeout=30_000)
    refused = [e for e in hub.workshop.admin().acl_log(count=100) if e["username"] in LEARNERS]
    assert {e["username"] for e in refused} == set(LEARNERS)
    assert all(e["object"].startswith(("emq:{ada.", "emq:{grace.")) for e in refused), refused


def test_the_dashboard_shows_both_learners_and_drives_class_chaos(hub: Hub, running) -> None:
    pages = running
    ada, teacher = pages["ada"], pages["teacher"]
    teacher.reload()  # the page it landed on at login, read afresh
    board = teacher.locator(".echoq-board")
    board.wait_for(timeout=READY_S * 1000)
    for name in LEARNERS:
        teacher.locator(".echoq-board td", has_text=name).first.wait_for(timeout=30_000)
    rows = board.inner_text()
    assert "00, 02" in rows, rows  # lessons reached, both learners
    assert "emq:{grace.lesson-02}" in rows and "emq:{ada.lesson-02}" in rows  # refused accesses: who, which key
    # Class chaos: produce jobs, kill Ada's worker from the page; the kill travels over the server.
    teacher.locator(".widget-text input").first.fill("40")
    teacher.get_by_role("button", name="produce jobs").click()
    teacher.get_by_text("Produced 40 jobs").wait_for(timeout=30_000)
    keys = classroom.ClassKeys(hub.workshop.class_name)
    instructor = echoq.connect(hub.workshop.instructor_url)
    deadline = time.monotonic() + 60
    while int(instructor.hget(keys.score, "ada:delivered") or 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    teacher.locator("select").first.select_option("ada")
    teacher.get_by_role("button", name="kill worker", exact=True).click()
    ada.get_by_text("KILLED by the instructor").wait_for(timeout=30_000)  # in Ada's own notebook
    teacher.locator(".echoq-board td.killed", has_text="killed").wait_for(timeout=30_000)
    deadline = time.monotonic() + 90
    while True:
        score = classroom.read_scoreboard(instructor, LEARNERS, klass=hub.workshop.class_name)
        if score.jobs and score.completed == score.jobs:
            break
        assert time.monotonic() < deadline, f"the class queue did not drain: {score}"
        time.sleep(0.1)
    assert score.total.lost == 0 and score.total.duplicates == 0 and score.total.effects == score.jobs
    assert score.by_learner["ada"].worker == "killed" and score.by_learner["grace"].worker == "running"
    teacher.get_by_text(f"{score.jobs} jobs produced, {score.jobs} completed").wait_for(timeout=30_000)
    assert "no job lost, no effect duplicated" in board.inner_text()
    save_screenshot(teacher.screenshot(full_page=True), "workshop-dashboard.png")
    save_screenshot(ada.screenshot(), "workshop-lab-ada.png")
    # A learner may not open the instructor's page.
    denied = pages["grace"].goto(hub.url + "/services/echoq-dashboard/")
    assert denied is not None and denied.status == 403
