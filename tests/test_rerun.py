"""Every code cell of every lesson, run a second time: after Run All, each cell (the setup
cell aside) is run again, in order, as a learner going back over a lesson does -- each cell
then runs after the whole lesson, out of its order. A cell either does its thing again or
fails in one line saying what to run first; and doing what that line says makes it pass.
Kernel-level (nbclient), no browser; tests/test_browser_habits.py runs a cell twice in a row."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("0[0-7]_*.ipynb"))  # 00-03 here, 04-07 in test_rerun_later.py
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def errors(cell: nbformat.NotebookNode) -> list[tuple[str, str, int]]:
    return [
        (out.ename, ANSI.sub("", out.evalue), len(out.traceback)) for out in cell.outputs if out.output_type == "error"
    ]


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("path", LESSONS[:4], ids=lambda p: p.name[:2])
def test_every_cell_run_again_does_its_thing_or_says_what_to_run_first(path: Path) -> None:
    run_every_cell_again(path)


def run_every_cell_again(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=180, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(path.parent)}}
    )
    code = [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]

    def run(i: int, cell: nbformat.NotebookNode) -> list[tuple[str, str, int]]:
        cell.outputs = []
        client.execute_cell(cell, i)
        return errors(cell)

    with client.setup_kernel():
        for i, cell in code:
            assert not run(i, cell), f"Run All fails at {cell.source.splitlines()[0]!r}: {errors(cell)}"
        for i, cell in code[1:]:
            first_line = cell.source.splitlines()[0]
            failed = run(i, cell)
            if not failed:
                continue
            (name, line, depth) = failed[0]
            assert depth == 1, f"{first_line!r} run again: a traceback, not one line: {name}: {line}"
            assert "\n" not in line and ("run" in line.lower() or "restart" in line.lower()), (first_line, line)
            if name == "RunFirst":  # what it says: run the cells above it, then this one
                for j, above in code:
                    if j < i:
                        run(j, above)
                assert not run(i, cell), f"{first_line!r} fails even after the cells above it: {errors(cell)}"
