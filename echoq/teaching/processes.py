"""Run a piece of code in a child process that can really be killed or frozen at a chosen step.

The lessons are about failures that only a second process can show: a worker SIGKILLed
between its effect and its ``complete``, a worker frozen (a long GC pause, a swapped-out
VM) while its lease runs out and another worker takes the job, two reapers racing on two
connections. :func:`spawn` forks the notebook's kernel (or the test process), runs
``target(*args)`` in the child and lets the parent watch it step by step:

* the child counts **steps**: every command it sends to Valkey through a
  :func:`counting_client` (a script counts once, named after its file), and every
  :func:`mark` the code around it makes (``"charge:before"``, ``"returned"`` ...);
* ``kill_at`` picks a step after which the child SIGKILLs itself -- a real ``kill -9``:
  no ``finally``, no ``atexit``, no goodbye to Valkey;
* ``freeze_at`` picks a step after which it SIGSTOPs itself: the process is frozen, its
  memory and sockets intact, until the parent calls :meth:`Child.resume` (SIGCONT).

A fork copies the parent's memory at that moment, so the child sees the learner's
functions, their globals and imports, exactly as the notebook defined them -- and a
``set()`` the learner keeps "in the worker" starts empty in every new child, as it would
in a restarted worker. The child talks to the parent over a pipe (one JSON line per
step), never prints into the notebook, and leaves through ``os._exit`` so it runs none of
the parent's exit handlers (which would stop the embedded server). Every wait has a
deadline and raises :class:`ChildTimeout` in one line; a timed-out child is killed.
Fork is POSIX-only (Linux, macOS), like the embedded server.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import select
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

import redis

from .. import scripts

__all__ = [
    "Child",
    "ChildTimeout",
    "StepAt",
    "counting_client",
    "delay",
    "hold",
    "made",
    "in_child",
    "mark",
    "spawn",
    "stop_all",
]

StepAt = int | str | Callable[[int, str], bool] | None
"""Which step to act after: the n-th step (1-based), the first step with this label, or a
predicate ``(n, label) -> bool``; None: never."""


class ChildTimeout(TimeoutError):
    """A child did not reach the expected point in time (it was killed)."""


# -- inside the child ------------------------------------------------------------------------


class _Steps:
    """The child's step counter, and its line to the parent."""

    def __init__(self, fd: int, kill_at: StepAt, freeze_at: StepAt) -> None:
        self.fd = fd
        self.kill_at = kill_at
        self.freeze_at = freeze_at
        self.count = 0
        self.delays: dict[str, tuple[int, float]] = {}  # label -> (n-th such command, seconds)
        self.holds: dict[str, int] = {}  # label -> the n-th such command is held (frozen) before it goes
        self.seen: dict[str, int] = {}  # commands about to be sent, per label
        self.made: dict[str, int] = {}  # steps made, per label
        self.sent_at: float | None = None  # when the command about to be counted went out

    def before(self, label: str) -> None:
        """Called before a counted command is sent: the network may be slow for this one."""
        n = self.seen[label] = self.seen.get(label, 0) + 1
        nth, seconds = self.delays.get(label, (0, 0.0))
        if n == nth:
            time.sleep(seconds)
        if self.holds.get(label) == n:
            self.send({"frozen": f"before {label}", "at": time.monotonic()})
            _stop_here()
            self.send({"resumed": f"before {label}"})
        self.sent_at = time.monotonic()

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]

    def mark(self, label: str) -> None:
        self.count += 1
        n = self.count
        self.made[label] = self.made.get(label, 0) + 1
        # The monotonic clock is the machine's, so the parent can set these beside its own.
        self.send({"step": label, "sent": self.sent_at, "done": time.monotonic()})
        self.sent_at = None
        first = self.made[label] == 1
        if _matches(self.kill_at, n, label, first):
            _die_here()
        if _matches(self.freeze_at, n, label, first):
            self.send({"frozen": label, "at": time.monotonic()})
            _stop_here()
            self.send({"resumed": label})


def _stop_here() -> None:
    """Freeze the whole process, this thread included, before it runs another line.

    Sent to the calling THREAD (tgkill), not to the process: a process-directed SIGSTOP is
    taken by the main thread, and a worker thread that sent it may run on -- and send the
    very command it meant to hold -- before the group stop reaches it."""
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def _die_here() -> None:
    """SIGKILL the whole process from the calling thread (a real ``kill -9``)."""
    signal.pthread_kill(threading.get_ident(), signal.SIGKILL)


def _matches(at: StepAt, n: int, label: str, first: bool) -> bool:
    if at is None:
        return False
    if isinstance(at, bool):
        raise TypeError("a step is a number, a label or a predicate, not a bool")
    if isinstance(at, int):
        return n == at
    if isinstance(at, str):
        return label == at and first
    return bool(at(n, label))


_steps: _Steps | None = None


def in_child() -> bool:
    """True inside a process :func:`spawn` started."""
    return _steps is not None


def mark(label: str) -> None:
    """Count one step named ``label`` (in a child: maybe the step it dies or freezes at).
    Outside a child it does nothing, so code that marks its steps runs anywhere."""
    if _steps is not None:
        _steps.mark(label)


@cache
def _script_names() -> dict[str, str]:
    return {scripts.sha(name): name for name in scripts.names()}


def _label(args: tuple[Any, ...]) -> str:
    command = str(args[0]).upper() if args else "?"
    if command == "EVALSHA" and len(args) > 1:
        return _script_names().get(str(args[1]), "EVALSHA")
    if command == "EVAL" and len(args) > 1:  # a registry script sent as text after NOSCRIPT
        return _script_names().get(hashlib.sha1(str(args[1]).encode()).hexdigest(), "EVAL")
    return command


def made(label: str) -> int:
    """In a child: how many steps labelled ``label`` it has made so far (0 in the parent)."""
    return _steps.made.get(label, 0) if _steps is not None else 0


def hold(label: str, nth: int) -> None:
    """In a child: freeze (SIGSTOP) just before sending the ``nth`` command labelled ``label``,
    until the parent resumes it -- a message held up on the network for exactly as long as
    the parent decides."""
    if _steps is not None:
        _steps.holds[label] = nth


def delay(label: str, nth: int, seconds: float) -> None:
    """In a child: hold the ``nth`` command labelled ``label`` (``"extend"``, ``"HSET"`` ...)
    for ``seconds`` before sending it -- a slow network, a late extension."""
    if _steps is not None:
        _steps.delays[label] = (nth, seconds)


class _CountingPipeline(redis.client.Pipeline):
    def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        if _steps is not None:
            _steps.before(_label(args))
        result = super().immediate_execute_command(*args, **options)
        mark(_label(args))
        return result

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        queued = len(self.command_stack)
        result = super().execute(raise_on_error)
        if queued:
            mark("MULTI/EXEC" if self.transaction else "PIPELINE")
        return result


class _CountingRedis(redis.Redis):
    """A client whose every successful command is one step of the child."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        label = _label(args)
        if _steps is not None:
            _steps.before(label)
        try:
            result = super().execute_command(*args, **options)
        except Exception:
            if _steps is not None:  # it did not happen (NOSCRIPT, an error reply): not a step
                _steps.seen[label] -= 1
            raise
        mark(label)
        return result

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> redis.client.Pipeline:
        return _CountingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def counting_client(client: redis.Redis) -> redis.Redis:
    """A new client to the same server (new connections: never share a socket across a
    fork) whose commands count as steps of the child. In the parent, steps are ignored."""
    pool = client.connection_pool
    fresh = redis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
    return _CountingRedis(connection_pool=fresh)


def _child_main(fd: int, target: Callable[..., Any], args: tuple[Any, ...], kill_at: StepAt, freeze_at: StepAt) -> None:
    global _steps
    code = 0
    try:
        # The child must not write into the notebook (the kernel's output machinery lives
        # in threads the fork did not copy): its prints go nowhere.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        import io
        import sys

        sys.stdout = sys.stderr = io.TextIOWrapper(io.FileIO(devnull, "w", closefd=False))
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _steps = _Steps(fd, kill_at, freeze_at)
        try:
            value = target(*args)
            _steps.send({"returned": _jsonable(value)})
        except BaseException as exc:  # the learner's code: report it, in words, to the parent
            frames = traceback.extract_tb(exc.__traceback__)
            where = next((f"line {f.lineno}, in {f.name}" for f in reversed(frames) if _learners(f.filename)), "")
            # Whose fault: a frame of the learner's, or the server refusing their script (or
            # timing out on it). Anything else is the kit's own bug, and must not be blamed on them.
            theirs = bool(where) or isinstance(exc, redis.ResponseError) or "Timeout reading" in str(exc)
            text = (str(exc).strip().splitlines() or [""])[0][:300]
            _steps.send(
                {"raised": f"{type(exc).__name__}: {text}".strip().rstrip(":"), "where": where, "theirs": theirs}
            )
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def _learners(filename: str) -> bool:
    """Is this frame the learner's code (a notebook cell, an exec'd answer), not a library's?"""
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    libraries = {sys.prefix, sys.base_prefix, sys.exec_prefix, here}
    return not any(filename.startswith(p) for p in libraries if p)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


# -- the parent's handle ---------------------------------------------------------------------


_live: dict[int, Child] = {}
# Called with each new Child and the arguments it was given: a check keeps the children of its
# run, for the feedback's timeline.
observers: list[Callable[[Child, tuple[Any, ...]], None]] = []


class Child:
    """A child process started by :func:`spawn`, seen from the parent."""

    def __init__(self, pid: int, fd: int, name: str) -> None:
        self.pid = pid
        self.name = name
        self._fd = fd
        self._buffer = b""
        self.steps: list[str] = []  # the labels of the steps it made, in order
        # when each step's command went out (None where not known) and when its reply came back
        self.step_times: list[tuple[float | None, float]] = []
        self.state = "running"  # running, frozen, returned, raised, killed, exited
        self.value: Any = None  # what target returned (JSON-able, or its repr)
        self.error: str | None = None  # "Type: message" if target raised
        self.where: str | None = None  # the learner's line it raised on, if known
        self.theirs = False  # the error came from the learner's code (not from the kit)
        self.frozen_at: str | None = None
        self.frozen_since: float | None = None  # the child's time.monotonic() as it froze (the machine's clock)
        self._reaped = False
        self._outcome_seen = False
        self.started_at = time.monotonic()
        self.ended_at: float | None = None  # when the parent saw it end
        self.moments: list[tuple[float, str]] = []  # (time.monotonic(), 'frozen' or 'resumed'), in order
        _live[pid] = self

    def __repr__(self) -> str:
        return f"<child {self.name} pid {self.pid}: {self.state} after {len(self.steps)} steps>"

    @property
    def ended(self) -> bool:
        return self.state in ("returned", "raised", "killed", "exited")

    @property
    def killed(self) -> bool:
        return self.state == "killed"

    def _pump(self, wait_s: float) -> None:
        """Read what the child sent (waiting up to wait_s for something), and notice its end."""
        if self._fd >= 0:
            ready, _, _ = select.select([self._fd], [], [], max(0.0, wait_s))
            if ready:
                try:
                    data = os.read(self._fd, 65536)
                except OSError:
                    data = b""
                if data:
                    self._buffer += data
                    *lines, self._buffer = self._buffer.split(b"\n")
                    for line in lines:
                        if line:
                            self._take(json.loads(line))
                else:  # EOF: the child is gone (or closed its end)
                    os.close(self._fd)
                    self._fd = -1
        self._poll_status()

    def _take(self, message: dict[str, Any]) -> None:
        if "step" in message:
            self.steps.append(message["step"])
            self.step_times.append((message.get("sent"), message.get("done", 0.0)))
        elif "frozen" in message:
            self.frozen_at = message["frozen"]
            self.frozen_since = message.get("at")
            self.moments.append((message.get("at") or time.monotonic(), "frozen"))
        elif "resumed" in message:
            self.frozen_at = None
        elif "returned" in message:
            self.value = message["returned"]
            self._outcome_seen = True
        elif "raised" in message:
            self.error = message["raised"]
            self.where = message.get("where") or None
            self.theirs = bool(message.get("theirs"))
            self._outcome_seen = True

    def _poll_status(self) -> None:
        if self._reaped:
            return
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
        except ChildProcessError:
            pid, status = self.pid, 0  # someone else reaped it; treat as exited
        if pid == 0:
            return
        if os.WIFSTOPPED(status):
            self.state = "frozen"
            return
        self._reaped = True
        self.ended_at = time.monotonic()
        _live.pop(self.pid, None)
        if self._fd >= 0:  # read what it said before it went
            while True:
                ready, _, _ = select.select([self._fd], [], [], 0)
                data = os.read(self._fd, 65536) if ready else b""
                if not data:
                    break
                self._buffer += data
            for line in self._buffer.split(b"\n"):
                if line:
                    self._take(json.loads(line))
            self._buffer = b""
            os.close(self._fd)
            self._fd = -1
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            self.state = "killed"
        elif self.error is not None:
            self.state = "raised"
        elif self._outcome_seen:
            self.state = "returned"
        else:
            self.state = "exited"

    def poll(self) -> Child:
        """Take in what the child said so far without waiting."""
        self._pump(0)
        return self

    def wait(self, timeout_s: float = 10.0, what: str | None = None) -> Child:
        """Wait until the child has ended (returned, raised, been killed); raises
        :class:`ChildTimeout` (killing it) if it has not within ``timeout_s``."""
        return self._until(lambda: self.ended, timeout_s, what or "end")

    def wait_frozen(self, timeout_s: float = 10.0) -> Child:
        """Wait until the child has frozen itself at its ``freeze_at`` step (or ended)."""
        return self._until(lambda: self.state == "frozen" or self.ended, timeout_s, "reach the step it freezes at")

    def pauses(self, since: int = 0) -> list[float]:
        """Seconds the child spent between one step's reply and its next command going out,
        for the steps after the first ``since``: its own pace, apart from the network's and
        the server's (a loop that waits between claims pauses; one that spins does not)."""
        times = self.step_times[since:]
        return [sent - done for (_, done), (sent, _) in zip(times, times[1:], strict=False) if sent is not None]

    def wait_steps(self, count: int, timeout_s: float = 10.0) -> Child:
        """Wait until the child has made ``count`` steps (or ended)."""
        return self._until(lambda: len(self.steps) >= count or self.ended, timeout_s, f"make {count} steps")

    def _until(self, done: Callable[[], bool], timeout_s: float, what: str) -> Child:
        give_up = time.monotonic() + timeout_s
        while True:
            self._pump(0.002 if self._fd < 0 else min(0.02, max(0.0, give_up - time.monotonic())))
            if done():
                return self
            if time.monotonic() > give_up:
                self.kill()
                raise ChildTimeout(
                    f"{self.name} did not {what} within {timeout_s:g} s (after {len(self.steps)} steps); it was killed"
                )
            if self._fd < 0 and not self._reaped:
                time.sleep(0.001)

    def freeze(self) -> None:
        """SIGSTOP it from outside, wherever it is."""
        if not self.ended:
            self.moments.append((time.monotonic(), "frozen"))
            os.kill(self.pid, signal.SIGSTOP)
            self._until(lambda: self.state == "frozen" or self.ended, 10.0, "freeze")

    def resume(self) -> None:
        """SIGCONT a frozen child."""
        if not self.ended:
            self.state = "running"
            self.moments.append((time.monotonic(), "resumed"))
            os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL it (if it still runs) and collect its end."""
        if self._reaped:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.kill(self.pid, signal.SIGCONT)  # a frozen process dies only once it runs
        except ProcessLookupError:
            pass
        give_up = time.monotonic() + 10
        while not self._reaped and time.monotonic() < give_up:
            self._pump(0.005)


def spawn(
    target: Callable[..., Any],
    *args: Any,
    kill_at: StepAt = None,
    freeze_at: StepAt = None,
    name: str = "child",
) -> Child:
    """Fork; run ``target(*args)`` in the child; return the parent's :class:`Child`.

    In the child, every :func:`mark` (and every command of a :func:`counting_client`) is a
    step; after the step ``kill_at`` names the child SIGKILLs itself, after ``freeze_at``
    it SIGSTOPs itself until :meth:`Child.resume`.
    """
    if not hasattr(os, "fork"):
        raise RuntimeError("this check needs os.fork (Linux or macOS) to run your code in a process it can kill")
    read_fd, write_fd = os.pipe()
    gc.freeze()  # the child never collects the parent's objects (nor copies their pages to)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
            pid = os.fork()
    except BaseException:
        gc.unfreeze()
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:
        os.close(read_fd)
        _live.clear()
        _child_main(write_fd, target, args, kill_at, freeze_at)
    gc.unfreeze()
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    child = Child(pid, read_fd, name)
    for observe in observers:
        observe(child, args)
    return child


def stop_all() -> None:
    """SIGKILL every child still alive (a check's ``finally``)."""
    for child in list(_live.values()):
        child.kill()
