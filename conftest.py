"""The lessons' second pass (tests/support/rerun.py) joins nbval's items here, at the root,
so that it runs whether pytest is given the whole suite or only ``notebooks/``.

And the suite never shares the user server (the library's default, which keeps a user's
jobs): a process that names no server uses a throwaway one of its own (``ECHOQ_VALKEY``
unless the run names another source, as ``ECHOQ_VALKEY=docker make test`` does), and the
user server's folder is one of this run's, removed at its end with any server in it."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.support.rerun import add_second_passes

os.environ.setdefault("ECHOQ_VALKEY", "throwaway")
_HOME = tempfile.mkdtemp(prefix="echoq-home-")  # mode 0700
os.environ["ECHOQ_HOME"] = _HOME


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py marks and orders the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    add_second_passes(items)


def pytest_unconfigure(config: pytest.Config) -> None:
    if os.environ.get("ECHOQ_HOME") == _HOME:
        from echoq.server import stop_user_server

        stop_user_server()
    shutil.rmtree(_HOME, ignore_errors=True)
