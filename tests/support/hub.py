"""A workshop's JupyterHub in the tests: the proxy it needs, the processes below it, and each
learner's JupyterLab driven through its own commands (the hub starts every server with
``--LabApp.expose_app_in_browser``, so ``window.jupyterapp`` is there to drive).

configurable-http-proxy comes from npm, installed into build/hub by ``tools/hub-deps.sh``;
without it the hub test is skipped with the reason, and under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import IN_CI, POLL_MS, ROOT, save_screenshot

PROXY = ROOT / "build" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
# Made by `make test` while npm installs the proxy beside the browser tests (tools/hub-deps.sh).
INSTALLING = PROXY.parents[2] / ".installing"
NPM_WAIT_S = 300.0
# A notebook run while the hub, several learners' kernels and the browser share two cores.
READY_S = 120.0


def proxy_path() -> Path:
    """The proxy, once npm is done installing it; else skip (fail under CI) with the reason."""
    deadline = time.monotonic() + NPM_WAIT_S
    while INSTALLING.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"npm still installs configurable-http-proxy after {NPM_WAIT_S:.0f} s: see build/hub-deps.log")
        time.sleep(0.2)
    if PROXY.is_file():
        return PROXY
    why = "configurable-http-proxy is not installed in build/hub (tools/hub-deps.sh installs it with npm)"
    if IN_CI:
        pytest.fail(f"CI must run the JupyterHub test, but {why}")
    if shutil.which("npm") is None:
        pytest.skip(f"{why}, and npm is missing here (as root, `make test` installs nodejs and npm with apt-get)")
    pytest.skip(f"{why}: run `make test` or `bash tools/hub-deps.sh`")


# ---------------------------------------------------------------- learners' Unix users

# The class hub runs each learner as a Unix user of their own (`workshop hub --user-prefix`):
# the tests' users carry the test process's pid, so no real account and no other session's
# users can clash, and one left by a killed session is known by its dead pid.
TEST_USERS = "eqt"


def session_user_prefix() -> str:
    return f"{TEST_USERS}{os.getpid()}-"


def remove_test_users(prefix: str | None = None) -> list[str]:
    """Delete the Unix users made with ``prefix`` (default: those of sessions no longer
    running, whatever their pid); the names deleted."""
    gone = []
    for entry in pwd.getpwall():
        name = entry.pw_name
        if not name.startswith(TEST_USERS) or "-" not in name:
            continue
        pid = name[len(TEST_USERS) : name.index("-")]
        if not pid.isdigit():
            continue
        if name.startswith(prefix) if prefix else not alive(int(pid)):
            for pid in processes_of(entry.pw_uid):  # what the hub left running as them
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["userdel", "--force", name], capture_output=True)
            gone.append(name)
    return gone


def processes_of(uid: int) -> list[int]:
    """The pids of the processes running as ``uid``."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                found.append(int(entry.name))
    return found


def _reachable_by_all(path: Path) -> bool:
    """Whether any user may reach ``path`` (every folder above it searchable by others)."""
    return all(p.stat().st_mode & 0o001 for p in [*path.resolve().parents][:-1] if p != Path("/"))


def _listable_by_all(folder: Path) -> bool:
    """Whether any user may reach ``folder`` and list it: Python lists each folder on its path
    (the editable install puts the checkout itself there) to import from it."""
    return _reachable_by_all(folder) and folder.stat().st_mode & 0o005 == 0o005


def _cannot(why: str) -> None:
    if IN_CI:
        pytest.fail(f"CI must run the class hub: {why}")
    pytest.skip(why)


# Under CI the hub's test modules open the checkout's folders to the learners' users; two of
# them run at once in the browser job (its two workers), so the folders are opened by the
# first and closed again by the last: a count in this file, under a lock, shared by the
# processes of the run. (Closed by the first to finish, the other's learners lost the checkout
# mid-test and their servers failed to start: 500 from the hub.)
OPENERS = ROOT / "build" / "hub-opened.json"


@contextlib.contextmanager
def _openers() -> Iterator[dict]:
    import fcntl

    OPENERS.parent.mkdir(parents=True, exist_ok=True)
    with open(OPENERS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(OPENERS.read_text())
        except (OSError, ValueError):
            state = {"count": 0, "modes": []}
        yield state
        OPENERS.write_text(json.dumps(state))


def open_for_search(path: Path, opened: list[tuple[Path, int]]) -> None:
    """Let other users pass through every folder above ``path`` (o+x: search, not list),
    noting each folder changed and its mode in ``opened``, for :func:`close_again`. Only
    under CI, a machine of its own: a clone under /root (0700) is out of the learners' reach."""
    for folder in reversed([*path.resolve().parents][:-1]):
        mode = folder.stat().st_mode & 0o7777
        if not mode & 0o001:
            opened.append((folder, mode))
            folder.chmod(mode | 0o001)


def close_again(opened: list[tuple[Path, int]]) -> None:
    """Give this module's opened folders back to the run, closing them (their first modes)
    only when no other module of the run still has them open."""
    with _openers() as state:
        state["modes"] += [[str(folder), mode] for folder, mode in opened]
        state["count"] = max(0, state["count"] - 1)
        if state["count"] == 0:
            for folder, mode in reversed(state["modes"]):
                with contextlib.suppress(OSError):
                    Path(folder).chmod(mode)
            state["modes"] = []
    opened.clear()


def learner_python(where: Path, opened: list[tuple[Path, int]]) -> str:
    """A Python every user can run, with this checkout's packages: the venv's own when every
    user can reach it; else a venv made in ``where`` over the system's Python of the same
    version (its site-packages added to the venv's: same version, same ABI). A checkout other
    users cannot reach is opened for search under CI (see :func:`open_for_search`), and the
    checkout and site-packages folders for listing; skipped with the reason elsewhere."""
    python = Path(sys.executable)
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    with _openers() as state:  # one more module of the run holds the folders open (close_again)
        state["count"] += 1
    for needed in (ROOT, site):
        if not _listable_by_all(needed) and IN_CI and os.geteuid() == 0:
            open_for_search(needed, opened)
            mode = needed.stat().st_mode & 0o7777
            if mode & 0o005 != 0o005:  # a clone made by mktemp -d is such a folder (0700)
                opened.append((needed, mode))
                needed.chmod(mode | 0o005)
    if not _listable_by_all(ROOT) or not _listable_by_all(site):
        _cannot(f"the checkout {ROOT} is not readable by other users, whom the class hub runs learners as")
    if _reachable_by_all(python.resolve()):
        return str(python)
    system = Path(f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
    if not system.exists():
        _cannot(f"{python.resolve()} is not reachable by other users and there is no {system}")
    where.mkdir(mode=0o755)
    (where / "bin").mkdir()
    (where / "bin" / "python").symlink_to(system)
    (where / "pyvenv.cfg").write_text(f"home = {system.parent}\ninclude-system-site-packages = false\n")
    own = where / site.relative_to(sys.prefix)
    own.mkdir(parents=True)
    (own / "echoq-tests.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")
    # redis-py imports the package async_timeout on a Python before 3.11.3 (Debian 12 has
    # 3.11.2), where this venv's Python has asyncio.timeout instead: the same context manager.
    (own / "async_timeout.py").write_text("from asyncio import timeout  # noqa: F401\n")
    for data in ("share", "etc"):  # JupyterLab's assets and settings, found under sys.prefix
        (where / data).symlink_to(Path(sys.prefix) / data)
    for path in [where, *where.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return str(where / "bin" / "python")


def give_to(path: Path, user: str) -> None:
    """``path`` and everything in it (written by the test, as root) made ``user``'s."""
    entry = pwd.getpwnam(user)
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chown(item, entry.pw_uid, entry.pw_gid, follow_symlinks=False)


# ---------------------------------------------------------------- processes


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the hub's proxy, servers, kernels): ours to end."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is gone, only not yet reaped
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def kernels_of(hub_pid: int, hub_user: str) -> list[int]:
    """The kernels below the hub that run for ``hub_user``: a kernel inherits its server's
    ``JUPYTERHUB_USER``, and only a learner's server has that user."""
    found = []
    for pid in _descendants(hub_pid):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            kernel = b"ipykernel_launcher" in argv or b"echoq.teaching.workshop.kernel" in argv  # the kit's hub's
            if kernel and f"JUPYTERHUB_USER={hub_user}".encode() in env:
                found.append(pid)
    return found


def run_in_kernel(pid: int, code: str, timeout_s: float = 60.0) -> str:
    """Run ``code`` in the running kernel ``pid`` (through its connection file, as a second
    client beside the learner's page: the kernel runs as the learner's Unix user) and return
    what it printed."""
    from jupyter_client import BlockingKernelClient

    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    client = BlockingKernelClient(connection_file=argv[argv.index("-f") + 1])
    client.load_connection_file()
    client.start_channels()
    printed: list[str] = []
    try:
        client.wait_for_ready(timeout=timeout_s)

        def keep(msg: dict) -> None:
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                printed.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

        client.execute_interactive(code, timeout=timeout_s, output_hook=keep)
    finally:
        client.stop_channels()
    return "".join(printed)


# ---------------------------------------------------------------- JupyterLab, driven

PANEL = """const panel = (path) => Array.from(window.jupyterapp.shell.widgets('main'))
    .find(w => w.context && w.context.path === path);"""
RUN_ALL = """() => {
    const app = window.jupyterapp;
    app.commands.execute('notebook:clear-all-cell-outputs').then(() => app.commands.execute('notebook:run-all-cells'));
}"""
OPENED = f"""(path) => {{ {PANEL}
    const w = panel(path), current = window.jupyterapp.shell.currentWidget;
    const k = w && w === current && w.sessionContext.session && w.sessionContext.session.kernel;
    return k && k.status === 'idle';
}}"""
DONE = f"""(path) => {{ {PANEL}
    const w = panel(path);
    const k = w.sessionContext.session && w.sessionContext.session.kernel;
    const code = w.content.widgets.filter(c => c.model.type === 'code');
    const failed = code.some(c => c.model.outputs.toJSON().some(x => x.output_type === 'error'));
    return k && k.status === 'idle' && (failed || code.every(c => c.model.executionCount !== null));
}}"""
STATE = f"""(path) => {{ {PANEL}
    const w = panel(path);
    const k = w && w.sessionContext.session && w.sessionContext.session.kernel;
    const code = w ? w.content.widgets.filter(c => c.model.type === 'code') : [];
    return {{open: !!w, kernel: k && k.status, counts: code.map(c => c.model.executionCount),
             dialog: !!document.querySelector('.jp-Dialog')}};
}}"""
OUTPUTS = f"""(path) => {{ {PANEL}
    return panel(path).content.widgets.filter(c => c.model.type === 'code').map(c => c.model.outputs.toJSON());
}}"""
READY = """() => window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open')
    && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')"""
ACTIVATE = f"(path) => {{ {PANEL} window.jupyterapp.shell.activateById(panel(path).id); }}"
IN_FRONT = f"(path) => {{ {PANEL} return window.jupyterapp.shell.currentWidget === panel(path); }}"
# The active cell alone: notebook:run-cell runs the selected cells, and Run All left none selected.
RUN_CELL = f"""([path, index]) => {{ {PANEL}
    const w = panel(path);
    w.content.activeCellIndex = index;
    w.content.deselectAll();
    window.jupyterapp.commands.execute('notebook:run-cell');
}}"""


def start_notebook(page, notebook: str) -> None:
    """Open ``notebook`` in the JupyterLab already loaded in ``page`` and start running every
    cell (not awaited: several notebooks run at once; :func:`finished_outputs` waits)."""
    page.wait_for_function(READY, polling=POLL_MS, timeout=READY_S * 1000)
    page.evaluate("() => window.jupyterapp.restored")  # the layout restored: opening now sticks
    page.evaluate("(path) => { window.jupyterapp.commands.execute('docmanager:open', {path}); }", notebook)
    try:
        page.wait_for_function(OPENED, arg=notebook, polling=POLL_MS, timeout=READY_S * 1000)
    except Exception as exc:
        shot = save_screenshot(page.screenshot(), f"hub-timeout-open-{Path(notebook).stem}.png")
        state = page.evaluate(STATE, notebook)
        pytest.fail(f"{notebook} did not open with an idle kernel ({type(exc).__name__}): {state}; {shot}")
    page.evaluate(RUN_ALL)  # on the notebook just opened: it is the current one


def finished_outputs(page, notebook: str) -> list[list[dict]]:
    try:
        page.wait_for_function(DONE, arg=notebook, polling=POLL_MS, timeout=READY_S * 1000)
    except Exception as exc:  # say what the page showed, not only that time ran out
        shot = save_screenshot(page.screenshot(), f"hub-timeout-{Path(notebook).stem}.png")
        state = page.evaluate(STATE, notebook)
        pytest.fail(
            f"{notebook} did not finish in {READY_S:.0f} s ({type(exc).__name__}); page state {state}; see {shot}"
        )
    return page.evaluate(OUTPUTS, notebook)


def bring_to_front(page, notebook: str) -> None:
    """Make the open ``notebook`` the tab in front: JupyterLab shows only that one, so text
    in any other is not visible to wait for."""
    page.evaluate(ACTIVATE, notebook)
    page.wait_for_function(IN_FRONT, arg=notebook, polling=POLL_MS, timeout=30_000)


def run_cell(page, notebook: str, index: int) -> None:
    """Run the code cell at ``index`` (of all cells) of the open ``notebook``, as a learner
    does with Shift-Enter (not awaited: the caller waits for what it shows)."""
    bring_to_front(page, notebook)
    page.evaluate(RUN_CELL, [notebook, index])


def errors_in(outputs: list[list[dict]]) -> list[str]:
    return [f"{o['ename']}: {o['evalue']}" for cell in outputs for o in cell if o["output_type"] == "error"]


def text_of(outputs: list[list[dict]]) -> str:
    return json.dumps(outputs)
