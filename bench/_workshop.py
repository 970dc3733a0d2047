"""What the workshop benchmarks share: a class server, and learners that click like people.

A simulated learner is a separate process (forked, so 60 of them start in a second) with
its own ACL user from ``workshop up``. It opens the lab panels of lessons 02-04
(``ClaimModel``, ``DeliveryModel``, ``ReapModel``: the models behind the widgets, so a
"click" is exactly the move the button runs plus the atomic re-read the picture is drawn
from) and clicks through their moves with a person's pauses. It times every click and
reports the JOB ids it ever saw, so the parent can check that no job crossed between two
learners.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from echoq.teaching.workshop import Workshop, admin

# The moves of lessons 02-04, as their lab panels' buttons run them.
CLAIM_MOVES = ("enqueue", "claim", "complete", "enqueue", "claim", "fast_forward", "reap", "claim", "complete")
REAP_MOVES = ("start_workers", "fast_forward", "step_reap", "claim_again", "fast_forward", "step_reap", "reset")


@dataclass
class LearnerReport:
    learner: str
    clicks_ms: list[float] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # readouts of clicks the server refused
    seen_ids: set[str] = field(default_factory=set)
    queues: list[str] = field(default_factory=list)
    error: str | None = None


def start_class(count: int, folder: Path | None = None) -> Workshop:
    """A class server with ``count`` learner users (learner-01 ...), as an instructor starts it."""
    where = folder or Path(tempfile.mkdtemp(prefix="echoq-bench-class-")) / "class"
    workshop, _lines = admin.up(where, count=count)
    return workshop


def stop_class(workshop: Workshop) -> None:
    admin.down(workshop.dir)


def clicks(models: dict[str, object], rng: random.Random) -> Iterator[tuple[str, object, Callable[[], bool]]]:
    """An endless walk through lessons 02-04's moves: (what, the panel's model, the click)."""
    claim, delivery, reap = models["claim"], models["delivery"], models["reap"]
    while True:
        for move in CLAIM_MOVES:
            yield f"02 {move}", claim, getattr(claim, move)
        for _ in range(3):
            n = rng.randint(1, 10)
            yield f"03 deliveries={n}", delivery, lambda n=n: _deliver(delivery, n)
        for _ in range(2):
            yield "03 fence step", delivery, delivery.fence_next
        for move in REAP_MOVES:
            yield f"04 {move}", reap, getattr(reap, move)


def _deliver(delivery: object, n: int) -> bool:
    return delivery.deliver(deliveries=n)  # the slider and the button: redeliver n times for real


def learner_main(
    learner: str, url: str, seconds: float, think_s: tuple[float, float], seed: int, start: mp.Barrier, out: mp.Queue
) -> None:
    """One simulated learner: connect as themselves, open the three panels, click until time is up."""
    report = LearnerReport(learner)
    try:
        os.environ["ECHOQ_LEARNER"] = learner
        os.environ["VALKEY_URL"] = url
        from echoq import connect
        from echoq.teaching.lab import ClaimModel, DeliveryModel, ReapModel

        client = connect(url)
        models = {
            "claim": ClaimModel("lesson-02-lab", client=client),
            "delivery": DeliveryModel("lesson-03-lab", client=client),
            "reap": ReapModel("lesson-04-lab", client=client),
        }
        report.queues = [m.name for m in models.values()]
        rng = random.Random(seed)
        walk = clicks(models, rng)
        start.wait(timeout=120)
        deadline = time.monotonic() + seconds
        time.sleep(rng.uniform(0, think_s[1]))  # people do not all click at the same instant
        while time.monotonic() < deadline:
            what, model, click = next(walk)
            started = time.perf_counter()
            ok = click()
            report.clicks_ms.append((time.perf_counter() - started) * 1000)
            if not ok:  # refused or disconnected: the readout says which
                report.refused.append(f"{what}: {model.readout}")
            for m in models.values():
                snap = m.snapshot
                if snap is not None:
                    report.seen_ids.update(snap.pending, snap.active, snap.scheduled, snap.dead, snap.done)
            time.sleep(rng.uniform(*think_s))
    except BaseException as exc:  # reported to the parent, which fails the run
        report.error = f"{type(exc).__name__}: {exc}"
    out.put(report)


def run_learners(
    workshop: Workshop, seconds: float, think_s: tuple[float, float], seed: int = 1, during: Callable[[], None] = None
) -> list[LearnerReport]:
    """Fork one process per learner, start them together, collect their reports."""
    ctx = mp.get_context("fork")
    start = ctx.Barrier(len(workshop.learners) + 1)
    out: mp.Queue = ctx.Queue()
    procs = [
        ctx.Process(
            target=learner_main,
            args=(lid, workshop.learner_url(lid), seconds, think_s, seed * 1000 + n, start, out),
            daemon=True,
        )
        for n, lid in enumerate(workshop.learners)
    ]
    for p in procs:
        p.start()
    start.wait(timeout=180)
    if during is not None:
        during()
    reports = [out.get(timeout=seconds + 180) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return sorted(reports, key=lambda r: r.learner)


def cross_talk(
    workshop: Workshop, reports: list[LearnerReport], expected: set[tuple[str, str]] = frozenset()
) -> list[str]:
    """Every way one learner's work could have reached another's, found on the server:
    a job id seen by two learners, a key in a learner's namespace holding an id they never
    saw, a queue outside their namespace, an ACL refusal (but the ``expected`` (user, key)
    ones a bench provoked on purpose). Empty means zero cross-talk."""
    problems: list[str] = []
    owner: dict[str, str] = {}
    for r in reports:
        for job_id in r.seen_ids:
            if job_id in owner:
                problems.append(f"{job_id} seen by {owner[job_id]} and {r.learner}")
            owner[job_id] = r.learner
        problems += [
            f"{r.learner} has queue {q} outside their namespace" for q in r.queues if not q.startswith(r.learner + ".")
        ]
    client = workshop.admin()
    for r in reports:
        for key in client.scan_iter(match=f"emq:{{{r.learner}.*", count=2000):
            if ":job:" in key:
                found = [key.rsplit(":", 1)[1]]
            elif client.type(key) == "zset":
                found = client.zrange(key, 0, -1)
            else:
                continue
            problems += [f"{key} holds {j}, a job of {owner[j]}" for j in found if owner.get(j, r.learner) != r.learner]
    for entry in client.acl_log(count=128):
        if entry.get("username") in workshop.learners and (entry["username"], entry["object"]) not in expected:
            problems.append(f"ACL refused {entry['username']} {entry['object']} ({entry['reason']})")
    client.close()
    return problems
