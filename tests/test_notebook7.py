"""A lesson in Jupyter Notebook 7 (the `notebook` package), through Chromium: its lab animates.

The approach of tests/test_browser.py (JupyterLab), on Notebook 7's own server and page: run the
lesson up to its lab, then make one move in its lab and count the distinct pictures the canvas paints.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.browser_support import (  # noqa: F401  (fixtures)
    _launch,
    _root_flag,
    browser,
    chromium,
    kernel_env,
    lab_root,
    page,
    poll,
    save_screenshot,
    valkey_for_kernels,
)
from tests.test_browser import SAMPLER, button, quiet, words

pytestmark = pytest.mark.browser
LESSON = "notebooks/02_recoverable_claim.ipynb"


def start_notebook7(root_dir: Path, env: dict[str, str]):
    def argv(port: int, workdir: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "notebook",
            *_root_flag(),
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={root_dir}",
            "--JupyterNotebookApp.expose_app_in_browser=True",
            f"--JupyterNotebookApp.workspaces_dir={workdir / 'workspaces'}",
            f"--JupyterNotebookApp.user_settings_dir={workdir / 'settings'}",
        ]

    return _launch("notebook7", argv, env, "/api/status", kernels_api=True)


def test_a_lesson_lab_animates_in_notebook_7(page, lab_root, valkey_for_kernels) -> None:  # noqa: F811
    server = start_notebook7(lab_root, kernel_env(valkey_for_kernels))
    try:
        page.goto(f"{server.url}/notebooks/{LESSON}")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=60_000)
        assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
        page.wait_for_function(
            """() => {
                const ctx = window.jupyterapp.shell.currentWidget.sessionContext;
                return ctx && ctx.isReady && ctx.session && ctx.session.kernel
                    && ctx.session.kernel.status === 'idle';
            }""",
            timeout=60_000,
        )
        # The lesson up to its lab (the exercise after it would keep the kernel busy, and a busy
        # kernel answers no click): select the cell below the lab, run everything above it.
        page.evaluate(
            """() => {
                const notebook = window.jupyterapp.shell.currentWidget.content;
                const lab = notebook.widgets.findIndex(c => c.model.sharedModel.getSource().includes('ClaimLab('));
                notebook.activeCellIndex = lab + 1;
                window.jupyterapp.commands.execute('notebook:run-all-above');
            }"""
        )
        panel = page.locator(".jp-OutputArea-output").filter(has=page.get_by_text("crash mid-job", exact=True)).first
        panel.wait_for(timeout=180_000)
        panel.scroll_into_view_if_needed()
        readout = panel.locator("[role=status]").first
        canvas = panel.locator(".jupyter-matplotlib-figure canvas").first
        canvas.wait_for(timeout=60_000)
        poll(lambda: (box := canvas.bounding_box()) and box["width"] > 400, what="the canvas to get its size")
        poll(lambda: "live" in readout.inner_text() and "animating" not in readout.inner_text(), what="a settled lab")
        quiet(page, canvas)
        seen = []
        for _try in range(2):  # as in test_browser: a page busy elsewhere may paint fewer frames once
            before = words(readout)
            canvas.evaluate(SAMPLER)
            button(panel, "enqueue").click()
            poll(lambda was=before: words(readout) != was, what="the readout after enqueue")
            poll(lambda: "animating" not in readout.inner_text(), timeout_s=60, what="the move's animation to end")
            time.sleep(0.3)  # a few settled frames after the last one
            frames = page.evaluate("() => { window.__sampling = false; return window.__frames; }")
            distinct = len(set(frames[1:]) - {frames[0]})
            seen.append(f"{distinct} distinct pictures in {len(frames) - 1} paints")
            if distinct >= 10:
                break
        assert distinct >= 10, f"the Claim lab did not animate in Notebook 7: {seen}"
        save_screenshot(panel.screenshot(), "lab-notebook7.png")
    finally:
        server.stop()
