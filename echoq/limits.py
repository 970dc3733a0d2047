"""Every numeric bound of the library, and the one helper that checks a number against one.

The same bounds check every script's ARGV before its first write (``lua/includes/args.lua``):
the registry writes this module's values into the scripts it sends (:data:`LUA_CONSTANTS`,
named ``{{NAME}}`` in the Lua), so the two sides are one source.
A bound is part of the contract: a lease longer than a day, say, is refused on both sides
with a one-line error, so a typo can never park a job for years.

=================  ==================  ==================================================
bound              range               why this size
=================  ==================  ==================================================
``lease_ms``       1 .. 86400000       a day; a longer job extends its lease (``extend``)
``delay_ms``       0 .. 604800000      a week of delay or retry backoff
``count``          1 .. 1000           jobs claimed or completed in one call: keeps a call short
``limit``          1 .. 10000          jobs one sweep or read may touch in one call
``max_attempts``   1 .. 1000           tries before a failing job is dead-lettered
``max_stalled``    1 .. 1000           the stall count that dead-letters a job: the N-th is fatal
``keep_done``      0 .. 1000000        completed ids remembered for duplicate refusal
``keep_dead``      0 .. 1000000        dead jobs kept (rows and all); older ones are evicted
``keep_given_ms``  0 .. 604800000      a week: how long an id a producer gave is a duplicate
``keep_outbox``    1 .. 1000000        effect records the outbox keeps
``token``          1 .. 2147483647     a fencing token (the row's token after a claim)
``payload_bytes``  0 .. 1048576        a job's payload: UTF-8 text of at most 1 MiB
``text_bytes``     0 .. 4096           an error kept on a row, an effect's record
=================  ==================  ==================================================

A server may be given a smaller payload cap than ``payload_bytes`` (a workshop's class
server: 64 KiB, stated in its key ``emq:payload_bytes``; see :mod:`echoq.scripts.registry`):
the scripts loaded there refuse a bigger payload, and one call carries at most
:data:`CALL_PAYLOADS` payloads' worth of bytes (:data:`CALL_PAYLOAD_BYTES` is that figure
for a server without one: no limit beyond ``count`` x ``payload_bytes``). Checking a
payload's UTF-8 costs the server time per byte; so no call can hold it for long.

:data:`CLOCK_AHEAD_MS` (60 s) is how far ahead of the server's clock a JOB id may have
been minted (``lua/includes/job_id.lua``). :data:`WAKE_CAP` is the most wakes
``emq:{q}:wake`` holds (``lua/includes/wake.lua``); :data:`UNSTARTED_MAX` the recoveries of
a job whose claims were never confirmed started before it is dead-lettered
(``lua/stalled_check.lua``).
"""

from __future__ import annotations

import math
from typing import Final

from .errors import InvalidArgument, InvalidPayload

__all__ = [
    "BOUNDS",
    "CLOCK_AHEAD_MS",
    "WAKE_CAP",
    "UNSTARTED_MAX",
    "SWEEP_MAX",
    "CALL_PAYLOADS",
    "CALL_PAYLOAD_BYTES",
    "LUA_CONSTANTS",
    "whole",
    "fraction",
    "check",
    "payload",
    "text",
]

BOUNDS: Final[dict[str, tuple[int, int]]] = {
    "lease_ms": (1, 86_400_000),
    "delay_ms": (0, 604_800_000),
    "count": (1, 1_000),
    "limit": (1, 10_000),
    "max_attempts": (1, 1_000),
    "max_stalled": (1, 1_000),
    "keep_done": (0, 1_000_000),
    "keep_dead": (0, 1_000_000),
    "keep_given_ms": (0, 604_800_000),
    "keep_outbox": (1, 1_000_000),
    "token": (1, 2_147_483_647),
    "payload_bytes": (0, 1_048_576),
    "text_bytes": (0, 4_096),
}

CLOCK_AHEAD_MS: Final[int] = 60_000

# Each wake wakes one blocked worker; a burst of more jobs than this wakes this many.
WAKE_CAP: Final[int] = 64

# Enough recoveries to ride out about 25 s of lost claim replies under a 500 ms lease (a
# claim every lease), and few enough that a job no worker ever starts does not loop forever.
UNSTARTED_MAX: Final[int] = 50

# Most entries a script moves in a sweep of its own in one call (due retries promoted, extra
# ids popped past corrupt ones, done and dead ids forgotten): a long backlog takes a few calls,
# and no call holds the server for long.
SWEEP_MAX: Final[int] = 1_000

# On a server with a payload cap of N bytes, one call carries at most this many times N
# bytes of payloads (a claim hands out fewer jobs, a batch enqueue is refused): a call's
# UTF-8 checks then take the server a bounded time. CALL_PAYLOAD_BYTES is the budget of a
# server without a cap: every job a call may move, each at the largest payload.
CALL_PAYLOADS: Final[int] = 16
CALL_PAYLOAD_BYTES: Final[int] = BOUNDS["count"][1] * BOUNDS["payload_bytes"][1]

# What the registry writes into a script where it names ``{{NAME}}`` (echoq.scripts.registry).
LUA_CONSTANTS: Final[dict[str, int | dict[str, tuple[int, int]]]] = {
    "BOUNDS": BOUNDS,
    "CLOCK_AHEAD_MS": CLOCK_AHEAD_MS,
    "WAKE_CAP": WAKE_CAP,
    "UNSTARTED_MAX": UNSTARTED_MAX,
    "SWEEP_MAX": SWEEP_MAX,
    "CALL_PAYLOAD_BYTES": CALL_PAYLOAD_BYTES,
}


def whole(name: str, value: object, low: int, high: int | None = None, *, unit: str = "") -> int:
    """``value`` if it is a whole number in ``low..high`` (``high`` None: no upper bound),
    else :class:`InvalidArgument` in one line naming ``name``, the range and what was given.

    A bool is refused (``True`` is an int in Python, and never what a caller meant)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"between {low:,} and {high:,}" if high is not None else f">= {low:,}"
        unit = f" {unit}" if unit else ""
        raise InvalidArgument(f"{name} must be a whole number{unit} {span}, got {_shown(value)}")
    return value


def fraction(name: str, value: object, low: float, high: float | None = None) -> float:
    """``value`` if it is a finite real number in ``low..high``, else :class:`InvalidArgument`."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= low
        and (high is None or value <= high)
    )
    if not ok:
        span = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidArgument(f"{name} must be a number {span}, got {_shown(value)}")
    return float(value)  # type: ignore[arg-type]


def check(bound: str, value: object, name: str | None = None) -> int:
    """Check ``value`` against the library bound of that name (``check('lease_ms', 500)``)."""
    low, high = BOUNDS[bound]
    return whole(name or bound, value, low, high, unit="of milliseconds" if bound.endswith("_ms") else "")


def payload(value: object) -> str:
    """A job's payload as the library stores it: ``str``, or ``bytes`` that are UTF-8, of
    at most ``payload_bytes`` bytes once encoded; else :class:`InvalidPayload` in one line.

    Payloads are text because every reader decodes them (a handler gets ``str``); binary
    data goes in base64, or somewhere else with a reference in the payload."""
    return _text("payload", value, "payload_bytes", InvalidPayload)


def text(name: str, value: object, *, shorten: bool = False) -> str:
    """Text the library keeps next to a job (an error, an effect's record): ``str`` that
    encodes as UTF-8 within ``text_bytes``. With ``shorten``, a longer text is cut at a
    character boundary and characters UTF-8 cannot hold (lone surrogates) become ``?``,
    instead of being refused."""
    if shorten and isinstance(value, str):
        high = BOUNDS["text_bytes"][1]
        raw = value.encode("utf-8", "replace")
        if len(raw) > high:
            raw = raw[:high].decode("utf-8", "ignore").encode()
        return raw.decode()
    return _text(name, value, "text_bytes", InvalidArgument)


def _text(name: str, value: object, bound: str, error: type[InvalidArgument] | type[InvalidPayload]) -> str:
    high = BOUNDS[bound][1]
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(
                f"{name} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at {exc.start}); "
                "echoq stores text: encode binary data (base64), or store it elsewhere and pass a reference"
            ) from None
    if not isinstance(value, str):
        raise error(f"{name} must be str (UTF-8 text), got {type(value).__name__}; serialise it first (json.dumps)")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise error(
            f"{name} has a character UTF-8 cannot encode ({value[exc.start]!r} at {exc.start}, a lone surrogate); "
            "echoq stores UTF-8 text"
        ) from None
    if size > high:
        raise error(
            f"{name} is {size:,} bytes of UTF-8, more than the {high:,} allowed; "
            "store it elsewhere and pass a reference"
        )
    return value


def _shown(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
