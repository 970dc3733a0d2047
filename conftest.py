"""The lessons' second pass (tests/support/rerun.py) joins nbval's items here, at the root,
so that it runs whether pytest is given the whole suite or only ``notebooks/``."""

from __future__ import annotations

import pytest

from tests.support.rerun import add_second_passes


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py marks and orders the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    add_second_passes(items)
