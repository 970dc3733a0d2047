"""The transport: the worker's complete-and-claim calls, and what is in flight.

:class:`OneCall` sends one call at a time and waits for its reply. :class:`PipelinedCalls`
keeps up to ``LANES`` calls in flight on one connection (RESP pipelining); when that
connection is lost it makes one call at a time until the server answers, then pipelines
again on a new connection."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from .. import scripts
from ..errors import NotReplicated, ServerUnavailable
from ..queue import Claim, Complete, Queue, _only_claims
from .delivery import Delivery, Life
from .outage import Outages

# A worker that may hold at least LANES * SPLIT_MIN jobs keeps up to LANES complete-and-
# claim calls in flight on its connection (RESP pipelining), each claiming at most 1/LANES
# of what it may hold, and a call after the first carrying SPLIT_MIN jobs (completed +
# claimed) at least: the server runs one call while this process hands out and finishes
# the jobs of the one before, instead of each waiting for the other. A smaller worker
# sends one call at a time: split further, a call's fixed cost (about 100 µs of CPU on
# each side, measured) would be shared by too few jobs.
SPLIT_MIN = 16
LANES = 2

# Called with each reply: the deliveries it completed, their outcomes, the new claims, the
# call's round trip.
OnReply = Callable[[Sequence[Delivery], list[Complete], list[Claim], float], None]


class OneCall:
    """One complete-and-claim call at a time: nothing is in flight between calls."""

    def __init__(
        self, queue: Queue, life: Life, outages: Outages, *, lease_ms: int, confirm: bool, on_reply: OnReply
    ) -> None:
        self.queue, self.life, self.outages = queue, life, outages
        self.lease_ms, self.confirm, self.on_reply = lease_ms, confirm, on_reply
        self.asked = 0  # jobs the calls in flight claim: they count against the room

    @property
    def pipelined(self) -> bool:
        return False

    @property
    def in_flight(self) -> int:
        """Calls sent whose replies are not read yet."""
        return 0

    def pipelining(self, capacity: int) -> bool:
        """Whether calls go ahead of replies for a worker that may hold ``capacity`` jobs."""
        return False

    def shape(self, ask: int, completing: bool, capacity: int) -> int:
        """How many jobs the next call asks for, out of ``ask``."""
        return ask

    def exchange(self, done: list[Delivery], ask: int, starting: Sequence[Delivery]) -> tuple[int, int]:
        """Complete ``done``, confirm the start of ``starting``, claim up to ``ask``: the
        jobs claimed and the jobs asked for by the replies read."""
        return self.call(done, ask, starting), ask

    def call(self, done: list[Delivery], ask: int, starting: Sequence[Delivery] = ()) -> int:
        """One call, its reply read: complete ``done`` (each fenced), confirm the start of
        ``starting`` and claim up to ``ask``; how many it claimed."""
        started = time.perf_counter()
        try:
            outcomes, claims = self.outages.ride_out_claiming(
                self.lease_ms if ask else 0,
                self.queue.complete_many_and_claim,
                [d.claim for d in done],
                count=ask,
                lease_ms=self.lease_ms,
                confirm=self.confirm,
                started=[d.claim for d in starting],
            )
        except NotReplicated as unconfirmed:  # it happened on the master: see Outages.ride_out
            with self.life.lock:
                self.life.report.unreplicated += len(done)
            outcomes, claims = self.queue._complete_many_reply(unconfirmed.reply)
        for delivery in starting:
            delivery.confirmed = True
        self.on_reply(done, outcomes, claims, time.perf_counter() - started)
        return len(claims)

    def close(self) -> None:
        pass


class PipelinedCalls(OneCall):
    """Up to LANES calls in flight on one connection, each read in the order sent. The
    owner never sleeps with a call in flight: claimed jobs never wait unread while their
    leases run."""

    def __init__(
        self, queue: Queue, life: Life, outages: Outages, *, lease_ms: int, confirm: bool, on_reply: OnReply
    ) -> None:
        super().__init__(queue, life, outages, lease_ms=lease_ms, confirm=confirm, on_reply=on_reply)
        self.pipe: scripts.Pipelined | None = scripts.Pipelined(queue.client, "complete_many")
        # Per call in flight: (completing, asked, confirming, sent at).
        self.sent: deque[tuple[list[Delivery], int, Sequence[Delivery], float]] = deque()

    @property
    def pipelined(self) -> bool:
        return self.pipe is not None

    @property
    def in_flight(self) -> int:
        return len(self.sent)

    def pipelining(self, capacity: int) -> bool:
        return self.pipe is not None and capacity >= LANES * SPLIT_MIN

    def shape(self, ask: int, completing: bool, capacity: int) -> int:
        if self.pipelining(capacity):
            ask = min(ask, capacity // LANES)  # room for the next call in flight
        if self.sent and not completing and ask < SPLIT_MIN:
            ask = 0  # a call after the first carries SPLIT_MIN jobs at least
        return ask

    def exchange(self, done: list[Delivery], ask: int, starting: Sequence[Delivery]) -> tuple[int, int]:
        if self.pipe is None:
            # The connection was lost: one call, ridden out until the server answers; then
            # calls go ahead of their replies again, on a new connection.
            answered = super().exchange(done, ask, starting)
            self.pipe = scripts.Pipelined(self.queue.client, "complete_many")
            return answered
        try:
            if done or ask or starting:
                self._send(done, ask, starting)
            # Read a reply once LANES calls are in flight, or when there is nothing more to
            # send: claimed jobs never wait unread (their leases would run on with nobody
            # extending them), and the owner never sleeps with a call in flight.
            if not (done or ask) or len(self.sent) >= LANES:
                return self._receive()
            return ask, ask
        except ServerUnavailable:
            self._lost(done, ask)
            return 0, 0

    def _send(self, done: list[Delivery], ask: int, starting: Sequence[Delivery]) -> None:
        assert self.pipe is not None
        self.life.check()
        claims = [d.claim for d in done]
        started = [d.claim for d in starting]
        _only_claims(claims, "complete_many")
        _only_claims(started, "complete_many")
        keys, args = self.queue._complete_many_call(claims, ask, self.lease_ms, confirm=self.confirm, started=started)
        self.pipe.send(keys, args)
        for delivery in starting:
            delivery.confirmed = True
        self.sent.append((done, ask, starting, time.perf_counter()))
        self.asked += ask

    def _receive(self) -> tuple[int, int]:
        """Read the oldest call's reply and hand it on: (claimed, asked)."""
        assert self.pipe is not None
        reply = self.pipe.receive()
        outcomes, claims = self.queue._complete_many_reply(reply)
        done, ask, _starting, sent = self.sent.popleft()
        self.asked -= ask
        self.on_reply(done, outcomes, claims, time.perf_counter() - sent)
        return len(claims), ask

    def _lost(self, unsent: list[Delivery], asking: int) -> None:
        """The connection of the calls in flight was lost: one call at a time until the
        server answers (the next :meth:`exchange` then pipelines again).

        Whether a call in flight ran is unknown. Its completions are sent again (with
        ``unsent``, the ones of the call being written when it failed, which asked for
        ``asking`` more): the fence answers ``gone`` for one
        that did apply, so none is lost and none is done twice; its confirmations are sent
        again too. Its claims, if it ran, hold leases nobody extends: they run out and the
        jobs are reaped, as a dead worker's are (a burst waits for them: :meth:`Life.unheard`)."""
        assert self.pipe is not None
        in_flight = [d for done, _ask, _starting, _sent in self.sent for d in done]
        if asking or any(ask for _done, ask, _starting, _sent in self.sent):
            self.life.unheard(self.lease_ms)
        for _done, _ask, starting, _sent in self.sent:
            for delivery in starting:
                delivery.confirmed = False
        self.sent.clear()
        self.asked = 0
        self.pipe.close()
        self.pipe = None
        again = in_flight + [d for d in unsent if d not in in_flight]
        if again:
            self.call(again, 0)
            self.pipe = scripts.Pipelined(self.queue.client, "complete_many")  # the server answered

    def close(self) -> None:
        if self.pipe is not None:
            self.pipe.close()  # replies left unread (an abandoned worker): the connection is dropped
