"""A learner's habits, in JupyterLab through Chromium, on the lesson's own embedded server
(no VALKEY_URL: the server is the kernel's child, as it is for a learner alone).

Lesson 04 (it has a lab, demonstration cells and an exercise): Restart & Run All; a cell run
twice in a row; interrupt a long cell, then go on (the server and its keys are still there);
play with the Reap lab, then run the demonstration cell after it; Run All a second time
(every code cell again, in order); save and reload the page: the lab is live, or its picture
says it is a still one. Every lesson's cells are run a second time at kernel level as well
(tests/support/rerun.py, on the kernel nbval ran the lesson on).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import (  # noqa: F401  (fixtures)
    POLL_MS,
    Served,
    browser,
    chromium,
    lab_root,
    lab_url,
    page,
    poll,
    save_screenshot,
    start_lab,
)
from tests.support.helpers import throwaway_env

pytestmark = pytest.mark.browser

CELLS = """() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => ({
    type: c.model.type,
    first: c.model.sharedModel.getSource().split('\\n')[0],
    count: c.model.type === 'code' ? c.model.executionCount : null,
    errors: c.model.type === 'code'
        ? c.model.outputs.toJSON().filter(o => o.output_type === 'error')
            .map(o => [o.ename, o.evalue, o.traceback.length])
        : [],
}))"""
KERNEL = "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
TEXT = "i => window.jupyterapp.shell.currentWidget.content.widgets[i].node.innerText"
STILL = "A still picture of this lab"


@pytest.fixture(scope="module")
def solo_lab(chromium: str, lab_root: Path) -> Iterator[Served]:  # noqa: F811
    env = throwaway_env("VALKEY_URL", "JUPYTER_PLATFORM_DIRS")
    server = start_lab(lab_root, env)
    yield server
    server.stop()


def cells(pg) -> list[dict]:
    return pg.evaluate(CELLS)


def settled(pg, after: int = 0) -> bool:
    """Every code cell ran (a count above ``after``) and the kernel is idle."""
    code = [c for c in cells(pg) if c["type"] == "code"]
    return pg.evaluate(KERNEL) == "idle" and all(c["count"] is not None and c["count"] > after for c in code)


def last_count(pg) -> int:
    return max((c["count"] or 0) for c in cells(pg) if c["type"] == "code")


def errors(pg) -> list[tuple[str, list]]:
    return [(c["first"], c["errors"]) for c in cells(pg) if c["errors"]]


def command(pg, name: str, args: str = "{}") -> None:
    # Started, not awaited: a cell that never returns must fail the test at a deadline, not hang it.
    pg.evaluate(f"() => {{ window.jupyterapp.commands.execute('{name}', {args}); }}")


def select(pg, index: int) -> None:
    pg.evaluate(f"() => {{ window.jupyterapp.shell.currentWidget.content.activeCellIndex = {index}; }}")


def index_of(pg, first_line: str) -> int:
    found = [i for i, c in enumerate(cells(pg)) if c["first"].startswith(first_line)]
    assert len(found) == 1, f"{first_line!r}: {len(found)} cells"
    return found[0]


def run_cell(pg, index: int, timeout_s: float = 60.0) -> dict:
    """Run the cell at ``index`` (as Shift+Enter would, staying on it); its state once done."""
    before = last_count(pg)
    select(pg, index)
    command(pg, "notebook:run-cell")
    poll(
        lambda: pg.evaluate(KERNEL) == "idle" and (cells(pg)[index]["count"] or 0) > before,
        timeout_s,
        what=f"cell {cells(pg)[index]['first']!r} to run",
    )
    return cells(pg)[index]


def add_cell(pg, source: str) -> int:
    """A new code cell at the end of the notebook (the learner's own); its index."""
    select(pg, len(cells(pg)) - 1)
    command(pg, "notebook:insert-cell-below")
    poll(lambda: cells(pg)[-1]["first"] == "" and len(cells(pg)) > 0, 10, what="a new cell")
    pg.evaluate(
        "src => { const nb = window.jupyterapp.shell.currentWidget.content;"
        " nb.widgets[nb.widgets.length - 1].model.sharedModel.setSource(src); }",
        source,
    )
    return len(cells(pg)) - 1


def lab_text(pg, index: int) -> str:
    """The words the lab's cell shows once drawn (Lab draws only the cells in view)."""
    pg.evaluate(f"() => window.jupyterapp.shell.currentWidget.content.scrollToItem({index}, 'center')")
    return poll(
        lambda: (
            text
            if ("step the reap" in (text := pg.evaluate(TEXT, index)) or STILL in text) and "readout" in text
            else ""
        ),
        60,
        what="the lab's cell to be drawn",
    )


def open_lesson(pg, server: Served, notebook: str):
    pg.goto(lab_url(server, notebook))
    return opened(pg)


def opened(pg):
    """The notebook the page shows, once its kernel is idle."""
    panel = pg.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.wait_for(timeout=60_000)
    pg.wait_for_function(
        """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
            return k && k.status === 'idle'; }""",
        polling=POLL_MS,
        timeout=60_000,
    )
    return panel


def test_lesson_04_survives_a_learners_habits(page, solo_lab) -> None:  # noqa: F811
    pg = page
    panel = open_lesson(pg, solo_lab, "notebooks/04_stalled_recovery.ipynb")
    command(pg, "notebook:restart-run-all")
    dialog = pg.locator(".jp-Dialog")
    dialog.wait_for(timeout=30_000)
    dialog.locator("button.jp-mod-accept").click()  # "Restart"
    poll(lambda: any(c["count"] is None for c in cells(pg) if c["type"] == "code"), 60, what="the restart")
    poll(lambda: settled(pg), 180, what="Restart & Run All", describe=lambda: errors(pg))
    assert errors(pg) == []

    # A demonstration cell run twice in a row: the second run does its thing, or says in one
    # line what to run first.
    reap = index_of(pg, "wait_until_expired(q.client, short.deadline_ms)")
    again = run_cell(pg, reap)
    assert all(depth == 1 and name == "RunFirst" for name, _, depth in again["errors"]), again

    # Interrupt a long cell; the lesson's server and its keys are still there.
    kept = run_cell(pg, add_cell(pg, 'kept = lesson.queue.enqueue("kept across the interrupt").job_id'))
    assert kept["errors"] == []
    before = last_count(pg)
    long = add_cell(pg, "import time\ntime.sleep(120)")
    select(pg, long)
    command(pg, "notebook:run-cell")
    poll(lambda: pg.evaluate(KERNEL) == "busy", 30, what="the long cell to start")
    command(pg, "notebook:interrupt-kernel")
    poll(lambda: pg.evaluate(KERNEL) == "idle" and (cells(pg)[long]["count"] or 0) > before, 30, what="the interrupt")
    ((name, line, depth),) = cells(pg)[long]["errors"]
    assert (name, depth) == ("KeyboardInterrupt", 1) and "still there" in line, line
    check = run_cell(pg, add_cell(pg, 'assert lesson.queue.snapshot().place_of(kept) == "pending"'))
    assert check["errors"] == [], check
    for _ in range(3):  # the learner's three cells go; the lesson is as it was
        select(pg, len(cells(pg)) - 1)
        command(pg, "notebook:delete-cell")
    poll(lambda: not cells(pg)[-1]["first"].startswith(("kept", "import time", "assert lesson")), 10, what="deletes")

    # Play with the Reap lab, then run the demonstration cell after it.
    lab_text(pg, index_of(pg, "lab = ReapLab("))
    lab = panel.locator(".jp-OutputArea-output").filter(has=pg.get_by_text("step the reap", exact=True)).first
    lab.scroll_into_view_if_needed()
    readout = lab.locator("[role=status]").first
    said = readout.inner_text()
    lab.locator('button.widget-button:text-is("start workers")').first.click()
    poll(lambda: readout.inner_text() != said, 30, what="the lab's readout after start workers")
    after_lab = run_cell(pg, index_of(pg, "lab.model.reset()  # whatever you did in the lab"))
    assert after_lab["errors"] == [], after_lab

    # Every code cell a second time, in order.
    count = last_count(pg)
    command(pg, "notebook:run-all-cells")
    poll(lambda: settled(pg, after=count), 180, what="Run All, a second time", describe=lambda: errors(pg))
    assert errors(pg) == []

    # Save, reload: the lab is live again, or its picture says it is a still one.
    command(pg, "docmanager:save")
    poll(lambda: not pg.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty"), 30, what="save")
    pg.reload()  # the same address: the workspace opens the lesson again
    opened(pg)
    assert pg.evaluate("() => window.jupyterapp.shell.currentWidget.context.path").endswith("04_stalled_recovery.ipynb")
    shown = lab_text(pg, index_of(pg, "lab = ReapLab("))
    assert "step the reap" in shown or STILL in shown, shown[:300]  # live, or says it is still
    save_screenshot(pg.screenshot(), "habits-after-reload.png")
