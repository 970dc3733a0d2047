"""The fence around each learner on the kit's hub, below the browser: what one learner's
processes can reach of another's, and what one learner can take from the machine.

A real hub (``workshop up --count 2``, then ``workshop hub`` as root, each learner a Unix user
of their own), each learner's server started and their kernels run through the hub's and
the server's own APIs with that learner's token, as JupyterLab does; what a learner tries is
run inside their kernel, as their Unix user. Shown here:

* kernels listen on unix sockets in the learner's runtime folder (0700), none on TCP: from
  learner A's kernel, the only TCP port B's user listens on is B's Jupyter server (which the
  hub's proxy reaches, and which answers only with B's hub token); every unix socket B's
  processes listen on (their kernels', their private server's) is a path in B's 0700 home,
  refused to A (EACCES);
* a learner's private server (where their own Lua runs) is a unix socket in their own
  folder, no TCP port, nothing in /tmp; its folder goes when the kernel shuts down, and a
  killed kernel's folder is swept at their next start;
* each learner is capped (memory per process, processes and threads, niceness): an
  allocation over the cap fails in that kernel alone, in one line saying why, while the
  other learner's kernel answers; a fork past the cap fails for that learner alone.

Skipped with the reason where not root or without the proxy; under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from echoq.teaching.workshop.spawner import system_user
from tests.support.browser import ROOT, _free_port, _http_status, poll
from tests.support.hub import (
    READY_S,
    TEST_USERS,
    _cannot,
    _descendants,
    alive,
    close_again,
    learner_python,
    processes_of,
    proxy_path,
    remove_test_users,
    run_in_kernel,
)

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
A, B = "learner-01", "learner-02"
TEACHER = "teacher"  # the instructor: the dashboard service, whose kernels run as root
GiB = 2**30
RUNTIME = Path("/run/echoq")  # each learner's runtime folder is <this>/<uid> (ClassSpawner.runtime_root)


@dataclass
class Learner:
    hub_user: str
    unix_user: str
    uid: int
    home: Path
    token: str


@dataclass
class Hub:
    url: str
    process: subprocess.Popen[bytes]
    folder: Path
    learners: dict[str, Learner]

    def api(self, who: str, method: str, path: str, **kwargs: object):  # noqa: ANN201
        import requests

        headers = {"Authorization": f"token {self.learners[who].token}"}
        return requests.request(method, self.url + path, headers=headers, timeout=60, **kwargs)

    def start_kernel(self, who: str) -> tuple[str, int]:
        """A new kernel of ``who``'s, through their server's API: its id and pid."""
        reply = self.api(who, "POST", f"/user/{who}/api/kernels", json={"name": "python3"})
        assert reply.status_code == 201, (reply.status_code, reply.text, self.log_tail())
        kernel = reply.json()["id"]

        def found() -> int | None:
            for pid in _descendants(self.process.pid):
                with contextlib.suppress(OSError):
                    if f"kernel-{kernel}.json".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                        return pid
            return None

        pid = poll(found, READY_S, f"{who}'s kernel {kernel} to start")

        # Its hb socket bound (Jupyter's liveness ping: a client that gets no answer takes the
        # kernel for dead), in the learner's runtime folder: the last of its sockets it binds.
        beat = RUNTIME / str(self.learners[who].uid) / "jupyter" / f"kernel-{kernel}-ipc-5"
        poll(beat.exists, READY_S, f"{who}'s kernel {kernel} to bind its hb socket")
        return kernel, pid

    def server_ready(self, who: str) -> bool:
        return bool(self.api(who, "GET", f"/hub/api/users/{who}").json()["servers"].get("", {}).get("ready"))

    def log_tail(self) -> str:
        """The end of the hub's log (its learners' servers log there too): what a failure shows."""
        log = self.folder / "hub" / "hub.log"
        return log.read_text(errors="replace")[-4000:] if log.exists() else "(no hub.log)"

    def stop_kernel(self, who: str, kernel: str) -> None:
        reply = self.api(who, "DELETE", f"/user/{who}/api/kernels/{kernel}")
        assert reply.status_code == 204, (reply.status_code, reply.text)

    def server_port(self, who: str) -> int:
        """The TCP port of ``who``'s Jupyter server, from its environment (as root reads it)."""
        for pid in processes_of(self.learners[who].uid):
            with contextlib.suppress(OSError):
                for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    if entry.startswith(b"JUPYTERHUB_SERVICE_URL="):
                        return int(entry.decode().split(":")[-1].split("/")[0])
        raise AssertionError(f"no Jupyter server of {who}'s found")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """Two learners' servers on the kit's hub, each as their own Unix user."""
    if os.geteuid() != 0:
        _cannot("the class hub runs each learner as a Unix user of their own, which needs root")
    proxy_path()
    remove_test_users()  # those a killed session left behind
    prefix = f"{TEST_USERS}{os.getpid()}-f-"  # not the guide's: both may run in one session
    shared = Path(tempfile.mkdtemp(prefix="echoq-fence-"))
    opened: list[tuple[Path, int]] = []
    tmp = tmp_path_factory.mktemp("fence")
    folder = tmp / "class"
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_WORKSHOP", "ECHOQ_LEARNER")}
    process = None
    try:
        shared.chmod(0o755)
        homes = shared / "home"
        homes.mkdir(mode=0o755)
        python = learner_python(shared / "python", opened)
        workshop = [PYTHON, "-m", "echoq.teaching", "workshop"]
        up = subprocess.run([*workshop, "up", "--dir", str(folder), "--count", "2", "--instructor", TEACHER],
                            capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)  # fmt: skip
        assert up.returncode == 0, up.stderr
        port = _free_port()
        log = tmp / "hub.out"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*workshop, "hub", "--dir", str(folder), "--port", str(port), "--homes", str(homes),
                 "--user-prefix", prefix, "--learner-python", python],  # fmt: skip
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, cwd=ROOT,
            )  # fmt: skip
        deadline = time.monotonic() + READY_S
        while "is up at" not in log.read_text(errors="replace"):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        config = folder / "hub" / "jupyterhub_config.py"
        learners = {}
        for who in (A, B, TEACHER):
            made = subprocess.run([PYTHON, "-m", "jupyterhub", "token", who, "-f", str(config)],
                                  capture_output=True, text=True, env=env, timeout=120, cwd=config.parent)  # fmt: skip
            assert made.returncode == 0, made.stderr
            entry = pwd.getpwnam(system_user(who, prefix) if who != TEACHER else "root")  # no server of their own
            learners[who] = Learner(who, entry.pw_name, entry.pw_uid, Path(entry.pw_dir), made.stdout.split()[-1])
        klass = Hub(f"http://127.0.0.1:{port}", process, folder, learners)
        for who in (A, B):
            reply = klass.api(who, "POST", f"/hub/api/users/{who}/server")
            assert reply.status_code in (201, 202), (reply.status_code, reply.text, klass.log_tail())
        for who in (A, B):
            poll(lambda who=who: klass.server_ready(who), READY_S, f"{who}'s server to start")
        assert _http_status(klass.url + "/hub/api") == 200
        yield klass
    finally:
        if process is not None:
            for pid in _descendants(process.pid) if process.poll() is None else []:
                with contextlib.suppress(ProcessLookupError):
                    if alive(pid):
                        os.kill(pid, signal.SIGKILL)
            if process.poll() is None:
                process.kill()
            process.wait()
        if (folder / "workshop.json").exists():
            subprocess.run([PYTHON, "-m", "echoq.teaching", "workshop", "down", "--purge", "--dir", str(folder)],
                           env=env, timeout=60, capture_output=True)  # fmt: skip
        for entry in [e for e in pwd.getpwall() if e.pw_name.startswith(prefix)]:  # the hub was killed, not stopped
            shutil.rmtree(RUNTIME / str(entry.pw_uid), ignore_errors=True)
        remove_test_users(prefix)
        shutil.rmtree(shared, ignore_errors=True)
        close_again(opened)


# ---------------------------------------------------------------- what a learner's processes listen on


def _socket_inodes(uid: int) -> set[int]:
    """The inodes of every socket a process of ``uid`` holds (as root reads them)."""
    found = set()
    for pid in processes_of(uid):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        found.add(int(target[8:-1]))
    return found


def listening(uid: int) -> dict[str, list]:
    """What the processes of ``uid`` listen on: TCP ports (v4 and v6), unix socket paths
    (abstract ones with a leading '@'), and bound UDP ports."""
    inodes = _socket_inodes(uid)
    tcp, udp, unix = [], [], []
    for table, kind in (("tcp", tcp), ("tcp6", tcp), ("udp", udp), ("udp6", udp)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if inode in inodes and (state == "0A" or table.startswith("udp")):  # 0A: LISTEN
                kind.append(int(local.rsplit(":", 1)[1], 16))
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        flags, inode = int(fields[3], 16), int(fields[6])
        if inode in inodes and flags & 0x10000 and len(fields) > 7:  # __SO_ACCEPTCON: listening
            unix.append(fields[7])
    return {"tcp": sorted(set(tcp)), "udp": sorted(set(udp)), "unix": sorted(set(unix))}


# Run in learner A's kernel: every TCP port B's Unix user listens on, found as any local user
# finds them (/proc/net/tcp, by uid), each connected to; then each unix socket of B's, each
# connected to. What happened, in one word each.
REACH = """
import json, os, socket
def ports_of(uid):
    found = set()
    for table in ("tcp", "tcp6"):
        for line in open(f"/proc/net/{table}").read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[7]) == uid:
                found.add(int(f[1].rsplit(":", 1)[1], 16))
    return sorted(found)
def attempt(family, address):
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        try:
            s.connect(address)
            return "connected"
        except PermissionError:
            return "EACCES"
        except OSError as exc:
            return type(exc).__name__
tcp = {p: attempt(socket.AF_INET, ("127.0.0.1", p)) for p in ports_of(UID)}
unix = {p: attempt(socket.AF_UNIX, p) for p in PATHS}
print(json.dumps({"me": os.getuid(), "tcp": tcp, "unix": unix}))
"""

PRIVATE = """
from echoq.teaching import learner
client = learner.own_lua_client()
assert client.ping()
print(learner._private.socket)
"""


def test_from_a_learners_kernel_the_other_learners_only_tcp_port_is_their_jupyter_server_and_their_sockets_refused(
    hub: Hub,
) -> None:
    a, b = hub.learners[A], hub.learners[B]
    _kernel_a, pid_a = hub.start_kernel(A)
    kernel_b, pid_b = hub.start_kernel(B)
    private = Path(run_in_kernel(pid_b, PRIVATE).strip())  # B's own Lua server, running
    # What every process of B's listens on, as root sees it: one TCP port, their Jupyter
    # server's (the hub's proxy reaches it; it answers only with B's hub token); every unix
    # socket a path inside B's home (mode 0700): their kernel's five and its fork pipe,
    # their private server's; no abstract socket (those have no permissions), no UDP.
    seen = listening(b.uid)
    assert seen["tcp"] == [hub.server_port(B)], seen
    assert seen["udp"] == [], seen
    runtime = RUNTIME / str(b.uid)
    assert seen["unix"] and all(Path(p).is_relative_to(runtime) for p in seen["unix"]), seen
    assert str(private) in seen["unix"] and private.is_relative_to(runtime / "echoq"), private
    kernel_files = [p for p in seen["unix"] if f"kernel-{kernel_b}-ipc-" in p]
    assert len(kernel_files) == 6, seen  # shell, iopub, stdin, control, hb, the fork pipe
    assert runtime.stat().st_mode & 0o777 == 0o700 and runtime.stat().st_uid == b.uid
    assert RUNTIME.stat().st_uid == 0 and RUNTIME.stat().st_mode & 0o777 == 0o755
    connection = json.loads(next(Path(kernel_files[0]).parent.glob(f"kernel-{kernel_b}.json")).read_text())
    assert connection["transport"] == "ipc", connection
    # From A's kernel, as A's Unix user: B's one TCP port connects (an HTTP server that wants
    # B's token: tried below), every unix socket of B's is refused.
    printed = run_in_kernel(pid_a, f"UID = {b.uid}\nPATHS = {seen['unix']!r}\n{REACH}")
    said = json.loads(printed.strip().splitlines()[-1])
    assert said["me"] == a.uid
    assert said["tcp"] == {str(hub.server_port(B)): "connected"}, said
    assert set(said["unix"].values()) == {"EACCES"}, said
    import requests

    status = requests.get(f"http://127.0.0.1:{hub.server_port(B)}/user/{B}/api/kernels", timeout=30).status_code
    assert status == 403, status  # no token, or A's: refused
    other = requests.get(f"http://127.0.0.1:{hub.server_port(B)}/user/{B}/api/kernels", timeout=30,
                         headers={"Authorization": f"token {a.token}"}).status_code  # fmt: skip
    assert other == 403, other
    # Nothing of either learner's in /tmp: no private server's folder, no password file.
    assert [p for p in Path("/tmp").iterdir() if p.lstat().st_uid in (a.uid, b.uid)] == []
    hub.stop_kernel(B, kernel_b)


def test_a_private_servers_folder_goes_with_its_kernel_and_a_killed_kernels_at_the_next_start(hub: Hub) -> None:
    b = hub.learners[B]
    kernel, pid = hub.start_kernel(B)
    first = Path(run_in_kernel(pid, PRIVATE).strip()).parent
    server = int((first / "server.pid").read_text())
    hub.stop_kernel(B, kernel)  # as "Shut Down Kernel" does
    poll(lambda: not first.exists() and not alive(server), 30, "the private server and folder to go")
    # A kernel killed outright leaves its folder (its server dies with it); the next private
    # server of the same learner removes it.
    kernel, pid = hub.start_kernel(B)
    second = Path(run_in_kernel(pid, PRIVATE).strip()).parent
    server = int((second / "server.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    poll(lambda: not alive(server), 30, "the killed kernel's private server to die with it")
    assert second.exists()
    _kernel, pid = hub.start_kernel(B)  # the learner's next kernel
    third = Path(run_in_kernel(pid, PRIVATE).strip()).parent
    assert not second.exists() and third.exists()
    # Whatever else is there is a live kernel's (another test's kernel of B's may hold one).
    others = [p.name for p in third.parent.iterdir() if p.is_dir() and p != third]
    assert all(alive(int(name.split("-", 1)[0])) for name in others), others
    assert third.stat().st_uid == b.uid and third.stat().st_mode & 0o777 == 0o700


BIG = "big = bytearray(3 << 30)"  # 3 GiB: over the 2 GiB cap; refused before a page is touched
FORKS = """
import subprocess
held, refused = [], ""
try:
    for _ in range(400):
        held.append(subprocess.Popen(["sleep", "60"]))
except OSError as exc:
    refused = f"{type(exc).__name__}: {exc.strerror}"
for p in held:
    p.kill()
    p.wait()
print(len(held), refused)
"""


def test_a_kernel_over_its_memory_cap_is_refused_alone_in_one_line_and_forks_past_the_cap_fail_alone(hub: Hub) -> None:
    _ka, pid_a = hub.start_kernel(A)
    _kb, pid_b = hub.start_kernel(B)
    limits = Path(f"/proc/{pid_a}/limits").read_text()
    assert f"Max data size             {2 * GiB}" in limits and "Max processes             256" in limits, limits
    assert int(Path(f"/proc/{pid_a}/stat").read_text().rsplit(")", 1)[1].split()[16]) == 10  # its nice
    said = run_in_kernel(pid_a, BIG)
    assert said.startswith("MemoryError: this kernel reached its memory cap (2.0 GiB") and "\n" not in said, said
    started = time.monotonic()
    assert run_in_kernel(pid_b, "print(6 * 7)").strip() == "42"  # B's kernel answers meanwhile
    took = time.monotonic() - started
    assert took < 10
    assert run_in_kernel(pid_a, "print('still here')").strip() == "still here"  # and A's lives on
    # The same line once a lesson's setup has made its errors one line each (its own handler).
    said = run_in_kernel(pid_a, f"from echoq.teaching import course\ncourse.one_line_errors()\n{BIG}")
    assert said.startswith("MemoryError: this kernel reached its memory cap (2.0 GiB") and "\n" not in said, said
    held, refused = run_in_kernel(pid_a, FORKS).strip().split(" ", 1)
    assert 100 < int(held) < 256 and refused.startswith("BlockingIOError"), (held, refused)
    assert run_in_kernel(pid_b, "import subprocess; print(subprocess.run(['true']).returncode)").strip() == "0"


def test_a_learners_runtime_folder_goes_when_their_server_stops(hub: Hub) -> None:
    b = hub.learners[B]
    runtime = RUNTIME / str(b.uid)
    assert runtime.is_dir()
    reply = hub.api(B, "DELETE", f"/hub/api/users/{B}/server")
    assert reply.status_code in (202, 204), (reply.status_code, reply.text)
    poll(lambda: not hub.server_ready(B) and not runtime.exists(), 60, "B's server and runtime folder to go")
    poll(lambda: processes_of(b.uid) == [], 30, "B's kernels and private servers to end with the server")


def test_the_dashboards_kernel_listens_on_no_tcp_port_either(hub: Hub) -> None:
    """The instructor's dashboard (Voila, a service of the hub, as root): a learner who could
    subscribe to its kernel would see every learner's row."""
    before = set(_descendants(hub.process.pid))
    page = hub.api(TEACHER, "GET", "/services/echoq-dashboard/")  # Voila runs the page in a kernel
    assert page.status_code == 200, (page.status_code, page.text[-500:])

    def dashboard_kernel() -> int | None:
        for pid in set(_descendants(hub.process.pid)) - before:
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"echoq.teaching.workshop.kernel" in argv and Path(f"/proc/{pid}").stat().st_uid == 0:
                    return pid
        return None

    pid = poll(dashboard_kernel, READY_S, "the dashboard's kernel (the kit's, on unix sockets)")
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    tcp = [line.split() for t in ("tcp", "tcp6") for line in Path(f"/proc/net/{t}").read_text().splitlines()[1:]]
    assert [f for f in tcp if f[3] == "0A" and int(f[9]) in inodes] == []  # it listens on no TCP port
