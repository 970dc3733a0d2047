"""The kit in a real browser: Chromium (Playwright) against JupyterLab and Voila on 127.0.0.1.

The probe notebook is the whole stack in small: an ipywidgets Button and Label and an ipympl
figure in one VBox, bound to a queue on a real Valkey. Clicking in the page must enqueue on the
server, change the label's text and redraw the figure's pixels -- which proves the kernel, the
widget manager and ipympl's front-end all work here, in JupyterLab and in Voila.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

import echoq
from tests.browser_support import (  # noqa: F401  (fixtures)
    browser,
    chromium,
    kernel_env,
    lab_url,
    page,
    save_screenshot,
    start_lab,
    start_voila,
    valkey_for_kernels,
)

PROBE_QUEUE = "browser-probe"
BAR_RGB = (214, 39, 40)  # the bar's colour, counted in the figure's pixels

PROBE_CELLS = [
    # The figure is made in one cell and driven from another (ipympl draws it only then).
    f"""%matplotlib widget
import matplotlib.pyplot as plt
import ipywidgets as widgets
import echoq
plt.ioff()
q = echoq.Queue({PROBE_QUEUE!r})
q.reset()
fig, ax = plt.subplots(figsize=(3, 2.5), dpi=80)
bar = ax.bar(["pending"], [0], color="#{BAR_RGB[0]:02x}{BAR_RGB[1]:02x}{BAR_RGB[2]:02x}")[0]
ax.set_ylim(0, 5)
fig.canvas.header_visible = False
fig.canvas.toolbar_visible = False""",
    """label = widgets.Label("pending: 0")
button = widgets.Button(description="enqueue")

def on_click(_):
    q.enqueue("clicked")
    n = q.snapshot().counts["pending"]
    label.value = f"pending: {n}"
    bar.set_height(n)
    fig.canvas.draw_idle()

button.on_click(on_click)
widgets.VBox([button, label, fig.canvas])""",
]


def write_probe(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in PROBE_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "probe.ipynb"
    nbformat.write(nb, path)
    return path


def bar_pixels(png: bytes) -> int:
    """How many pixels of the screenshot are (nearly) the bar's colour."""
    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)
    return int((np.abs(rgb - np.array(BAR_RGB)).sum(axis=2) < 30).sum())


def poll(check, timeout_s: float = 30.0, what: str = "condition"):
    """Poll ``check()`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def click_and_check(pg, scope, server_url: str) -> None:
    """Click enqueue three times in the page; the label, the figure and Valkey must all follow."""
    label = scope.locator(".widget-label", has_text="pending: 0")
    label.wait_for(timeout=60_000)
    figure = scope.locator(".jupyter-matplotlib-figure canvas").first
    figure.wait_for(timeout=60_000)
    figure_box = scope.locator(".jupyter-matplotlib-figure").first
    # The canvas is drawn from an image the kernel sends; wait until its axes are on it.
    poll(lambda: _ink(figure_box.screenshot()) > 200, what="the figure to be drawn")
    before = bar_pixels(figure_box.screenshot())
    button = scope.get_by_role("button", name="enqueue")
    for n in (1, 2, 3):
        button.click()
        scope.locator(".widget-label", has_text=f"pending: {n}").wait_for(timeout=30_000)
    # Three jobs on the server: the click reached Valkey, not only the page.
    assert echoq.Queue(PROBE_QUEUE, echoq.connect(server_url)).snapshot().counts["pending"] == 3
    after = poll(lambda: (px := bar_pixels(figure_box.screenshot())) > before + 500 and px, what="the bar to grow")
    assert before < 50, f"an empty queue should draw no bar, found {before} bar-coloured pixels"
    assert after > before + 500


def _ink(png: bytes) -> int:
    """Pixels that are not (near) white: a drawn figure has axes, ticks and labels."""
    grey = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    return int((grey < 200).sum())


def test_jupyterlab_runs_a_widget_notebook_against_valkey(page, valkey_for_kernels, tmp_path: Path) -> None:  # noqa: F811
    write_probe(tmp_path)
    lab = start_lab(tmp_path, kernel_env(valkey_for_kernels))
    try:
        page.goto(lab_url(lab, "probe.ipynb"))
        panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        panel.wait_for(timeout=60_000)
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=60_000)
        page.evaluate(
            """async () => {
                const nb = window.jupyterapp.shell.currentWidget;
                await nb.sessionContext.ready;
                await window.jupyterapp.commands.execute('notebook:run-all-cells');
            }"""
        )
        click_and_check(page, panel, valkey_for_kernels.url)
        save_screenshot(page.screenshot(), "browser-lab-probe.png")
    finally:
        lab.stop()


def test_voila_serves_the_widgets_without_code(page, valkey_for_kernels, tmp_path: Path) -> None:  # noqa: F811
    notebook = write_probe(tmp_path)
    voila = start_voila(notebook, kernel_env(valkey_for_kernels))
    try:
        page.goto(voila.url + "/")
        click_and_check(page, page, valkey_for_kernels.url)
        # Voila strips the sources: the page shows widgets, never the code behind them.
        assert page.get_by_text("def on_click").count() == 0
        assert page.locator(".jp-InputArea, .jp-CodeMirrorEditor").count() == 0
        save_screenshot(page.screenshot(), "browser-voila-probe.png")
    finally:
        voila.stop()
