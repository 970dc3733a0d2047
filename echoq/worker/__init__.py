"""The consumer: one I/O owner on a beat, feeding a pool of handler threads.

>>> worker = Worker(queue, handler, concurrency=8, lease_ms=5_000)
>>> report = worker.work(burst=True)          # drain what is there, then return
>>> report.completed, report.retried, report.dead

The design is the one serious consumers use (dramatiq's consumer thread feeding worker
threads; BullMQ's single ``extendLocks`` call, stalled-check lock key and blocking wait):

* **One I/O owner.** The thread that calls :meth:`Worker.work` makes every move on Valkey.
  In ONE call (``complete_many.lua``) it completes the jobs the handlers have finished --
  each fenced by its own token -- and claims as many new ones as there are free handler
  slots plus a prefetch buffer. ``concurrency`` handler threads take jobs from the buffer,
  call the handler with a :class:`Delivery` (JOB id, payload, token, attempts) and hand the
  finished job back. The owner sends its call once the buffer is down to half its
  prefetch (its low mark), so the handlers work through the other half while the call is
  on the wire, and whatever they run meanwhile goes into the next call: a busy worker
  sends big batches, a quiet one small ones. A handler that raised gives its job back
  through ``retry`` with an exponential :class:`Backoff`, which dead-letters it after
  ``max_attempts``.
* **Two calls in flight.** A worker that may hold enough jobs for two calls of
  ``SPLIT_MIN`` (concurrency 7 or more with the default prefetch) writes its next call before it
  reads the reply to the one before, on one connection (RESP pipelining), each call
  claiming half of what it may hold: the server runs one call while the handlers work
  through the jobs of the other. It never sleeps with a call in flight, so claimed jobs
  never wait unread while their leases run. Smaller workers send one call at a time. A
  lost connection costs the pipelining only until the server answers one call again.
* **Threads wake for work that needs them.** A handler thread that takes a job wakes the
  next sleeping one while jobs are left -- unless jobs are quick (under ``QUICK_JOB_S`` of
  handler time, a moving average): then the awake thread runs them one after another, as
  fast as the GIL would let several threads take turns, without a thread wake-up per job.
  Should it meet a slow job meanwhile, the owner wakes another thread for the jobs waiting
  behind it within ``NUDGE_S``.
* **Prefetch.** By default the buffer holds at most ``PREFETCH_PER_SLOT`` jobs per handler
  slot, and no more than the handlers get through in about two round trips, so quick jobs
  are batched and slow ones are not hoarded (a slow job is claimed only for a free slot).
* **Leases.** Every ``extend_every_ms`` one ``extend_many`` call extends the lease of every
  job held: the running ones AND the prefetched ones waiting in the buffer, so a job that
  waits is never reaped. A refused extension (the lease was lost) marks that delivery alone
  ``lease_lost``; if it had not started, it is dropped unstarted.
* **Idle without polling.** When a claim comes back short, the worker waits on
  ``emq:{q}:wake`` (the scripts that fill pending push to it) until a wake, a beat, a
  lease extension, ``idle_wait_ms``, or the due time of the earliest retry waiting out its
  backoff. Holding nothing, the owner blocks on the wake itself, so the claim goes out on
  the thread that heard it; :meth:`Worker.stop` and :meth:`Worker.abandon` end that wait by
  a push to the run's own ``emq:{q}:halt:<run>`` key. Holding jobs (with room for more) for
  longer than ``ARM_S``, it sleeps on its handlers while a listener thread blocks on the
  wake for it.
* **The beat.** Every ``beat_ms`` the owner runs the count-thresholded stalled check --
  unless another worker of the fleet ran it within this beat (a lock key set with
  ``SET NX PX``): one check per beat across the fleet, not one per worker. A lock found
  lasting longer than this worker's beat (or with no expiry) is cut down to it, so no
  worker's long beat pauses the fleet's checks.
* **Confirmed starts.** A claim's reply can be lost on its way back. The worker's claims
  count as unstarted until a later call confirms that a handler started the job (a job
  still running ``CONFIRM_S`` after its start rides on the next call, or on one of its own
  if none is due, at the latest on the owner's next beat): the stalled check (the one
  sweep a worker's beat runs) recovers an unconfirmed claim without counting a stall, and
  gives its try back: a lost reply costs a job none of its ``max_attempts``
  (``lua/stalled_check.lua``: 'unstarted', bounded apart). A bare ``Queue.reap`` run
  beside the workers gives no try back. A worker with hooks claims jobs as started at once.
* **Stop and crash.** :meth:`Worker.stop` claims nothing more, gives the unstarted
  prefetched jobs back at once (``release_many.lua``: each gets its try back) and lets the
  running ones finish and complete within ``grace_ms``; a handler still running then has
  its job given back the same way (pending again for another worker, whatever the
  handler does later fenced off), and ``stop(0)`` does that at once: nothing is held past
  the stop. ``work()`` run in the main thread handles SIGINT and SIGTERM for the length
  of the run (the first stops it, a second stops it at once) and puts the handlers it
  found back when it returns; in another thread it installs none. A worker that is
  killed holds leases that nobody extends; they run out and the stalled check returns
  the jobs (or, at their ``max_stalled``-th stall, dead-letters them). Nothing is lost
  either way.
* **A time limit.** With ``timeout_ms`` (off by default), a handler still running that
  long after it started has its job given up: its lease is no longer extended, the job
  goes back through ``retry`` (a try spent, its error ``timeout: ...``) for another
  handler to take, and the late handler's completion is refused by the fence. Python
  cannot stop a thread: the late handler keeps its thread (and that slot takes no job)
  until it returns, and a worker whose every slot is held so claims nothing and gives
  back its prefetched jobs; ``delivery.lease_lost`` tells a handler to give up early.
* **Logs.** Records go to the ``echoq`` logger (``echoq.worker.*``), which the library
  leaves to the program to configure (a ``NullHandler`` drops them otherwise): a handler's
  exception with its traceback and JOB id at ERROR; retries, dead letters, lost leases,
  time limits, jobs given back running and completions the fence refused at WARNING;
  start, stop, stalled jobs recovered and reconnects at INFO. Nothing is logged per job
  that went well, and no record holds a password or a payload.

**A lost server.** When Valkey stops answering (a cluster master killed and its replica
not yet promoted, a server restarting) or answers BUSY (a script held past the server's
busy limit: :class:`~echoq.errors.ServerBusy`), the owner repeats the move that failed, backing off
from 10 ms to 200 ms, until the server answers -- a cluster client finds the promoted
replica by itself -- or one lease time (at least a second) has passed since the first
failure; only then does ``work`` raise :class:`~echoq.errors.ServerUnavailable`.
``report.reconnected`` counts the outages it rode out. Every error out of ``work`` is an
:class:`~echoq.errors.EchoqError` (or a handler's own ``BaseException``). On a queue with the durability
option, a completion or retry that no replica confirmed in time (``NotReplicated``) still
happened on the master: it counts, ``report.unreplicated`` says how many, and the worker
carries on (a shard has no replica right after a failover until one catches up).

**Hooks.** ``Worker(..., hooks=h)`` calls ``h.reached(delivery, checkpoint)`` at three
:class:`Checkpoint` s of every delivery: ``after_claim`` (the handler thread took the job;
the handler has not started), ``mid_job`` (inside the handler, at
:meth:`Delivery.checkpoint`), ``after_effect`` (the handler returned, the job is not yet
completed). Without hooks nothing is called. A hook may raise :class:`Abandon`: the worker
then behaves as a process killed at that moment -- nothing completed, given back or
extended after it, no move on Valkey at all -- and ``work`` returns with
``report.abandoned_at`` set. :meth:`Worker.abandon` does the same from any thread. The
teaching kit's fault injection (``echoq.teaching.faults``) is built on these two.

The parts, one module each: :mod:`.delivery` (what a handler gets, the hooks, the state the
parts share), :mod:`.pool` (the handler threads and the buffer), :mod:`.calls` (the
transport: one call at a time, or pipelined), :mod:`.pacing` (the prefetch policy and when
to claim), :mod:`.leases` (extend, give back, retry), :mod:`.beat` (the stalled check),
:mod:`.wake` (waiting for a wake, and the halt that ends the wait), :mod:`.outage` (riding out a lost server) and
:mod:`.core` (the Worker, whose loop puts them together).
"""

from .calls import LANES, SPLIT_MIN
from .consumers import keyed_consumer
from .core import MAX_CONCURRENCY, Worker, WorkerState
from .delivery import Abandon, Checkpoint, Delivery, Handler, WorkerHooks, WorkReport
from .leases import Backoff
from .pacing import PREFETCH_PER_SLOT, PREFETCH_ROUND_TRIPS
from .pool import CONFIRM_S, NUDGE_S, QUICK_JOB_S

__all__ = [
    "Abandon",
    "Backoff",
    "Checkpoint",
    "Delivery",
    "Handler",
    "Worker",
    "WorkerHooks",
    "WorkerState",
    "WorkReport",
    "keyed_consumer",
    "CONFIRM_S",
    "LANES",
    "MAX_CONCURRENCY",
    "NUDGE_S",
    "PREFETCH_PER_SLOT",
    "PREFETCH_ROUND_TRIPS",
    "QUICK_JOB_S",
    "SPLIT_MIN",
]
