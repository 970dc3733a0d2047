"""The user server: with no VALKEY_URL the library keeps jobs like SQLite keeps rows -- one
server per user, its data in a folder of the user's with an append-only file, reached over a
unix socket only that user can open, started by the first process and found by the next.
Each test has a folder (ECHOQ_HOME) of its own, and stops what it started."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import echoq
from echoq import server

pytestmark = pytest.mark.server


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user-server folder of this test's (short: a unix socket path has ~100 bytes), as the
    library's default for this process and its children; whatever server ran there is stopped."""
    folder = Path(tempfile.mkdtemp(prefix="eq-"))
    monkeypatch.setenv("ECHOQ_HOME", str(folder))
    monkeypatch.delenv("VALKEY_URL", raising=False)
    monkeypatch.setenv("ECHOQ_VALKEY", "user")  # the library's default, said aloud: the suite's is "throwaway"
    yield folder
    server.stop_user_server()
    shutil.rmtree(folder, ignore_errors=True)


def python(code: str, *, unset: str = "") -> str:
    """Run ``code`` in a fresh interpreter with this process's environment (the test's
    folder), less the variable named ``unset``."""
    env = {k: v for k, v in os.environ.items() if k != unset}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def echoq_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "echoq", *args], capture_output=True, text=True, timeout=60)


def test_jobs_a_producer_left_wait_for_a_later_worker_even_across_a_kill_9_of_the_server(home: Path) -> None:
    started = echoq_cli("server", "start")  # the command the docs give; then a producer finds that server
    assert started.returncode == 0 and started.stdout.startswith("running (pid ") and str(home) in started.stdout
    first_pid = int((home / "server.pid").read_text())
    assert f"(pid {first_pid})" in started.stdout and Path(f"/proc/{first_pid}").exists()  # outlives the command
    assert f"(pid {first_pid})" in echoq_cli("server", "start").stdout  # a second start finds it
    produced = python("import echoq; print(len(echoq.Queue('orders').enqueue_many([f'o{n}' for n in range(200)])))")
    assert produced == "200"  # ... and that process has exited
    status = echoq_cli("server", "status")
    assert status.returncode == 0 and f"data in {home}" in status.stdout, status
    pid = int((home / "server.pid").read_text())
    assert pid == first_pid  # the producer used the server `server start` left running
    os.kill(pid, signal.SIGKILL)  # as a power cut would, to the server alone
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower():
        assert time.monotonic() < deadline, "the server outlived its kill -9"
        time.sleep(0.01)  # another process's end: there is no event to wait on
    assert echoq_cli("server", "status").returncode == 3  # not running now
    worked = python(
        "import echoq; r = echoq.Worker(echoq.Queue('orders'), lambda d: None).work(burst=True); print(r.completed)"
    )
    assert worked == "200"  # the next process started the server again, on the same data
    check = echoq_cli("check")
    assert check.returncode == 0 and "the user server" in check.stdout and str(home) in check.stdout, check
    assert echoq_cli("server", "stop").stdout.startswith("stopped the user server")
    assert echoq_cli("server", "status").returncode == 3


def test_only_its_user_can_open_it_and_it_has_no_tcp_port(home: Path) -> None:
    started = server.user_server()
    assert started is not None and started.socket.parent == home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(started.socket.stat().st_mode) == 0o700 and stat.S_ISSOCK(started.socket.stat().st_mode)
    for secret in ("password", "server.conf"):
        assert stat.S_IMODE((home / secret).stat().st_mode) == 0o600, secret
    client = echoq.connect()
    assert client.config_get("port") == {"port": "0"}  # no TCP at all
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert started.password not in Path(f"/proc/{started.pid()}/cmdline").read_text()
    assert started.password not in server.describe(client) and "the user server" in server.describe(client)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(unix_socket_path=str(started.socket), retry=Retry(NoBackoff(), 0)).ping()
    url = echoq_cli("server", "url").stdout.strip()
    assert url == started.url
    assert echoq.connect(url).ping()  # the URL it prints is one the library takes as VALKEY_URL


def test_two_processes_starting_at_once_get_one_server_and_the_kit_chooses_a_throwaway_one(home: Path) -> None:
    code = "import echoq; from echoq.server import user_server; echoq.connect(); print(user_server().pid())"
    both = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    pids = {process.communicate(timeout=60)[0].strip() for process in both}
    assert len(pids) == 1 and pids != {"None"}, pids
    kit = (
        "import echoq.teaching, echoq\nc = echoq.connect()\n"
        "print(echoq.server.source(), c.config_get('port')['port'])"
    )
    source, port = python(kit, unset="ECHOQ_VALKEY").split()
    assert source == "throwaway" and port != "0"  # the lesson's own server, on loopback TCP
    assert python("from echoq import server; print(server.source())", unset="ECHOQ_VALKEY") == "user"


def test_a_folder_it_cannot_make_is_one_line_saying_what_to_set(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = home / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("ECHOQ_HOME", str(blocker / "echoq"))
    done = echoq_cli("check")
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and "set ECHOQ_HOME to a folder you can write" in done.stderr, done.stderr


def test_server_stop_stops_a_server_whose_disk_is_full_and_says_what_was_not_written(home: Path) -> None:
    """A full disk, for real: the append-only file's next part is made /dev/full (every write
    to it fails with ENOSPC, root or not), and the server then refuses writes and PING with
    MISCONF; with snapshots configured, its SHUTDOWN's save fails too (the snapshot's name is
    taken by a folder: rename fails, root or not) and it refuses SHUTDOWN. ``server status``
    still sees it; ``server stop`` stops it (SHUTDOWN NOSAVE) and says in one line what was not
    written."""
    running = server.user_server()
    assert running is not None
    client = running._client(socket_timeout=5)
    try:
        client.config_set("save", "3600 1")
        (home / "dump.rdb").mkdir()
        client.set("before", "1")
        parts = home / "appendonlydir"
        (incr,) = parts.glob("*.incr.aof")
        n = int(incr.name.split(".")[2])
        os.symlink("/dev/full", incr.with_name(incr.name.replace(f".{n}.", f".{n + 1}.")))
        client.bgrewriteaof()  # the rewrite ends by opening that next part: /dev/full
        deadline = time.monotonic() + 10
        while (info := client.info("persistence"))["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"]:
            assert time.monotonic() < deadline, "the rewrite did not end"
            time.sleep(0.01)  # the server's own background job: there is no event to wait on
        client.set("lost", "1")  # accepted in memory; its write to the file fails
        with pytest.raises(redis.ResponseError, match="^MISCONF .*No space left on device"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                client.set("refused", "1")
    finally:
        client.close()
    pid = running.pid()
    status = echoq_cli("server", "status")
    assert status.returncode == 0 and f"running (pid {pid})" in status.stdout, status
    stopped = echoq_cli("server", "stop")
    assert stopped.returncode == 0 and stopped.stderr == "", stopped
    line = stopped.stdout
    assert line.count("\n") == 1 and line.startswith(f"stopped the user server in {home} with SHUTDOWN NOSAVE; ")
    assert "its last write to the append-only file failed" in line and "not on disk" in line, line
    assert "it refused SHUTDOWN (" in line and "the snapshot a SHUTDOWN saves was not written" in line, line
    assert not server._running(pid)
    assert echoq_cli("server", "status").returncode == 3


PRIVATE_ORPHAN = (
    "import os; from echoq import server; s = server.start_server(private=True); "
    "print(s.workdir, s.process.pid, flush=True); os.kill(os.getpid(), 9)"
)


def test_a_private_server_is_a_unix_socket_in_the_users_folder_gone_at_stop_and_an_orphans_swept_next_time(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a learner's own Lua runs on a class (learner.own_lua_client): no TCP port, nothing
    in /tmp, its folder removed at stop, or by the next one if its process was killed."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)  # alone, on a laptop: under ECHOQ_HOME
    killed = subprocess.run([sys.executable, "-c", PRIVATE_ORPHAN], capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # a kernel killed outright: its folder stays
    orphan, pid = killed.stdout.split()
    assert Path(orphan).parent == home / "private" and Path(orphan).is_dir()
    deadline = time.monotonic() + 30
    while server._running(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.01)  # its server dies with it (PR_SET_PDEATHSIG): another process's exit
    private = server.start_server(private=True)
    try:
        assert not Path(orphan).exists()  # swept as the next one started
        assert private.port == 0 and private.socket == private.workdir / "valkey.sock"
        assert private.workdir.parent == home / "private" and stat.S_IMODE(private.workdir.stat().st_mode) == 0o700
        assert private.url.startswith(f"unix://{private.socket}?password=")
        assert echoq.connect(private.url).ping()
        conf = (private.workdir / "server.conf").read_text()
        assert "port 0\n" in conf and "bind" not in conf  # its config and password: in its folder only
        fds = Path(f"/proc/{private.process.pid}/fd")
        inodes = {os.readlink(fd) for fd in fds.iterdir()}
        tcp = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
        assert not [i for i in inodes if i.startswith("socket:[") and f" {i[8:-1]} " in tcp]  # no TCP socket at all
    finally:
        private.stop()
    assert not private.workdir.exists() and [p.name for p in (home / "private").iterdir()] == ["lock"]
