"""The class's watchdog: what one learner can do to everyone's server, noticed and undone.

Valkey lets any user who may run EVAL stall the whole server, and lets any user open as
many connections as the server allows. ACL rules cannot stop either. The watchdog (``python
-m echoq.teaching workshop watch``, started in the background by ``workshop up``) holds one admin
connection to the class server, PINGs it every ``tick_s`` (0.1 s) and looks at its clients
and its Lua heap every ``look_s`` (1 s):

* **a script that never ends** -- the server answers ``BUSY`` to everyone once a script
  has run ``busy-reply-threshold`` ms (the class's setting, 1 s): the watchdog sends
  ``SCRIPT KILL`` (learners may not), then reads the slow log and ``CLIENT LIST`` to say
  whose script it was;
* **a script that wrote, then never ends** -- ``SCRIPT KILL`` answers ``UNKILLABLE`` (its
  writes cannot be undone): the watchdog restarts a server ``up`` started (``SHUTDOWN
  NOSAVE``: the script's writes are never kept, then ``up`` again: same port, password,
  users and limits, on the append-only file); a server it was lent it cannot restart,
  and says so;
* **too many connections** -- Valkey has no per-user limit: the watchdog closes a learner's
  newest connections beyond ``per-learner-connections`` (``CLIENT KILL ID``), and the
  server's ``maxclients`` is set to room for every learner's share;
* **a huge Lua heap** -- Valkey has no cap on the Lua heap, which ``maxmemory`` does not
  count: above ``lua-memory`` the watchdog flushes it (``SCRIPT FLUSH``, which frees the Lua
  interpreter) and loads the kit's scripts again;
* **a flood of calls** -- Valkey serves one command at a time, so one learner sending
  tens of thousands of calls a second makes everyone wait. ``CLIENT LIST``'s ``tot-cmds``
  counts every command a connection ran, those inside the library's scripts too (a job
  enqueued and worked is about 30 of them for 2 or 3 calls), so it only picks whom to
  look at: a learner whose connections ran over ``FLOOD_PER_S`` commands a second is
  watched for ``COUNT_S`` with ``MONITOR``, which tells a call from a script's command
  (``[0 lua]``), at most every ``RECOUNT_S``; a learner sending over ``FLOOD_CALLS_PER_S``
  calls a second is named when the flood starts and again when it ends, with how long
  and how many (the library's Worker and producer at full speed send far fewer: see
  docs/WORKSHOP.md);
* **a server that died** -- a server ``up`` started is started again.

The class's settings are read again from ``workshop.json`` whenever ``up`` rewrote it: a
new ``--per-learner-connections`` or ``--lua-memory``, or learners added to the roster, are
applied at the next look, and said.

Each event is one line, also appended to ``watch.log`` in the workshop folder, where the
dashboard and ``workshop status`` read it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from ...errors import EchoqError
from .admin import STATE_FILE, Workshop, _wait_gone, bytes_of, reload_scripts, up
from .html import text

__all__ = ["LOG_FILE", "Watchdog", "last_events"]

LOG_FILE = "watch.log"
REPEAT_S = 10.0  # the same event again within this is counted, not written again
AUTH_GRACE_S = 3  # a connection that has not authenticated after this long is closed
CROWDED, ROOMY = 0.9, 0.8  # of maxclients: idle learners' connections closed from the first down to the second
IDLE_S = 300.0  # how long a learner's connection must have been idle to be closed when crowded
SCRIPT_COMMANDS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")
FLOOD_PER_S = 5_000  # commands run a second (scripts' included) past which a learner's calls are counted
FLOOD_CALLS_PER_S = 10_000  # calls sent a second past which a learner is named (docs/WORKSHOP.md: measured)
COUNT_S = 0.25  # how long MONITOR counts calls, on the server's clock
RECOUNT_S = 5.0  # a learner's calls are counted again at most this often while their commands stay high
WATCHED_SETTINGS = ("per-learner-connections", "lua-memory", "busy-reply-threshold", "maxmemory", "maxclients")


@dataclass
class Event:
    at: float  # time.time()
    what: str  # one line

    def line(self) -> str:
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.what}"


def last_events(folder: Path, count: int = 10) -> list[str]:
    """The watchdog's last ``count`` lines in ``folder`` (none if it never wrote)."""
    try:
        lines = (folder / LOG_FILE).read_bytes().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return lines[-count:]


class Watchdog:
    """Watches the class server of ``workshop`` (see the module's docstring)."""

    def __init__(
        self,
        workshop: Workshop,
        *,
        tick_s: float = 0.1,
        look_s: float = 1.0,
        on_event: Callable[[str], None] | None = None,
        log: bool = True,
        idle_s: float = IDLE_S,
    ) -> None:
        self.workshop = workshop
        self.tick_s = tick_s  # how often it PINGs (a BUSY server is noticed this fast)
        self.look_s = look_s  # how often it reads CLIENT LIST and the Lua heap (heavier)
        self.idle_s = idle_s
        self._looked = float("-inf")
        self.on_event = on_event
        self.log = log
        self.events: list[Event] = []
        self.restarts = 0
        self._admin: redis.Redis | None = None
        self._clients: list[dict] = []  # CLIENT LIST at the last look
        self._repeats = 0  # times the last event came again, not yet written
        self._repeat_since = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._read_at = self._state_mtime()  # workshop.json as last read
        self._sent: dict[str, int] | None = None  # connection id -> its tot-cmds at the last look
        self._sent_at = 0.0
        self._flooding: dict[str, tuple[float, int]] = {}  # learner -> (since, commands so far)
        self._counted: dict[str, tuple[float, float]] = {}  # learner -> (when, calls a second counted then)

    # -- settings ------------------------------------------------------------------------

    @property
    def per_learner(self) -> int:
        return int(self.workshop.settings.get("per-learner-connections", 100))

    @property
    def lua_cap(self) -> int:
        return bytes_of(self.workshop.settings.get("lua-memory", "128mb"))

    # -- the loop ----------------------------------------------------------------------------

    def start(self) -> Watchdog:
        self._thread = threading.Thread(target=self.run, name="echoq-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._admin is not None:
            self._admin.close()

    def run(self) -> None:
        """Tick until stopped; no failure ends the loop (each is said, then tried again)."""
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - a watchdog that dies protects no one
                self.say(f"watchdog: {type(exc).__name__}: {_first_line(exc)}; trying again")
                self._drop()
            self._stop.wait(self.tick_s)

    def tick(self) -> None:
        self._flush_repeats(due=True)
        try:
            admin = self._connection()
            admin.ping()
            if time.monotonic() - self._looked < self.look_s:
                return
            self._looked = time.monotonic()
            self._settings()
            clients = admin.client_list()
            self._clients = clients
            self._connections(admin, clients)
            self._floods(admin, clients)
            self._lua_heap(admin)
        except redis.ResponseError as exc:
            if not str(exc).startswith("BUSY"):
                raise
            self._busy(self._connection())
        except (redis.ConnectionError, redis.TimeoutError):
            self._drop()
            self._gone()

    # -- each attack -------------------------------------------------------------------------

    def _busy(self, admin: redis.Redis) -> None:
        try:
            admin.script_kill()
        except redis.ResponseError as exc:
            if str(exc).startswith("NOTBUSY"):
                return  # it ended between our two commands
            if str(exc).startswith("UNKILLABLE"):
                self._unkillable()
                return
            raise
        who, what, ran_ms = self._whose_script(admin)
        self.say(
            f"BUSY: {who}'s script ran {ran_ms} ms and held the whole class; ended it with SCRIPT KILL "
            f"({what}); the class goes on"
        )

    def _whose_script(self, admin: redis.Redis) -> tuple[str, str, str]:
        """From the slow log (the script just killed is its newest script entry) and CLIENT
        LIST (the user of the connection at that address): who, the command, how long."""
        users = {c.get("addr"): c.get("user") for c in _once_not_busy(admin.client_list)}
        for entry in admin.slowlog_get(16):
            command = _text(entry.get("command", b""))
            if command.split(" ", 1)[0].lower() in SCRIPT_COMMANDS:
                address = _text(entry.get("client_address", b""))
                who = users.get(address) or f"a connection from {address} that has gone since"
                return who, _short(command), str(int(entry.get("duration", 0)) // 1000)
        return "an unknown user", "no script in the slow log", "?"

    def _unkillable(self) -> None:
        suspects = sorted(
            {c.get("user", "?") for c in self._clients if c.get("cmd", "").split("|")[0] in SCRIPT_COMMANDS}
        )
        who = (
            f"the user(s) whose connection last ran a script at the watchdog's last look: {', '.join(suspects)}"
            if suspects
            else "not known (a server in that state answers nothing but SCRIPT KILL and SHUTDOWN)"
        )
        if not self.workshop.started:
            self.say(
                "BUSY and UNKILLABLE: a script wrote, then never ended; only a restart ends it, and this "
                f"server was lent to the workshop (--url): restart it yourself. Who: {who}"
            )
            return
        admin = self._connection()
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
            admin.shutdown(nosave=True)  # its writes are dropped: the script never ran, as far as anyone sees
        self._drop()
        _wait_gone(self.workshop.server_pid)
        self._restart(
            "BUSY and UNKILLABLE: a script wrote, then never ended (SCRIPT KILL refuses it); stopped the server "
            f"without keeping its writes. Who: {who}"
        )

    def _gone(self) -> None:
        """The server does not answer: a server `up` started and that is not running any more is started again."""
        if not self.workshop.started:
            self.say("the class server does not answer; it was lent to the workshop (--url): start it yourself")
            return
        pid = self.workshop.server_pid
        if pid and _running(pid):
            return  # alive but slow (or starting): look again next tick
        self._restart("the class server had stopped")

    def _restart(self, why: str) -> None:
        workshop, lines = up(self.workshop.dir)
        self.workshop = workshop
        self._read_at = self._state_mtime()  # its own rewrite of workshop.json: nothing new in it
        self._sent = None  # a new server: its connections counted afresh
        if lines and lines[0].startswith("the class server is already up"):
            return  # someone restarted it meanwhile (`workshop restart`, `up`): they said so
        self.restarts += 1
        limits = ", ".join(f"{k} {workshop.settings[k]}" for k in ("maxmemory", "busy-reply-threshold", "maxclients"))
        self.say(f"{why}; restarted it on port {workshop.port} with the class's users and limits ({limits})")

    def _connections(self, admin: redis.Redis, clients: list[dict]) -> None:
        if self.workshop.started:  # a lent server's other users are its owner's business
            self._unauthenticated(admin, clients)
        mine: dict[str, list[int]] = {}
        for client in clients:
            user = client.get("user", "")
            if user in self.workshop.learners:
                mine.setdefault(user, []).append(int(client["id"]))
        for user, ids in mine.items():
            if len(ids) <= self.per_learner:
                continue
            excess = sorted(ids)[self.per_learner :]  # the newest: the ones opened last
            pipe = admin.pipeline(transaction=False)
            for client_id in excess:
                pipe.execute_command("CLIENT", "KILL", "ID", client_id)
            pipe.execute(raise_on_error=False)
            self.say(
                f"{user} had {len(ids)} connections (the class allows {self.per_learner} per learner): "
                f"closed their {len(excess)} newest"
            )
        self._idle_when_crowded(admin, clients)

    def _idle_when_crowded(self, admin: redis.Redis, clients: list[dict]) -> None:
        """A server near ``maxclients`` (``CROWDED`` of it) takes few new connections: the
        learners' connections idle for ``idle_s`` or more are closed, the longest idle first,
        until it is back under ``ROOMY`` of it (the kit's clients reconnect when they next
        need the server). Who lost how many is said in one line."""
        cap = int(self.workshop.settings.get("maxclients", 0) or 0)
        if not cap or len(clients) < CROWDED * cap:
            return
        idle = sorted(
            (c for c in clients if c.get("user") in self.workshop.learners and int(c.get("idle", 0)) >= self.idle_s),
            key=lambda c: -int(c.get("idle", 0)),
        )[: max(0, len(clients) - int(ROOMY * cap))]
        if not idle:
            return
        whose = _close(admin, idle, lambda c: str(c["user"]))
        self.say(
            f"the server held {len(clients)} of its {cap} connections: closed {len(idle)} idle for "
            f"{self.idle_s:g} s or more ({', '.join(f'{u} {n}' for u, n in sorted(whose.items()))})"
        )

    def _unauthenticated(self, admin: redis.Redis, clients: list[dict]) -> None:
        """Close connections still not authenticated ``AUTH_GRACE_S`` after they opened (or
        back to that state by RESET): they hold a place under ``maxclients`` and are nobody's.
        Such a connection is the server's ``default`` user without a name; every connection of
        the workshop's own tools as that user is named ``echoq-...``."""
        stale = [
            c for c in clients
            if c.get("user") == "default" and not str(c.get("name", "")).startswith("echoq-")
            and int(c.get("age", 0) or 0) >= AUTH_GRACE_S
        ]  # fmt: skip
        if not stale:
            return
        sources = _close(admin, stale, lambda c: str(c.get("addr", "?")).rsplit(":", 1)[0])
        shown = ", ".join(f"{host}: {n}" for host, n in sorted(sources.items())[:5])
        self.say(
            f"closed {len(stale)} connection(s) that had not authenticated within {AUTH_GRACE_S} s "
            f"(or had RESET their login), by address: {shown}"
        )

    def _state_mtime(self) -> float:
        try:
            return (self.workshop.dir / STATE_FILE).stat().st_mtime
        except OSError:
            return 0.0

    def _settings(self) -> None:
        """Read the class's settings and roster again when ``up`` (or a restart) rewrote
        ``workshop.json``; say what changed that the watchdog applies."""
        mtime = self._state_mtime()
        if mtime == self._read_at:
            return
        self._read_at = mtime
        try:
            now = Workshop.load(self.workshop.dir)
        except EchoqError:
            return  # being rewritten, or gone (`down`): the next look tries again
        before = self.workshop
        changed = [
            f"{name} {before.settings.get(name, '-')} -> {now.settings.get(name, '-')}"
            for name in WATCHED_SETTINGS
            if before.settings.get(name) != now.settings.get(name)
        ]
        added = sorted(set(now.learners) - set(before.learners))
        if added:
            changed.append(f"{len(added)} learner(s) added ({', '.join(added[:5])}{', ...' if len(added) > 5 else ''})")
        self.workshop = now
        if changed:
            self.say(f"the class's settings changed (`workshop up`): {'; '.join(changed)}; applied from this look on")

    def _floods(self, admin: redis.Redis, clients: list[dict]) -> None:
        """Name a learner who sends over ``FLOOD_CALLS_PER_S`` calls a second (the server runs
        one command at a time: theirs make everyone wait), once when it starts and once when
        it ends. Whom to count: learners whose connections ran over ``FLOOD_PER_S`` commands
        a second between two looks (``tot-cmds``; a server without it, Redis 7, is not watched)."""
        counts = {str(c.get("id")): int(c["tot-cmds"]) for c in clients if str(c.get("tot-cmds", "")).isdigit()}
        at = time.monotonic()
        before, since = self._sent, self._sent_at
        self._sent, self._sent_at = counts, at
        if before is None or not counts or at <= since:
            return
        sent: dict[str, int] = {}
        for client in clients:
            user, cid = client.get("user", ""), str(client.get("id"))
            if user in self.workshop.learners and cid in counts:
                sent[user] = sent.get(user, 0) + counts[cid] - before.get(cid, 0)
        seconds = at - since
        busy = {user for user, n in sent.items() if n / seconds > FLOOD_PER_S}
        due = [u for u in sorted(busy) if at - self._counted.get(u, (float("-inf"), 0.0))[0] >= RECOUNT_S]
        if due:
            calls, span = self._count_calls(admin, clients)
            for user in due:
                self._counted[user] = (at, calls.get(user, 0) / span)
        for user in sorted(busy | set(self._flooding)):
            rate = self._counted[user][1] if user in busy else 0.0
            if rate > FLOOD_CALLS_PER_S:
                started, total = self._flooding.get(user, (at - seconds, 0))
                if user not in self._flooding:
                    others = sum(n for u, n in sent.items() if u != user)
                    self.say(
                        f"{user} is flooding the class server: {rate:,.0f} calls a second (counted over "
                        f"{COUNT_S} s); their connections ran {sent[user]:,} commands in {seconds:.1f} s (the class's "
                        f"others together {others:,}); everyone's commands wait behind theirs: talk to them "
                        "(as the admin, `ACL SETUSER <learner> off` stops them)"
                    )
                self._flooding[user] = (started, total + sent.get(user, 0))
            elif user in self._flooding:
                started, total = self._flooding.pop(user)
                self.say(f"{user}'s flood ended: {total:,} commands in {at - started:.1f} s")

    def _count_calls(self, admin: redis.Redis, clients: list[dict]) -> tuple[dict[str, int], float]:
        """Each learner's calls over ``COUNT_S`` of the server's clock, from ``MONITOR`` (a
        line per command the server runs, those inside a script marked ``lua``: not counted),
        and the seconds they were counted over (less when the lines came faster than they
        were read). The connection is closed after, which ends MONITOR."""
        users = {str(c.get("addr")): str(c.get("user")) for c in clients}
        calls: dict[str, int] = {}
        first: float | None = None
        last = 0.0
        give_up = time.monotonic() + 10 * COUNT_S  # lines may come faster than they are read: read on
        with admin.monitor() as lines:
            while time.monotonic() < give_up and lines.connection.can_read(timeout=COUNT_S):
                line = lines.next_command()
                when = float(line.get("time", 0))
                first = when if first is None else first
                if when > first + COUNT_S:
                    break
                last = when
                if line.get("client_type") == "lua":
                    continue  # a command a script ran, not a call
                user = users.get(f"{line.get('client_address')}:{line.get('client_port')}")
                if user in self.workshop.learners:
                    calls[user] = calls.get(user, 0) + 1
        span = last - first if first is not None and last - first > COUNT_S / 10 else COUNT_S
        return calls, span

    def _lua_heap(self, admin: redis.Redis) -> None:
        memory = admin.info("memory")
        heap = int(memory.get("used_memory_vm_eval", memory.get("used_memory_lua", 0)))
        if heap <= self.lua_cap:
            return
        who, what, _ms = self._whose_script(admin)
        reload_scripts(admin)
        after = int(admin.info("memory").get("used_memory_vm_eval", 0))
        self.say(
            f"Lua heap at {heap // 2**20} MiB (the class allows {self.lua_cap // 2**20}): flushed it with "
            f"SCRIPT FLUSH, the kit's scripts loaded again ({after // 2**20} MiB now); "
            f"the last slow script was {who}'s ({what})"
        )

    # -- plumbing --------------------------------------------------------------------------------

    def _connection(self) -> redis.Redis:
        if self._admin is None:
            # One connection, opened once and kept: a server full of a learner's connections
            # (maxclients) takes no new one, and one answering BUSY takes no PING.
            self._admin = self.workshop.admin(ping=False)
            self._admin.connection_pool.connection_kwargs["socket_timeout"] = 5.0
            with contextlib.suppress(redis.ResponseError):  # BUSY: the name only helps CLIENT LIST readers
                self._admin.client_setname("echoq-watchdog")
        return self._admin

    def _drop(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None

    def say(self, what: str) -> None:
        """One event: one line in the log, whatever a learner put into its words (control
        characters, a newline, a terminal escape: dropped, so no line can be forged). The same
        event again within ``REPEAT_S`` is counted, and the count written as a line of its own
        (when another event comes, or ``REPEAT_S`` after it began): none is dropped."""
        what = text(what, longest=None)
        now = time.time()
        last = self.events[-1] if self.events else None
        if last is not None and last.what == what and now - self._repeat_since < REPEAT_S:
            self._repeats += 1
            return
        self._flush_repeats()
        self._write(Event(now, what))
        self._repeat_since = now

    def _flush_repeats(self, *, due: bool = False) -> None:
        """Write how often the last event came again (``due``: only once ``REPEAT_S`` has passed)."""
        if not self._repeats or (due and time.time() - self._repeat_since < REPEAT_S):
            return
        count, self._repeats = self._repeats, 0
        self._write(Event(time.time(), f"(the line above {count} more time(s) since {_clock(self._repeat_since)})"))
        self._repeat_since = float("-inf")

    def _write(self, event: Event) -> None:
        # The log first: whoever sees the event in ``events`` can read it in the log too.
        if self.log:
            with contextlib.suppress(OSError):  # the instructor's alone, mode 0600 from its first byte
                fd = os.open(self.workshop.dir / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, (event.line() + "\n").encode())
                finally:
                    os.close(fd)
        self.events.append(event)
        del self.events[:-200]
        if self.on_event is not None:
            self.on_event(event.line())


def _close(admin: redis.Redis, clients: list[dict], by: Callable[[dict], str]) -> dict[str, int]:
    """Close ``clients`` (CLIENT KILL ID, in one round trip); how many, by ``by`` of each."""
    pipe = admin.pipeline(transaction=False)
    counts: dict[str, int] = {}
    for client in clients:
        pipe.execute_command("CLIENT", "KILL", "ID", client["id"])
        counts[by(client)] = counts.get(by(client), 0) + 1
    pipe.execute(raise_on_error=False)
    return counts


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def _once_not_busy(read: Callable[[], list[dict]], timeout_s: float = 2.0) -> list[dict]:
    """``read()`` once the server is past the script just killed: SCRIPT KILL answers at
    once, but the script stops at its next check, and until then the server says BUSY."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return read()
        except redis.ResponseError as exc:
            if not str(exc).startswith("BUSY") or time.monotonic() > deadline:
                raise
        time.sleep(0.005)


def _running(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        return not finished
    except ChildProcessError:  # not our child: does it exist?
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _text(value: object) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _short(command: str, longest: int = 80) -> str:
    return command if len(command) <= longest else command[: longest - 1] + "…"


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def main(folder: str | None = None, *, tick_s: float = 0.1) -> int:
    """``python -m echoq.teaching workshop watch``: watch until interrupted, printing each event."""
    if not 0.01 <= tick_s <= 10:
        print(f"echoq: --tick must be from 0.01 to 10 seconds, got {tick_s:g}", file=sys.stderr)
        return 2
    try:
        workshop = Workshop.load(folder)
    except EchoqError as exc:
        print(f"echoq: {exc}")
        return 2
    dog = Watchdog(workshop, tick_s=tick_s, on_event=lambda line: print(line, flush=True))
    dog.say(
        f"watching the class server at {workshop.host}:{workshop.port} every {tick_s:g} s "
        f"(scripts over {workshop.settings.get('busy-reply-threshold', '?')} ms, more than "
        f"{dog.per_learner} connections per learner, a Lua heap over {workshop.settings.get('lua-memory', '?')})"
    )
    try:
        dog.run()
    except KeyboardInterrupt:
        pass
    return 0
