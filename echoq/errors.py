"""Typed errors. Each message is one line: what was wrong, and what to do about it."""

from __future__ import annotations


class EchoqError(Exception):
    """Base of every error echoq raises on purpose."""


class InvalidJobId(EchoqError, ValueError):
    """An id that is not a branded JOB id (``JOB`` + 26 Crockford base-32 characters)."""


class InvalidQueueName(EchoqError, ValueError):
    """A queue name outside ``[A-Za-z0-9_-]``, empty, or longer than 64 characters."""


class InvalidArgument(EchoqError, ValueError):
    """A number or option out of its range (a negative lease, a zero limit, ...)."""


class ServerUnavailable(EchoqError, ConnectionError):
    """Valkey cannot be reached, refused the password, or went away."""


class DockerUnavailable(ServerUnavailable):
    """``ECHOQ_VALKEY=docker`` was asked for but no Docker engine answered."""


class ScriptFailed(EchoqError, RuntimeError):
    """A Lua script replied with an error code the Python side does not expect."""
