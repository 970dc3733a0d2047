"""The ACL users of a workshop: what a learner and the instructor may do on the shared server.

A **learner** is fenced by what is allowed, never by a list of what is forbidden (each
round of attacks found the next unlisted command). Their user may run:

* the library's and the kit's scripts: ``EVALSHA`` / ``EVALSHA_RO`` of what the admin
  loaded (``up`` loads every script before a learner connects, and again after every
  restart and flush); no Lua of their own (``EVAL``, ``SCRIPT``, ``FUNCTION`` are not on
  the list: Valkey cannot bound a script's heap nor the time one C call takes, so the
  Lua a learner writes runs on their own private server);
* the commands those scripts run inside (:data:`SCRIPT_COMMANDS`, read off the scripts
  themselves): a script runs with its caller's rights, so Valkey refuses a script's
  command its caller could not send. Each of them costs what its arguments and the
  learner's own keys make it cost, never more (no negative-count random reads, no
  ``*STORE`` of other sets, no sort);
* :data:`RAW_COMMANDS`: the short list the kit sends raw, each with why its cost is the
  caller's own (the threat model in docs/WORKSHOP.md lists them);

on their own keys only (``emq:{<learner>.*``), the class queue's keys in its own shapes
(:func:`class_key_patterns`: ``pending``, ``active``, ..., a row ``job:JOB<26>``: no free
key name under the class's prefix), read-only the instructor's kill orders and the class
payload cap, in database 0 only (where the server knows database permissions: Valkey 9;
``SELECT`` is on no list anyway). Everything a learner says about themselves in class
chaos (their counts, their worker's state, the jobs delivered to them) lives in their own
namespace, so a learner can misstate only their own row.

The **instructor** (the dashboard's user) may read every ``emq:*`` key, write the class
queue and the kill orders, and read the ACL log; not flush, configure or shut down.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache

import redis

from ... import scripts
from ...ids import ALPHABET
from ...keyspace import PAYLOAD_CAP_KEY, Keyspace, check_namespace

__all__ = [
    "INSTRUCTOR_USER",
    "INSTRUCTOR_COMMANDS",
    "DENIED",
    "RAW_COMMANDS",
    "CONNECTION_COMMANDS",
    "PAYLOAD_CAP_KEY",
    "script_commands",
    "learner_commands",
    "class_key_patterns",
    "learner_rules",
    "namespace_pattern",
    "instructor_rules",
    "set_user",
    "delete_users",
    "class_queue_name",
    "control_queue_name",
]

INSTRUCTOR_USER = "echoq-instructor"

# Refused to the instructor's user, whatever the server's categories say (a learner's user
# is an allow-list: none of these is on it).
DENIED = (
    "flushall",
    "flushdb",
    "keys",
    "randomkey",
    "config",
    "shutdown",
    "debug",
    "monitor",
    "client",
    "acl",
    "eval",
    "eval_ro",
    "script",
    "function",
    "fcall",
    "fcall_ro",
    "save",
    "bgsave",
    "bgrewriteaof",
    "swapdb",
    "migrate",
    "replicaof",
    "slaveof",
    "failover",
    "sync",
    "psync",
    "module",
    "sort",
    "sort_ro",
)

# What every client needs to log in, name its connection and run a pipeline: no key, no
# cost beyond the reply's own size. Each is tried on its own: Redis 7.0 has no SETINFO.
CONNECTION_COMMANDS = (
    "auth",
    "hello",
    "ping",
    "quit",
    "client|setinfo",
    "client|setname",
    "client|getname",
    "client|id",
    "multi",
    "exec",
    "discard",
    "evalsha",
    "evalsha_ro",
)

# The commands the kit sends raw on the class server from a learner's kernel, beyond the
# ones its scripts run: each with why its cost is the caller's own. On their own keys only.
RAW_COMMANDS: dict[str, str] = {
    "info": "a fixed set of the server's figures (the kit says which server it found); no key",
    "get": "one value of the learner's own, at most 1 MiB (proto-max-bulk-len)",
    "set": "one value of the learner's own (the stalled check's lock, presence): at most 1 MiB",
    "mget": "values of the learner's own keys, as many as the caller names",
    "hsetnx": "one field of the learner's own hash (a progress record's first time): constant time",
    "hlen": "the size of the learner's own hash: constant time",
    "hexists": "one field of the learner's own hash: constant time",
    "pexpire": "one key's time to live: constant time",
    "pttl": "one key's time to live: constant time",
    "zremrangebyscore": "trims the learner's own sorted set: at most what they wrote into it",
    "lrange": "a range of the learner's own list: at most what they wrote into it",
    "blpop": "waits on the learner's own lists (a Worker's idle wait); while it waits it costs nothing",
    "scan": "key names matching a pattern, COUNT at a time (the kit empties a queue with it): a learner's "
    "COUNT can walk at most the server's keys once, and `workshop status` shows who made them",
}


def class_queue_name(class_name: str) -> str:
    """The one queue the whole class shares (class chaos): ``<class>.chaos``."""
    return Keyspace(f"{class_name}.chaos").queue


def control_queue_name(class_name: str) -> str:
    """Where the instructor writes kill orders; learners may only read it: ``<class>.control``."""
    return Keyspace(f"{class_name}.control").queue


def namespace_pattern(learner: str) -> str:
    """Every key of every queue of ``learner``: ``emq:{<learner>.*`` (see echoq/keyspace.py)."""
    return f"emq:{{{check_namespace(learner)}.*"


_CALL = re.compile(r"""redis\.p?call\(\s*['"]([A-Za-z_]+)['"]""")


@cache
def script_commands() -> tuple[str, ...]:
    """Every command the registry's scripts run (lower case, sorted), read off their expanded text."""
    found = {m.lower() for name in scripts.names() for m in _CALL.findall(scripts.expanded(name))}
    return tuple(sorted(found))


def learner_commands() -> tuple[str, ...]:
    """Every command a learner's user may send: connection, scripts, their insides, the raw list."""
    return tuple(dict.fromkeys([*CONNECTION_COMMANDS, *script_commands(), *RAW_COMMANDS]))


# A JOB id's glob: JOB and 26 characters of its alphabet (echoq/ids.py), no more, no fewer.
_JOB_GLOB = "JOB" + f"[{ALPHABET}]" * 26
# A Worker's run token (echoq/worker/wake.py: 16 hex digits): the key that ends its idle wait.
_RUN_GLOB = "[0-9a-f]" * 16


def class_key_patterns(class_name: str) -> list[str]:
    """The keys of the class queue, each in its own shape: no free name under its prefix."""
    keys = Keyspace(class_queue_name(class_name))
    named = ("pending", "active", "scheduled", "dead", "done", "given", "stats", "effects", "outbox", "wake")
    return [
        *(getattr(keys, name) for name in named),
        keys.stalled_lock,
        keys.prefix + "job:" + _JOB_GLOB,
        keys.prefix + "halt:" + _RUN_GLOB,
    ]


def _password_hash(password: str) -> str:
    # The server keeps (and ACL LIST shows) only this hash; the password itself is sent once.
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def _denials() -> list[str]:
    return ["-@dangerous", *(f"-{command}" for command in DENIED)]


def learner_rules(learner: str, class_name: str, password: str) -> list[str]:
    """The ACL SETUSER rules of one learner (``reset`` first: re-running ``up`` re-applies
    them); the commands follow, one rule each (see :func:`set_user`)."""
    return [
        "reset",
        "on",
        _password_hash(password),
        f"~{namespace_pattern(learner)}",
        *(f"~{pattern}" for pattern in class_key_patterns(class_name)),
        f"%R~{Keyspace(control_queue_name(class_name)).pattern()}",
        f"%R~{PAYLOAD_CAP_KEY}",
        "resetchannels",
        "-@all",
    ]


# The instructor's user runs every command but the denied ones; these come back after them.
INSTRUCTOR_COMMANDS = ("client|setinfo", "client|setname", "client|getname", "client|id", "acl|log")


def instructor_rules(password: str) -> list[str]:
    """The dashboard's user: every echoq key, no command that hurts the server, the ACL log."""
    return ["reset", "on", _password_hash(password), "~emq:*", "resetchannels", "+@all", *_denials()]


# Database 0 only, on a server that knows database permissions (Valkey 9; Redis 7 has none,
# and SELECT is on no learner's list).
_DATABASE_ZERO = ("resetdbs", "db=0")


def set_user(admin: redis.Redis, user: str, rules: list[str], commands: tuple[str, ...] = ()) -> None:
    """Create or reset ``user`` with ``rules``, then allow each of ``commands`` (a command
    this server does not have, CLIENT SETINFO before Redis 7.2, is skipped), then database 0
    only where the server can say so."""
    admin.execute_command("ACL", "SETUSER", user, *rules)
    try:
        if commands:
            admin.execute_command("ACL", "SETUSER", user, *(f"+{command}" for command in commands))
    except redis.ResponseError:
        for command in commands:  # one at a time: skip those this server does not have
            try:
                admin.execute_command("ACL", "SETUSER", user, f"+{command}")
            except redis.ResponseError:
                pass
    try:
        admin.execute_command("ACL", "SETUSER", user, *_DATABASE_ZERO)
    except redis.ResponseError:
        pass  # no database permissions before Valkey 9


def delete_users(admin: redis.Redis, users: list[str]) -> int:
    """Delete ACL users (missing ones are skipped); how many were deleted."""
    return int(admin.execute_command("ACL", "DELUSER", *users)) if users else 0
