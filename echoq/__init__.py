"""echoq: a small, real reliable queue on Valkey.

The three guarantees (see lua/ for the contract):

1. the recoverable claim -- a job moves pending -> active under a lease, never out of Valkey;
2. at-least-once delivery -- so effects are keyed on the JOB id, and completion is fenced;
3. stalled recovery -- an expired lease goes back to pending in one atomic sweep.

Everything this module exports is the supported library API. The Jupyter teaching kit
built on it lives in :mod:`echoq.teaching` (lessons, lab panels, exercises, contrasts,
chaos and durability demos); ``import echoq`` loads none of it, and the library needs
none of the kit's dependencies.
"""

import logging

from .address import is_cluster, redact
from .durability import Durability
from .effects import Effect, EffectResult, Effects
from .errors import (
    SCRIPT_ERRORS,
    ClockSkew,
    DockerUnavailable,
    EchoqError,
    InvalidArgument,
    InvalidJobId,
    InvalidPayload,
    InvalidQueueName,
    NotReplicated,
    OutOfMemory,
    PermissionDenied,
    ScriptFailed,
    ServerBusy,
    ServerUnavailable,
    WrongKeyType,
)
from .ids import is_job_id, new_job_id
from .keyspace import Keyspace
from .limits import BOUNDS, CLOCK_AHEAD_MS
from .queue import (
    Claim,
    Complete,
    DeadLetter,
    DeadPage,
    Enqueue,
    Enqueued,
    Extend,
    Job,
    JobState,
    Purge,
    Queue,
    Release,
    Requeue,
    Retry,
    RetryResult,
    Snapshot,
    StalledReport,
    Waiting,
)
from .server import connect, describe, server_url
from .worker import (
    Abandon,
    Backoff,
    Checkpoint,
    Delivery,
    Worker,
    WorkerHooks,
    WorkReport,
    keyed_consumer,
)

__all__ = [
    "Abandon",
    "BOUNDS",
    "Backoff",
    "CLOCK_AHEAD_MS",
    "Checkpoint",
    "Claim",
    "ClockSkew",
    "Complete",
    "DeadLetter",
    "DeadPage",
    "Delivery",
    "DockerUnavailable",
    "Durability",
    "EchoqError",
    "Effect",
    "EffectResult",
    "Effects",
    "Enqueue",
    "Enqueued",
    "Extend",
    "InvalidArgument",
    "InvalidJobId",
    "InvalidPayload",
    "InvalidQueueName",
    "Job",
    "NotReplicated",
    "OutOfMemory",
    "PermissionDenied",
    "JobState",
    "Keyspace",
    "Purge",
    "Queue",
    "Release",
    "Requeue",
    "Retry",
    "RetryResult",
    "SCRIPT_ERRORS",
    "ScriptFailed",
    "ServerBusy",
    "ServerUnavailable",
    "WrongKeyType",
    "Snapshot",
    "StalledReport",
    "Waiting",
    "WorkReport",
    "Worker",
    "WorkerHooks",
    "connect",
    "describe",
    "is_cluster",
    "is_job_id",
    "keyed_consumer",
    "new_job_id",
    "redact",
    "server_url",
]
__version__ = "0.2.0"

# Quiet unless the program configures logging (``python -m echoq worker`` does): every record
# goes to the "echoq" logger or one under it, and this handler drops what nothing else takes.
logging.getLogger("echoq").addHandler(logging.NullHandler())
