"""The wake listener: a thread that blocks on ``emq:{q}:wake`` while the worker is idle, so
an idle worker hears of new work without polling."""

from __future__ import annotations

import threading
import time

from ..queue import Queue
from .delivery import Life


class WakeListener:
    """Listens while the owner asks it to (:meth:`listen`), one thread per ``work()`` call,
    started when first needed; a wake sets ``life.woken`` and wakes the owner."""

    def __init__(self, queue: Queue, life: Life, idle_wait_ms: int) -> None:
        self.queue, self.life, self.idle_wait_ms = queue, life, idle_wait_ms
        self.listening = threading.Event()  # the owner wants to hear of new work
        self._run_id = 0
        self._listener_run = -1

    def begin(self) -> None:
        self._run_id += 1
        self.listening.clear()

    def end(self) -> None:
        """The listener leaves after its current wait."""
        with self.life.lock:
            self._run_id += 1
            self.listening.set()

    def listen(self, on: bool) -> None:
        if not on:
            self.listening.clear()
            return
        if self._listener_run != self._run_id:
            self._listener_run = self._run_id
            threading.Thread(target=self._listen, args=(self._run_id,), name="echoq-wake-listener", daemon=True).start()
        self.listening.set()

    def _listen(self, run_id: int) -> None:
        # Blocks on its own pooled connection; the owner never waits on the network for it.
        life, wait_s = self.life, self.idle_wait_ms / 1000
        while self._run_id == run_id:
            if not self.listening.wait(wait_s) or self._run_id != run_id:
                continue
            if life.crashed.is_set():
                return
            try:
                woken = self.queue.wait_for_work(self.idle_wait_ms)
            except Exception:
                # The owner meets the same failure on its next call: it rides it out (a
                # failover) or reports it and ends this run. Listen again meanwhile.
                time.sleep(min(0.2, wait_s))
                continue
            if self._run_id != run_id or life.crashed.is_set():
                return
            if woken:
                with life.lock:
                    life.woken = True
                    if life.owner_waiting:
                        life.io_wake.notify()
