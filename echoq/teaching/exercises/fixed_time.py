"""One fixed server time for the differential judge: both moves read the same ``TIME``.

A move run a few milliseconds after another reads a later ``TIME``, so a judge on the real
clock has to accept a time a millisecond or two off, and then cannot tell a clock slip
(microseconds divided by 999 or 1001 instead of 1000: a millisecond off) from the run's own
pace. Here ``TIME`` answers :data:`SECONDS`, :data:`MICROS` to the learner's move and to
the reference's alike, so a time derived from it must be the reference's millisecond. The
microseconds are chosen so that every such slip shows: 999,500 / 1000 = 999.5 (999 ms),
/ 999 = 1000.5 (1000 ms), / 1001 = 998.5 (998 ms).

In a Lua move each read of the clock written as a call (``redis.call('TIME')``,
``redis.pcall("time")``, ``server.call('TIME')``: Valkey's name for ``redis``) is replaced
in its text, in place, by a call of a function that returns the fixed reply, defined in
front of the move's first line: the lines of the learner's errors stay theirs. A move that
still names TIME another way (a command name in a variable) also gets, there, a lexical
``redis`` and ``server`` whose ``call`` and ``pcall`` answer TIME with the fixed time and
pass every other command on (the global ``redis`` is read-only; a local of the same name is
what the body sees); the price, in that rare case, is that an error a command raises is
reported on line 1, where those functions are. A Python
move gets a client whose ``time()`` and ``execute_command('TIME')`` answer the fixed time.
"""

from __future__ import annotations

import re
from typing import Any

SECONDS, MICROS = 1_800_000_000, 999_500
NOW_MS = SECONDS * 1000 + MICROS // 1000  # the judge's now, as the scripts compute it
# TIME's reply, from a function the prelude defines: a call is an expression (indexed where
# the call was, redis.call('TIME')[1]) and a statement alike, and this one never raises.
CALL = "echoq_fixed_time()"
_REPLY = f"local function echoq_fixed_time() return {{'{SECONDS}', '{MICROS}'}} end "
_TIME_CALL = re.compile(r"""\b(?:redis|server)\s*\.\s*p?call\s*\(\s*(['"])time\1\s*\)""", re.I)
_TIME_NAMED = re.compile(r"""(['"])time\1""", re.I)


def _shadow(real: str) -> str:
    """A table that answers TIME with the fixed time and is ``real`` for everything else."""
    call, pcall = (
        f"function(c, ...) if type(c) == 'string' and string.upper(c) == 'TIME' then return {CALL} end "
        f"return {real}.{how}(c, ...) end"
        for how in ("call", "pcall")
    )
    return f"setmetatable({{call = {call}, pcall = {pcall}}}, {{__index = {real}}})"


# Inside each expression ``redis`` is still the global: a local's scope begins after its statement.
_SHADOW = f"local redis = {_shadow('redis')} local server = server and {_shadow('server')} "


def lua(source: str) -> str:
    """``source`` with TIME answering the fixed time, its lines where they were."""
    fixed = _TIME_CALL.sub(CALL, source)
    prelude = _REPLY + (_SHADOW if _TIME_NAMED.search(fixed) else "")
    if fixed.startswith("#!"):  # a shebang stays the first line
        first, _, rest = fixed.partition("\n")
        return f"{first}\n{prelude}{rest}"
    return prelude + fixed


class Client:
    """``client`` with TIME answering the fixed time (for a Python move)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def time(self) -> tuple[int, int]:
        return SECONDS, MICROS

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args and str(args[0]).upper() == "TIME":
            return (SECONDS, MICROS)
        return self._client.execute_command(*args, **options)
