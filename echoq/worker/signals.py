"""SIGINT and SIGTERM while workers run: the first stops them gracefully, a second at once.

Only the main thread may set a signal handler. :meth:`Worker.work` run there installs
:class:`StopOnSignals` for itself for the length of the run and puts back the handlers it
found when it returns (rq's worker does the same); run in another thread it installs
nothing, and the program wires ``worker.stop()`` to its own signals. ``python -m echoq
worker`` installs one for all the workers it runs.

A handler only calls :meth:`Worker.stop` (through ``Worker._stop_on_signal``, which notes
the signal for the log line the worker's own thread writes later). ``stop`` takes the
worker's re-entrant lock, wakes its threads and pushes the halt from a thread of its own:
nothing the interrupted main thread may hold (the client's connection pool, a log
handler's lock) is taken."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, Protocol

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stoppable(Protocol):
    def _stop_on_signal(self, signum: int, at_once: bool) -> None: ...


class StopOnSignals:
    """While installed, the first SIGINT or SIGTERM calls ``stop()`` on each worker (finish
    or give back what it holds within its grace period), and any later one ``stop(0)``
    (give back at once what still runs). ``received`` lists the signals, in order."""

    def __init__(self, workers: Sequence[Stoppable]) -> None:
        self.workers = list(workers)
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Install the handlers; False (and nothing installed) outside the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.getsignal(signum)
                signal.signal(signum, self._on_signal)
        except ValueError:  # not the main interpreter
            self.restore()
            return False
        return True

    def restore(self) -> None:
        """Put back the handlers found at :meth:`install`."""
        for signum, previous in self._previous.items():
            # None: a handler set from outside Python; the default is the nearest we can do.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    @property
    def at_once(self) -> bool:
        """A second signal came: the workers were stopped at once."""
        return len(self.received) > 1

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        for worker in self.workers:
            worker._stop_on_signal(signum, self.at_once)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
