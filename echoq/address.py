"""Server addresses: reading a URL, hiding its password, and naming a client's server.

Everything here is text about where a server is, and nothing here connects: the one
place that reads ``VALKEY_URL``'s forms (a single server's ``redis://``, ``rediss://``,
``unix://`` and their ``valkey`` spellings, a cluster's ``redis+cluster://``), hides a
password before a URL is shown (:func:`redact`), and describes a connected client's
server without its password (:func:`describe_client`). :mod:`echoq.server` connects.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TypeAlias
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import RedisCluster

from .errors import ServerUnavailable

__all__ = [
    "Client",
    "try_instead",
    "DEFAULT_SOURCE",
    "redact",
    "plain_url",
    "describe_client",
    "connection_settings",
    "ClusterURL",
    "CLUSTER_FORM",
    "is_cluster",
    "is_cluster_url",
    "parse_cluster_url",
]

# What echoq.connect() hands back: one server's client, or a cluster client that routes each
# command to the master serving its key's slot.
Client: TypeAlias = redis.Redis | RedisCluster

# Which server a process uses when neither VALKEY_URL nor ECHOQ_VALKEY says: 'user' (the
# library's) or 'throwaway' (the kit's choice). echoq.server.choose_default sets it; it is kept
# here, beside the advice that depends on it.
DEFAULT_SOURCE = {"source": "user"}
_YOUR_URL = "set VALKEY_URL to a server you run (redis://:password@host:6379/0)"


def try_instead() -> str:
    """What a user can do about a server that cannot be reached, in words true for where this
    process takes its server from: VALKEY_URL, ECHOQ_VALKEY, or neither (the user server, or
    the kit's throwaway server)."""
    if os.environ.get("VALKEY_URL", "").strip():
        return "fix VALKEY_URL, or unset it to use your user server (python -m echoq server start)"
    chosen = os.environ.get("ECHOQ_VALKEY", "").strip().lower()
    if chosen:
        return f"unset ECHOQ_VALKEY (now {chosen!r}) to use your user server, or {_YOUR_URL}"
    if DEFAULT_SOURCE["source"] == "throwaway":
        return f"echoq.connect() starts a new server of this process's own, or {_YOUR_URL}"
    return f"python -m echoq server status says whether your user server runs (server start starts it), or {_YOUR_URL}"


_QUERY_PASSWORD = re.compile(r"[?&]password=", re.IGNORECASE)


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``, whatever characters the password holds.

    Two places can hold one: the user part (``user:pass@`` or ``:pass@``), which runs from
    the first ``:`` after ``//`` to the LAST ``@`` (a user part with no ``:`` at all may be
    a password written bare, ``secret@``: it is hidden whole); and a ``password=`` query parameter,
    hidden with everything after it, since a password written as is (not percent-encoded)
    may itself hold ``&``, ``#`` or ``@``. Both are hidden whenever either reading applies,
    so a URL whose raw password holds ``@ / ? #`` loses more than the password, never less.
    """
    start = url.find("://") + 3 if "://" in url else 0
    hidden: list[tuple[int, int]] = []
    at = url.rfind("@")
    if at >= start:
        # user:password@, or :password@; a user part with no ':' may be a bare password
        # (redis://secret@host): it is hidden whole.
        colon = url.find(":", start, at)
        hidden.append((colon + 1 if colon >= 0 else start, at))
    query = _QUERY_PASSWORD.search(url, start)
    if query is not None:
        hidden.append((query.end(), len(url)))
    if not hidden:
        return url
    shown, end = [], -1
    for begin, stop in sorted(hidden):
        if begin > end:  # a stretch of its own
            shown.append(url[max(end, 0) : begin] + "***")
            end = stop
        else:  # overlaps the stretch before: hide up to the later end
            end = max(end, stop)
    return "".join(shown) + url[end:]


def _database(url: str) -> str | None:
    """The database a redis:// URL's path names when it is not a whole number (the client
    would quietly use database 0 instead), else None. A unix:// path is the socket's."""
    if not url.startswith(("redis://", "rediss://")):
        return None
    path = unquote(urlsplit(url).path).strip("/")
    return None if path == "" or (path.isascii() and path.isdigit()) else path


def _ambiguous(url: str) -> bool:
    """True when ``url`` holds an ``@`` outside its network location, or cannot be split at
    all: a password written as is with ``/ ? # @ [`` in it, which a URL parser would split
    in the wrong place (taking part of the password for a host or a port)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. a '[' that reads as a broken IPv6 host
        return True
    return "@" in parts.path or "@" in parts.query or "@" in parts.fragment


def plain_url(url: str) -> str:
    """``url`` (one server's, not a cluster's) in the form redis-py reads: the ``valkey``
    schemes spelled ``redis``. Refuses, in one line with the password hidden, a URL a parser
    would split in the wrong place and a database that is not a number."""
    if not isinstance(url, str):
        raise ServerUnavailable(f"a server URL must be text, got {type(url).__name__}")
    if url.startswith("valkey+unix://"):
        url = "unix://" + url[len("valkey+unix://") :]
    elif url.startswith("valkey://"):
        url = "redis://" + url[len("valkey://") :]
    elif url.startswith("valkeys://"):
        url = "rediss://" + url[len("valkeys://") :]
    if _ambiguous(url):
        raise ServerUnavailable(
            f"VALKEY_URL {redact(url)!r} cannot be split into user, password and host safely (an '@' "
            "after the host?): write the password percent-encoded (urllib.parse.quote(password, safe=''): "
            "@ is %40, / is %2F, ? is %3F, # is %23, [ is %5B, % is %25)"
        )
    database = _database(url)
    if database is not None:
        raise ServerUnavailable(
            f"VALKEY_URL {redact(url)!r} names the database {database!r}, which is not a number; "
            "write one from 0 up (redis://host:6379/0), or none"
        )
    return url


def connection_settings(client: Client) -> dict:
    """The settings ``client`` connects with (host, port, password, socket_timeout ...): a
    plain client's pool's, or a cluster client's (it keeps one pool per node, all alike)."""
    if isinstance(client, RedisCluster):
        return client.nodes_manager.connection_kwargs
    return client.connection_pool.connection_kwargs


def describe_client(client: Client) -> str:
    if isinstance(client, RedisCluster):
        return _describe_cluster_client(client)
    kw = client.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}"
    auth = ":***@" if kw.get("password") else ""
    return f"redis://{auth}{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


# -- Valkey Cluster URLs -------------------------------------------------------------------------

CLUSTER_SCHEMES = {
    "redis+cluster": False,
    "valkey+cluster": False,
    "rediss+cluster": True,  # TLS
    "valkeys+cluster": True,
}
CLUSTER_FORM = "redis+cluster://[user]:password@host:port[,host:port...]"


@dataclass(frozen=True)
class ClusterURL:
    """A parsed cluster URL: the seed nodes, the credentials, and whether to use TLS."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False


def is_cluster_url(url: str) -> bool:
    """True for ``redis+cluster://``, ``rediss+cluster://``, ``valkey+cluster://``, ``valkeys+cluster://``."""
    scheme, sep, _ = url.strip().partition("://")
    return bool(sep) and scheme.lower() in CLUSTER_SCHEMES


def is_cluster(client: object) -> bool:
    """True if ``client`` is a cluster client (what :func:`connect` returns for a cluster URL)."""
    return isinstance(client, RedisCluster)


def _url_problem(url: str, what: str) -> ServerUnavailable:
    return ServerUnavailable(f"VALKEY_URL {redact(url)!r} {what}; the cluster form is {CLUSTER_FORM}")


def parse_cluster_url(url: str) -> ClusterURL:
    """Read ``redis+cluster://[user]:password@host:port[,host:port...]``.

    Name several seed nodes so a client started while one of them is down (a master just
    killed, say) still finds the cluster; any one live node is enough. The port defaults to
    6379; there is no database number but 0 and no query: a cluster has one keyspace, and
    the password goes in the user part (percent-encoded if it holds ``@``, ``:`` or ``,``).
    """
    scheme, _, rest = url.strip().partition("://")
    tls = CLUSTER_SCHEMES.get(scheme.lower())
    if tls is None:
        raise _url_problem(url, "is not a cluster URL")
    rest, _, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    if question or fragment:
        raise _url_problem(url, "has a query or a fragment, which a cluster URL does not take")
    netloc, slash, path = rest.partition("/")
    if slash and path not in ("", "0"):
        raise _url_problem(url, f"names database {path!r}, but a cluster has database 0 only")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    seeds: list[tuple[str, int]] = []
    for entry in hosts.split(","):
        entry = entry.strip()
        if entry.startswith("["):  # [::1]:7000
            host, _, port_text = entry[1:].partition("]")
            port_text = port_text.removeprefix(":")
        else:
            host, _, port_text = entry.partition(":")
        if not host:
            raise _url_problem(url, "has an empty host in its host list")
        try:
            port = int(port_text) if port_text else 6379
        except ValueError:
            raise _url_problem(url, f"has a port that is not a number ({port_text!r})") from None
        if not 0 < port < 65536:
            raise _url_problem(url, f"has a port out of range ({port})")
        seeds.append((host, port))
    return ClusterURL(tuple(seeds), username, password, tls)


def _describe_cluster_client(client: RedisCluster) -> str:
    auth = ":***@" if connection_settings(client).get("password") else ""
    seeds = ",".join(node.name for node in client.get_primaries()) or "?"
    return f"redis+cluster://{auth}{seeds}"
