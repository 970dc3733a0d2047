"""Every code cell of a lesson, run a second time, on the kernel nbval ran the lesson on.

nbval runs a lesson top to bottom (Run All). Right after its last cell, on the same kernel,
this item runs each code cell again in order (the setup cell aside), as a learner going back
over a lesson does: each cell then runs after the whole lesson, out of its order. A cell
either does its thing again or fails in one line saying what to run first; and doing what
that line says makes it pass. Reusing nbval's kernel means each lesson is executed once for
both tests instead of twice. tests/test_browser_habits.py runs a cell twice in a row.
"""

from __future__ import annotations

import re
from queue import Empty
from typing import Any

import nbformat
import pytest

from tests.support.helpers import ANSI

LESSON = re.compile(r"0[0-7]_.*\.ipynb")
CELL_TIMEOUT_S = 180


class RunAgain(pytest.Item):
    """One lesson's second pass; its parent is nbval's notebook, whose kernel it borrows."""

    def runtest(self) -> None:
        kernel = getattr(self.parent, "kernel", None)
        if kernel is None or not kernel.is_alive():
            pytest.fail("the lesson's kernel is not running: an earlier cell of this lesson failed", pytrace=False)
        nb = nbformat.read(self.path, as_version=4)
        code = [cell.source for cell in nb.cells if cell.cell_type == "code"]
        for i, source in enumerate(code[1:], start=1):
            first_line = source.splitlines()[0]
            failed = run(kernel, source)
            if not failed:
                continue
            (name, line, depth) = failed[0]
            assert depth == 1, f"{first_line!r} run again: a traceback, not one line: {name}: {line}"
            assert "\n" not in line and ("run" in line.lower() or "restart" in line.lower()), (first_line, line)
            if name == "RunFirst":  # what it says: run the cells above it, then this one
                for above in code[:i]:
                    run(kernel, above)
                again = run(kernel, source)
                assert not again, f"{first_line!r} fails even after the cells above it: {again}"

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{self.path.name}: every cell run again"


def run(kernel: Any, source: str) -> list[tuple[str, str, int]]:
    """Execute ``source`` on nbval's kernel; the errors it showed (name, one-line value, traceback depth)."""
    msg_id = kernel.execute_cell_input(source, allow_stdin=False)
    try:
        kernel.await_reply(msg_id, timeout=CELL_TIMEOUT_S)
    except Empty:
        kernel.interrupt()
        pytest.fail(f"{source.splitlines()[0]!r} run again did not end within {CELL_TIMEOUT_S} s", pytrace=False)
    errors = []
    while True:
        msg = kernel.get_message("iopub", timeout=CELL_TIMEOUT_S)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        if msg["msg_type"] == "error":
            errors.append((content["ename"], ANSI.sub("", content["evalue"]), len(content["traceback"])))
        elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
            return errors


def add_second_passes(items: list[pytest.Item]) -> None:
    """After the last cell nbval collected of each lesson, that lesson's second pass."""
    last: dict[pytest.Collector, int] = {}
    for index, item in enumerate(items):
        parent = item.parent
        if parent is not None and type(parent).__name__ == "IPyNbFile" and LESSON.fullmatch(item.path.name):
            last[parent] = index
    for parent, index in sorted(last.items(), key=lambda pair: pair[1], reverse=True):
        items.insert(index + 1, RunAgain.from_parent(parent, name="every cell run again"))
