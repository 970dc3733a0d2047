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
move gets a client whose ``time()`` and ``execute_command('TIME')`` answer the fixed time,
and so do its pipelines and transactions: a TIME queued in a pipeline (MULTI/EXEC or not)
goes to the server as an ECHO in its place, whose reply ``execute()`` gives as the fixed
time, so every other command keeps its place and the block stays one block.
"""

from __future__ import annotations

import re
from typing import Any

from ..proxies import ClientProxy, PipelineProxy

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


class Client(ClientProxy):
    """``client`` with TIME answering the fixed time (for a Python move)."""

    def time(self) -> tuple[int, int]:
        return SECONDS, MICROS

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args and str(args[0]).upper() == "TIME":
            return (SECONDS, MICROS)
        return self._client.execute_command(*args, **options)

    def pipeline(self, *args: Any, **kwargs: Any) -> Pipeline:
        return Pipeline(self._client.pipeline(*args, **kwargs))


class Pipeline(PipelineProxy):
    """A redis-py pipeline whose TIME answers the fixed time, queued or (after WATCH) at once."""

    def __init__(self, pipe: Any) -> None:
        super().__init__(pipe)
        self._fixed: set[int] = set()  # the places in the queue that hold a TIME

    def time(self) -> Any:
        return self.execute_command("TIME")

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args and str(args[0]).upper() == "TIME":
            if self._pipe.watching and not self._pipe.explicit_transaction:
                return (SECONDS, MICROS)  # WATCH mode runs each command at once
            self._pipe.execute_command("ECHO", "TIME")
            self._fixed.add(len(self._pipe.command_stack) - 1)
            return self
        return self._answer("execute_command", args, options, self._pipe.execute_command(*args, **options))

    def execute(self, *args: Any, **kwargs: Any) -> list[Any]:
        fixed, self._fixed = self._fixed, set()
        replies = self._pipe.execute(*args, **kwargs)
        return [(SECONDS, MICROS) if n in fixed else reply for n, reply in enumerate(replies)]

    def _forget(self) -> None:
        self._fixed = set()
