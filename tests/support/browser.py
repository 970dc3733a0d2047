"""A real browser against real servers: Debian's Chromium driven by Playwright, JupyterLab and Voila.

Everything binds 127.0.0.1 on a free port with no token (nothing else can reach it), runs as
root where we are root (``--allow-root``), waits for readiness by polling, and is shut down at the
end with the kernels it started. Import the fixtures into a test module:

    from tests.support.browser import browser, page, valkey_for_kernels  # noqa: F401
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from echoq.server import EmbeddedValkey, start_server
from tests.support.helpers import throwaway_env
from tests.support.servers import IN_CI

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# Screenshots always go to build/ (ignored by git); with ECHOQ_UPDATE_DOCS=1 also to docs/, where
# the README shows them: a plain test run leaves the working tree clean.
SHOTS = ROOT / "build" / "screenshots"
DOCS = ROOT / "docs"
READY_TIMEOUT_S = 90.0  # a loaded 2-core machine can be slow to bring up a Jupyter server
# How often a page re-checks a condition a test waits for (page.wait_for_function). Playwright's
# default runs it on every animation frame, 60 times a second: about 1 s of Chromium's CPU per
# 10 s of waiting on a lesson's page, against 0.1-0.2 s at this pace. Every condition waited
# on this way is a state that lasts (a kernel idle, every cell run), never a passing one.
POLL_MS = 100


def chromium_path() -> str:
    """Debian's Chromium, or skip (fail under CI) with the reason it is missing."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found:
        return found
    if IN_CI:
        pytest.fail("CI must run the browser tests, but chromium is missing: tools/system-deps.sh did not install it")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and cannot be here (needs root and apt-get: apt-get install chromium)")
    pytest.skip("chromium is not installed: run `make test` (as root it installs chromium through apt-get)")


def save_screenshot(png: bytes, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / name).write_bytes(png)
    if os.environ.get("ECHOQ_UPDATE_DOCS") == "1":
        DOCS.mkdir(exist_ok=True)
        (DOCS / name).write_bytes(png)
    return SHOTS / name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


@dataclass
class Served:
    """A Jupyter server process we started (JupyterLab or Voila) and where to reach it."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    workdir: Path
    kernels_api: bool
    started_s: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.kernels_api and self.process.poll() is None:
            # Kernels outlive the browser; ask the server to shut each one down cleanly first.
            with contextlib.suppress(Exception):
                import json

                with urllib.request.urlopen(f"{self.url}/api/kernels", timeout=5) as reply:
                    kernels = json.load(reply)
                for kernel in kernels:
                    req = urllib.request.Request(f"{self.url}/api/kernels/{kernel['id']}", method="DELETE")
                    urllib.request.urlopen(req, timeout=10).close()
        if self.process.poll() is None:
            # The server runs in its own process group (start_new_session): SIGTERM reaches it and
            # any kernel it still has; both shut down on it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def no_news(user_settings: Path) -> None:
    """No "get notified about Jupyter news?" toast over the page (and no fetch: we are
    offline), in the JupyterLab user settings folder ``user_settings``."""
    toast = user_settings / "@jupyterlab" / "apputils-extension"
    toast.mkdir(parents=True)
    (toast / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')


def _launch(
    name: str,
    argv: Callable[[int, Path], list[str]],
    env: dict[str, str],
    ready_path: str,
    kernels_api: bool,
    *,
    cwd: Path | None = None,
    port_from_log: bool = False,
) -> Served:
    """Start ``argv(port, workdir)`` and poll ``ready_path`` until it answers (not 5xx).

    With ``port_from_log`` the server may have moved to another port (Voila's port_retries):
    the port is read from the URL it logs once it listens.
    """
    last = ""
    for _attempt in range(3):  # a free port can be taken between our probe and the server's bind
        workdir = Path(tempfile.mkdtemp(prefix=f"echoq-{name}-"))
        port = _free_port()
        log = workdir / "server.log"
        full_env = {
            **env,
            # Private config, runtime and data dirs: no user settings, no workspace from an
            # earlier run, no connection files shared with anyone else's server.
            "JUPYTER_CONFIG_DIR": str(workdir / "config"),
            "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
            "IPYTHONDIR": str(workdir / "ipython"),
            "MPLCONFIGDIR": str(workdir / "mpl"),
        }
        no_news(workdir / "settings")
        started = time.perf_counter()
        with log.open("wb") as out:
            process = subprocess.Popen(
                argv(port, workdir),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full_env,
                cwd=cwd or workdir,
                start_new_session=True,
            )
        served = Served(name, process, port, log, workdir, kernels_api)
        deadline = started + READY_TIMEOUT_S
        while time.perf_counter() < deadline and process.poll() is None:
            if port_from_log:
                found = re.search(r"running at:\s*http://127\.0\.0\.1:(\d+)/", served.log_tail(200))
                if not found:
                    time.sleep(0.1)
                    continue
                served.port = int(found.group(1))
            status = _http_status(served.url + ready_path)
            if status is not None and status < 500:
                served.started_s = time.perf_counter() - started
                return served
            time.sleep(0.1)
        last = served.log_tail()
        served.stop()
        if "Address already in use" not in last and "is already in use" not in last:
            break
    raise RuntimeError(f"{name} did not come up on 127.0.0.1 within {READY_TIMEOUT_S:.0f} s; its log:\n{last}")


def _root_flag() -> list[str]:
    return ["--allow-root"] if os.geteuid() == 0 else []


def jupyter_argv(module: str, app: str, port: int, workdir: Path, root_dir: Path) -> list[str]:
    """A Jupyter server (``python -m jupyterlab`` with app ``LabApp``, ``notebook`` with
    ``JupyterNotebookApp``) on loopback, with no token, its state in ``workdir``."""
    return [
        sys.executable,
        "-m",
        module,
        *_root_flag(),
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        f"--ServerApp.root_dir={root_dir}",
        # Lets the test drive the app's own commands (run all cells) instead of guessing menus.
        f"--{app}.expose_app_in_browser=True",
        f"--{app}.workspaces_dir={workdir / 'workspaces'}",
        f"--{app}.user_settings_dir={workdir / 'settings'}",
    ]


def start_lab(root_dir: Path, env: dict[str, str]) -> Served:
    def argv(port: int, workdir: Path) -> list[str]:
        return [
            *jupyter_argv("jupyterlab", "LabApp", port, workdir, root_dir),
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ]

    return _launch("lab", argv, env, "/api/status", kernels_api=True)


def start_voila(notebook: Path, env: dict[str, str]) -> Served:
    def argv(port: int, workdir: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "voila",
            str(notebook),
            "--no-browser",
            "--Voila.ip=127.0.0.1",
            f"--Voila.port={port}",
            "--Voila.port_retries=0",
            "--show_tracebacks=True",
        ]

    # Voila runs the notebook on every page load, so readiness is a static file, not "/".
    return _launch("voila", argv, env, "/voila/static/extension.js", kernels_api=False)


def present_command(port: int) -> list[str]:
    """The command `make present` runs (read from make itself, so the test runs the real recipe)."""
    bin_dir = Path(sys.executable).parent
    dry = subprocess.run(
        ["make", "-s", "-n", "present", f"PRESENT_PORT={port}", f"BIN={bin_dir}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert dry.returncode == 0, dry.stderr
    lines = [line for line in dry.stdout.splitlines() if f"{bin_dir}/voila " in line]
    assert len(lines) == 1, f"`make -n present` should run voila once:\n{dry.stdout}"
    return shlex.split(lines[0])


def start_present(env: dict[str, str]) -> tuple[Served, list[str]]:
    """`make present`'s own command, on a free port, from the repository root."""
    command: list[str] = []

    def argv(port: int, _workdir: Path) -> list[str]:
        command[:] = present_command(port)
        return command

    served = _launch("present", argv, env, "/voila/static/extension.js", False, cwd=ROOT, port_from_log=True)
    return served, command


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def chromium() -> str:
    return chromium_path()


_shared: dict[str, object] = {}


def _close_shared_browser() -> None:
    launched, pw = _shared.pop("browser", None), _shared.pop("playwright", None)
    if launched is not None:
        launched.close()
    if pw is not None:
        pw.stop()


@pytest.fixture(scope="session")
def browser(chromium: str, request: pytest.FixtureRequest) -> Iterator[object]:
    """One Chromium for the whole session. Each test module that imports this fixture gets a
    fixture of its own, so the browser itself is kept here: Playwright's sync API cannot run
    twice at once in one thread, and one browser start is enough."""
    if "browser" not in _shared:
        from playwright.sync_api import sync_playwright

        _shared["playwright"] = pw = sync_playwright().start()
        _shared["browser"] = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        request.config.add_cleanup(_close_shared_browser)
    yield _shared["browser"]


def new_context(browser, height: int = 900, width: int = 1280):
    """A browser context (1280 px wide unless told), whose navigations may take 90 s."""
    context = browser.new_context(viewport={"width": width, "height": height})
    # Playwright's 30 s is short for a page whose server shares two cores with the whole suite.
    context.set_default_navigation_timeout(90_000)
    return context


@pytest.fixture
def page(browser) -> Iterator[object]:
    context = new_context(browser)
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture(scope="session")
def valkey_for_kernels() -> Iterator[EmbeddedValkey]:
    """One server the kernels and the test both use, so a test can check what a click did."""
    server = start_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What JupyterLab serves: a copy of the lessons, so running them never rewrites the repo's
    notebooks (Lab saves what it runs), and room for the tests' own notebooks."""
    root = tmp_path_factory.mktemp("lab-root")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    return root


@pytest.fixture(scope="session")
def lab_server(chromium: str, lab_root: Path, valkey_for_kernels: EmbeddedValkey) -> Iterator[Served]:
    """One JupyterLab for the session (it takes seconds to start); each test opens its own workspace."""
    server = start_lab(lab_root, kernel_env(valkey_for_kernels))
    yield server
    server.stop()


def open_in_lab(pg, server: Served, notebook: str):
    """Open ``notebook`` (a path under the Lab root), run all its cells; the notebook's panel."""
    pg.goto(lab_url(server, notebook))
    panel = pg.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.wait_for(timeout=60_000)
    pg.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget", polling=POLL_MS, timeout=60_000
    )
    # Wait for the kernel, then start "run all" without awaiting it: page.evaluate has no
    # timeout, and a cell that never returns would hang the test instead of failing it. The
    # caller waits (with a deadline) for what the cells should show.
    pg.wait_for_function(
        """() => {
            if (document.querySelector('.jp-Dialog')) return true;  // e.g. "Select Kernel"
            const ctx = window.jupyterapp.shell.currentWidget.sessionContext;
            return ctx.isReady && ctx.session && ctx.session.kernel && ctx.session.kernel.status === 'idle';
        }""",
        polling=POLL_MS,
        timeout=60_000,
    )
    dialog = pg.locator(".jp-Dialog")
    if dialog.count():
        pytest.fail(f"JupyterLab opened a dialog instead of running {notebook}: {dialog.inner_text()[:200]!r}")
    pg.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    return panel


def kernel_env(valkey: EmbeddedValkey) -> dict[str, str]:
    env = throwaway_env("JUPYTER_PLATFORM_DIRS")
    env["VALKEY_URL"] = valkey.url
    return env


def lab_url(server: Served, notebook: str) -> str:
    # A fresh workspace per visit, reset: Lab would otherwise reopen whatever was open last.
    return f"{server.url}/lab/workspaces/t{uuid.uuid4().hex[:8]}/tree/{notebook}?reset"


def poll(check, timeout_s: float = 60.0, what: str = "condition", describe=None):
    """Poll ``check()`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f" (last seen: {describe()})" if describe else ""
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}{seen}")
        time.sleep(0.05)


def feedback_shown(shown, what: str, timeout_ms: int = 60_000) -> tuple[object, str]:
    """``shown``, a page's output of a rejected answer's feedback, waited for and scrolled into
    view (Lab draws only the cells in view), its picture loaded: the picture's img, and the ✗
    line its alt text holds, which must be one of the output's own lines."""
    shown.wait_for(timeout=timeout_ms)
    shown.scroll_into_view_if_needed()
    img = shown.locator("img").first
    poll(lambda: img.evaluate("i => i.complete && i.naturalWidth > 0"), what=f"{what}: the feedback's picture")
    line = (img.get_attribute("alt") or "").partition("✗ ")[2]
    assert line and line in shown.inner_text(), f"{what}: the picture's alt text is not the ✗ line: {line!r}"
    return img, line
