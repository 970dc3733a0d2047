"""Lessons 04-07 run a second time, cell by cell (see tests/test_rerun.py; a file of their
own so that `make test` spreads the lessons over two workers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_rerun import LESSONS, run_every_cell_again


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("path", LESSONS[4:], ids=lambda p: p.name[:2])
def test_every_cell_run_again_does_its_thing_or_says_what_to_run_first(path: Path) -> None:
    run_every_cell_again(path)
