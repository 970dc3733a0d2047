"""The ACL users of a workshop: what a learner and the instructor may touch on the shared server.

A **learner** may touch the keys of their own namespace (``emq:{<learner>.*``: every queue
the kit makes for them, and their progress record), the class queue
(``emq:{<class>.chaos}:*``, shared on purpose: class chaos), and may only *read* the
instructor's kill orders (``emq:{<class>.control}:*``). They may run any command of the
kit except the ones that reach past their keys or can hurt the others:

* no FLUSHALL / FLUSHDB, KEYS, RANDOMKEY, CONFIG, SHUTDOWN, DEBUG, MONITOR, CLIENT (but
  naming their own connection), ACL, SAVE, replication, cluster or module commands:
  everything in Valkey's ``@dangerous`` category, and each of those named again here so
  that a server whose categories differ still refuses them;
* no code of their own: no EVAL / EVAL_RO, no SCRIPT (no FLUSH, no KILL, no LOAD), no
  FUNCTION / FCALL, no MODULE. Valkey cannot bound a script's heap nor the time it spends
  inside one C call, so a learner's Lua on the shared server could stop the whole class;
  the Lua a learner writes runs on their own private server instead (the exercises' judges
  start one in the learner's kernel);
* no Pub/Sub channel.

EVALSHA and EVALSHA_RO stay allowed: they run only scripts already in the server's cache,
and only the admin puts scripts there (every script of the library and the kit, loaded by
``up`` before learners connect, and again after every restart and flush). A script runs
with its caller's rights: one that reaches another learner's key is refused inside, just
as a direct command is.

The **instructor** (the dashboard's user) may read every ``emq:*`` key, write the class
queue and the kill orders, and read the ACL log; not flush, configure or shut down.
"""

from __future__ import annotations

import hashlib

import redis

from ...keyspace import Keyspace, check_namespace

__all__ = [
    "INSTRUCTOR_USER",
    "DENIED",
    "learner_rules",
    "namespace_pattern",
    "instructor_rules",
    "set_user",
    "delete_users",
    "class_queue_name",
    "control_queue_name",
]

INSTRUCTOR_USER = "echoq-instructor"

# Refused to every workshop user, whatever the server's categories say.
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

# Allowed back after the denials: INFO (the kit says which server it found), and a
# client naming its own connection (redis-py sends CLIENT SETINFO on connect; refused, it
# would fill the ACL log with noise). Each is tried on its own: Redis 7.0 has no SETINFO.
ALLOWED_BACK = ("+info", "+client|setinfo", "+client|setname", "+client|getname", "+client|id")


def class_queue_name(class_name: str) -> str:
    """The one queue the whole class shares (class chaos): ``<class>.chaos``."""
    return Keyspace(f"{class_name}.chaos").queue


def control_queue_name(class_name: str) -> str:
    """Where the instructor writes kill orders; learners may only read it: ``<class>.control``."""
    return Keyspace(f"{class_name}.control").queue


def namespace_pattern(learner: str) -> str:
    """Every key of every queue of ``learner``: ``emq:{<learner>.*`` (see echoq/keyspace.py)."""
    return f"emq:{{{check_namespace(learner)}.*"


def _password_hash(password: str) -> str:
    # The server keeps (and ACL LIST shows) only this hash; the password itself is sent once.
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def _denials() -> list[str]:
    return ["-@dangerous", *(f"-{command}" for command in DENIED)]


def learner_rules(learner: str, class_name: str, password: str) -> list[str]:
    """The ACL SETUSER rules of one learner (``reset`` first: re-running ``up`` re-applies them)."""
    return [
        "reset",
        "on",
        _password_hash(password),
        f"~{namespace_pattern(learner)}",
        f"~{Keyspace(class_queue_name(class_name)).pattern()}",
        f"%R~{Keyspace(control_queue_name(class_name)).pattern()}",
        "resetchannels",
        "+@all",
        *_denials(),
    ]


def instructor_rules(password: str) -> list[str]:
    """The dashboard's user: every echoq key, no command that hurts the server, the ACL log."""
    return ["reset", "on", _password_hash(password), "~emq:*", "resetchannels", "+@all", *_denials(), "+acl|log"]


def set_user(admin: redis.Redis, user: str, rules: list[str]) -> None:
    """Create or reset ``user`` with ``rules``, then allow back what a kit client needs."""
    admin.execute_command("ACL", "SETUSER", user, *rules)
    for rule in ALLOWED_BACK:
        try:
            admin.execute_command("ACL", "SETUSER", user, rule)
        except redis.ResponseError:
            pass  # a command this server does not have (CLIENT SETINFO before Redis 7.2)


def delete_users(admin: redis.Redis, users: list[str]) -> int:
    """Delete ACL users (missing ones are skipped); how many were deleted."""
    return int(admin.execute_command("ACL", "DELUSER", *users)) if users else 0
