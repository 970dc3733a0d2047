"""Typed errors. Each message is one line: what was wrong, and what to do about it.

:data:`SCRIPT_ERRORS` is the one table of the error codes the Lua scripts reply with
(``redis.error_reply('BADARG ...')``): the code is the first word of the reply, and the
registry (:mod:`echoq.scripts`) raises the class the table names for it.
"""

from __future__ import annotations


class EchoqError(Exception):
    """Base of every error echoq raises on purpose."""


class InvalidJobId(EchoqError, ValueError):
    """An id that is not a branded JOB id (``JOB`` + 26 Crockford base-32 characters)."""


class InvalidQueueName(EchoqError, ValueError):
    """A queue name outside ``[A-Za-z0-9_-]``, empty, or longer than 64 characters."""


class InvalidArgument(EchoqError, ValueError):
    """A number or option out of its range (a negative lease, a zero limit, ...)."""


class InvalidPayload(InvalidArgument):
    """A payload the library will not store: not UTF-8 text, or more than 1 MiB of it.
    Nothing was written. Encode binary data (base64), or store big data elsewhere and
    enqueue a reference."""


class ClockSkew(EchoqError, ValueError):
    """A JOB id minted more than ``echoq.limits.CLOCK_AHEAD_MS`` ahead of the server's
    clock. Its producer's clock runs fast; fix it (NTP), or let :meth:`echoq.Queue.enqueue`
    mint the id (it follows the server's clock). Nothing was written."""


class WrongKeyType(EchoqError, TypeError):
    """A queue key holds another type than echoq writes there (something else wrote it):
    the script refused the whole call before any write. Rename or delete that key."""


class ServerUnavailable(EchoqError, ConnectionError):
    """Valkey cannot be reached, refused the password, or went away."""


class ServerBusy(ServerUnavailable):
    """The server answered BUSY: a script (another client's, maybe) has run past the
    server's busy-script time limit, and until it ends or is killed (``SCRIPT KILL``) the
    server runs nothing else. The command refused did not run; sending it again later is
    safe. A Worker rides it out as it rides out a lost server."""


class DockerUnavailable(ServerUnavailable):
    """``ECHOQ_VALKEY=docker`` was asked for but no Docker engine answered."""


class PermissionDenied(EchoqError, PermissionError):
    """The server's ACL refused a command or a key: this user may not touch it (on a shared
    workshop server, a learner reaching outside their own namespace). The message names the
    user, the command or the key, and what to do."""


class NotReplicated(EchoqError):
    """A move asked for durability (``Queue(..., durability=Durability(...))``) was applied on
    the master, but fewer replicas than asked acknowledged it in time: it may be lost if
    that master fails before it replicates. ``acknowledged`` / ``wanted`` count replicas;
    ``reply`` is the script's reply (what the move did on the master)."""

    def __init__(self, message: str, *, acknowledged: int = 0, wanted: int = 0, reply: object = None) -> None:
        super().__init__(message)
        self.acknowledged = acknowledged
        self.wanted = wanted
        self.reply = reply


class ScriptFailed(EchoqError, RuntimeError):
    """A Lua script replied with an error code the Python side does not expect."""


# code -> (class raised, what the code means). Every code a script in lua/ replies with is
# here; tests/test_layers.py fails on a code used in lua/ but missing from this table.
SCRIPT_ERRORS: dict[str, tuple[type[EchoqError], str]] = {
    "BADARG": (InvalidArgument, "an argument or a key is out of range, or KEYS mix two queues"),
    "BADID": (InvalidJobId, "an id is not a JOB id, or a row key does not belong to the id"),
    "BADPAYLOAD": (InvalidPayload, "a payload is not UTF-8 text, or is longer than 1 MiB"),
    "BADCLOCK": (ClockSkew, "a JOB id was minted too far ahead of the server's clock"),
    "NOPERM": (PermissionDenied, "the server's ACL refused a key or a command to this user"),
    "BADKEY": (WrongKeyType, "a queue key holds another type than echoq writes there"),
}

# How an ACL refusal inside a script reads (the code is lost on the way out): Valkey, Redis 7.
ACL_REFUSALS = (
    "ACL failure in script",
    "can't access at least one of the keys",
    "can't run this command",
    "no permissions",
)


class OutOfMemory(EchoqError, MemoryError):
    """The server is at its ``maxmemory`` and refused a write (its reply began ``OOM``):
    nothing of the call ran, and sending it again once memory is free is safe. Free memory
    (``python -m echoq dead purge --all``, or delete keys you no longer need), or raise the
    server's ``maxmemory``; on a workshop's class server, tell the instructor (``workshop
    status`` shows the memory; ``--maxmemory`` on the next ``up`` raises it)."""
