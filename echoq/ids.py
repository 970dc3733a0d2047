"""Branded JOB ids whose byte order is mint order.

``JOB`` + 10 characters of milliseconds since the epoch + 16 characters of a per-process
counter seeded at random, all in Crockford base 32 (``0-9 A-Z`` less ``I L O U``), whose
characters sort in ASCII the same as their values. Within one process every id is greater
than the one before, even within one millisecond; across processes ids sort by the
millisecond they were minted in. That is what lets the pending set hold every id at score 0:
ZPOPMIN then takes the byte-smallest id, which is the oldest.
"""

from __future__ import annotations

import re
import secrets
import threading
import time

from .errors import InvalidJobId

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
JOB_ID_RE = re.compile(r"^JOB[0-9A-HJKMNP-TV-Z]{26}$")
JOB_ID_EXAMPLE = "JOB01JCXZ8Q0M7Z4Y2W6V9T3R5P1N"

_RANDOM_BITS = 80
_lock = threading.Lock()
_last_ms = -1
_last_random = 0


def _b32(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 32)
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))


def new_job_id() -> str:
    """Mint a fresh JOB id, greater than every id this process minted before."""
    global _last_ms, _last_random
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms <= _last_ms:
            # Same (or an earlier, if the clock stepped back) millisecond: keep the last
            # millisecond and count up, so mint order still equals byte order.
            now_ms = _last_ms
            _last_random += 1
        else:
            _last_random = secrets.randbits(_RANDOM_BITS - 1)  # headroom for counting up
        _last_ms = now_ms
        return "JOB" + _b32(now_ms, 10) + _b32(_last_random, 16)


def is_job_id(value: object) -> bool:
    return isinstance(value, str) and JOB_ID_RE.match(value) is not None


def check_job_id(value: object) -> str:
    """Return ``value`` if it is a branded JOB id, else raise :class:`InvalidJobId`."""
    if not is_job_id(value):
        raise InvalidJobId(
            f"{value!r} is not a JOB id: a JOB id is 'JOB' followed by 26 characters of "
            f"0-9 and A-Z without I, L, O, U (e.g. {JOB_ID_EXAMPLE}); mint one with new_job_id()"
        )
    return value  # type: ignore[return-value]
