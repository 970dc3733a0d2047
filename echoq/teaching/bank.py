"""A stand-in payment service for lesson 03: an effect OUTSIDE the queue.

The effects ledger (``echoq.Effects``) can make an effect happen once because the effect
and its record are written to Valkey in one script. A real effect -- a card charged at a
bank, an email handed to a mail provider -- happens in another system, and no script can
write there and in Valkey at once. Record first and die before the charge: the charge is
lost. Charge first and die before the record: it is charged again. What makes the repeat
harmless is the other system itself: the request carries an **idempotency key**, and the
service remembers the keys it has charged.

:class:`Bank` is that other system, kept on the same server under its own keys
(``emq:{<name>}:charges`` and ``emq:{<name>}:idempotency``, built by
:class:`echoq.Keyspace`) so a lesson can count its charges. It knows nothing of jobs,
leases or attempts; ``lua/teaching/bank_charge.lua`` checks the key and charges in one step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

import redis

from .. import scripts
from ..errors import InvalidArgument
from ..keyspace import Keyspace
from ..queue import _text
from . import processes

__all__ = ["Bank", "Charge", "ChargeOutcome", "IdempotencyConflict"]

_CARD = re.compile(r"^[A-Za-z0-9-]{1,32}$")


class ChargeOutcome(StrEnum):
    CHARGED = "charged"
    REPLAYED = "replayed"  # the idempotency key was known: nothing was charged


class IdempotencyConflict(InvalidArgument):
    """The idempotency key was used before for another card or amount."""


@dataclass(frozen=True)
class Charge:
    """What the bank answered: the charge's number, and whether this request charged."""

    number: int
    outcome: ChargeOutcome


@dataclass(frozen=True)
class Entry:
    """One charge in the bank's record."""

    card: str
    cents: int
    key: str | None


class Bank:
    """A payment service with its own record, named ``name`` (a learner's name is namespaced
    by the caller: see :func:`echoq.teaching.learner.queue_name`)."""

    def __init__(self, client: redis.Redis, name: str = "bank") -> None:
        self.client = client
        self.keys = Keyspace(name)
        self.charges_key = self.keys.prefix + "charges"
        self.idempotency_key = self.keys.prefix + "idempotency"

    @property
    def name(self) -> str:
        return self.keys.queue

    def __repr__(self) -> str:
        return f"Bank({self.name!r}: {len(self.record())} charges)"

    def charge(self, card: str, cents: int, *, idempotency_key: str | None = None) -> Charge:
        """Charge ``cents`` to ``card``. With an ``idempotency_key`` the bank charges that key
        once: a repeat charges nothing and returns the first charge (``REPLAYED``)."""
        if not isinstance(card, str) or not _CARD.match(card):
            raise InvalidArgument(f"card must be 1 to 32 characters of A-Z, a-z, 0-9 and -, got {card!r}")
        if not isinstance(cents, int) or isinstance(cents, bool) or not 1 <= cents <= 100_000_000:
            raise InvalidArgument(f"cents must be a whole number between 1 and 100000000, got {cents!r}")
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key) <= 200
        ):
            raise InvalidArgument(f"an idempotency key is a string of 1 to 200 characters, got {idempotency_key!r}")
        processes.mark("charge:before")  # in a check's child process: a step it may die at
        reply = scripts.run(
            self.client,
            "teaching/bank_charge",
            [self.charges_key, self.idempotency_key],
            [card, cents, idempotency_key or ""],
        )
        outcome, number = _text(reply[0]), int(reply[1])
        if outcome == "conflict":
            raise IdempotencyConflict(
                f"the idempotency key {idempotency_key!r} was used for charge {number}, another card or amount: "
                "a key names one payment"
            )
        if outcome == "full":
            raise InvalidArgument(f"the bank {self.name!r} holds {number} charges, its limit; call bank.reset()")
        processes.mark("charge:after")
        return Charge(number, ChargeOutcome(outcome))

    def record(self) -> list[Entry]:
        """Every charge made, in order (one read)."""
        entries = []
        for raw in self.client.lrange(self.charges_key, 0, -1):
            card, cents, key = _text(raw).split(" ", 2)
            entries.append(Entry(card, int(cents), None if key == "-" else key))
        return entries

    def charges(self, card: str | None = None) -> int:
        """How many charges were made (to ``card``, if given)."""
        return sum(1 for e in self.record() if card is None or e.card == card)

    def reset(self) -> int:
        """Forget every charge and key; returns how many keys went."""
        return int(self.client.delete(self.charges_key, self.idempotency_key))
