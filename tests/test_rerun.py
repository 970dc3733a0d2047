"""The lessons' second pass (tests/support/rerun.py) can fail: a cell that breaks when it is
run after the whole lesson fails it, with the cell's first line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.server
def test_a_cell_that_breaks_when_run_again_fails_the_second_pass(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("assert x == 1\nx = 2")]
    nbformat.write(nb, tmp_path / "00_twice.ipynb")
    shutil.copy(ROOT / "conftest.py", tmp_path)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [*argv, "00_twice.ipynb"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    out = run.stdout
    assert run.returncode == 1, out
    assert "2 passed" in out and "FAILED 00_twice.ipynb::every cell run again" in out, out
    assert "'assert x == 1' run again: a traceback, not one line" in out, out
