"""The frontends learners open, through Chromium (JupyterLab and Voila are in tests/test_browser.py).

- Jupyter Notebook 7 (the `notebook` package): the lesson's glossary link opens the glossary; the
  lesson runs up to its lab, and one move in the lab animates, as tests/test_browser.py counts
  it in JupyterLab: every frame reaches the page, and it paints several distinct pictures.
- A frontend with no widget manager (Colab without its custom widget manager, VS Code without the
  Jupyter extension's widget support, GitHub's viewer), played by JupyterLab with its widget manager
  disabled: a lab shows its picture, its readout and the one-line note, from the stored notebook and
  when run there, never a blank output, a widget's repr or a traceback; a rejected answer's feedback
  shows its lines and its picture. On the same page, the
  lesson's glossary link opens the glossary.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.support.browser import (  # noqa: F401  (fixtures)
    POLL_MS,
    _launch,
    browser,
    chromium,
    feedback_shown,
    jupyter_argv,
    kernel_env,
    lab_root,
    lab_url,
    page,
    poll,
    save_screenshot,
    valkey_for_kernels,
)
from tests.support.hub import start_notebook
from tests.test_browser import ANIMATED, SAMPLER, button, quiet, words

pytestmark = pytest.mark.browser
LESSON = "notebooks/02_recoverable_claim.ipynb"


def start_notebook7(root_dir: Path, env: dict[str, str]):
    def argv(port: int, workdir: Path) -> list[str]:
        return jupyter_argv("notebook", "JupyterNotebookApp", port, workdir, root_dir)

    return _launch("notebook7", argv, env, "/api/status", kernels_api=True)


def test_a_lesson_lab_animates_in_notebook_7(page, lab_root, valkey_for_kernels) -> None:  # noqa: F811
    server = start_notebook7(lab_root, kernel_env(valkey_for_kernels))
    try:
        page.goto(f"{server.url}/notebooks/{LESSON}")
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget", polling=POLL_MS, timeout=60_000
        )
        assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
        # The glossary link in the lesson's header opens the glossary, in a tab of its own as
        # Notebook 7 opens a document (../docs would be outside the folder it serves: a 404)
        link = page.locator(".jp-RenderedMarkdown a", has_text="glossary").first
        with page.context.expect_page() as opened:
            link.click()
        glossary = opened.value
        glossary.bring_to_front()  # a tab in the background draws nothing
        glossary.locator(".jp-RenderedMarkdown").filter(has_text="One line per term").first.wait_for(timeout=60_000)
        page.bring_to_front()
        assert glossary.url.split("?")[0].endswith("/notebooks/notebooks/glossary.ipynb"), glossary.url
        glossary.close()
        # The lesson's stored example of a rejected answer, before any cell runs: its picture,
        # with the ✗ line as its alt text
        from echoq.teaching.exercises import EXAMPLE

        example = page.locator(".jp-OutputArea-output").filter(has_text=EXAMPLE.split(":")[0]).first
        _img, line = feedback_shown(example, "the stored example")
        assert line.startswith("[row never marked active]"), line
        page.wait_for_function(
            """() => {
                const ctx = window.jupyterapp.shell.currentWidget.sessionContext;
                return ctx && ctx.isReady && ctx.session && ctx.session.kernel
                    && ctx.session.kernel.status === 'idle';
            }""",
            polling=POLL_MS,
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
            frames, received = page.evaluate(
                "() => { window.__sampling = false; return [window.__frames, window.__received]; }"
            )
            distinct = len(set(frames[1:]) - {frames[0]})
            seen.append(f"{distinct} distinct pictures in {len(frames) - 1} paints of {received} images received")
            if received >= 18 and distinct >= ANIMATED:
                break
        assert received >= 18, f"the Claim lab's frames did not all reach Notebook 7: {seen}"
        assert distinct >= ANIMATED, f"the Claim lab did not animate in Notebook 7: {seen}"
        cut = panel.evaluate(
            """p => [...p.querySelectorAll('button')]
                .filter(b => b.offsetWidth > 0 && b.scrollWidth > b.clientWidth + 1).map(b => b.innerText)"""
        )
        assert not cut, f"buttons whose label is cut: {cut}"  # nothing hidden, the controls' words included
        # Jobs enqueued outside the page (this test, with the library) are drawn: the kernel's
        # re-read clock ticks whatever the frontend.
        from echoq import Queue, connect

        name, pending = re.search(r"emq:\{([^}]+)\}:pending holds (\d+)", readout.inner_text()).groups()  # type: ignore[union-attr]
        Queue(name, connect(valkey_for_kernels.url)).enqueue_many(["made outside the page"] * 3)
        poll(lambda: f"pending holds {int(pending) + 3}" in readout.inner_text(), what="jobs enqueued outside, drawn")
        save_screenshot(panel.screenshot(), "lab-notebook7.png")
    finally:
        server.stop()


def start_lab_without_widgets(root_dir: Path, env: dict[str, str]):
    """JupyterLab with the ipywidgets manager switched off: no renderer for a widget view."""

    def argv(port: int, workdir: Path) -> list[str]:
        labconfig = workdir / "config" / "labconfig"
        labconfig.mkdir(parents=True, exist_ok=True)
        (labconfig / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {"@jupyter-widgets/jupyterlab-manager": True}})
        )
        return [*jupyter_argv("jupyterlab", "LabApp", port, workdir, root_dir), "--LabApp.news_url=None"]

    return _launch("lab-no-widgets", argv, env, "/api/status", kernels_api=True)


def _outputs(scope) -> list[str]:
    return [o.inner_text() for o in scope.locator(".jp-OutputArea-output").all()]


def test_without_a_widget_manager_a_lab_is_its_picture_readout_and_note(page, lab_root, valkey_for_kernels) -> None:  # noqa: F811
    from echoq.teaching.lab.view import STILL

    live = lab_root / "notebooks" / "no_widgets.ipynb"
    live.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": src}
                    for src in (
                        "%matplotlib widget\nfrom echoq.teaching.lab import ClaimLab\nlab = ClaimLab()\nlab",
                        "lab.model.enqueue()",
                        'from echoq.teaching import exercises\nexercises.example("claim", "row-not-active")',
                    )
                ],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    server = start_lab_without_widgets(lab_root, kernel_env(valkey_for_kernels))
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        # 1. the stored lesson, as GitHub or a reader without the extension sees it
        page.goto(lab_url(server, LESSON))
        scope = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        lab = scope.locator(".jp-OutputArea-output").filter(has_text=STILL).first
        lab.wait_for(timeout=60_000)
        lab.scroll_into_view_if_needed()  # Lab draws only the cells in view
        poll(lambda: "readout" in lab.inner_text(), what="the stored lab's readout")
        img = lab.locator("img").first
        poll(lambda: img.evaluate("i => i.complete && i.naturalWidth > 0"), what="the stored lab picture to load")
        assert len(img.get_attribute("alt") or "") >= 20
        assert not any("Error displaying widget" in text for text in _outputs(scope))

        # 2. the glossary link in the lesson's header opens the glossary (a notebook in the folder
        # Lab serves: ../docs would be outside it, a 404), in a tab beside the lesson
        link = scope.locator(".jp-RenderedMarkdown a", has_text="glossary").first
        link.scroll_into_view_if_needed()
        link.click()
        glossary = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").filter(has_text="One line per term")
        glossary.wait_for(timeout=60_000)
        # Lab renders a notebook's cells as they come into view, a moment after the panel shows
        poll(lambda: glossary.get_by_text("the fencing token", exact=False).count() >= 1, what="the glossary's terms")
        save_screenshot(glossary.screenshot(), "lab-glossary-from-lesson-02.png")

        # 3. a lab run there (opened beside the lesson, in the same page): its picture, readout
        # and note; after the next cell, that cell's move
        start_notebook(page, "notebooks/no_widgets.ipynb")
        scope = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        shown = scope.locator(".jp-OutputArea-output").filter(has_text=STILL).first
        shown.wait_for(timeout=120_000)
        shown.scroll_into_view_if_needed()
        poll(lambda: "enqueue" in shown.inner_text(), what="the picture's readout after the enqueue cell")
        poll(lambda: shown.locator("img").first.evaluate("i => i.complete && i.naturalWidth > 0"), what="a picture")
        texts = _outputs(scope)
        assert not any("Traceback" in t or "Error" in t or t.startswith("ClaimLab(") for t in texts), texts
        save_screenshot(shown.screenshot(), "lab-no-widget-manager.png")
        # a rejected answer's feedback: its lines and its picture, the ✗ line as alt text
        rejected = scope.locator(".jp-OutputArea-output").filter(has_text="Lesson 02 · write the claim").first
        _img, line = feedback_shown(rejected, "the rejected answer")
        assert line.startswith("[row never marked active]"), line
        assert not errors, errors
    finally:
        server.stop()
        live.unlink()
