"""Lesson 03: charge once (an effect in another system), and the fenced complete.

**charge once.** The learner's ``handle(claim, bank)`` charges the order in the claim's
payload at a stand-in bank (:class:`echoq.teaching.bank.Bank`). Each delivery runs in its
own child process: claim (the real script), the handler, then the real fenced complete.
The check kills that process (SIGKILL) at every step of a delivery -- before the handler,
just before the charge, just after it, after the handler returned -- lets the lease run
out, and delivers again from a NEW process; it freezes a worker (SIGSTOP) past its lease
so that another takes the job, then lets it go on; and it sends two different orders with
equal payloads. The verdict is the bank's own record: how many charges per order.

**the fenced complete.** The learner's Lua complete (KEYS active, done, row; ARGV id,
attempt) is called by a live holder, by a holder frozen past its lease while the job was
reaped (and, in another run, claimed again by B). The verdict is where the job is, what
its row says, and what the real reaper and enqueue then do with it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ... import scripts
from ...queue import Claim, Enqueue, Queue, _text
from .. import learner, processes
from ..bank import Bank
from ..fast_forward import fast_forward
from .core import Exercise, Misconception, Run, check_runner, register
from .differential import Job, Move, State, contract_step, states

LEASE_MS = 10_000

# -- charge once -------------------------------------------------------------------------------

CHARGE_STUB = '''\
def handle(claim, bank) -> None:
    """Charge the order in claim.payload ("<card> <cents>") once, however often it is delivered."""
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))  # TODO: a redelivery charges the card again
'''

CHARGE_SOLUTION = '''\
def handle(claim, bank) -> None:
    """Charge the order in claim.payload ("<card> <cents>") once, however often it is delivered."""
    card, cents = claim.payload.split()
    bank.charge(card, int(cents), idempotency_key=claim.job_id)
'''

CHARGE_ALTERNATIVES = [
    """\
def handle(claim, bank):
    card, cents = claim.payload.split(" ")
    key = f"order-{claim.job_id}"  # any text made from the JOB id alone, the same on every delivery
    bank.charge(card, int(cents), idempotency_key=key)
""",
    """\
def handle(claim, bank):
    card, _, cents = claim.payload.partition(" ")
    charge = bank.charge(card=card, cents=int(cents), idempotency_key=str(claim.job_id))
    return charge.number
""",
]

_PAYLOAD_SPLIT = "    card, cents = claim.payload.split()\n"

CHARGE_MISCONCEPTIONS = [
    Misconception(
        "no-idempotency-key",
        "no idempotency key",
        "One order, delivered {deliveries} times, was charged {charges} times: nothing told the bank that the "
        "second request was the first one again. At-least-once delivery WILL repeat a delivery.",
        "The bank remembers the idempotency keys it has charged, and charges a key once.",
        "Pass bank.charge an idempotency_key that is the same on every delivery of this job, and differs between jobs.",
        example="""\
def handle(claim, bank):
    card, cents = claim.payload.split()
    amount = int(cents)
    bank.charge(card, amount)
""",
    ),
    Misconception(
        "seen-set-in-memory",
        "seen set in memory",
        "Your record of what was charged lived in the worker's memory, which died with it: killed after the "
        "charge and before complete, the job came back to a new worker process, which had never seen it, and "
        "the card was charged {charges} times.",
        "What survives a SIGKILL? Not the process's variables.",
        "Keep no memory of your own: let the bank recognise the repeat from a key you send with the charge.",
        example="""\
seen = set()  # the jobs this worker has charged

def handle(claim, bank):
    if claim.job_id in seen:
        return
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))
    seen.add(claim.job_id)
""",
    ),
    Misconception(
        "check-then-act",
        "check, then charge, then record",
        "Your check and your record are two steps apart from the charge: {how}, and the card was charged "
        "{charges} times. No order of check, charge and record written in your worker closes that gap.",
        "The charge happens at the bank; your record is elsewhere. Can both change in one step?",
        "Only the system that performs the effect can check and perform it in one step: give the bank the key.",
        example="""\
import echoq

r = echoq.connect()

def handle(claim, bank):
    done = f"charged:{claim.job_id}"
    if r.exists(done):
        return
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))
    r.set(done, 1, ex=600)
""",
    ),
    Misconception(
        "mark-then-act",
        "record first, then charge",
        "Your handler recorded the job as charged before it charged: killed between the two, the job came "
        "back, your record said done, and the card was charged {charges} times. The order was never paid: "
        "a lost effect is as wrong as a double one.",
        "A record written before the effect can outlive an effect that never happened.",
        "Neither order of record and charge survives a kill between them; the bank must do both.",
        example="""\
import echoq

r = echoq.connect()

def handle(claim, bank):
    if not r.set(f"charged:{claim.job_id}", 1, nx=True, ex=600):
        return  # someone charged it already
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))
""",
    ),
    Misconception(
        "skip-redeliveries",
        "a redelivery is a duplicate",
        "A worker was killed right after its claim, before it charged anything; the job came back as attempt "
        "{attempt} and your handler skipped it, so the card was charged {charges} times. A redelivery may "
        "be the first time the work gets done.",
        "Why was the job delivered again? Not always because it was done.",
        "Do not decide from the attempt number; let the bank decide from a key.",
        example="""\
def handle(claim, bank):
    if claim.attempt > 1:
        return  # a redelivery: it was charged the first time
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))
""",
    ),
    Misconception(
        "key-changes-per-delivery",
        "a new key on every delivery",
        "Your idempotency keys differed between two deliveries of one job ({keys}), so the bank saw two "
        "payments and charged {charges} times. A key must name the job, not the delivery.",
        "What is the same on every delivery of one job?",
        "The attempt number and a freshly minted id change each time; the job's own id does not.",
        example=CHARGE_SOLUTION.replace(
            "idempotency_key=claim.job_id", 'idempotency_key=f"{claim.job_id}-{claim.attempt}"'
        ),
    ),
    Misconception(
        "dedupe-by-content",
        "orders told apart by their content",
        "Two different orders, same card and same amount, were charged {charges} time(s) in all: your handler "
        "told jobs apart by what they say. Two jobs may carry equal payloads.",
        "What tells one job from another, and stays the same on every delivery of it?",
        "The payload is what the customer asked for, twice; each request got its own JOB id when it was enqueued.",
        example=CHARGE_SOLUTION.replace("idempotency_key=claim.job_id", "idempotency_key=claim.payload"),
    ),
    Misconception(
        "no-effect",
        "the card is never charged",
        "One delivery, no crash, and the bank charged {charges} times for this order.",
        "The handler's job is to charge the order, once.",
        "Call bank.charge(card, cents, ...) with the card and the cents from claim.payload.",
        example="def handle(claim, bank):\n    pass\n",
    ),
]

CHARGE = register(
    Exercise(
        key="charge",
        lesson="03",
        title="charge once",
        kind="python",
        names=("handle",),
        stub=CHARGE_STUB,
        solution=CHARGE_SOLUTION,
        alternatives=CHARGE_ALTERNATIVES,
        misconceptions=CHARGE_MISCONCEPTIONS,
    )
)

Handler = Callable[[Claim, Bank], object]


def deliver(queue: Queue, bank: Bank, handle: Handler, *, lease_ms: int = LEASE_MS) -> dict[str, Any] | None:
    """One delivery, as a worker process does it: claim, handle, complete (fenced). Every
    move is a step of the process it runs in (see :mod:`echoq.teaching.processes`)."""
    client = processes.counting_client(queue.client)
    q, b = Queue(queue.name, client), Bank(client, bank.name)
    claim = q.claim(lease_ms=lease_ms)
    if claim is None:
        return None
    handle(claim, b)
    processes.mark("handled")
    return {"job": claim.job_id, "attempt": claim.attempt, "complete": q.complete(claim).value}


def _deliver_twice_here(queue: Queue, bank: Bank, handle: Handler) -> None:
    """Two deliveries to the SAME process: the first ran slow, its lease ran out, the job came
    back to this worker (no crash: its memory is intact)."""
    client = processes.counting_client(queue.client)
    q, b = Queue(queue.name, client), Bank(client, bank.name)
    first = q.claim(lease_ms=LEASE_MS)
    handle(first, b)
    fast_forward(q)
    q.reap()
    second = q.claim(lease_ms=LEASE_MS)
    handle(second, b)
    q.complete(second)


class _Orders:
    """The check's queue and bank: each order a distinct card, so charges count per order."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.queue = run.queue()
        self.bank = Bank(run.client, learner.queue_name(f"{self.queue.keys.queue.split('.')[-1]}-bank"[:64]))
        self.bank.reset()
        run.cleanup(self.bank.reset)
        self.count = 0

    def order(self, cents: int = 1999, card: str | None = None) -> tuple[str, str]:
        self.count += 1
        card = card or f"card-{self.count}"
        job = self.queue.enqueue(f"{card} {cents}").job_id
        return job, card

    def charges(self, card: str) -> int:
        return self.bank.charges(card)

    def keys(self, card: str) -> list[str | None]:
        return [e.key for e in self.bank.record() if e.card == card]

    def recover(self) -> None:
        """The dead or frozen holder's lease runs out (fast-forwarded: nothing else is active) and
        the real reaper returns the job to pending."""
        fast_forward(self.queue)
        self.queue.reap()

    def deliver(self, handle: Handler, what: str, **at: Any) -> processes.Child:
        child = processes.spawn(deliver, self.queue, self.bank, handle, name="a worker", **at)
        if at.get("freeze_at") is not None:
            child.wait_frozen(15)
            if child.ended and child.error is not None:
                self.run.code_failed("runs", what, child)
            return child
        self.run.waited("runs", what, child, 15)
        if child.error is not None:
            self.run.code_failed("runs", what, child)
        return child


@check_runner(CHARGE)
def check_charge_once(run: Run, handle: Handler) -> None:
    """Deliver orders to ``handle`` under kills, a frozen worker and equal payloads; count the
    bank's charges per order."""
    if not callable(handle):
        run.fail("runs", "not-yet", what=f"Pass your handler function (handle), not {handle!r}.")
    orders = _Orders(run)

    # 1. One delivery, nothing goes wrong.
    job, card = orders.order()
    orders.deliver(handle, "Your handler")
    if orders.charges(card) == 0:
        run.fail("once", "no-effect", charges=0)
    if orders.charges(card) > 1:
        run.fail(
            "once",
            "not-yet",
            what=f"One delivery, no crash, and the order was charged {orders.charges(card)} times: "
            "charge once per delivery.",
        )
    entry = next(e for e in orders.bank.record() if e.card == card)
    if entry.cents != 1999:
        run.fail("once", "not-yet", what=f"The order was for 1999 cents; the bank was asked for {entry.cents}.")
    if orders.queue.snapshot().place_of(job) != "done":
        run.fail("once", "not-yet", what="After your handler returned, the job was not completed; did it raise?")
    run.good("once", "One delivery with no crash charged the order once, and the job was completed.")

    # 2. Two different orders with equal payloads.
    orders.order(card="card-twin")
    orders.order(card="card-twin")
    orders.deliver(handle, "Your handler")
    orders.deliver(handle, "Your handler")
    if orders.charges("card-twin") != 2:
        run.fail("twins", "dedupe-by-content", charges=orders.charges("card-twin"))
    run.good("twins", "Two different orders with the same card and amount were each charged: 2 charges.")

    # 3. The job comes back to the same, living worker (its lease ran out while it was slow).
    job, card = orders.order()
    child = processes.spawn(_deliver_twice_here, orders.queue, orders.bank, handle, name="a slow worker")
    run.waited("runs", "Your handler", child, 15)
    if child.error is not None:
        run.code_failed("runs", "Your handler", child)
    if orders.charges(card) > 1:
        _too_many(run, orders, card, "same-worker", deliveries=2)
    run.good("same-worker", "A job delivered twice to the same living worker was charged once.")

    # 4. A kill at every step of a delivery; the next delivery comes from a new process.
    for at, where in (
        ("claim", "right after its claim"),
        ("charge:before", "just before its charge reached the bank"),
        ("charge:after", "just after the bank charged"),
        ("handled", "after your handler returned, before complete"),
    ):
        job, card = orders.order()
        first = orders.deliver(handle, "Your handler", kill_at=at)
        if not first.killed:
            continue  # it never reached that step (e.g. it charged nothing): nothing to kill there
        orders.recover()
        second = orders.deliver(handle, "Your handler")
        charges = orders.charges(card)
        if charges == 0:
            if at == "claim":
                run.fail("kills", "skip-redeliveries", attempt=(second.value or {}).get("attempt", 2), charges=0)
            run.fail("kills", "mark-then-act", charges=0)
        if charges > 1:
            if at == "handled":
                run.fail("kills", "seen-set-in-memory", charges=charges)
            if at == "charge:after" and not any(orders.keys(card)):
                if _charges_after_kill_at_end(orders, handle) > 1:
                    run.fail("kills", "seen-set-in-memory", charges=charges)
                run.fail("kills", "check-then-act", how=f"a worker was killed {where}", charges=charges)
            _too_many(run, orders, card, "kills", deliveries=2)
    run.good(
        "kills",
        "A worker SIGKILLed at each step of a delivery (before its charge, just after it, before complete): "
        "the next worker, a new process, never charged the order twice, nor lost it.",
    )

    # 5. Two holders: A freezes before its charge, its lease runs out, B takes the job and
    #    finishes; then A wakes up, charges, and its complete is refused.
    job, card = orders.order()
    a = orders.deliver(handle, "Your handler", freeze_at="charge:before")
    if a.ended:
        raise RuntimeError(f"worker A should have frozen before its charge: {a!r}")
    orders.recover()
    orders.deliver(handle, "Your handler")
    a.resume()
    run.waited("runs", "Your handler", a, 15)
    if a.error is not None:
        run.code_failed("runs", "Your handler", a)
    charges = orders.charges(card)
    stale = (a.value or {}).get("complete")
    if charges != 1:
        if charges > 1 and not any(orders.keys(card)):
            run.fail(
                "stale",
                "check-then-act",
                how="worker A checked, froze, and B checked, charged and completed before A charged too",
                charges=charges,
            )
        _too_many(run, orders, card, "stale", deliveries=2)
    run.good(
        "stale",
        f"Worker A, frozen (SIGSTOP) past its lease while B charged and completed, woke up and sent its charge "
        f"too: the bank charged once. A's complete was refused ({stale}: B had finished the job); the fence "
        "stops a stale worker's complete, and only the key stopped its charge.",
    )


def _too_many(run: Run, orders: _Orders, card: str, prop: str, deliveries: int) -> None:
    keys = orders.keys(card)
    charges = orders.charges(card)
    if any(k is not None for k in keys):
        run.fail(prop, "key-changes-per-delivery", keys=", ".join(str(k) for k in keys), charges=charges)
    run.fail(prop, "no-idempotency-key", deliveries=deliveries, charges=charges)


def _charges_after_kill_at_end(orders: _Orders, handle: Handler) -> int:
    """Kill after the handler returned (its record, if any, is written): does a new process
    charge again? Only a record kept in the dead process's memory says yes."""
    job, card = orders.order()
    first = orders.deliver(handle, "Your handler", kill_at="handled")
    if first.killed:
        orders.recover()
        orders.deliver(handle, "Your handler")
    return orders.charges(card)


# -- the fenced complete ---------------------------------------------------------------------

COMPLETE_STUB = """\
-- KEYS[1] = emq:{q}:active   KEYS[2] = emq:{q}:done   KEYS[3] = emq:{q}:job:<id>
-- ARGV[1] = the job id       ARGV[2] = the attempt (the token) the caller's claim returned
local id, attempt = ARGV[1], ARGV[2]
-- TODO: refuse, changing nothing, unless the caller still holds the job:
--       reply {'stale'} when the row's state is not 'active' or its attempts is not the caller's attempt
local t = redis.call('TIME')
redis.call('ZREM', KEYS[1], id)
redis.call('DEL', KEYS[3])
redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000), id)
return {'completed'}
"""

_FENCE = """\
local state, attempts = unpack(redis.call('HMGET', KEYS[3], 'state', 'attempts'))
if state ~= 'active' or attempts ~= attempt then
  return {'stale'}
end
"""

_TODO = """\
-- TODO: refuse, changing nothing, unless the caller still holds the job:
--       reply {'stale'} when the row's state is not 'active' or its attempts is not the caller's attempt
"""

COMPLETE_SOLUTION = COMPLETE_STUB.replace(_TODO, _FENCE)


def _complete_variant(*edits: tuple[str, str]) -> str:
    text = COMPLETE_SOLUTION
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return text


COMPLETE_ALTERNATIVES = [
    """\
local row = KEYS[3]
if redis.call('HGET', row, 'state') ~= 'active' then return {'stale'} end
if tonumber(redis.call('HGET', row, 'attempts')) ~= tonumber(ARGV[2]) then return {'stale'} end
local now = redis.call('TIME')
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], now[1] * 1000 + math.floor(now[2] / 1000), ARGV[1])
redis.call('DEL', row)
return 'completed'
""",
    """\
local fields = redis.call('HGETALL', KEYS[3])
local row = {}
for i = 1, #fields, 2 do row[fields[i]] = fields[i + 1] end
local holds = row.state == 'active' and row.attempts == ARGV[2]
if not holds then
  return {'stale', row.state or 'gone'}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3])
local t = redis.call('TIME')
redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[1])
return {'completed'}
""",
]

COMPLETE_MISCONCEPTIONS = [
    Misconception(
        "no-fence",
        "no fence",
        "Worker A, frozen past its lease, woke up and completed {job} while worker B held it: the job left "
        "the active set under B ({after}). If B now crashes, nothing will ever redo its work.",
        "A caller's claim came with a token. What does the row say about who holds the job now?",
        "Compare the row's state and attempts with what the caller holds, and reply {'stale'} before any write.",
        example=COMPLETE_STUB.replace(_TODO, ""),
    ),
    Misconception(
        "fence-on-state-only",
        "fenced on the state alone",
        "Worker A, frozen past its lease, completed {job} while worker B held it: the row said 'active' -- "
        "but for B's claim, not A's ({after}).",
        "The state says the job is held; does it say by whom?",
        "The attempts field changes with every claim: compare it with the caller's attempt too.",
        example=COMPLETE_STUB.replace(
            _TODO, "if redis.call('HGET', KEYS[3], 'state') ~= 'active' then return {'stale'} end\n"
        ),
    ),
    Misconception(
        "fence-on-attempts-only",
        "fenced on the attempt alone",
        "Worker A, frozen past its lease, completed {job} after the reaper had put it back in pending: "
        "its token still matched, since nobody had claimed it since ({after}).",
        "Between the reap and the next claim the attempts field has not moved. What has?",
        "Check the row's state is 'active' as well.",
        example=COMPLETE_STUB.replace(
            _TODO, "if redis.call('HGET', KEYS[3], 'attempts') ~= attempt then return {'stale'} end\n"
        ),
    ),
    Misconception(
        "write-before-check",
        "writes before it checks",
        "Your complete refused worker A ({reply}), but had already changed the job B holds ({after}). A "
        "refused call must change nothing.",
        "Read first, decide, and only then write.",
        "Move every ZREM, DEL and ZADD below the check.",
        example=_complete_variant(
            (
                "local id, attempt = ARGV[1], ARGV[2]\n",
                "local id, attempt = ARGV[1], ARGV[2]\nredis.call('ZREM', KEYS[1], id)\n",
            )
        ),
    ),
    Misconception(
        "fence-refuses-the-holder",
        "the holder is refused too",
        "A worker that held {job} (attempt {attempt}; the row said state={state!r}, attempts={attempts!r}) "
        "was refused ({reply}): your fence turns away the very worker that holds the job.",
        "Compare like with like: Lua says a number and a string differ, always.",
        "HGET returns a string and ARGV[2] is a string: compare them as they are, or tonumber() both.",
        example=_complete_variant(("attempts ~= attempt", "tonumber(attempts) ~= attempt")),
    ),
    Misconception(
        "left-in-active",
        "left in the active set",
        "{job} was completed but stayed in emq:{{q}}:active: when its lease ran out, {consequence}.",
        "Where was the job while its worker held it? It must leave that set when done.",
        "ZREM the id from KEYS[1].",
        example=_complete_variant(("redis.call('ZREM', KEYS[1], id)\n", "")),
    ),
    Misconception(
        "row-left-behind",
        "row left behind",
        "{job} was completed but its row remains (state={state!r}): a job may not be done and still have a row "
        "saying where it is.",
        "A finished job's row has nothing left to say.",
        "DEL KEYS[3].",
        example=_complete_variant(("redis.call('DEL', KEYS[3])\n", "")),
    ),
    Misconception(
        "not-remembered-done",
        "done jobs forgotten",
        "{job} was completed, then the producer sent the same job again (same JOB id) and the queue took it as "
        "new ({outcome}): emq:{{q}}:done did not remember it, so it would run twice.",
        "enqueue refuses an id it knows. Where does it look for ids that are done?",
        "ZADD the id to KEYS[2], the done set.",
        example=_complete_variant(("redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000), id)\n", "")),
    ),
]

COMPLETE = register(
    Exercise(
        key="complete",
        lesson="03",
        title="the fenced complete",
        kind="lua",
        names=(),
        stub=COMPLETE_STUB,
        solution=COMPLETE_SOLUTION,
        alternatives=COMPLETE_ALTERNATIVES,
        misconceptions=COMPLETE_MISCONCEPTIONS,
    )
)


def _claim_then_complete(queue: Queue, source: str) -> dict[str, Any]:
    """In a child: claim with the real script (a step), then complete with the learner's."""
    client = processes.counting_client(queue.client)
    q = Queue(queue.name, client)
    claim = q.claim(lease_ms=LEASE_MS)
    k = q.keys
    reply = scripts.run_text(client, source, [k.active, k.done, k.job(claim.job_id)], [claim.job_id, claim.attempt])
    return {"job": claim.job_id, "attempt": claim.attempt, "reply": _reply_text(reply)}


def _complete_as(queue: Queue, source: str, job: str, attempt: int) -> str:
    """In a child: complete ``job`` with the learner's script, as the holder of ``attempt``."""
    k = queue.keys
    client = processes.counting_client(queue.client)
    return _reply_text(scripts.run_text(client, source, [k.active, k.done, k.job(job)], [job, attempt]))


def _reply_text(reply: Any) -> str:
    if isinstance(reply, list):
        return _text(reply[0]) if reply else "{}"
    return _text(reply) if reply is not None else "nil"


def _where(queue: Queue, job: str) -> str:
    snap = queue.snapshot()
    places = [
        n for n, members in (("pending", snap.pending), ("active", snap.active), ("done", snap.done)) if job in members
    ]
    row = queue.job(job)
    return f"afterwards: in {' and '.join(places) or 'no set'}, row {'state ' + row.state.value if row else 'deleted'}"


def _stale_call(run: Run, source: str, *, reclaim: bool) -> dict[str, Any]:
    """A claims and freezes; its lease runs out; the reaper returns the job; (B claims it);
    A wakes and completes with the learner's script. Returns what happened."""
    queue = run.queue()
    job = queue.enqueue("stale holder").job_id
    a = processes.spawn(_claim_then_complete, queue, source, freeze_at="claim", name="worker A")
    a.wait_frozen(15)
    if a.ended:
        raise RuntimeError(f"worker A should have frozen after its claim: {a!r}")
    fast_forward(queue)
    queue.reap()
    b = queue.claim(lease_ms=LEASE_MS) if reclaim else None
    before = queue.snapshot()
    queue_row_before = queue.job(job)
    a.resume()
    run.waited("runs", "Your complete", a, 15)
    if a.error is not None:
        run.code_failed("runs", "Your complete (called by worker A)", a)
    after = queue.snapshot()
    row_before, row_after = before.rows.get(job), after.rows.get(job)
    row_before = (row_before, queue_row_before)
    row_after = (row_after, queue.job(job))
    unchanged = (
        before.place_of(job) == after.place_of(job)
        and job not in after.done
        and row_before == row_after
        and before.active.get(job) == after.active.get(job)
    )
    return {
        "queue": queue,
        "job": job,
        "b": b,
        "reply": (a.value or {}).get("reply"),
        "unchanged": unchanged,
        "after": _where(queue, job),
    }


@check_runner(COMPLETE)
def check_fenced_complete(run: Run, source: str) -> None:
    """Call the learner's complete as a live holder, and as a holder frozen past its lease."""
    if not isinstance(source, str) or not source.strip():
        run.fail("runs", "not-yet", what="Pass your complete script (the string my_complete).")

    # 1. The live holder completes.
    queue = run.queue()
    job = queue.enqueue("live holder").job_id
    child = run.waited("runs", "Your complete", processes.spawn(_claim_then_complete, queue, source), 15)
    if child.error is not None:
        run.code_failed("runs", "Your complete", child)
    reply = child.value["reply"]
    if reply != "completed":
        row = queue.job(job)
        state, attempts = (row.state.value, row.attempts) if row else (None, None)
        run.fail(
            "holder",
            "fence-refuses-the-holder",
            job=job,
            attempt=child.value["attempt"],
            reply=reply,
            state=state,
            attempts=attempts,
        )
    snap = queue.snapshot()
    if job in snap.active:
        fast_forward(queue)
        handed_out = job in queue.reap()
        run.fail(
            "holder",
            "left-in-active",
            job=job,
            consequence="the reaper handed the finished job out again"
            if handed_out
            else "the reaper found a lease whose row was gone and could only count it as corrupt data; until "
            "then anyone reading the active set saw a finished job as still held",
        )
    row = queue.job(job)
    if row is not None:
        run.fail("holder", "row-left-behind", job=job, state=row.state.value)
    again = queue.enqueue("live holder", job_id=job)
    if again.outcome is Enqueue.ENQUEUED:
        run.fail("holder", "not-remembered-done", job=job, outcome=again.outcome.value)
    run.good("holder", "The worker that held the job completed it: out of active, row gone, remembered as done.")

    # 2. Two stale holders: after a reap and B's claim; after a reap alone.
    reclaimed = _stale_call(run, source, reclaim=True)
    reaped = _stale_call(run, source, reclaim=False)
    for case in (reclaimed, reaped):
        if case["reply"] != "completed" and not case["unchanged"]:
            run.fail("stale", "write-before-check", reply=case["reply"], after=case["after"])
        if case["reply"] == "completed" and case["unchanged"]:
            run.fail(
                "stale",
                "not-yet",
                what="Your complete answered 'completed' to worker A, whose lease was gone, yet changed nothing: "
                "reply {'stale'} when you refuse.",
            )
    took_b, took_pending = not reclaimed["unchanged"], not reaped["unchanged"]
    if took_b and took_pending:
        run.fail("stale", "no-fence", job=reclaimed["job"], after=reclaimed["after"])
    if took_b:
        run.fail("stale", "fence-on-state-only", job=reclaimed["job"], after=reclaimed["after"])
    if took_pending:
        run.fail("stale", "fence-on-attempts-only", job=reaped["job"], after=reaped["after"])
    run.good(
        "stale",
        "Worker A, frozen (SIGSTOP) past its lease, was refused when it woke -- after the reap, and after B's "
        "claim -- and the refusal changed nothing.",
    )

    # 3. B, the holder, still completes with your script.
    q, b = reclaimed["queue"], reclaimed["b"]
    child = run.waited("runs", "Your complete", processes.spawn(_complete_as, q, source, b.job_id, b.attempt), 15)
    final = child.value
    if final != "completed" or q.snapshot().place_of(b.job_id) != "done":
        row = q.job(b.job_id)
        state, attempts = (row.state.value, row.attempts) if row else (None, None)
        run.fail(
            "holder-b",
            "fence-refuses-the-holder",
            job=b.job_id,
            attempt=b.attempt,
            reply=final,
            state=state,
            attempts=attempts,
        )
    run.good("holder-b", "Then worker B, the job's real holder, completed it.")

    # 4. The whole contract: called as holder, stale holder or stranger, on generated queues.
    contract_step(run, COMPLETE_MOVE, source, what="Your complete")


def _complete_states(rng: random.Random, size: int) -> State:
    state = states(rng, size)
    jobs = list(state.jobs)
    if not any(j.place == "active" for j in jobs):
        jobs.append(
            Job(
                id="JOB" + "".join(rng.choice("0123456789ABCDEFGH") for _ in range(26)),
                place="active",
                attempts=rng.randint(1, 4),
            )
        )
    roll = rng.random()
    if roll < 0.6:
        job = rng.choice([j for j in jobs if j.place == "active"])
    else:
        job = rng.choice(jobs)
    attempt = max(0, job.attempts + rng.choice((0, 0, -1, 1)))
    if roll > 0.93:
        return replace(state, jobs=tuple(sorted(jobs, key=lambda j: j.id)), caller=("JOB" + "1" * 26, 1))
    return replace(state, jobs=tuple(sorted(jobs, key=lambda j: j.id)), caller=(job.id, attempt))


def _first(reply: object) -> object:
    return reply[0] if isinstance(reply, list) and reply else reply


COMPLETE_MOVE = Move(
    keys=("active", "done", "row"),
    argv=lambda state: [state.caller[0], state.caller[1]],
    reply=_first,
    generate=_complete_states,
)
