"""Who the learner is, and the one place the kit names a learner's queues.

On a shared server (a workshop: see ``python -m echoq.teaching workshop``) each learner has a
namespace, and every queue the kit makes for them -- lessons, labs, exercises, their
progress -- is named ``<learner>.<queue>``: its keys all match ``emq:{<learner>.*``, the one
pattern their ACL user may touch. Alone (no learner id), names are left as they are.

The learner id comes from ``ECHOQ_LEARNER``, else from ``JUPYTERHUB_USER`` (made safe for a
key: see :func:`from_hub_user`), else there is none: solo mode.
"""

from __future__ import annotations

import hashlib
import os
import re

from ..keyspace import NAMESPACE_RE, check_namespace, check_queue_name

__all__ = [
    "learner_id", "from_hub_user", "normalize_hub_user", "queue_name", "own_lua_client", "memory_cap",
    "over_the_cap_line",
]  # fmt: skip

_private = None  # this kernel's private server for a learner's own Lua (see own_lua_client)


def own_lua_client():  # noqa: ANN201 (an echoq client)
    """Where the Lua a learner writes runs. On a class server (a learner id and
    ``VALKEY_URL``) learners may run only the scripts the instructor loaded (Valkey cannot
    bound a script's heap or its time inside a C call, so one learner's Lua could stop the
    class): theirs runs on a private server of this kernel's own, started on first use: a
    unix socket in a folder of the learner's own (mode 0700, no TCP port: no other user can
    connect to it), removed at exit, or at their next start if the kernel was killed (see
    :func:`echoq.server.start_server`'s ``private``). Anywhere else, the server
    :func:`echoq.connect` gives."""
    global _private
    from .. import server

    if not (os.environ.get("VALKEY_URL", "").strip() and learner_id()):
        return server.connect()
    if _private is None or not _private.alive():
        import atexit

        _private = server.start_server(private=True)
        atexit.register(_private.stop)
    return server.connect(_private.url)


def normalize_hub_user(user: str) -> str:
    """A user name as JupyterHub keeps it: its default ``Authenticator.normalize_username``
    lowercases every name at login (``Katherine.Johnson@nasa.gov`` logs in as
    ``katherine.johnson@nasa.gov``), so a roster must be matched in that form. (A hub with a
    ``username_map`` or its own authenticator: write the names it ends up with.)"""
    return user.strip().lower()


def from_hub_user(user: str) -> str:
    """A namespace for a JupyterHub user name, taken as the hub normalises it
    (:func:`normalize_hub_user`). A name that is then a valid namespace is kept; any other
    (``Ada.Lovelace@uni.edu``) becomes its safe letters plus a short hash of the whole name,
    so two different users can never share a namespace."""
    user = normalize_hub_user(user)
    if NAMESPACE_RE.match(user):
        return user
    safe = re.sub(r"[^a-z0-9_-]+", "-", user.lower()).strip("-_")[:20] or "user"
    return f"{safe}-{hashlib.sha1(user.encode()).hexdigest()[:8]}"


def learner_id() -> str | None:
    """``ECHOQ_LEARNER`` (checked: a bad one is a one-line error), else the JupyterHub user
    made safe, else None (solo mode)."""
    given = os.environ.get("ECHOQ_LEARNER", "").strip()
    if given:
        return check_namespace(given)
    hub_user = os.environ.get("JUPYTERHUB_USER", "").strip()
    return from_hub_user(hub_user) if hub_user else None


def queue_name(name: str) -> str:
    """``name`` in the learner's namespace (``alice.lesson-02``), or ``name`` in solo mode."""
    learner = learner_id()
    return check_queue_name(f"{learner}.{name}" if learner else name)


def memory_cap() -> int | None:
    """The memory cap of this process in bytes (``RLIMIT_DATA``, set by the class hub's
    spawner), or None: none."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_DATA)
    return None if soft == resource.RLIM_INFINITY else soft


def over_the_cap_line() -> str:
    """What a learner sees when an allocation of their kernel is refused."""
    cap = memory_cap()
    if cap is None:
        return "that allocation was refused: more memory than this kernel may have; free what it holds (del ...)"
    return (
        f"this kernel reached its memory cap ({cap / 2**30:.1f} GiB, set by the class hub for each of your "
        "processes): that allocation was refused, nobody else was touched; free what it holds (del ...) or "
        "restart the kernel"
    )
