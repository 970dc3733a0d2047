"""The lessons' committed form and shape (nbval runs them; this checks how they are kept).

Decision (see README § Testing): notebooks are committed WITH outputs, produced by
tools/run_notebooks.py, so a lesson reads well on GitHub or nbviewer before anyone runs it.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_there_are_lessons() -> None:
    assert NOTEBOOKS, "no notebooks/NN_*.ipynb found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_executed_in_order_without_errors(path: Path) -> None:
    cells = code_cells(path)
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name} is not stored as one top-to-bottom run (execution counts {counts}); "
        "run .venv/bin/python tools/run_notebooks.py"
    )
    errors = [o for c in cells for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name} has stored error outputs"
    assert "widgets" not in nbformat.read(path, as_version=4).metadata, "widget state should be stripped"
    assert path.stat().st_size < 1_000_000


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cells_are_short(path: Path) -> None:
    lengths = [len(c.source.strip().splitlines()) for c in code_cells(path)]
    assert statistics.median(lengths) <= 3, f"{path.name}: median code cell is {statistics.median(lengths)} lines"
    ninetieth = sorted(lengths)[int(0.9 * (len(lengths) - 1))]
    assert ninetieth <= 10, f"{path.name}: 90th percentile code cell is {ninetieth} lines"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_lesson_shape(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0].source
    assert first.startswith("# "), "a lesson opens with its title"
    assert "What you will be able to do" in first and "Time:" in first
    # The glossary as a notebook beside the lesson: ../docs is outside the folder JupyterLab serves.
    assert "](glossary.ipynb)" in first and (path.parent / "glossary.ipynb").is_file(), "link the glossary"
    # It closes on sections of their own (its summary and its free play), whatever their words.
    last = [c.source for c in nb.cells if c.cell_type == "markdown"][-1]
    sections = [line for line in last.splitlines() if line.startswith("## ")]
    assert len(sections) >= 2, f"{path.name} does not close on a summary and a free play section"
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "course.start(" in code_cells(path)[0].source
    if not path.name.startswith("00"):
        assert "exercises.check" in code, f"{path.name} has no exercise with an automatic check"
        assert "exercises.solution(" in code, f"{path.name} has no solution to open on request"
        assert "assert " in code, f"{path.name} demonstrates no guarantee with an assert"


def test_exercise_stubs_in_the_notebooks_are_the_ones_the_tests_prove_wrong() -> None:
    """tests/test_exercises.py proves each stub fails its check; the notebooks must carry
    those very stubs, not a drifted copy, each with its check and its solution."""
    from echoq.teaching.exercises import EXERCISES

    sources = {p.name[:2]: "\n".join(c.source for c in code_cells(p)) for p in NOTEBOOKS}
    for key, ex in EXERCISES.items():
        lesson = sources[ex.lesson]
        assert ex.stub.strip() in lesson, f"lesson {ex.lesson} does not carry the stub of {key!r}"
        assert ex.check.__name__ in lesson, f"lesson {ex.lesson} never runs {ex.check.__name__}"
        assert f'exercises.solution("{key}")' in lesson, f"lesson {ex.lesson} does not offer the solution of {key!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_predictions_come_before_the_run_that_reveals_them(path: Path) -> None:
    """At least two predict-then-run questions per lesson, each asked in a cell before the
    first cell that runs what answers it."""
    import re

    from echoq.teaching.predictions import QUESTIONS, REVEALED_BY

    lesson = path.name[:2]
    cells = [c.source for c in code_cells(path)]
    asked = {m: n for n, src in enumerate(cells) for m in re.findall(r'course\.ask\("(\d\d)", "([a-z0-9-]+)"\)', src)}
    keys = {key for (nn, key) in asked if nn == lesson}
    assert keys == set(QUESTIONS.get(lesson, {})), f"{path.name} asks {sorted(keys)}"
    assert len(keys) >= 2, f"{path.name} asks fewer than two predictions"
    for key in keys:
        at = asked[(lesson, key)]
        reveal = REVEALED_BY[(lesson, key)]
        runs = [n for n, src in enumerate(cells) if reveal in src]
        assert runs and runs[0] > at, f"{path.name}: {key!r} must be asked before the cell running {reveal!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_what_a_lesson_asks_to_read_is_on_screen_and_waits_raise(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for n, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and "Read it" in cell.source:
            shown = next(c for c in nb.cells[n + 1 :] if c.cell_type == "code").source
            reads = ("course.lua(", "course.lua_folded(", "course.source(")
            assert any(call in shown for call in reads), f"{path.name}: 'Read it' shows nothing"
    code = "\n".join(c.source for c in code_cells(path))
    # A wait that times out must raise; wait_for_server_ms returns False, to be ignored.
    assert "wait_for_server_ms" not in code, f"{path.name} waits with a bool nobody checks"


@pytest.mark.parametrize("lesson", ["01", "05", "06"])
def test_result_charts_are_stored_as_pictures(lesson: str) -> None:
    """The lessons' result charts must reach GitHub/nbviewer readers as images, not as
    `<Figure size …>` text (course.start registers the PNG formatter)."""
    (path,) = [p for p in NOTEBOOKS if p.name.startswith(lesson)]
    outputs = [o for c in code_cells(path) for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} stores no picture"
