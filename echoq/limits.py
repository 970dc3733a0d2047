"""Every numeric bound of the library, and the one helper that checks a number against one.

The same bounds are written into ``lua/includes/args.lua``, which every script uses to
check its ARGV before its first write (``tests/test_limits.py`` keeps the two in step).
A bound is part of the contract: a lease longer than a day, say, is refused on both sides
with a one-line error, so a typo can never park a job for years.

=================  ==============  =====================================================
bound              range           why this size
=================  ==============  =====================================================
``lease_ms``       1 .. 86400000   a day; a longer job renews its lease (``extend``)
``delay_ms``       0 .. 604800000  a week of delay or retry backoff
``count``          1 .. 1000       jobs claimed or finished in one call: keeps a call short
``limit``          1 .. 10000      jobs one sweep or read may touch in one call
``max_attempts``   1 .. 1000       deliveries before a failing job is dead-lettered
``max_stalled``    1 .. 1000       the stall count that dead-letters a job: the N-th is fatal
``keep_done``      0 .. 1000000    completed ids remembered for duplicate refusal
=================  ==============  =====================================================
"""

from __future__ import annotations

import math
from typing import Final

from .errors import InvalidArgument

__all__ = ["BOUNDS", "whole", "fraction", "check"]

BOUNDS: Final[dict[str, tuple[int, int]]] = {
    "lease_ms": (1, 86_400_000),
    "delay_ms": (0, 604_800_000),
    "count": (1, 1_000),
    "limit": (1, 10_000),
    "max_attempts": (1, 1_000),
    "max_stalled": (1, 1_000),
    "keep_done": (0, 1_000_000),
}


def whole(name: str, value: object, low: int, high: int | None = None, *, unit: str = "") -> int:
    """``value`` if it is a whole number in ``low..high`` (``high`` None: no upper bound),
    else :class:`InvalidArgument` in one line naming ``name``, the range and what was given.

    A bool is refused (``True`` is an int in Python, and never what a caller meant)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"between {low:,} and {high:,}" if high is not None else f">= {low:,}"
        unit = f" {unit}" if unit else ""
        raise InvalidArgument(f"{name} must be a whole number{unit} {span}, got {value!r}")
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
        raise InvalidArgument(f"{name} must be a number {span}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check(bound: str, value: object, name: str | None = None) -> int:
    """Check ``value`` against the library bound of that name (``check('lease_ms', 500)``)."""
    low, high = BOUNDS[bound]
    return whole(name or bound, value, low, high, unit="of milliseconds" if bound.endswith("_ms") else "")
