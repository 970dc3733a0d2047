"""Where Valkey comes from: the embedded server, VALKEY_URL, unix sockets, docker, and errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

import echoq
from echoq.address import redact
from echoq.server import start_server
from tests.support.helpers import install_command, throwaway_env

ROOT = Path(__file__).resolve().parent.parent


def run_echoq(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = throwaway_env("VALKEY_URL")
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "echoq", *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120
    )


@pytest.fixture(scope="module")
def own_server():
    server = start_server()
    yield server
    server.stop()


def test_embedded_server_is_loopback_only_with_a_password(own_server) -> None:
    client = redis.Redis(host="127.0.0.1", port=own_server.port, password=own_server.password, decode_responses=True)
    assert client.config_get("bind") == {"bind": "127.0.0.1"}
    assert client.config_get("protected-mode") == {"protected-mode": "yes"}
    anonymous = redis.Redis(host="127.0.0.1", port=own_server.port)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    assert len(own_server.password) >= 24
    # The password is not on the command line, where other users' `ps` would see it.
    cmdline = Path(f"/proc/{own_server.process.pid}/cmdline").read_bytes().decode()
    assert own_server.password not in cmdline


def test_embedded_server_answers_quickly(own_server) -> None:
    # The figure lives in the benchmark (bench/startup.py); this only catches a gross regression.
    assert own_server.startup_s < 10.0  # 0.2 s on a quiet machine; a loaded CI runner is slower


@pytest.mark.server  # the first call in a process starts the server
def test_the_embedded_server_is_reused_within_a_process() -> None:
    assert echoq.server_url() == echoq.server_url()


@pytest.mark.server
def test_embedded_server_stops_at_interpreter_exit(tmp_path: Path) -> None:
    script = "import echoq; from echoq.server import _throwaway_server as e; echoq.connect(); print(e().process.pid)"
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=throwaway_env("VALKEY_URL"),
    )
    pid = int(result.stdout.strip())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.mark.server
def test_a_server_started_from_a_short_lived_thread_outlives_it() -> None:
    # Linux ties PDEATHSIG to the forking thread: a server forked from a widget callback's
    # thread used to die as soon as that thread returned.
    started: list = []
    thread = threading.Thread(target=lambda: started.append(start_server()))
    thread.start()
    thread.join()
    server = started[0]
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port, password=server.password)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # the signal, were it sent, would land within this
            assert server.alive() and client.ping()
        assert server.password not in repr(server)
    finally:
        server.stop()


@pytest.mark.server
def test_a_killed_interpreter_leaves_no_server_behind() -> None:
    script = (
        "import os, signal, threading; from echoq.server import start_server; box = [];"
        "t = threading.Thread(target=lambda: box.append(start_server())); t.start(); t.join();"
        "print(box[0].process.pid, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pid = int(result.stdout.strip())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and "zombie" not in _status(pid) and time.monotonic() < deadline:
        time.sleep(0.02)  # polling another process's exit: there is no event to wait on
    assert not Path(f"/proc/{pid}").exists() or "zombie" in _status(pid), "the orphaned server is still running"


@pytest.mark.server
def test_interrupting_the_kernel_leaves_its_server_running_and_killing_it_ends_the_server() -> None:
    """Jupyter's "Interrupt kernel" sends SIGINT to the kernel's whole process group; the
    lesson's server must not get it (valkey-server shuts down on SIGINT), yet must still die
    when the kernel is killed."""
    kernel = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, threading\n"
            "from echoq.server import start_server\n"
            "interrupted = threading.Event()\n"
            "signal.signal(signal.SIGINT, lambda *_: interrupted.set())  # as ipykernel does\n"
            "box = []\n"
            "t = threading.Thread(target=lambda: box.append(start_server())); t.start(); t.join()\n"
            "print(box[0].process.pid, box[0].url, flush=True)\n"
            "interrupted.wait(60); print('interrupted', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as Jupyter starts a kernel
    )
    try:
        pid_text, url = kernel.stdout.readline().split()
        pid = int(pid_text)
        client = redis.Redis.from_url(url, socket_timeout=5)
        client.set("lesson", "state")
        os.killpg(kernel.pid, signal.SIGINT)
        assert kernel.stdout.readline().strip() == "interrupted"
        deadline = time.monotonic() + 1.0  # a server that got SIGINT shuts down within its 100 ms cron
        while time.monotonic() < deadline:
            assert _running(pid) and client.get("lesson") == b"state", "the interrupt reached the server"
        kernel.kill()
        kernel.wait(10)
        give_up = time.monotonic() + 10
        while _running(pid):
            assert time.monotonic() < give_up, f"valkey-server {pid} outlived the kernel that started it"
            time.sleep(0.02)  # polling another process's exit: there is no event to wait on
    finally:
        kernel.kill()


@pytest.mark.server
def test_a_server_interrupted_while_it_starts_is_ended_not_left_running(monkeypatch: pytest.MonkeyPatch) -> None:
    # In a session of its own the server never sees the kernel's SIGINT: start_server must end
    # the half-started server itself when the interrupt lands in its start-up wait.
    from echoq import server as server_module

    started: list = []
    spawn = server_module._spawn_from_long_lived_thread
    monkeypatch.setattr(
        server_module, "_spawn_from_long_lived_thread", lambda f: started.append(spawn(f)) or started[0]
    )

    def interrupted(self: object) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(redis.Redis, "ping", interrupted)
    with pytest.raises(KeyboardInterrupt):
        start_server()
    assert started and started[0].poll() is not None, "the half-started server was left running"


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return "zombie (gone)"


def test_valkey_url_is_used_when_set(own_server) -> None:
    result = run_echoq("check", env={"VALKEY_URL": own_server.url})
    assert result.returncode == 0, result.stderr
    assert f"127.0.0.1:{own_server.port}" in result.stdout and "VALKEY_URL" in result.stdout
    assert own_server.password not in result.stdout


@pytest.mark.server
def test_unix_socket_urls_work(tmp_path: Path) -> None:
    sock = tmp_path / "v.sock"
    server = start_server(extra_config={"unixsocket": str(sock), "unixsocketperm": "700"})
    try:
        for url in (f"unix://{sock}?password={server.password}", f"valkey+unix://{sock}?password={server.password}"):
            client = echoq.connect(url)
            assert client.ping() and client.connection_pool.connection_kwargs["path"] == str(sock)
            q = echoq.Queue("over-a-socket", client)
            q.enqueue("x")
            assert q.claim().payload == "x"
    finally:
        server.stop()


@pytest.mark.server
def test_unreachable_url_gives_one_clear_line() -> None:
    result = run_echoq("check", env={"VALKEY_URL": "redis://:s3cret@127.0.0.1:1/0"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot reach Valkey at redis://:***@127.0.0.1:1/0" in lines[0] and "s3cret" not in lines[0]
    assert "fix VALKEY_URL, or unset it to use your user server" in lines[0]


def test_wrong_password_gives_one_clear_line(own_server) -> None:
    result = run_echoq("check", env={"VALKEY_URL": f"redis://:wrong@127.0.0.1:{own_server.port}/0"})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "refused the password" in result.stderr and ":***@" in result.stderr and "wrong" not in result.stderr


def test_missing_password_is_reported_as_such(own_server) -> None:
    with pytest.raises(echoq.ServerUnavailable, match="refused the password"):
        echoq.connect(f"redis://127.0.0.1:{own_server.port}/0")


@pytest.mark.server
def test_a_server_that_dies_gives_a_clear_error() -> None:
    server = start_server()
    q = echoq.Queue("doomed", echoq.connect(server.url))
    q.enqueue("x")
    server.stop()
    with pytest.raises(echoq.ServerUnavailable, match="lost Valkey at redis://:\\*\\*\\*@127.0.0.1") as info:
        q.claim()
    assert server.password not in str(info.value)


def test_bad_url_scheme_is_explained() -> None:
    with pytest.raises(echoq.ServerUnavailable, match="not a URL this kit understands"):
        echoq.connect("http://example.invalid")


@pytest.mark.server
def test_unknown_source_is_explained() -> None:
    result = run_echoq("check", env={"ECHOQ_VALKEY": "cloud"})
    assert result.returncode == 2 and "'cloud' is not a known source" in result.stderr


def _docker_engine_reachable() -> bool:
    try:
        import docker  # type: ignore

        docker.from_env().ping()
        return True
    except Exception:
        return False


@pytest.mark.server
def test_docker_source_without_an_engine_says_so_in_one_line() -> None:
    if _docker_engine_reachable():
        pytest.skip("a Docker engine is reachable here; the no-engine message cannot be shown")
    result = run_echoq("check", env={"ECHOQ_VALKEY": "docker"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert (
        "no Docker engine answered" in lines[0]
        and "unset ECHOQ_VALKEY (now 'docker') to use your user server" in lines[0]
    )


@pytest.mark.server
def test_docker_source_runs_a_real_container_where_an_engine_runs() -> None:
    if not _docker_engine_reachable():
        pytest.skip(
            "no Docker engine reachable (none runs on this machine); ECHOQ_VALKEY=docker is tested where one does"
        )
    result = run_echoq("check", env={"ECHOQ_VALKEY": "docker"})
    assert result.returncode == 0 and "Docker container" in result.stdout


def test_redact_hides_only_the_password() -> None:
    assert redact("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact("rediss://:pw@h:1") == "rediss://:***@h:1"
    assert redact("redis://host:6379") == "redis://host:6379"
    # after password= everything is hidden: a raw password may hold '&' (see test_secrets.py)
    assert redact("unix:///tmp/v.sock?db=0&password=s3cret") == "unix:///tmp/v.sock?db=0&password=***"
    assert redact("unix:///tmp/v.sock?password=s3cret&db=0") == "unix:///tmp/v.sock?password=***"
    assert redact("redis://h:1/0?PASSWORD=x") == "redis://h:1/0?PASSWORD=***"


def test_lua_scripts_ship_in_the_wheel(tmp_path: Path, own_server) -> None:
    """pip install . into a folder, then import and run a script from another directory."""
    target = tmp_path / "site"
    build = subprocess.run(
        install_command(sys.executable, "--no-deps", "--target", str(target), str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    assert (target / "echoq" / "lua" / "claim.lua").is_file()
    assert (target / "echoq" / "lua" / "includes" / "fence.lua").is_file()
    probe = (
        "import echoq, echoq.scripts as s; q = echoq.Queue('from-wheel'); q.reset(); q.enqueue('w'); "
        "c = q.claim(); print(s.lua_dir()); print(q.complete(c).value)"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(target), "VALKEY_URL": own_server.url, "PATH": os.environ.get("PATH", "")}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lua_dir, outcome = result.stdout.split()
    assert Path(lua_dir) == target / "echoq" / "lua" and outcome == "completed"


@pytest.mark.server
def test_a_server_held_by_an_endless_script_dies_with_the_python_that_started_it() -> None:
    """A learner's Lua that wrote and then loops forever holds the server (SCRIPT KILL answers
    UNKILLABLE, SIGTERM is not handled); when the kernel that started it is killed, the server
    must go too, not spin a core as an orphan."""
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import threading, time, echoq\n"
            "from echoq.server import start_server\n"
            "server = start_server()\n"
            "client = echoq.connect(server.url)\n"
            "stuck = lambda: client.eval(\"redis.call('SET', 'k', 'v') while true do end\", 0)\n"
            "threading.Thread(target=stuck, daemon=True).start()\n"
            "print(server.process.pid, server.url, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid_text, url = starter.stdout.readline().split()
        pid = int(pid_text)
        probe = redis.Redis.from_url(url, socket_timeout=15)  # it answers BUSY after lua-time-limit (5 s)
        give_up = time.monotonic() + 30
        while True:  # until the script holds the server
            try:
                probe.ping()
            except redis.exceptions.BusyLoadingError:
                break
            except redis.ResponseError as exc:
                if "BUSY" in str(exc):
                    break
                raise
            assert time.monotonic() < give_up, "the endless script never held the server"
            time.sleep(0.05)
        starter.kill()
        starter.wait(10)
        give_up = time.monotonic() + 10
        while _running(pid):
            assert time.monotonic() < give_up, f"valkey-server {pid} outlived the Python that started it"
            time.sleep(0.05)
    finally:
        starter.kill()


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an orphan's end may not be reaped here)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("db", ["abc", "1x", "0/extra", "%31a"])
def test_a_database_that_is_not_a_number_is_refused_in_one_line(db: str) -> None:
    with pytest.raises(echoq.ServerUnavailable, match="not a number") as info:
        echoq.connect(f"redis://:pw@127.0.0.1:1/{db}")
    assert "\n" not in str(info.value) and "pw" not in str(info.value)


@pytest.mark.parametrize(
    ("env", "default", "advice"),
    [
        ({"VALKEY_URL": "redis://127.0.0.1:1/0"}, "user", "fix VALKEY_URL, or unset it to use your user server"),
        ({"ECHOQ_VALKEY": "throwaway"}, "user", "unset ECHOQ_VALKEY (now 'throwaway') to use your user server"),
        ({}, "user", "python -m echoq server status says whether your user server runs"),
        ({}, "throwaway", "echoq.connect() starts a new server of this process's own"),
    ],
)
def test_a_lost_server_is_told_what_is_true_for_where_its_server_comes_from(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], default: str, advice: str
) -> None:
    """With nothing set the library uses the user server: no line says to unset what is not
    set, nor sends the user to an "embedded server" the library would not use."""
    from echoq.address import DEFAULT_SOURCE
    from echoq.translation import lost_server

    for name in ("VALKEY_URL", "ECHOQ_VALKEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(DEFAULT_SOURCE, "source", default)
    line = str(lost_server(redis.Redis(port=1), ConnectionError("Connection refused")))
    assert advice in line and "embedded" not in line and "\n" not in line, line
    for name in ("VALKEY_URL", "ECHOQ_VALKEY"):
        assert (f"unset {name}" in line or f"{name}, or unset it" in line) == (name in env), line
