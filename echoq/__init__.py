"""echoq: a small, real reliable queue on Valkey, and a Jupyter kit that teaches it.

The three guarantees (see lua/ for the contract):

1. the recoverable claim -- a job moves pending -> active under a lease, never out of Valkey;
2. at-least-once delivery -- so effects are keyed on the JOB id, and completion is fenced;
3. stalled recovery -- an expired lease goes back to pending in one atomic sweep.
"""

from .effects import Effects
from .errors import (
    DockerUnavailable,
    EchoqError,
    InvalidArgument,
    InvalidJobId,
    InvalidQueueName,
    ScriptFailed,
    ServerUnavailable,
)
from .ids import is_job_id, new_job_id
from .keyspace import Keyspace
from .queue import (
    Claim,
    Complete,
    Enqueue,
    Enqueued,
    Extend,
    Job,
    JobState,
    Queue,
    Retry,
    RetryResult,
    Snapshot,
    StalledReport,
)
from .server import connect, describe, server_url
from .worker import Backoff, CrashPoint, Delivery, Worker, WorkReport, keyed_consumer, naive_consumer

__all__ = [
    "Backoff",
    "CrashPoint",
    "Delivery",
    "Effects",
    "Worker",
    "WorkReport",
    "keyed_consumer",
    "naive_consumer",
    "Claim",
    "Complete",
    "DockerUnavailable",
    "EchoqError",
    "Enqueue",
    "Enqueued",
    "Extend",
    "InvalidArgument",
    "InvalidJobId",
    "InvalidQueueName",
    "Job",
    "JobState",
    "Keyspace",
    "Queue",
    "Retry",
    "RetryResult",
    "ScriptFailed",
    "ServerUnavailable",
    "Snapshot",
    "StalledReport",
    "connect",
    "describe",
    "is_job_id",
    "new_job_id",
    "server_url",
]
__version__ = "0.1.0"
