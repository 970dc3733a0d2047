"""The one place every key of a queue is built.

Every key of queue ``q`` starts with ``emq:{q}:``. The braces are a hash tag: Valkey Cluster
hashes only the text between them, so all of a queue's keys land in one slot and each Lua
script may touch them together.

A queue name may carry one namespace, ``<namespace>.<name>`` (``alice.lesson-02``): the
namespace stays inside the tag (``emq:{alice.lesson-02}:pending``), so the queue is still in
one slot, and every key of every queue in namespace ``alice`` matches the one pattern
``emq:{alice.*`` -- which is what an ACL user of a shared server is allowed to touch.

Every key the library writes has a bound (``tests/test_bounds.py`` checks each, and that
this table names every key a busy queue holds):

=========================  ==========  =========================================  ==================================
key                        type        holds                                      bound
=========================  ==========  =========================================  ==================================
``emq:{q}:pending``        sorted set  JOB ids scored by arrival number (the      the jobs you enqueued and nobody
                                       order they reached the server; the row's   has finished: your work, not
                                       ``arrival``)                               overhead
``emq:{q}:active``         sorted set  JOB ids scored by lease deadline (ms)      as many as are leased (idem)
``emq:{q}:scheduled``      sorted set  JOB ids waiting out a retry backoff or a   idem; a backoff or delay is at
                                       delay, scored by due time (ms)             most a week
``emq:{q}:job:<id>``       hash        the row: state, token, attempts, stalled,  one per live or dead job; payload
                                       payload, error, reason, arrival,           <= 1 MiB, error <= 4 KiB
                                       timestamps
``emq:{q}:dead``           sorted set  dead-lettered ids scored by time of death  newest ``keep_dead`` (10,000);
                                                                                  older ones evicted with their rows,
                                                                                  counted in stats ``dead_evicted``
``emq:{q}:done``           sorted set  recently completed ids, scored by          newest ``keep_done`` (10,000)
                                       completion time
``emq:{q}:given``          sorted set  the idempotency record: ids producers      the ids given in the last
                                       gave (``job_id=``, ``job_ids=``), scored   ``keep_given_ms`` (an hour); each
                                       by first arrival (ms)                      enqueue forgets older ones
``emq:{q}:effects``        hash        the effects ledger: JOB id -> how many     one per job the queue remembers
                                       times its effect ran                       (live, dead, or in done); goes
                                                                                  with the job
``emq:{q}:outbox``         list        the effect's record (a transactional       newest ``keep_outbox`` (10,000),
                                       outbox): one record per effect performed   each <= 4 KiB
``emq:{q}:stats``          hash        counters: enqueued, claimed, completed,    a fixed set of counter names
                                       retried, reaped, stalled, dead,
                                       dead_evicted, corrupt, bad_payload, ...
``emq:{q}:wake``           list        wakes for idle workers: one per            at most 64 wakes of one byte
                                       job put into pending (lua/includes/wake)   (``WAKE_CAP``), trimmed by every
                                                                                  script that pushes
``emq:{q}:halt:<run>``     list        what ends one idle Worker's wait on the    at most one one-byte entry per
                                       wake: a push by its ``stop()`` or          ``stop()``/``abandon()`` call; the
                                       ``abandon()`` (``Queue.halt_wait``)        waiting worker pops it at once, and
                                                                                  it expires ``HALT_TTL_MS`` (10 s)
                                                                                  after a push in any case
``emq:{q}:stalled_lock``   string      which worker ran the fleet's last stalled  one short string; expires by
                                       check (``SET NX PX``)                      itself within a beat, at most an
                                                                                  hour (``Queue.stalled_check_locked``)
=========================  ==========  =========================================  ==================================

One key belongs to no queue: :data:`PAYLOAD_CAP_KEY`, ``emq:payload_bytes``, a string of
digits, the payload cap of a server whose scripts were loaded for a smaller cap than the
library's (a workshop's class server: 65536; see :mod:`echoq.scripts.registry`). Whoever
loaded those scripts writes it; :func:`echoq.connect` reads it, so a client calls the
scripts that server has, and the server's URL stays a plain Redis URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidArgument, InvalidQueueName
from .ids import check_job_id

PAYLOAD_CAP_KEY = "emq:payload_bytes"  # no braces: it can be no queue's key
NAMESPACE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
RUN_RE = re.compile(r"^[0-9a-f]{16,32}$")
QUEUE_NAME_RE = re.compile(r"^(?:[a-z0-9][a-z0-9_-]{0,31}\.)?[A-Za-z0-9_-]{1,64}$")


def check_queue_name(name: object) -> str:
    if not isinstance(name, str) or QUEUE_NAME_RE.match(name) is None:
        raise InvalidQueueName(
            f"{name!r} is not a valid queue name: use 1 to 64 characters of A-Z, a-z, 0-9, "
            "'_' and '-' (e.g. 'orders' or 'lesson-02'), optionally after a namespace and a dot "
            "('alice.lesson-02'; a namespace is 1 to 32 of a-z, 0-9, '_' and '-')"
        )
    return name


def check_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or NAMESPACE_RE.match(namespace) is None:
        raise InvalidQueueName(
            f"{namespace!r} is not a valid namespace: use 1 to 32 characters of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit (e.g. 'alice' or 'learner-07')"
        )
    return namespace


@dataclass(frozen=True)
class Keyspace:
    """Builds every key of one queue. ``Keyspace('orders').pending == 'emq:{orders}:pending'``."""

    queue: str

    def __post_init__(self) -> None:
        check_queue_name(self.queue)

    @property
    def namespace(self) -> str | None:
        """The part of the name before the dot, if any: ``Keyspace('alice.q').namespace == 'alice'``."""
        head, dot, _ = self.queue.partition(".")
        return head if dot else None

    @property
    def prefix(self) -> str:
        """``emq:{q}:``; the scripts read it off their own KEYS[1] (lua/includes/queue_keys.lua)."""
        return f"emq:{{{self.queue}}}:"

    @property
    def pending(self) -> str:
        return self.prefix + "pending"

    @property
    def active(self) -> str:
        return self.prefix + "active"

    @property
    def scheduled(self) -> str:
        return self.prefix + "scheduled"

    @property
    def dead(self) -> str:
        return self.prefix + "dead"

    @property
    def done(self) -> str:
        return self.prefix + "done"

    @property
    def given(self) -> str:
        """The idempotency record: the ids producers gave, kept ``keep_given_ms``."""
        return self.prefix + "given"

    @property
    def stats(self) -> str:
        return self.prefix + "stats"

    @property
    def effects(self) -> str:
        return self.prefix + "effects"

    @property
    def outbox(self) -> str:
        return self.prefix + "outbox"

    @property
    def wake(self) -> str:
        """The wakes an idle worker blocks on; pushed by the scripts that fill pending."""
        return self.prefix + "wake"

    def halt(self, run: str) -> str:
        """What ends one idle worker's wait on the wake (``run``: its work() call's token)."""
        if not isinstance(run, str) or RUN_RE.match(run) is None:
            raise InvalidArgument(f"{run!r} is not a worker run token: use 16 to 32 lower-case hex digits")
        return self.prefix + "halt:" + run

    @property
    def stalled_lock(self) -> str:
        """Set with ``SET NX PX`` by the worker that runs this beat's stalled check."""
        return self.prefix + "stalled_lock"

    def job(self, job_id: str) -> str:
        """The row key of one job; refuses anything that is not a branded JOB id."""
        return self.prefix + "job:" + check_job_id(job_id)

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this queue (the braces are literal in globs)."""
        return self.prefix + "*"
