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
import shutil
import time
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
            if b"ipykernel_launcher" in argv and f"JUPYTERHUB_USER={hub_user}".encode() in env:
                found.append(pid)
    return found


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
