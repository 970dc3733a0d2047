"""Lesson 03: charge once (an effect in another system).

The learner's ``charge_order(claim, bank)`` charges the order in the claim's
payload at a stand-in bank (:class:`echoq.teaching.bank.Bank`). Each delivery runs in its
own child process: claim (the real script), ``charge_order``, then the real fenced complete.
The check kills that process (SIGKILL) at every step of a delivery -- before ``charge_order``,
just before the charge, just after it, after it returned -- lets the lease run
out, and delivers again from a NEW process; it freezes a worker (SIGSTOP) past its lease
so that another takes the job, then lets it go on; and it sends two different orders with
equal payloads. Then the rows of :data:`SCENES` (a workload of :mod:`..workloads`, which the
loop and extend checks share): one worker process serves a stream of orders in turn -- every two
to one card for one amount, more arriving as it runs -- and is killed just after its third
charge, and a new process serves the rest: what charge_order keeps in memory meets the next
order there. The verdict is the bank's own record: how many charges per order.
"""

from __future__ import annotations

import inspect
import json
import linecache
import os
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

from echoq.ids import new_job_id
from echoq.queue import Claim, Queue
from echoq.teaching import learner, processes
from echoq.teaching.bank import Bank
from echoq.teaching.exercises.core import Misconception, Run, check_runner, load, register
from echoq.teaching.exercises.workloads import STREAM, Feeder, Scene
from echoq.teaching.fast_forward import fast_forward

LEASE_MS = 10_000

# A worker serves one order after another in one process, so what its charge_order keeps in
# memory meets the next order: a row of the workloads the loop and extend checks share.
SCENES = (
    Scene(
        "stream",
        STREAM,
        "the worker SIGKILLed just after its third charge, orders still waiting, and a new process taking over",
        "every order charged once: two orders with one card and amount are two payments",
    ),
)
KILLED_AT_CHARGE = 3


CHARGE_MISCONCEPTIONS = [
    Misconception(
        "no-idempotency-key",
        "no idempotency key",
        "One order, delivered {deliveries} times, was charged {charges} times: nothing told the bank that the "
        "second request was the first one again. At-least-once delivery WILL repeat a delivery.",
        "The bank remembers the idempotency keys it has charged, and charges a key once.",
        "Pass bank.charge an idempotency_key that is the same on every delivery of this job, and differs between jobs.",
        signature=lambda e: e["charges_of_the_order"] > 1 and not any(e["keys_sent_for_the_order"]),
    ),
    Misconception(
        "seen-set-in-memory",
        "seen set in memory",
        "Your record of what was charged lived in the worker's memory, which died with it: killed after the "
        "charge and before complete, the job came back to a new worker process, which had never seen it, and "
        "the card was charged {charges} times.",
        "What survives a SIGKILL? Not the process's variables.",
        "Keep no memory of your own: let the bank recognise the repeat from a key you send with the charge.",
        signature=lambda e: e["same_worker_charges"] == 1 and e["charges_after_a_kill_at_the_end"] > 1,
    ),
    Misconception(
        "check-then-act",
        "check, then charge, then record",
        "Your check and your record are two steps apart from the charge: {how}, and the card was charged "
        "{charges} times. No order of check, charge and record written in your worker closes that gap.",
        "The charge happens at the bank; your record is elsewhere. Can both change in one step?",
        "Only the system that performs the effect can check and perform it in one step: give the bank the key.",
        signature=lambda e: (
            e["same_worker_charges"] == 1 and e["charges_of_the_order"] > 1 and not any(e["keys_sent_for_the_order"])
        ),
    ),
    Misconception(
        "mark-then-act",
        "record first, then charge",
        "Your charge_order recorded the job as charged before it charged: killed between the two, the job came "
        "back, your record said done, and the card was charged {charges} times. The order was never paid: "
        "a lost effect is as wrong as a double one.",
        "A record written before the effect can outlive an effect that never happened.",
        "Neither order of record and charge survives a kill between them; the bank must do both.",
        signature=lambda e: e["killed_at"] != "claim" and e["charges_of_the_order"] == 0,
    ),
    Misconception(
        "skip-redeliveries",
        "a redelivery is a duplicate",
        "A worker was killed right after its claim, before it charged anything; the job came back as try "
        "{attempt} and your charge_order skipped it, so the card was charged {charges} times. A redelivery may "
        "be the first time the work gets done.",
        "Why was the job delivered again? Not always because it was done.",
        "Do not decide from the try count (claim.attempts); let the bank decide from a key.",
        signature=lambda e: e["killed_at"] == "claim" and e["charges_of_the_order"] == 0 and e["attempt"] > 1,
    ),
    Misconception(
        "key-changes-per-delivery",
        "a new key on every delivery",
        "Your idempotency keys differed between two deliveries of one job ({keys}), so the bank saw two "
        "payments and charged {charges} times. A key must name the job, not the delivery.",
        "What is the same on every delivery of one job?",
        "The fencing token and a freshly minted id change each time; the job's own id does not.",
        signature=lambda e: len({k for k in e["keys_sent_for_the_order"] if k is not None}) > 1,
    ),
    Misconception(
        "dedupe-by-content",
        "orders told apart by their content",
        "Two different orders, same card and same amount, were charged {charges} time(s) in all: your charge_order "
        "told jobs apart by what they say. Two jobs may carry equal payloads.",
        "What tells one job from another, and stays the same on every delivery of it?",
        "The payload is what the customer asked for, twice; each request got its own JOB id when it was enqueued.",
        signature=lambda e: e["twin_charges"] < e["twin_orders"],
    ),
    Misconception(
        "no-effect",
        "the card is never charged",
        "One delivery, no crash, and the bank charged {charges} times for this order.",
        "charge_order's job is to charge the order, once.",
        "Call bank.charge(card, cents, ...) with the card and the cents from claim.payload.",
        signature=lambda e: e["charges_of_the_order"] == 0,
    ),
]


CHARGE = register(
    load(
        __file__,
        key="charge",
        lesson="03",
        title="charge once",
        kind="python",
        names=("charge_order",),
        misconceptions=CHARGE_MISCONCEPTIONS,
    )
)


# What the learner writes: the work for one claimed order, called by a queue-level loop
# (claim, charge_order, complete), so it is given a Claim and is not a Worker's handler.
ChargeOrder = Callable[[Claim, Bank], object]


def deliver(queue: Queue, bank: Bank, charge_order: ChargeOrder, *, lease_ms: int = LEASE_MS) -> dict[str, Any] | None:
    """One delivery, as a worker process does it: claim, charge_order, complete (fenced). Every
    move is a step of the process it runs in (see :mod:`echoq.teaching.processes`)."""
    client = processes.counting_client(queue.client)
    q, b = Queue(queue.name, client), Bank(client, bank.name)
    claim = q.claim(lease_ms=lease_ms)
    if claim is None:
        return None
    charge_order(claim, b)
    processes.mark("returned")
    return {"job": claim.job_id, "attempt": claim.attempts, "complete": q.complete(claim).value}


def _deliver_twice_here(queue: Queue, bank: Bank, charge_order: ChargeOrder) -> None:
    """Two deliveries to the SAME process: the first ran slow, its lease ran out, the job came
    back to this worker (no crash: its memory is intact)."""
    client = processes.counting_client(queue.client)
    q, b = Queue(queue.name, client), Bank(client, bank.name)
    first = q.claim(lease_ms=LEASE_MS)
    charge_order(first, b)
    fast_forward(q)
    q.reap()
    second = q.claim(lease_ms=LEASE_MS)
    charge_order(second, b)
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
        self.jobs: list[str] = []

    def order(self, cents: int = 1999, card: str | None = None) -> tuple[str, str]:
        self.count += 1
        card = card or f"card-{self.count}"
        job = self.queue.enqueue(f"{card} {cents}").job_id
        self.jobs.append(job)
        return job, card

    def twins(self, card: str, n: int = 2) -> list[str]:
        """``n`` different orders with one payload whose JOB ids share their time part (the first
        13 characters: minted in the same millisecond) and differ only after it."""
        first = new_job_id()  # the others: the same millisecond, other random parts (minted here, on purpose)
        jobs = [first] + [first[:13] + new_job_id()[13:] for _ in range(n - 1)]
        for job in jobs:
            self.queue.enqueue(f"{card} 1999", job_id=job)
        self.jobs += jobs
        return jobs

    def charges(self, card: str) -> int:
        return self.bank.charges(card)

    def keys(self, card: str) -> list[str | None]:
        return [e.key for e in self.bank.record() if e.card == card]

    def recover(self) -> None:
        """The dead or frozen holder's lease runs out (fast-forwarded: nothing else is active) and
        the real reaper returns the job to pending."""
        fast_forward(self.queue)
        self.queue.reap()
        self.run.event("the reaper", "reaps", self.queue)

    def deliver(self, charge_order: ChargeOrder, what: str, **at: Any) -> processes.Child:
        child = processes.spawn(deliver, self.queue, self.bank, charge_order, name="a worker", **at)
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
def check_charge_once(run: Run, charge_order: ChargeOrder) -> None:
    """Deliver orders to ``charge_order`` under kills, a frozen worker and equal payloads; count the
    bank's charges per order."""
    if not callable(charge_order):
        run.fail("runs", "not-yet", what=f"Pass your function (charge_order), not {charge_order!r}.")
    orders = _Orders(run)

    # 1. One delivery, nothing goes wrong.
    job, card = orders.order()
    orders.deliver(charge_order, "Your charge_order")
    run.saw(charges_of_the_order=orders.charges(card))
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
        run.fail("once", "not-yet", what="After your charge_order returned, the job was not completed; did it raise?")
    run.good("once", "One delivery with no crash charged the order once, and the job was completed.")

    # 2. Two different orders with equal payloads.
    twins = orders.twins("card-twin")
    orders.deliver(charge_order, "Your charge_order")
    orders.deliver(charge_order, "Your charge_order")
    run.saw(twin_orders=len(twins), twin_charges=orders.charges("card-twin"))
    if orders.charges("card-twin") != 2:
        keys = [k for k in orders.keys("card-twin") if k]
        if keys and all(job != keys[0] and job.startswith(keys[0]) for job in twins):
            run.fail(
                "twins",
                "not-yet",
                what=f"Two different orders, enqueued in the same millisecond, were charged "
                f"{orders.charges('card-twin')} time(s) in all: both were sent with the idempotency key made of the "
                f"JOB id's first {len(keys[0])} characters, which two ids minted in one millisecond share (a JOB id "
                "begins with the time it was minted). The whole id names the job.",
            )
        run.fail("twins", "dedupe-by-content", charges=orders.charges("card-twin"))
    run.good(
        "twins",
        "Two different orders with the same card and amount, their JOB ids minted in the same millisecond, were "
        "each charged: 2 charges.",
    )

    # 3. The job comes back to the same, living worker (its lease ran out while it was slow).
    job, card = orders.order()
    child = processes.spawn(_deliver_twice_here, orders.queue, orders.bank, charge_order, name="a slow worker")
    run.waited("runs", "Your charge_order", child, 15)
    if child.error is not None:
        run.code_failed("runs", "Your charge_order", child)
    run.saw(same_worker_charges=orders.charges(card))
    if orders.charges(card) > 1:
        _too_many(run, orders, card, "same-worker", deliveries=2)
    run.good("same-worker", "A job delivered twice to the same living worker was charged once.")

    # 4. A kill at every step of a delivery; the next delivery comes from a new process.
    for at, where in (
        ("claim", "right after its claim"),
        ("charge:before", "just before its charge reached the bank"),
        ("charge:after", "just after the bank charged"),
        ("returned", "after your charge_order returned, before complete"),
    ):
        job, card = orders.order()
        first = orders.deliver(charge_order, "Your charge_order", kill_at=at)
        if not first.killed:
            continue  # it never reached that step (e.g. it charged nothing): nothing to kill there
        orders.recover()
        second = orders.deliver(charge_order, "Your charge_order")
        charges = orders.charges(card)
        run.saw(killed_at=at, charges_of_the_order=charges, keys_sent_for_the_order=orders.keys(card))
        if charges == 0:
            if at == "claim":
                run.fail("kills", "skip-redeliveries", attempt=(second.value or {}).get("attempt", 2), charges=0)
            run.fail("kills", "mark-then-act", charges=0)
        if charges > 1:
            if at == "returned":
                run.saw(charges_after_a_kill_at_the_end=charges)
                run.fail("kills", "seen-set-in-memory", charges=charges)
            if at == "charge:after" and not any(orders.keys(card)):
                run.saw(charges_after_a_kill_at_the_end=_charges_after_kill_at_end(orders, charge_order))
                if run.seen["charges_after_a_kill_at_the_end"] > 1:
                    run.fail("kills", "seen-set-in-memory", charges=charges)
                run.fail("kills", "check-then-act", how=f"a worker was killed {where}", charges=charges)
            _too_many(run, orders, card, "kills", deliveries=2)
    run.good(
        "kills",
        "A worker SIGKILLed at each step of a delivery (before its charge, just after it, before complete): "
        "the next worker, a new process, never charged the order twice, nor lost it.",
    )

    # 5. Two holders: A freezes before its charge, its lease runs out, B takes the job and
    #    completes it; then A wakes up, charges, and its complete is refused.
    job, card = orders.order()
    a = orders.deliver(charge_order, "Your charge_order", freeze_at="charge:before")
    if a.ended:
        raise RuntimeError(f"worker A should have frozen before its charge: {a!r}")
    orders.recover()
    orders.deliver(charge_order, "Your charge_order")
    a.resume()
    run.waited("runs", "Your charge_order", a, 15)
    if a.error is not None:
        run.code_failed("runs", "Your charge_order", a)
    charges = orders.charges(card)
    stale = (a.value or {}).get("complete")
    run.saw(charges_of_the_order=charges, keys_sent_for_the_order=orders.keys(card))
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
        f"too: the bank charged once. A's complete was refused ({stale}: B had completed the job); the fence "
        "stops a stale worker's complete, and only the key stopped its charge.",
    )

    # 6. The bank refuses an order (0 cents): the error must reach the worker, which then
    #    does not complete the job (it stays for a retry, or the dead set, with its error).
    job, card = orders.order(cents=0)
    refused = processes.spawn(deliver, orders.queue, orders.bank, charge_order, name="a worker")
    run.waited("runs", "Your charge_order", refused, 15)
    place = orders.queue.snapshot().place_of(job)
    if refused.error is None and place == "done":
        run.fail(
            "refused",
            "not-yet",
            what="The bank refused an order of 0 cents (bank.charge raised InvalidArgument), yet the job was "
            "completed with nothing charged: the error never reached the worker, so the order is lost without a "
            "trace. Let the bank's error propagate out of your charge_order: the worker then retries the job, or "
            "dead-letters it with the error on its row.",
        )
    if refused.error is not None and not refused.theirs:
        raise RuntimeError(f"the check itself failed in {refused.name} (not your code): {refused.error}")
    run.good(
        "refused", "An order the bank refused raised out of your charge_order: the job was not completed, nothing lost."
    )

    for row in SCENES:
        _play_stream(run, charge_order, row)

    run.at(orders.queue)  # the stream's queues came after it
    run.one_place_each("places", orders.queue, orders.jobs)  # every order of the run, killed and frozen ones too
    run.good(
        "places", f"At the end, each of the {len(orders.jobs)} orders' jobs was in exactly one place, its row agreeing."
    )

    # 7. The key of one job, asked of freshly started interpreters (not forks of this one),
    #    and a day later: a key that depends on the interpreter or the clock is no key.
    run.at(None)  # fresh interpreters and a recording bank: no queue of the run holds this job
    keys = _fresh_keys(run, charge_order)
    if keys is not None and len(set(keys)) > 1:
        shown = ", ".join(repr(k) for k in dict.fromkeys(keys))
        run.fail(
            "identity",
            "not-yet",
            what=f"Your charge_order gave one job different idempotency keys ({shown}) when run in two freshly started "
            "Python interpreters, and a day later: a worker restarted, or on another machine, would charge the "
            "order again. A key must be made from what is the same on every delivery of the job, in any process "
            "at any time (Python's hash() of a text, or the clock, is not).",
        )
    if keys is not None:
        run.good("identity", f"Two freshly started interpreters, and a day later, made the same key: {keys[0]!r}.")


FRESH = """
import json, sys, time
from echoq.queue import Claim

class Recorder:
    def __init__(self):
        self.keys = []

    def charge(self, card, cents, *, idempotency_key=None):
        self.keys.append(idempotency_key)
        return type("Charge", (), {"number": 1, "outcome": "charged"})()

namespace = {}
exec(compile(sys.stdin.read(), "<your charge_order>", "exec"), namespace)
charge_order = namespace[sys.argv[1]]
bank = Recorder()
now = [1_800_000_000.0]  # a fixed wall clock, so that a key read from it is the same every run
time.time = lambda: now[0]
time.time_ns = lambda: int(now[0] * 1e9)
charge_order(Claim(job_id=sys.argv[2], payload="card-fresh 2500", token=1, attempts=1, deadline_ms=0), bank)
now[0] += 86_400  # a day later
charge_order(Claim(job_id=sys.argv[2], payload="card-fresh 2500", token=2, attempts=2, deadline_ms=0), bank)
print(json.dumps(bank.keys))
"""

FRESH_JOB = "JOB" + "0" * 23 + "FRE"


def _fresh_keys(run: Run, charge_order: ChargeOrder) -> list[object] | None:
    """The keys ``charge_order`` sends for one job, from two new interpreters with different hash
    seeds (fixed, so the verdict is the same every run), each delivering twice, a day apart.
    None when the function's text cannot be found (a function made elsewhere than a cell)."""
    # The whole cell (or answer) that defined it, for the helpers and imports beside it;
    # only the function when that text also runs the check (it would run again).
    cell = "".join(linecache.getlines(getattr(getattr(charge_order, "__code__", None), "co_filename", "")))
    try:
        source = cell if cell and "check_charge_once" not in cell else textwrap.dedent(inspect.getsource(charge_order))
    except (OSError, TypeError):
        run.note(
            "The key's sameness in a freshly started interpreter was not checked: the text of your charge_order "
            "was not found."
        )
        return None
    keys: list[object] = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, VALKEY_URL=_url(run))
        done = subprocess.run(
            [sys.executable, "-c", FRESH, charge_order.__name__, FRESH_JOB],
            input=source,
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            if last.startswith("NameError"):  # it needs a name from another cell: not judged, and said so
                run.note(
                    "The key's sameness in a freshly started interpreter was not checked: your charge_order uses a "
                    f"name defined in another cell ({last})."
                )
                return None
            run.fail(
                "identity",
                "code-error",
                what="Your charge_order, in a freshly started interpreter,",
                error=last,
                where="",
            )
        keys += json.loads(done.stdout.strip().splitlines()[-1])
    return keys


def _url(run: Run) -> str:
    kw = run.client.connection_pool.connection_kwargs
    if kw.get("path"):
        return f"unix://{kw['path']}"
    auth = f"{kw.get('username') or ''}:{kw['password']}@" if kw.get("password") else ""
    return f"redis://{auth}{kw.get('host', '127.0.0.1')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def _too_many(run: Run, orders: _Orders, card: str, prop: str, deliveries: int) -> None:
    keys = orders.keys(card)
    charges = orders.charges(card)
    run.saw(charges_of_the_order=charges, keys_sent_for_the_order=keys)
    if any(k is not None for k in keys):
        run.fail(prop, "key-changes-per-delivery", keys=", ".join(str(k) for k in keys), charges=charges)
    run.fail(prop, "no-idempotency-key", deliveries=deliveries, charges=charges)


def _charges_after_kill_at_end(orders: _Orders, charge_order: ChargeOrder) -> int:
    """Kill after charge_order returned (its record, if any, is written): does a new process
    charge again? Only a record kept in the dead process's memory says yes."""
    job, card = orders.order()
    first = orders.deliver(charge_order, "Your charge_order", kill_at="returned")
    if first.killed:
        orders.recover()
        orders.deliver(charge_order, "Your charge_order")
    return orders.charges(card)


def _serve(queue: Queue, bank: Bank, charge_order: ChargeOrder, stop_fd: int) -> int:
    """A worker process serving order after order (claim, charge_order, complete) until told to
    stop and the queue is empty; returns how many it served."""
    client = processes.counting_client(queue.client)
    q, b = Queue(queue.name, client), Bank(client, bank.name)
    served = 0
    while True:
        claim = q.claim(lease_ms=LEASE_MS)
        if claim is None:
            if select.select([stop_fd], [], [], 0.005)[0]:
                return served
            continue
        charge_order(claim, b)
        processes.mark("returned")
        q.complete(claim)
        served += 1


def _nth_charge(n: int) -> processes.StepAt:
    """Just after the ``n``-th charge the bank made (the predicate runs in the worker process)."""
    seen = [0]

    def at(_step: int, label: str) -> bool:
        seen[0] += label == "charge:after"
        return label == "charge:after" and seen[0] == n

    return at


def _play_stream(run: Run, charge_order: ChargeOrder, row: Scene) -> None:
    """One worker process serves a stream of orders (pairs with one card and amount) and is
    killed just after a charge; a new process takes over the rest, and what arrives meanwhile."""
    stream = _Orders(run)
    feeder = Feeder(stream.queue, row.workload, seed=3, payload=lambda n, _ms: f"card-s{n // 2} {1000 + n // 2}")
    feeder.fill()
    for kill_at in (_nth_charge(KILLED_AT_CHARGE), None):
        stop_r, stop_w = os.pipe()
        child = processes.spawn(
            _serve, stream.queue, stream.bank, charge_order, stop_r, kill_at=kill_at, name="a worker"
        )
        os.close(stop_r)
        give_up, told = time.monotonic() + 15, False
        while not child.poll().ended:
            feeder.top_up()
            snap = stream.queue.snapshot()
            served = not snap.counts["pending"] and not snap.counts["active"]
            if not told and len(feeder.ids) >= row.workload.most and served:
                os.write(stop_w, b"x")  # everything came and was served: stop when idle
                told = True
            if time.monotonic() > give_up:
                child.kill()
                run.fail(row.name, "too-slow", what="Your charge_order, serving a stream of orders,", seconds=15)
            time.sleep(0.005)
        os.close(stop_w)
        if child.error is not None and "IdempotencyConflict" in child.error:
            run.fail(
                row.name,
                "not-yet",
                what=f"One worker process served {row.workload.words} in turn: the bank refused a charge, because "
                "your charge_order sent it an idempotency key it had already sent for another order, to another "
                "card or amount. The key must name the job it charges, not one this worker saw before.",
            )
        if child.error is not None:
            run.code_failed("runs", "Your charge_order", child)
        if child.killed:
            stream.recover()  # its lease runs out; the reaper gives its order back
    stream.jobs = list(feeder.ids)
    for n in range(0, len(stream.jobs), 2):
        card = f"card-s{n // 2}"
        same = len(stream.jobs[n : n + 2])
        if stream.charges(card) != same:
            run.fail(
                row.name,
                "not-yet",
                what=f"One worker process served {row.workload.words} in turn, and a new one took over when it was "
                f"killed just after a charge: the {same} orders to {card}, each its own job with the same card and "
                f"amount, were charged {stream.charges(card)} time(s) in all, not {same}. Each job is one payment, "
                "charged once, whatever this worker charged before.",
            )
    run.one_place_each(row.name, stream.queue, stream.jobs)
    run.good(
        row.name,
        f"One worker process served {row.workload.words} in turn, {row.fault}: each of the {len(stream.jobs)} "
        "orders was charged once.",
    )
