"""What every lab panel's model shares: a queue on a real server, the recorded frames, the
readout in words, the connection. Traitlets only: no widget and no plot is imported here.

A move is an explicit method (``claim()``, ``step_reap()`` ...): it runs real scripts on
Valkey, then takes ONE atomic :meth:`echoq.Queue.snapshot` and records a
:class:`~echoq.teaching.lab.frames.Frame` from it; every marker drawn and every number shown
comes from that read. Constructors and trait observers never touch the network: a panel
connects when it is first displayed (:meth:`LabModel.open`) or at its first move.

Threads: moves and samples run on the kernel's thread (a click, a cell). Anything else
that changes a model (the Fleet lab's worker threads) does so under ``self._lock``.

If Valkey goes away, a move does not raise: ``connected`` turns False and the readout says
so in one line; :meth:`LabModel.reconnect` tries again.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import redis
from traitlets import Bool, HasTraits, Int, Unicode

from ...address import describe_client, redact
from ...errors import EchoqError, ServerUnavailable
from ...keyspace import Keyspace
from ...queue import Queue, Snapshot
from ...server import check, connect
from .. import learner
from . import words
from .frames import NO_PATH, Frame, History, Lit

__all__ = ["LabModel", "GONE", "Said"]

_instances = itertools.count(1)
GONE = (ServerUnavailable, redis.ConnectionError, redis.TimeoutError)

# A move's run() returns its words, or (words, the paths it took), or None when it recorded its own frames.
Said = str | tuple[str, Lit] | None


class LabModel(HasTraits):
    """One panel's state: its queue, its frames, its readout. Subclasses add moves."""

    kind: ClassVar[str] = "lab"
    settings: ClassVar[tuple[str, ...]] = ()  # traits the learner sets; recorded in every frame
    setting_words: ClassVar[Mapping[str, Callable[[Any], str]]] = {}  # what a change of each says

    readout = Unicode("", help="what the latest frame says: the last move and where the jobs are")
    connected = Bool(False, help="False until the panel connects, and once Valkey went away")
    revision = Int(0, help="how many frames were recorded; views draw on it")

    def __init__(self, name: str | None = None, *, client: redis.Redis | None = None, url: str | None = None) -> None:
        super().__init__()
        # A given name goes in the learner's namespace too: lessons name their panels.
        self.name = learner.queue_name(name or f"lab-{self.kind}-{os.getpid()}-{next(_instances)}")
        self.url = url
        self._given_client = client
        self.queue: Queue | None = None
        self.history = History()
        self._lock = threading.RLock()
        self._opened = False
        self._quiet = 0  # > 0 inside a move or a reset: settings changes record no frame of their own
        self.readout = words.unopened(self.name)
        if self.settings:
            self.observe(self._setting_changed, names=list(self.settings))

    # -- reading ----------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest frame's snapshot (the last atomic read)."""
        frame = self.history.latest()
        return frame.snapshot if frame else None

    @property
    def frame(self) -> Frame | None:
        return self.history.latest()

    @property
    def opened(self) -> bool:
        return self._opened

    def keys(self, part: str) -> str:
        """A key of this panel's queue, by its Keyspace name: ``keys('active')``."""
        return str(getattr(Keyspace(self.name), part))

    # -- connection -------------------------------------------------------------------------

    def open(self) -> bool:
        """Connect, empty this panel's queue, take the first snapshot: the panel's clean start.
        Displaying a panel opens it, and so does its first move; opening again does nothing."""
        if self._opened:
            return self.connected
        return self._connect(fresh=True)

    def reconnect(self) -> bool:
        """Connect again: the given client, else ``url``, else :func:`echoq.connect`."""
        return self._connect(fresh=not self._opened)

    def _connect(self, *, fresh: bool) -> bool:
        try:
            if self._given_client is not None:
                check(self._given_client)
                client = self._given_client
            else:
                client = connect(self.url)
            queue = Queue(self.name, client)
            if fresh:
                queue.reset()
        except GONE as exc:
            self._gone(exc)
            return False
        with self._lock:
            self.queue = queue
            self._opened = True
        if fresh:
            self.setup()  # settings stay as set: only reset() puts them back
        self.connected = True
        return self.record("connect", words.connected(redact(describe_client(client)), self.name))

    def _gone(self, exc: BaseException) -> None:
        where = describe_client(self.queue.client) if self.queue is not None else (self.url or "the default server")
        self.connected = False
        latest = self.history.latest()
        self._publish(
            self.history.append(
                move="gone",
                readout=words.gone(redact(where), type(exc).__name__),
                snapshot=latest.snapshot if latest else None,
                state=self._state(),
                connected=False,
            )
        )

    # -- moves ------------------------------------------------------------------------------

    def setup(self) -> None:
        """Runs after the panel's queue was emptied (on opening, on reset): clear own state."""

    def restore_defaults(self) -> None:
        """Put every setting back to its default (a reset is a clean start)."""
        with self.hold_trait_notifications():
            for name in self.settings:
                self.set_trait(name, self.trait_defaults(name))

    def act(self, move: str, run: Callable[[], Said], lit: Lit | None = None) -> bool:
        """Run one move; record the frame that shows what it did (or why it was refused)."""
        if not self._opened and not self.open():
            return False
        if not self.connected or self.queue is None:
            self.say(move, words.not_connected(move))
            return False
        self._quiet += 1
        try:
            said = run()
        except GONE as exc:
            self._quiet -= 1
            self._gone(exc)
            return False
        except EchoqError as exc:
            self._quiet -= 1
            self.record(move, words.refused(move, exc))
            return False
        self._quiet -= 1
        if said is None:  # the move recorded its own frames
            return True
        text, path = said if isinstance(said, tuple) else (said, Lit.moved(move) if lit is None else lit)
        return self.record(move, text, lit=path)

    def record(self, move: str, said: str, *, lit: Lit = NO_PATH, snapshot: Snapshot | None = None) -> bool:
        """Take one atomic snapshot (unless given) and record the frame drawn from it."""
        if self.queue is None:
            return False
        try:
            snap = snapshot if snapshot is not None else self.read()
        except GONE as exc:
            self._gone(exc)
            return False
        with self._lock:
            state = self._state()
            text = f"{said} {self.describe(snap, state)}".strip()
            frame = self.history.append(move=move, readout=text, snapshot=snap, state=state, lit=lit)
        self._publish(frame)
        return True

    def read(self) -> Snapshot:
        """One atomic read of the whole queue (subclasses may read more members)."""
        assert self.queue is not None
        return self.queue.snapshot(limit=200)

    def sample(self) -> bool:
        """Re-read the queue without a move (the Fleet lab's beat); False if Valkey is gone."""
        if not self._opened or not self.connected:
            return False
        return self.record("sample", words.sampled())

    def reset(self) -> bool:
        def run() -> str:
            assert self.queue is not None
            self.setup()  # first: a panel's own threads stop before the keys go
            deleted = self.queue.reset()
            self.restore_defaults()
            self.setup()
            return words.reset(deleted, self.name)

        return self.act("reset", run, lit=NO_PATH)

    def say(self, move: str, text: str) -> None:
        """Record a frame that only speaks (a refusal before any I/O): the last snapshot, new words."""
        latest = self.history.latest()
        with self._lock:
            frame = self.history.append(
                move=move,
                readout=text,
                snapshot=latest.snapshot if latest else None,
                state=self._state(),
                connected=self.connected,
            )
        self._publish(frame)

    def _publish(self, frame: Frame) -> None:
        # Traits change outside the lock: observers (the views) may take their own locks.
        self.readout = frame.readout
        self.revision = frame.index + 1

    # -- settings ---------------------------------------------------------------------------

    def _setting_changed(self, change: dict[str, Any]) -> None:
        # A setting is not a move: no I/O. It is recorded on the last snapshot, so the
        # figure's title, the readout and the timeline all agree on the value in force.
        if self._quiet or not self._opened or self.history.latest() is None:
            return
        latest = self.history.latest()
        assert latest is not None
        with self._lock:
            state = self._state()
            said = words.setting(self.setting_words, change["name"], change["new"])
            text = f"{said} {self.describe(latest.snapshot, state)}".strip() if latest.snapshot else said
            frame = self.history.append(
                move="settings", readout=text, snapshot=latest.snapshot, state=state, connected=self.connected
            )
        self._publish(frame)

    # -- what a frame keeps ------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in self.settings}
        state.update(self.state())
        return state

    def state(self) -> dict[str, Any]:
        """The panel's own facts for the frame being recorded (called under the lock)."""
        return {}

    def describe(self, snapshot: Snapshot | None, state: dict[str, Any]) -> str:
        """Where the jobs are, naming the keys."""
        if snapshot is None:
            return ""
        return words.where(self.keys, snapshot)
