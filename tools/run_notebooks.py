"""Execute the lesson notebooks top to bottom and store their outputs (the committed form).

    .venv/bin/python tools/run_notebooks.py                 # every notebooks/[0-9]*.ipynb
    .venv/bin/python tools/run_notebooks.py notebooks/02_recoverable_claim.ipynb

Notebooks are committed WITH outputs so that a learner can read a lesson on GitHub or
nbviewer before running it; widget state is dropped (it is large, and the widgets need a
live kernel anyway). tests/test_notebook_format.py checks that every committed notebook is
in this form, and nbval re-runs them in `make test`, comparing the cells tagged
`nbval-check-output` (tools/lesson_notebooks.py puts the tags).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def run(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("notebooks", nargs="*", help="the notebooks to run (default: every lesson)")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.notebooks] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    for path in paths:
        print(f"{path.name}: {run(path):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
