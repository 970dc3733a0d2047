"""Branded JOB ids whose byte order is mint order.

``JOB`` + 10 characters of milliseconds since the epoch + 16 characters of a counter seeded
at random, all in Crockford base 32 (``0-9 A-Z`` less ``I L O U``), whose characters sort
in ASCII the same as their values. One :class:`Minter` hands out ids that each sort after
the one before, even within one millisecond; ids from different minters sort by the
millisecond they were minted in.

**Whose clock.** The millisecond is the minter's clock. :func:`new_job_id` reads this
machine's; :meth:`echoq.Queue.enqueue` mints on the *server's* clock instead
(:class:`echoq.clock.ServerClock`). Which job is claimed first does not depend on either:
the pending set is scored by the order jobs reached the server (``lua/includes/arrival.lua``),
so a producer whose clock runs a day slow cannot push its jobs ahead of everyone else's, nor
one that runs fast starve its own. The scripts refuse an id minted more than
``limits.CLOCK_AHEAD_MS`` (60 s) ahead of the server's clock (:class:`echoq.ClockSkew`),
whoever minted it: its producer's clock is wrong, and the id would carry that time into
everything that reads it.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable

from .errors import InvalidJobId

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
JOB_ID_RE = re.compile(r"JOB[0-9A-HJKMNP-TV-Z]{26}")
JOB_ID_EXAMPLE = "JOB01JCXZ8Q0M7Z4Y2W6V9T3R5P1N"

_RANDOM_BITS = 80


def _b32(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 32)
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))


def local_now_ms() -> int:
    """This machine's clock, in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class Minter:
    """Mints JOB ids on the clock ``now_ms``; each id sorts after the one before."""

    def __init__(self, now_ms: Callable[[], int] = local_now_ms) -> None:
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def mint(self, now_ms: int | None = None) -> str:
        """A fresh id, minted at ``now_ms`` (default: this minter's clock)."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            if now_ms <= self._last_ms:
                # Same (or an earlier, if the clock stepped back) millisecond: keep the last
                # millisecond and count up, so mint order still equals byte order.
                now_ms = self._last_ms
                self._last_random += 1
            else:
                self._last_random = secrets.randbits(_RANDOM_BITS - 1)  # headroom for counting up
            self._last_ms = now_ms
            return "JOB" + _b32(now_ms, 10) + _b32(self._last_random, 16)


_local = Minter()


def new_job_id() -> str:
    """Mint a fresh JOB id on this machine's clock, greater than every id minted by this
    function in this process before. (``Queue.enqueue`` mints on the server's clock.)"""
    return _local.mint()


def minted_ms(job_id: str) -> int:
    """The millisecond (Unix epoch, on its minter's clock) a JOB id was minted at."""
    value = 0
    for char in check_job_id(job_id)[3:13]:
        value = value * 32 + ALPHABET.index(char)
    return value


def is_job_id(value: object) -> bool:
    return isinstance(value, str) and JOB_ID_RE.fullmatch(value) is not None


def check_job_id(value: object) -> str:
    """Return ``value`` if it is a branded JOB id, else raise :class:`InvalidJobId`."""
    if not is_job_id(value):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise InvalidJobId(
            f"{shown} is not a JOB id: a JOB id is 'JOB' followed by 26 characters of "
            f"0-9 and A-Z without I, L, O, U (e.g. {JOB_ID_EXAMPLE}); mint one with new_job_id()"
        )
    return value  # type: ignore[return-value]
