"""Waiting for a wake (``emq:{q}:wake``) without polling.

A worker that holds nothing waits on the wake itself: the I/O owner blocks on it
(:meth:`Waker.wait`) with its claim written behind the wait on the same connection, so the
server runs the claim the moment a wake ends the wait -- no round trip and no thread
hand-off between the wake and the claim. ``stop()`` and ``abandon()`` end that wait by a
push to the run's halt key (``Queue.halt_wait``); the claim behind it still runs, and a
stopping worker gives back what it claimed, as it gives back its prefetched jobs.

A worker that holds jobs and has room for more cannot block on the network: it must hear
its handlers finish. For that case a listener thread blocks on the wake and hands it to
the owner (:meth:`Waker.listen`) -- armed only once jobs have been held for ``ARM_S``, so
quick jobs never start it. The two never wait at once: the owner waits itself only while
no wait of the listener is in flight."""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable

from ..queue import Claim, Queue
from .delivery import Life
from .outage import Outages

# A worker holding jobs (with room for more) hears wakes through the listener thread once
# it has held them this long; quicker jobs are done before that, and the owner, holding
# nothing again, waits on the wake itself. Waking the listener costs a thread start and a
# hand-off per wake, which a quick job does not need.
ARM_S = 0.002


class Waker:
    """The owner's own wait on the wake, the listener thread, and the halt that ends the
    owner's wait. Its flags are read and written under ``life.lock``."""

    def __init__(
        self, queue: Queue, life: Life, outages: Outages, *, idle_wait_ms: int, lease_ms: int, confirm: bool
    ) -> None:
        self.queue, self.life, self.outages, self.idle_wait_ms = queue, life, outages, idle_wait_ms
        self.lease_ms, self.confirm = lease_ms, confirm
        # A claim behind the wait goes on the wait's connection; a queue whose writes wait
        # for replicas (durability) claims after the wait, as its calls do.
        self.claims_behind = queue.durability is None
        self.run = ""  # this work() call's token: its halt key is emq:{q}:halt:<run>
        self.owner_blocked = False  # the owner is blocked on the wake (a halt ends it)
        self.listening = False  # the owner wants the listener to wait on the wake
        self.listener_waiting = False  # a wait of the listener is in flight
        self._wanted = threading.Condition(life.lock)  # the listener parks on it
        self._listener: threading.Thread | None = None
        self._listener_run = ""

    @property
    def idle(self) -> bool:
        return self.owner_blocked or self.listening

    def begin(self) -> None:
        self.run = secrets.token_hex(8)
        self.listening = self.owner_blocked = False

    def end(self) -> None:
        """The listener leaves after its current wait (at most ``idle_wait_ms``)."""
        with self.life.lock:
            self.run = ""
            self.listening = False
            self._wanted.notify_all()

    # -- the owner's own wait ---------------------------------------------------------------

    def wait(self, deadline: float, still: Callable[[], bool], count: int) -> tuple[bool, list[Claim] | None] | None:
        """Block on the wake until a wake, ``deadline`` (time.monotonic()) or a halt, then
        claim up to ``count`` (behind the wait, see the module): whether a wake came, and
        the claims (None: no claim was made). None: a wait of the listener is in flight,
        and the owner must hear the wake through it. ``still()``, read under the lock, says the wait is still wanted
        (no stop, no death, no wake already heard)."""
        life = self.life
        with life.lock:
            self.listening = False
            if self.listener_waiting:
                return None
            if not still():
                return False, None
            self.owner_blocked = True
        try:
            if count and self.claims_behind:
                return self.outages.ride_out_claiming(self.lease_ms, self._wait_once, deadline, still, count)
            return self.outages.ride_out(self._wait_once, deadline, still, count)
        finally:
            with life.lock:
                self.owner_blocked = False

    def _wait_once(self, deadline: float, still: Callable[[], bool], count: int) -> tuple[bool, list[Claim] | None]:
        if not still():  # checked again before each try while an outage is ridden out
            return False, None
        left_ms = math.ceil((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return False, None
        left_ms = min(left_ms, 3_600_000)
        if count and self.claims_behind:
            return self.queue._wait_then_claim(
                left_ms, halt=self.run, count=count, lease_ms=self.lease_ms, confirm=self.confirm
            )
        return self.queue.wait_for_work(left_ms, halt=self.run), None

    def halt(self) -> None:
        """End the owner's wait if it is blocked on the wake (stop, abandon). The push is made
        on a thread of its own: a caller may be a signal handler on the owner's own thread,
        which must not take the client's connection pool it may have interrupted. Should the
        push fail (the server is gone), the wait ends by its deadline: the next beat, at
        most ``beat_ms`` away."""
        with self.life.lock:
            if not self.owner_blocked or not self.run:
                return
            run = self.run
        threading.Thread(target=self._push_halt, args=(run,), name="echoq-halt", daemon=True).start()

    def _push_halt(self, run: str) -> None:
        try:
            self.queue.halt_wait(run)
        except Exception:  # noqa: BLE001 -- see halt(): the wait's deadline bounds it
            pass

    # -- the listener thread ----------------------------------------------------------------

    def listen(self, on: bool) -> None:
        """Under ``life.lock``: whether the listener should wait on the wake for the owner."""
        self.listening = on
        if not on:
            return
        if self._listener_run != self.run:
            self._listener_run = self.run
            self._listener = threading.Thread(
                target=self._listen, args=(self.run,), name="echoq-wake-listener", daemon=True
            )
            self._listener.start()
        self._wanted.notify()

    def _listen(self, run: str) -> None:
        # Blocks on its own pooled connection; the owner sleeps on io_wake meanwhile.
        life = self.life
        while True:
            with life.lock:
                while not self.listening and self.run == run and not life.crashed.is_set():
                    self._wanted.wait()
                if self.run != run or life.crashed.is_set():
                    return
                self.listener_waiting = True
            failed = False
            try:
                woken = self.queue.wait_for_work(self.idle_wait_ms)
            except Exception:  # noqa: BLE001
                # The owner meets the same failure on its next call: it rides it out (a
                # failover) or reports it and ends this run. Listen again meanwhile.
                woken, failed = False, True
            with life.lock:
                self.listener_waiting = False
                if woken:
                    life.woken = True
                # A wake to hand over, or the owner may now wait on the wake itself.
                if life.owner_waiting:
                    life.io_wake.notify()
            if failed:
                life.crashed.wait(min(0.2, self.idle_wait_ms / 1000))
