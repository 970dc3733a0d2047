"""What survives when Valkey itself dies: the queue is only as durable as its server.

Every guarantee in this kit assumes that a write the server acknowledged is still there
later. :func:`crash_and_restart` tests that assumption for real: it starts a private
server with one persistence setting, enqueues jobs (each one acknowledged), claims a few,
SIGKILLs the server (no shutdown save), starts a new server on the same data folder, and
counts what came back.

Persistence settings compared (see the Valkey docs on persistence):

* ``none`` -- no snapshot, no append-only file: everything lives in memory only.
* ``snapshot`` -- an RDB snapshot taken half-way (standing in for a periodic ``save``);
  whatever was acknowledged after the last snapshot is gone.
* ``aof`` -- the append-only file with ``appendfsync always``: every write is written and
  flushed to disk before its reply goes out, so neither a killed process nor a power cut
  loses an acknowledged write.

Most servers run ``appendfsync everysec`` instead (the workshop's class server does): it
flushes once a second, so a power cut can lose about the last second. A killed process can
lose writes too: while a flush is slow (a busy disk), Valkey holds new writes back for up to
2 s and replies all the same. A notebook cannot pull the plug or make a disk slow on demand,
so the demo uses ``always``, whose outcome does not depend on the disk, and the lesson tells
the difference.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import InvalidArgument
from ..queue import Queue
from ..server import connect, start_server

Persistence = Literal["none", "snapshot", "aof"]

_CONFIG: dict[str, dict[str, str]] = {
    "none": {"appendonly": "no", "save": '""'},
    "snapshot": {"appendonly": "no", "save": '""', "dbfilename": "dump.rdb"},
    "aof": {"appendonly": "yes", "appendfsync": "always", "save": '""'},
}


@dataclass(frozen=True)
class RestartReport:
    persistence: str
    acknowledged: int  # enqueues the server replied "enqueued" to before it died
    survived: int  # of those, jobs found again after the restart (pending or active)
    pending_after: int
    active_after: int  # claimed before the crash, still leased: the reaper will return them

    @property
    def lost(self) -> int:
        return self.acknowledged - self.survived


def crash_and_restart(persistence: Persistence = "none", *, jobs: int = 100, claimed: int = 10) -> RestartReport:
    """Enqueue ``jobs``, claim ``claimed`` of them, SIGKILL the server, restart, and count."""
    if persistence not in _CONFIG:
        raise InvalidArgument(f"persistence must be one of {sorted(_CONFIG)}, got {persistence!r}")
    if jobs < 2 or not 0 <= claimed <= jobs:
        raise InvalidArgument(f"need jobs >= 2 and 0 <= claimed <= jobs, got jobs={jobs}, claimed={claimed}")
    workdir = Path(tempfile.mkdtemp(prefix="echoq-persistence-"))
    config = _CONFIG[persistence]
    try:
        first = start_server(extra_config=config, workdir=workdir)
        try:
            queue = Queue("persistence", connect(first.url))
            half = jobs // 2
            acknowledged = len(queue.enqueue_many([f"job {n}" for n in range(half)]))
            if persistence == "snapshot":
                queue.client.save()  # the last periodic snapshot before the crash
            acknowledged += len(queue.enqueue_many([f"job {n}" for n in range(half, jobs)]))
            if claimed:
                queue.claim_many(claimed, lease_ms=60_000)
        finally:
            first.kill()
        second = start_server(extra_config=config, workdir=workdir, password=first.password)
        try:
            snap = Queue("persistence", connect(second.url)).snapshot()
        finally:
            second.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    survived = snap.counts["pending"] + snap.counts["active"]
    return RestartReport(persistence, acknowledged, survived, snap.counts["pending"], snap.counts["active"])
