"""The durability option: a move returns only once replicas hold its writes.

Valkey replicates asynchronously. A master answers a write as soon as it has applied it in
memory and streams it to its replicas afterwards, so a master that dies in between takes
the last writes with it, and the replica promoted in its place has never seen them. A job
whose ``enqueue`` returned, or a completion the worker was told succeeded, can vanish.

``Queue(name, client, durability=Durability(replicas=1, timeout_ms=1000))`` closes that
window for the moves that acknowledge something to their caller: after the script the
library sends ``WAIT replicas timeout_ms`` (with ``fsync=True``, ``WAITAOF 1 replicas
timeout_ms``: fsynced to the master's append-only file and to the replicas') **on the same
connection as the script**, in one non-transactional pipeline to the master serving the
queue's slot -- ``WAIT`` counts the replicas that have the writes of its own connection,
and of no other -- and returns only when enough replicas have the writes. Otherwise it
raises :class:`~echoq.errors.NotReplicated`: the write IS applied on the master, and may be
lost if the master fails now. Then enqueue again with the same ``job_id`` (a duplicate is
refused, so a retry never doubles a job), alert, or stop accepting work. A ``Worker`` on a
durable queue counts a completion or retry no replica confirmed (``report.unreplicated``)
and carries on: right after a failover a shard has no replica until one catches up, and
stopping every worker then would turn a failover into an outage.

Waited: :data:`WAITED` (enqueue, enqueue_many, complete, complete_many -- which also
serves complete_and_claim -- and retry). Not waited: claim, extend, reap, stalled_check
and snapshot: losing one of those in a failover only makes a job delivered again, which
at-least-once delivery already allows (a lost claim leaves the job pending on the new
master, a lost extend or reap at worst re-runs the job). Nor the effects ledger
(``effect.lua``): a master replicates its writes in the order it applied them, so the
WAIT that confirms a job's completion -- written after its effect -- confirms the effect
too, and a handler is not made to fail on a replica's silence. The exception: a master that
dies between an effect's record and the completion's reply. The Worker runs the completion
again on the promoted replica, where its WAIT confirms the completion alone, and a record
that had not reached the replica is lost (the job completed, its effect run once).

The price is a round trip to a replica on every acknowledged move (docs/cluster.md has the
measured latency against loss). ``WAIT`` is not consensus: a replica that acknowledged and
is then not the one promoted, or a failover forced by hand, can still lose a write; a write
that timed out may still have reached the replica; and after a failover, until a replica
has caught up, every durable move waits its full timeout and raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgument
from .limits import whole

__all__ = ["Durability", "WAITED"]

# The scripts whose writes the caller is told about: run with the wait when durability is on.
WAITED = frozenset({"enqueue", "enqueue_many", "complete", "complete_many", "retry"})


@dataclass(frozen=True)
class Durability:
    """Wait for ``replicas`` replicas (at most ``timeout_ms``) after every acknowledged move.

    ``fsync=True`` waits for the append-only file instead (``WAITAOF``): the master's own
    and the replicas' fsync, which needs ``appendonly yes`` on every node.
    """

    replicas: int = 1
    timeout_ms: int = 1_000
    fsync: bool = False

    def __post_init__(self) -> None:
        whole("replicas", self.replicas, 1, 16)
        # 0 would mean "wait for ever" to the server: a worker must never block without end.
        whole("timeout_ms", self.timeout_ms, 1, 60_000, unit="of milliseconds")
        if not isinstance(self.fsync, bool):
            raise InvalidArgument(f"fsync must be True or False, got {self.fsync!r}")
