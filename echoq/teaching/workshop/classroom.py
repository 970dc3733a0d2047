"""Class chaos: one queue the whole class shares, a worker per learner, kills from the instructor.

Every learner starts a :class:`ClassWorker` on the class queue (``<class>.chaos``) from one
notebook cell. The instructor produces jobs into it and kills learners' workers from the
dashboard. A kill is an order written on the shared server
(``emq:{<class>.control}:kills``, a hash learner -> how many kills were ordered; learners
may only read it); each worker watches its own field and, when it goes up, dies on the
spot with :meth:`echoq.Worker.abandon` -- exactly as a SIGKILLed process: the job in its
hands is neither completed nor given back, and stays leased until another learner's
worker reaps it and it is delivered again.

Each worker runs the JOB-id-keyed consumer on the class queue's effects ledger, so a
redelivered job never has its effect twice. The **scoreboard** counts, per learner and
for the class: deliveries, redeliveries (a delivery whose token is 2 or more), effects,
duplicate effects (0) and lost jobs (0). Lost is counted from one atomic snapshot of the
class queue: every job ever enqueued is pending, active, scheduled, dead or done.

Keys (the class queue's own, in their shapes only: a learner's ACL names each, see
:mod:`.acl`; everything a learner says about themselves is in their own namespace, so a
learner can misstate only their own row; bounded by the round's jobs):

==============================================  ======  ==========================================
``emq:{<learner>.class-worker}:score``          hash    ``delivered|redelivered|effects|duplicates``
``emq:{<learner>.class-worker}:held``           hash    JOB id -> the token it was delivered to them with
``emq:{<learner>.class-worker}:state``          string  ``running|stopped|killed`` ``<server ms>``
``emq:{<learner>.class-worker}:ledger``         hash    JOB id -> ``applied|skipped`` (below)
``emq:{<class>.control}:kills``                 hash    learner -> kills ordered (the instructor's
                                                        only); ``:stop`` -> stops ordered to all
==============================================  ======  ==========================================

**Whose word counts.** The class queue's keys are written by the library's moves (and a
learner's user may send those moves' commands on them too: Valkey runs a script with its
caller's rights), so the class's figures are checked against what each learner alone can
write: their own ledger, ``emq:{<learner>.class-worker}:ledger`` (a hash in their namespace:
JOB id -> ``applied`` or ``skipped``, what the effect move said when their worker ran the
job, written before the job is completed). A class job in done that no learner's worker
recorded running, an effect two learners' ledgers both claim, a ledger entry the class
ledger does not hold: each is shown as a disagreement, named after the learner whose
ledger (or, for a job no ledger holds, whose last delivery) it concerns -- "bob's ledger
disagrees with the queue" -- and never counted as what it claims.

Between rounds the instructor stops every worker (:func:`stop_all`: each finishes the job
in hand and ends, "stopped by the instructor") and starts afresh (:func:`new_round`: stop
everyone, wait for the workers whose kernels are alive to end, then empty the class queue
and zero the scoreboard); learners run their cell again to join the next round.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from ...clock import server_now_ms
from ...effects import Effect, Effects
from ...errors import EchoqError, InvalidArgument, ServerUnavailable
from ...keyspace import Keyspace, check_namespace
from ...limits import whole
from ...queue import Queue
from ...server import connect
from ...worker import Delivery, Worker
from .. import learner as learners
from . import acl

__all__ = [
    "ClassKeys",
    "ClassWorker",
    "Score",
    "Scoreboard",
    "class_name",
    "kill",
    "new_round",
    "produce",
    "read_scoreboard",
    "stop_all",
]

LEASE_MS = 2_000  # short: a killed worker's job comes back within seconds
BEAT_MS = 500
KEEP_DONE = 100_000
MAX_JOBS_PER_CLICK = 1_000
COUNTS = ("delivered", "redelivered", "effects", "duplicates")
PLACES = ("pending", "active", "scheduled", "dead", "done")
STOP_FIELD = ":stop"  # in the kills hash; no learner id holds a ':'


def class_name() -> str:
    """The class this kernel belongs to: ``ECHOQ_CLASS`` (set by the hub snippet), else ``class``."""
    return check_namespace(os.environ.get("ECHOQ_CLASS", "").strip() or "class")


@dataclass(frozen=True)
class ClassKeys:
    """Every key of class chaos, built in one place."""

    class_name: str

    @property
    def queue(self) -> str:
        return acl.class_queue_name(self.class_name)

    @property
    def prefix(self) -> str:
        return Keyspace(self.queue).prefix

    @property
    def kills(self) -> str:
        return Keyspace(acl.control_queue_name(self.class_name)).prefix + "kills"

    @property
    def produced(self) -> str:
        """The ids of the jobs the instructor produced (a zset, score: server ms), in the
        control queue only the instructor may write: the class's figures count these jobs."""
        return Keyspace(acl.control_queue_name(self.class_name)).prefix + "produced"


# -- the learner's side ----------------------------------------------------------------------


# Each class worker (each kernel running one) pulses on its own member of its learner's
# sorted set, scored by a deadline on the server's clock: a worker SIGKILLed shows "gone"
# once its deadline passes, whatever the learner's other kernels do.
WORKER_PULSE_S = 0.5
WORKER_TTL_MS = 2_000  # four pulses; with the dashboard's 1 s refresh, "gone" within 3 s
WORKER_PULSES_KEPT_MS = 60_000  # older members are dropped at each pulse: the set stays small


def worker_pulse_key(learner: str) -> str:
    """``emq:{<learner>.class-worker}:alive``: member = one worker, score = its deadline (server ms)."""
    return Keyspace(f"{check_namespace(learner)}.class-worker").prefix + "alive"


def score_key(learner: str) -> str:
    """``emq:{<learner>.class-worker}:score``: what their workers report, in their namespace."""
    return Keyspace(f"{check_namespace(learner)}.class-worker").prefix + "score"


def held_key(learner: str) -> str:
    """``emq:{<learner>.class-worker}:held``: JOB id -> the token it was last delivered to them with."""
    return Keyspace(f"{check_namespace(learner)}.class-worker").prefix + "held"


def state_key(learner: str) -> str:
    """``emq:{<learner>.class-worker}:state``: ``running|stopped|killed <server ms>``."""
    return Keyspace(f"{check_namespace(learner)}.class-worker").prefix + "state"


def ledger_key(learner: str) -> str:
    """``emq:{<learner>.class-worker}:ledger``: JOB id -> what the effect move said when this
    learner's worker ran it (``applied`` / ``skipped``); in their namespace, so theirs alone."""
    return Keyspace(f"{check_namespace(learner)}.class-worker").prefix + "ledger"


REJOIN_S = 30.0  # a class server back within this (a restart) is joined again by a new Worker


class ClassWorker:
    """A learner's worker on the class queue, in a background thread of their kernel.

    It runs the keyed consumer (each job "works" a random ``work_ms`` range of ms, then its
    effect runs once per JOB id), watches the instructor's kill orders every
    ``watch_ms``, and dies with :meth:`Worker.abandon` when one arrives for its learner.
    """

    def __init__(
        self,
        client: redis.Redis | None = None,
        *,
        learner: str | None = None,
        klass: str | None = None,
        work_ms: tuple[int, int] = (20, 120),
        lease_ms: int = LEASE_MS,
        watch_ms: int = 100,
        seed: int | None = None,
    ) -> None:
        self.learner = check_namespace(learner or learners.learner_id() or "solo")
        self.client = client if client is not None else connect()
        self.keys = ClassKeys(klass or class_name())
        self.queue = Queue(self.keys.queue, self.client, keep_done=KEEP_DONE)
        self.effects = Effects(self.queue)
        low, high = (whole("work_ms", n, 0, 10_000, unit="of milliseconds") for n in work_ms)
        if low > high:
            raise InvalidArgument(f"work_ms must be (low, high) with low <= high, got {work_ms!r}")
        self.work_ms = (low, high)
        self.watch_s = whole("watch_ms", watch_ms, 10, 10_000, unit="of milliseconds") / 1000
        self.lease_ms = lease_ms
        self.worker = self._new_worker()
        self.rejoined = 0  # times the server was gone longer than the Worker rides out, and back
        self.beat_id = f"{os.getpid()}-{os.urandom(4).hex()}"
        self._pulse_at = float("-inf")
        self._random = random.Random(seed)
        self._done = threading.Event()
        self.killed_at_ms: int | None = None
        self.stopped_by_instructor = False
        self.held_when_killed = 0
        self.error: str | None = None
        self.mine = dict.fromkeys(COUNTS, 0)  # this worker's own counts (the score hash sums all runs)
        self._threads: list[threading.Thread] = []

    def _new_worker(self) -> Worker:
        return Worker(
            self.queue, self._handle, lease_ms=self.lease_ms, beat_ms=BEAT_MS, idle_wait_ms=100, max_attempts=1000
        )

    # the handler: note the delivery, "work", then the effect once per JOB id
    def _handle(self, delivery: Delivery) -> None:
        who = self.learner
        pipe = self.client.pipeline(transaction=True)
        pipe.hincrby(score_key(who), "delivered", 1)
        if delivery.token > 1:
            pipe.hincrby(score_key(who), "redelivered", 1)
        pipe.hset(held_key(who), delivery.job_id, delivery.token)
        pipe.execute()
        self.mine["delivered"] += 1
        self.mine["redelivered"] += delivery.token > 1
        time.sleep(self._random.uniform(*self.work_ms) / 1000)  # the job's work (simulated)
        delivery.checkpoint()  # a kill during the work unwinds here: no effect, no complete
        result = self.effects.apply_once(delivery.job_id, who)
        if result.outcome is Effect.GONE:
            return  # completed by another worker meanwhile: nothing ran here
        pipe = self.client.pipeline(transaction=True)
        # In our own ledger before the job completes: a class job in done is in someone's.
        pipe.hset(ledger_key(who), delivery.job_id, result.outcome.value)
        if result.outcome is Effect.APPLIED:
            pipe.hincrby(score_key(who), "effects", 1)
            if result.count > 1:
                pipe.hincrby(score_key(who), "duplicates", 1)
        pipe.execute()
        if result.outcome is Effect.APPLIED:
            self.mine["effects"] += 1
            self.mine["duplicates"] += result.count > 1

    def start(self) -> ClassWorker:
        """Start working (and watching for kills) in background threads; returns self."""
        if self._threads:
            raise InvalidArgument("this class worker was started already; make a new one to restart")
        kills, stops = self.client.hmget(self.keys.kills, [self.learner, STOP_FIELD])
        self._baseline, self._stops = int(kills or 0), int(stops or 0)
        from .. import presence

        if self.learner != "solo":  # the dashboard orders kills only to a kernel that is alive
            presence.start(self.client, learner=self.learner)
        self._status("running")
        self._pulse()
        work = threading.Thread(target=self._work, name=f"echoq-class-worker-{self.learner}", daemon=True)
        watch = threading.Thread(target=self._watch, name=f"echoq-class-watch-{self.learner}", daemon=True)
        self._threads = [work, watch]
        for t in self._threads:
            t.start()
        return self

    def _work(self) -> None:
        try:
            while True:
                try:
                    self.worker.work()
                    return
                except ServerUnavailable:
                    # Longer than the Worker rides out (a class server restarting on a busy
                    # machine): the jobs it held come back when their leases run out; a new
                    # Worker joins again once the server answers, unless it is gone for good.
                    if self.killed_at_ms is not None or self.stopped_by_instructor or not self._server_back():
                        raise
                    self.worker = self._new_worker()
                    self.rejoined += 1
        except Exception as exc:  # the server went away: say so in the readout
            self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        finally:
            self._done.set()

    def _server_back(self, within_s: float = REJOIN_S) -> bool:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                return bool(self.client.ping())
            except redis.AuthenticationError:
                return False  # the learner's user is gone (`workshop down`): not a restart
            except (redis.RedisError, EchoqError):
                time.sleep(0.1)
        return False

    def _pulse(self, *, last: bool = False) -> None:
        """This worker's deadline, pushed 2 s ahead again; at its end (``last``) its member is removed."""
        try:
            key = worker_pulse_key(self.learner)
            if last:
                self.client.zrem(key, self.beat_id)
                return
            now = server_now_ms(self.client)
            pipe = self.client.pipeline(transaction=True)
            pipe.zadd(key, {self.beat_id: now + WORKER_TTL_MS})
            pipe.zremrangebyscore(key, "-inf", now - WORKER_PULSES_KEPT_MS)
            pipe.pexpire(key, WORKER_PULSES_KEPT_MS)
            pipe.execute()
            self._pulse_at = time.monotonic()
        except Exception:  # noqa: S110 - a missed pulse shows as "gone" soon: the truth
            pass

    def _watch(self) -> None:
        try:
            self._watching()
        finally:
            self._pulse(last=True)

    def _watching(self) -> None:
        while not self._done.wait(self.watch_s):
            if time.monotonic() - self._pulse_at >= WORKER_PULSE_S:
                self._pulse()
            try:
                kills, stops = self.client.hmget(self.keys.kills, [self.learner, STOP_FIELD])
                ordered = int(kills or 0)
            except Exception:
                continue  # the work thread meets the same failure and reports it
            if int(stops or 0) > self._stops and not self.stopped_by_instructor:
                self.stopped_by_instructor = True
                self.worker.stop()  # graceful: the job in hand finishes, nothing new is claimed
            if ordered > self._baseline:
                self.held_when_killed = len(self.worker.in_flight)
                self.killed_at_ms = server_now_ms(self.client)
                self.worker.abandon()
                self._status("killed")
                return
        if self.killed_at_ms is None:
            self._status("stopped")

    def _status(self, state: str) -> None:
        try:
            self.client.set(state_key(self.learner), f"{state} {server_now_ms(self.client)}")
        except Exception:
            pass  # only a readout: the worker's own errors are reported by the work thread

    @property
    def state(self) -> str:
        if self.killed_at_ms is not None:
            return "killed"
        if self.error:
            return "failed"
        if not self._threads:
            return "not started"
        return "stopped" if self._done.is_set() else "running"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Graceful stop: the job in hand finishes; nothing new is claimed."""
        self.worker.stop()
        self.join(timeout_s)

    def join(self, timeout_s: float = 10.0) -> bool:
        """Wait until the worker has ended (stopped, killed or failed); whether it has."""
        ended = self._done.wait(timeout_s)
        for t in self._threads:
            t.join(max(0.0, timeout_s))
        return ended

    def readout(self) -> str:
        """One paragraph for the learner: what their worker is doing, in words."""
        m = self.mine
        counts = (
            f"{m['delivered']} deliveries to you ({m['redelivered']} of them redeliveries), "
            f"{m['effects']} effects, {m['duplicates']} duplicate effects"
        )
        where = f"class queue {self.keys.queue!r} (keys emq:{{{self.keys.queue}}}:*)"
        if self.state == "killed":
            held = self.held_when_killed
            return (
                f"Worker of {self.learner} KILLED by the instructor, as a SIGKILL would: {counts}. "
                f"{held} job(s) were in its hands; they stay leased in emq:{{{self.keys.queue}}}:active until "
                f"their lease ({self.worker.lease_ms} ms) ends, then another worker's reaper returns them to pending "
                "and they are delivered again, with no second effect. Run the cell again to start a new worker."
            )
        if self.state == "failed":
            return f"Worker of {self.learner} stopped: {self.error}. Run the cell again to reconnect."
        if self.state == "stopped" and self.stopped_by_instructor:
            return (
                f"Worker of {self.learner} stopped by the instructor (the round is over; it finished the job in "
                f"its hands): {counts}. Run the cell again to join the next round."
            )
        return f"Worker of {self.learner} {self.state} on the {where}: {counts}."


# -- the instructor's side -----------------------------------------------------------------------


def produce(client: redis.Redis, count: int, *, klass: str | None = None) -> list[str]:
    """Enqueue ``count`` jobs (1..1000) into the class queue; their ids."""
    whole("count", count, 1, MAX_JOBS_PER_CLICK)
    keys = ClassKeys(klass or class_name())
    stamp = time.strftime("%H:%M:%S")
    ids = Queue(keys.queue, client, keep_done=KEEP_DONE).enqueue_many([f"class job {stamp} #{n}" for n in range(count)])
    now = server_now_ms(client)
    pipe = client.pipeline(transaction=True)
    pipe.zadd(keys.produced, dict.fromkeys(ids, now))
    pipe.zremrangebyrank(keys.produced, 0, -KEEP_DONE - 1)  # as many as the queue keeps done
    pipe.execute()
    return ids


def kill(client: redis.Redis, learners_to_kill: Iterable[str], *, klass: str | None = None) -> list[str]:
    """Order the workers of ``learners_to_kill`` to die (the instructor's user; learners may
    only read the orders). Each running worker sees its order within its watch interval."""
    keys = ClassKeys(klass or class_name())
    who = [check_namespace(name) for name in learners_to_kill]
    if who:
        pipe = client.pipeline(transaction=True)
        for name in who:
            pipe.hincrby(keys.kills, name, 1)
        pipe.execute()
    return who


def stop_all(client: redis.Redis, *, klass: str | None = None) -> None:
    """Order every class worker to stop gracefully (the instructor's user)."""
    client.hincrby(ClassKeys(klass or class_name()).kills, STOP_FIELD, 1)


def new_round(
    client: redis.Redis,
    alive: Iterable[str] = (),
    *,
    klass: str | None = None,
    learners: Iterable[str] = (),
    timeout_s: float = 10.0,
) -> list[str]:
    """Stop every worker, wait until those of ``alive`` learners (kernels whose presence key lives:
    a dead one never answers) no longer say "running", then empty the class queue and each of
    ``learners``' (and ``alive``'s) own records of the round: counts, held jobs, ledger (their
    worker's state stays: who was in the last round, and how it ended). Returns the learners
    whose worker did not stop in time (their jobs, if any, come back to the next round's
    scoreboard as a lease runs out)."""
    keys = ClassKeys(klass or class_name())
    stop_all(client, klass=keys.class_name)
    waiting = sorted(set(alive))
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        states = client.mget([state_key(name) for name in waiting])
        waiting = [name for name, st in zip(waiting, states, strict=True) if str(st).startswith("running")]
        if waiting:
            time.sleep(0.05)
    Queue(keys.queue, client, keep_done=KEEP_DONE).reset()  # jobs, effects
    client.delete(keys.produced)  # the scoreboard counts from what was produced: this round starts at 0
    everyone = {name for name in [*learners, *alive] if _namespace(name)}
    mine = [key for name in sorted(everyone) for key in (score_key(name), held_key(name), ledger_key(name))]
    if mine:  # each learner's own record of the round (the instructor may delete it)
        client.delete(*mine)
    return waiting


@dataclass
class Score:
    delivered: int = 0
    redelivered: int = 0
    effects: int = 0
    duplicates: int = 0
    lost: int = 0
    worker: str = "-"  # running / killed / stopped, as the worker last said
    since_ms: int = 0


@dataclass
class Scoreboard:
    """Class chaos, per learner and in total; ``lost`` and ``duplicates`` must stay 0."""

    queue: str
    now_ms: int
    jobs: int  # ever enqueued
    counts: dict[str, int]  # pending / active / scheduled / dead / done, from one snapshot
    completed: int
    by_learner: dict[str, Score] = field(default_factory=dict)
    total: Score = field(default_factory=Score)
    skipped: dict[str, int] = field(default_factory=dict)  # where -> learner-written entries not counted (bad)
    # What -> how many entries the kit's own moves cannot have written: shown as forged,
    # never counted as what they claim.
    forged: dict[str, int] = field(default_factory=dict)
    # Learner -> how their own ledger and the class queue disagree (see the module) -> the
    # jobs: "bob's ledger disagrees with the queue: ...". "?" for jobs no learner can be named for.
    disagreements: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.total.lost == 0 and self.total.duplicates == 0 and not self.forged and not self.disagreements

    def disagree(self, who: str, how: str, job_id: str) -> None:
        self.disagreements.setdefault(who, {}).setdefault(how, []).append(job_id)

    def disagreement(self, who: str) -> str:
        """``who``'s disagreements in words: each way, with how many jobs and the first few."""
        return "; ".join(f"{how}: {_jobs(ids)}" for how, ids in sorted(self.disagreements.get(who, {}).items()))


def read_scoreboard(client: redis.Redis, learners_shown: Iterable[str] = (), *, klass: str | None = None) -> Scoreboard:
    """The scoreboard, in one MULTI (after a look at how big each learner's own records are).

    The class's figures -- jobs, where each is, completed, lost, effects and duplicate
    effects -- are counted by the reader from the queue itself, for the jobs the
    instructor produced (``produced``, which learners may not write), and checked against
    each learner's own ledger (see the module: a disagreement is named after its learner,
    a job in done that no ledger ran is counted lost); the per-learner counters and worker
    states are what each learner's worker reported in their own namespace, shown as theirs.
    Anything a learner wrote that is not what the kit writes (not a whole number, a wrong
    type) is skipped and counted in ``skipped``. ``learners_shown``: the roster (without it,
    every learner whose worker ever said its state)."""
    keys = ClassKeys(klass or class_name())
    places = Keyspace(keys.queue)
    shown = list(learners_shown) or _learners_with_a_state(client)
    skipped: dict[str, int] = {}
    readable = _records_to_read(client, keys, shown, skipped)
    pipe = client.pipeline(transaction=True)
    pipe.time()
    pipe.zrange(keys.produced, 0, -1)
    pipe.hgetall(places.effects)
    for place in PLACES:
        pipe.execute_command("ZINTERCARD", 2, keys.produced, getattr(places, place))
    pipe.execute_command("ZINTER", 2, keys.produced, places.done)  # the class's jobs counted done
    for name in shown:  # a fixed number of fields each, however big a learner made the keys
        pipe.hmget(score_key(name), list(COUNTS))
        pipe.getrange(state_key(name), 0, 63)
    # In the same snapshot: a learner's ledger entry is written after the effect and before
    # the job completes, so in one moment "in done" implies an entry, and "applied" a class one.
    for name in readable:
        pipe.hgetall(ledger_key(name))
        pipe.hgetall(held_key(name))
    reply = pipe.execute(raise_on_error=False)

    def valid(value: object, where: str, default: object) -> object:
        if isinstance(value, Exception):  # a learner made the key another type
            skipped[where] = skipped.get(where, 0) + 1
            return default
        return value

    seconds, micros = reply[0]
    produced = set(valid(reply[1], "the produced jobs", []))
    effect_counts = valid(reply[2], "the class effects ledger", {})
    counts = {
        place: int(valid(n, f"the class queue's {place} set", 0))
        for place, n in zip(PLACES, reply[3 : 3 + len(PLACES)], strict=True)
    }
    done_ids = valid(reply[3 + len(PLACES)], "the class queue's done set", [])
    at = 4 + len(PLACES)
    own = reply[at : at + 2 * len(shown)]
    records = reply[at + 2 * len(shown) :]
    board = Scoreboard(
        keys.queue,
        int(seconds) * 1000 + int(micros) // 1000,
        len(produced),
        dict(counts),
        counts["done"],
    )
    for i, name in enumerate(shown):
        row = board.by_learner[name] = Score()
        for count, value in zip(COUNTS, valid(own[2 * i], "learners' own counts", [None] * len(COUNTS)), strict=True):
            number = _whole(value if value is not None else 0)
            if number is None:
                skipped["learners' own counts"] = skipped.get("learners' own counts", 0) + 1
            else:
                setattr(row, count, number)
        said = valid(own[2 * i + 1], "learners' worker states", "")
        if said:
            state, _, since = str(said).partition(" ")
            when = _whole(since)
            if state not in WORKER_STATES or when is None:
                skipped["learners' worker states"] = skipped.get("learners' worker states", 0) + 1
            else:
                row.worker, row.since_ms = state, when
    ledgers: dict[str, dict[str, str]] = {}
    holders: dict[str, tuple[int, str]] = {}  # job -> (token, learner): who says it was delivered to them last
    for i, name in enumerate(readable):
        entries = valid(records[2 * i], "learners' own ledgers", None)
        if isinstance(entries, dict):
            ledgers[name] = {str(j): str(v) for j, v in entries.items() if j in produced}
        held = valid(records[2 * i + 1], "learners' own held jobs", None)
        for job_id, token in held.items() if isinstance(held, dict) else []:
            number = _whole(token)
            if job_id in produced and number is not None and (job_id not in holders or number > holders[job_id][0]):
                holders[job_id] = (number, name)
    effects = duplicates = 0
    forged: dict[str, int] = {}
    for job_id, value in effect_counts.items():
        if job_id not in produced:
            continue  # not a job of the class's (a learner may enqueue into the class queue)
        number = _whole(value)
        if number is None or number == 0:
            skipped["class effects ledger"] = skipped.get("class effects ledger", 0) + 1
            continue
        effects += 1
        if number > 1:
            # effect.lua runs a job's effect once and refuses it after (a class worker
            # always goes through it): a count above 1 was written by hand.
            forged[FORGED_DUPLICATES] = forged.get(FORGED_DUPLICATES, 0) + 1
    # A class worker applies a job's effect before it completes it, and complete.lua keeps
    # the ledger's entry while the id is in done: a class job in done with no entry was
    # put there by hand (a lost job made to look completed). It is counted lost.
    done_by_hand = [job_id for job_id in done_ids if job_id not in effect_counts]
    if done_by_hand:
        forged[FORGED_DONE] = len(done_by_hand)
    ran: dict[str, list[tuple[str, str]]] = {}  # job -> (learner, what their ledger says)
    for name, entries in ledgers.items():
        for job_id, said in entries.items():
            ran.setdefault(job_id, []).append((name, said))
    for name, entries in sorted(ledgers.items()):
        for job_id, said in sorted(entries.items()):
            if said == Effect.APPLIED.value and job_id not in effect_counts:
                board.disagree(name, NOT_IN_THE_CLASS_LEDGER, job_id)
    for job_id, whose in sorted(ran.items()):
        appliers = sorted(name for name, said in whose if said == Effect.APPLIED.value)
        if len(appliers) > 1:  # the effect move applies a JOB id once: two claims cannot both be true
            duplicates += 1
            for name in appliers:
                board.disagree(name, CLAIMED_TWICE, job_id)
    unrecorded = [j for j in done_ids if j not in done_by_hand and j not in ran]
    for job_id in [*done_by_hand, *unrecorded]:  # a lost job made to look completed: counted lost
        board.disagree(holders.get(job_id, (0, "?"))[1], DONE_UNRECORDED, job_id)
    board.completed -= len(done_by_hand) + len(unrecorded)
    board.total = Score(
        delivered=sum(s.delivered for s in board.by_learner.values()),
        redelivered=sum(s.redelivered for s in board.by_learner.values()),
        effects=effects,
        duplicates=duplicates,
        lost=max(0, board.jobs - sum(counts.values())) + len(done_by_hand) + len(unrecorded),
        worker=f"{sum(s.worker == 'running' for s in board.by_learner.values())} running",
    )
    board.skipped = skipped
    board.forged = forged
    if board.total.lost:
        _attribute_lost(client, keys, produced, board, holders)
    return board


WORKER_STATES = ("running", "stopped", "killed")
# How a learner's own ledger and the class queue can disagree (Scoreboard.disagreements).
NOT_IN_THE_CLASS_LEDGER = "it says their worker ran the effect of jobs the class ledger does not hold"
CLAIMED_TWICE = "it says their worker ran effects another learner's ledger says theirs ran too"
DONE_UNRECORDED = "jobs last delivered to them are in done, yet no worker's ledger says it ran them"
FORGED_DUPLICATES = "effects-ledger counts above 1 (the kit's effect move never counts a job twice)"
FORGED_DONE = "class jobs in done with no effect recorded (a class worker records it before completing)"


# The most entries of one learner's own ledger a reader takes in beyond the round's jobs:
# a legitimate ledger holds one entry per job their worker ran (new_round empties it).
LEDGER_SLACK = 1_000


def _learners_with_a_state(client: redis.Redis) -> list[str]:
    """Every learner whose class worker ever said its state (a SCAN: without a roster only)."""
    pattern = Keyspace("x.class-worker").prefix.replace("{x.", "{*.") + "state"
    found = {str(key).split("{", 1)[1].split(".class-worker}", 1)[0] for key in client.scan_iter(match=pattern)}
    return sorted(name for name in found if _namespace(name))


def _records_to_read(client: redis.Redis, keys: ClassKeys, shown: list[str], skipped: dict[str, int]) -> list[str]:
    """The learners whose own ledger and held jobs the scoreboard reads: each no larger than
    the round could have filled (one entry per job their worker ran; ``new_round`` empties
    them). A bigger one, or one of another type, is that learner's skipped record, never
    read whole."""
    jobs = client.zcard(keys.produced)
    pipe = client.pipeline(transaction=False)
    for name in shown:
        pipe.hlen(ledger_key(name))
        pipe.hlen(held_key(name))
    sizes = pipe.execute(raise_on_error=False)
    readable = []
    for i, name in enumerate(shown):
        ledger, held = sizes[2 * i], sizes[2 * i + 1]
        if any(isinstance(n, Exception) or n > jobs + LEDGER_SLACK for n in (ledger, held)):
            skipped["learners' own ledgers"] = skipped.get("learners' own ledgers", 0) + 1
        elif ledger or held:
            readable.append(name)
    return readable


def _jobs(ids: list[str]) -> str:
    shown = ", ".join(sorted(ids)[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    return f"{len(ids)} job(s) ({shown})"


def _whole(value: object) -> int | None:
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def _namespace(name: str) -> bool:
    try:
        check_namespace(name)
        return True
    except EchoqError:
        return False


def _attribute_lost(
    client: redis.Redis, keys: ClassKeys, produced: set[str], board: Scoreboard, holders: dict[str, tuple[int, str]]
) -> None:
    """Name the learner whose own record says each lost job was delivered to them last (by its
    token; rare: only when the total is not 0)."""
    places = Keyspace(keys.queue)
    pipe = client.pipeline(transaction=True)
    for place in PLACES:
        pipe.zrange(getattr(places, place), 0, -1)
    sets = pipe.execute(raise_on_error=False)
    placed = set().union(*(s for s in sets if not isinstance(s, Exception)))
    for job_id in produced - placed:
        who = holders.get(job_id, (0, "?"))[1]
        if who in board.by_learner:
            board.by_learner[who].lost += 1
