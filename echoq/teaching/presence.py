"""A learner's kernel says it is alive: a key with a deadline, written again every second.

On a class server (a learner id and a ``VALKEY_URL``), the first lesson started
(:func:`echoq.teaching.course.start`) or class worker starts one daemon thread in
the kernel. Every ``PULSE_S`` it sets ``emq:{<learner>.course}:alive`` with a time to live of
``TTL_MS``: the instructor's dashboard says "kernel alive" only while that key lives, so a
kernel killed with ``kill -9`` (or a server the hub stopped) shows as gone within
``TTL_MS`` -- nothing has to say goodbye. The key's value says which process, on which
host, in which lesson. The same pulse writes into the learner's progress record when the
kernel first connected (``connected``) and when the learner last did something
(``active``, server ms): ran a cell (IPython's ``pre_run_cell`` counts them; the cell that
starts a kernel's pulse is one), or clicked in a lab (:func:`touch`).

When the class server stops answering for ``GONE_S`` -- the instructor ran ``workshop
down`` (the learner's user is gone: the server refuses the password) or the server stopped
-- the next cell the learner runs prints one line saying so and what to do, instead of
leaving them with a ``VALKEY_URL`` that leads nowhere.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
from dataclasses import dataclass

import redis

from ..clock import ServerClock
from ..keyspace import Keyspace, check_namespace
from . import learner as learners
from .progress import key as progress_key

__all__ = ["PULSE_S", "TTL_MS", "Alive", "alive_key", "parse", "start", "running", "gone_notice", "touch"]

PULSE_S = 1.0
TTL_MS = 4_000  # four pulses: a busy machine may delay one or two, never four
GONE_S = 5.0
COURSE = "course"


def alive_key(learner: str) -> str:
    """The presence key of ``learner`` (inside their namespace: only they write it)."""
    return Keyspace(f"{check_namespace(learner)}.{COURSE}").prefix + "alive"


@dataclass(frozen=True)
class Alive:
    """What a live presence key says (``None`` from :func:`parse` when the key has expired)."""

    pid: int
    host: str
    lesson: str | None
    since_ms: int  # server ms the kernel started pulsing


def parse(raw: str | bytes | None) -> Alive | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return Alive(int(data["pid"]), str(data["host"]), data.get("lesson"), int(data["since"]))
    except (ValueError, KeyError, TypeError):
        return None  # not ours: shown as not alive rather than guessed


class _Pulse:
    def __init__(self, client: redis.Redis, learner: str) -> None:
        self.client = client
        self.learner = learner
        self.key = alive_key(learner)
        self.progress = progress_key(learner)
        self.clock = ServerClock(refresh_s=60.0)
        self.lesson: str | None = None
        self.acts = 1  # what the learner did (cells run, lab clicks); the cell starting the pulse is the first
        self._written_acts = 0
        self.since_ms = self.clock.now_ms(client)
        self.failing_since: float | None = None
        self.gone: str | None = None  # one line, once the class server is gone
        self._told = False
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"echoq-presence-{learner}", daemon=True)

    def value(self) -> str:
        mine = {"pid": os.getpid(), "host": socket.gethostname(), "lesson": self.lesson, "since": self.since_ms}
        return json.dumps(mine)

    def pulse(self) -> None:
        now = self.clock.now_ms(self.client)
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self.key, self.value(), px=TTL_MS)
        pipe.hsetnx(self.progress, "connected", now)
        acts = self.acts
        if acts != self._written_acts:
            pipe.hset(self.progress, "active", now)
        pipe.execute()
        self._written_acts = acts

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.pulse()
                self.failing_since = None
            except Exception as exc:  # any failure to reach the server: judged by how long it lasts
                first = self.failing_since = self.failing_since or time.monotonic()
                if self.gone is None and time.monotonic() - first >= GONE_S:
                    try:
                        self.gone = _gone_line(self.client, exc)
                    except Exception:  # the notice must never end the pulse
                        self.gone = "echoq: the class server is gone; run `%env VALKEY_URL=` to go on alone"
            self._stop.wait(PULSE_S)

    def stop(self) -> None:
        """A kernel that ends cleanly takes its presence key with it at once."""
        self._stop.set()
        try:
            self.client.delete(self.key)
        except Exception:
            pass  # the key expires by itself

    def on_cell(self, *_args: object) -> None:
        self.acts += 1
        if self.gone and not self._told:
            self._told = True
            print(self.gone)


def _gone_line(client: redis.Redis, exc: BaseException) -> str:
    pool = getattr(client, "connection_pool", None)  # a cluster client has one per node
    kw = pool.connection_kwargs if pool is not None else {}
    where = f"{kw.get('host', '?')}:{kw.get('port', '?')}"
    if isinstance(exc, redis.AuthenticationError) or "WRONGPASS" in str(exc) or "NOAUTH" in str(exc):
        why = "your class user no longer exists: the instructor ended the workshop"
    else:
        why = "it has not answered for a while: the instructor stopped it, or the machine is down"
    return (
        f"echoq: the class server at {where} is gone ({why}); your notebook is intact -- to go on alone, run "
        "`%env VALKEY_URL=` then the lesson's first cell again (an embedded server of your own)"
    )


_pulses: dict[str, _Pulse] = {}  # one per learner (a kernel has one; a test may run several)
_lock = threading.Lock()


def running(learner: str | None = None) -> _Pulse | None:
    """The presence this process pulses for ``learner`` (default: its only one), if any."""
    if learner is None:
        return next(iter(_pulses.values()), None)
    return _pulses.get(learner)


def touch() -> None:
    """The learner did something besides running a cell (a click in a lab): their last
    activity moves at the next pulse, within a second."""
    for pulse in list(_pulses.values()):
        pulse.acts += 1


def gone_notice() -> str | None:
    """The one line about a class server that went away, or None while it answers."""
    return next((b.gone for b in _pulses.values() if b.gone), None)


def start(client: redis.Redis, lesson: str | None = None, *, learner: str | None = None) -> _Pulse | None:
    """Start (once per process and learner) the presence of ``learner`` (default: this
    kernel's) on ``client``'s server, and note ``lesson`` as the one the learner is in.
    Nothing in solo mode (no learner id, or none given and no ``VALKEY_URL``: an embedded
    server nobody else watches)."""
    if learner is None:
        learner = learners.learner_id()
        if learner is None or not os.environ.get("VALKEY_URL"):
            _warn_if_off_the_class_server()
            return None
    learner = check_namespace(learner)
    with _lock:
        pulse = _pulses.get(learner)
        if pulse is not None and pulse.thread.is_alive() and not pulse.gone:
            if lesson is not None and lesson != pulse.lesson:
                pulse.lesson = lesson
                try:
                    pulse.pulse()  # the new lesson shows at once, not a pulse later
                except Exception:
                    pass  # the thread keeps trying
            return pulse
        if pulse is not None:
            pulse.stop()
            _unwatch_cells(pulse)
        pulse = _Pulse(client, learner)
        pulse.lesson = lesson
        try:
            pulse.pulse()  # alive from the first moment, not a second later
        except Exception:
            pass  # the thread keeps trying, and says when the server is gone for good
        pulse.thread.start()
        atexit.register(pulse.stop)
        _watch_cells(pulse)
        _pulses[learner] = pulse
        return pulse


_warned = False


def _warn_if_off_the_class_server() -> None:
    """The hub's workshop snippet gives every user ``ECHOQ_CLASS`` and a roster user a
    ``VALKEY_URL``: with the first and not the second, this learner works alone, unseen by
    the instructor (their hub name is not on the roster). Said once, in one line."""
    global _warned
    if _warned or not os.environ.get("ECHOQ_CLASS") or os.environ.get("VALKEY_URL"):
        return
    _warned = True
    user = os.environ.get("JUPYTERHUB_USER", "this user")
    print(
        f"echoq: you are working alone on a server of your own: the class server has no place for {user!r} "
        "(not on the roster); your instructor cannot see your progress -- tell them your hub user name"
    )


def _shell():  # the IPython shell, or None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _watch_cells(pulse: _Pulse) -> None:
    shell = _shell()
    if shell is not None:
        shell.events.register("pre_run_cell", pulse.on_cell)


def _unwatch_cells(pulse: _Pulse) -> None:
    shell = _shell()
    if shell is not None:
        try:
            shell.events.unregister("pre_run_cell", pulse.on_cell)
        except ValueError:
            pass
