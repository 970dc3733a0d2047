"""The Delivery lab's sentences: deliveries and the effects ledger, and the fence's five steps.

Functions take facts and return plain text; see :mod:`echoq.teaching.lab.words` for what
every panel shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ....queue import Job
from ..words import short

SETTINGS: dict[str, Callable[[Any], str]] = {
    "deliveries": lambda v: f"Deliveries set to {v}: press 'deliver' to deliver one job {v} time(s).",
    "consumer": lambda v: (
        "Consumer: keyed on the JOB id (one effect per job). Press 'deliver'."
        if v == "keyed"
        else "Consumer: naive (one effect per delivery). Press 'deliver'."
    ),
}


def title(consumer: str, deliveries: int) -> str:
    how = "keyed" if consumer == "keyed" else "naive"
    return f"At-least-once delivery · {how} consumer · {deliveries} deliveries"


def fence_title() -> str:
    return "The fence: a stale worker's complete is refused"


def start(job_id: str, n: int, consumer: str) -> str:
    how = "keyed on the JOB id" if consumer == "keyed" else "naive: one effect per delivery"
    return f"Delivering {short(job_id)} {n} time(s), consumer {how}: enqueue.lua put it in pending."


def claimed(k: int, n: int, job_id: str, token: int, effects: int, effects_key: str, ran: bool) -> str:
    if ran:
        did = f"the worker ran the effect: {effects_key} now counts {effects} for it."
    else:
        did = (
            f"the ledger already held this JOB id, so effect.lua SKIPPED the effect: {effects_key} "
            f"still counts {effects} for it."
        )
    return f"Delivery {k} of {n}: claim.lua leased {short(job_id)} (token {token}); {did}"


def hand(ran: bool) -> str:
    return "holds it, ran the effect" if ran else "holds it, effect SKIPPED"


def crashed_hand(ran: bool) -> str:
    return "ran the effect, crashed" if ran else "effect SKIPPED, crashed"


def ledger(effects: int, deliveries: int) -> str:
    """The ledger's count against the deliveries (each delivery ran its effect or skipped it)."""
    skipped = max(0, deliveries - effects)
    return f"{deliveries} deliver{'y' if deliveries == 1 else 'ies'} · {skipped} skipped"


def workers_card(workers: Sequence[tuple[str, int, str]]) -> str:
    """The workers card: each worker's name, the token it holds, what it did."""
    return "\n".join(f"{name} · token {token}\n  {status}" for name, token, status in workers) or "none yet"


def row_card(job_id: str | None, row: Job | None, in_done: bool) -> str:
    """The row card: the job's row as the snapshot read it (None: it has no row)."""
    if job_id is None:
        return "no job yet"
    if row is not None:
        return f"{short(job_id)}\ntoken = {row.token} · {row.state or 'a state echoq never writes'}"
    if in_done:
        return f"{short(job_id)}\ncompleted: the id is\nin done"
    return f"{short(job_id)}\n(not listed)"


def refusal(worker: str, token: int, row_token: int) -> str:
    return f"refused {worker}: {token} ≠ {row_token}"


def fence_card(step: int) -> str:
    return f"The fence · step {step} of 5\n" + FENCE_RULE


def ledger_card(ledger_key: str, job_id: str, ran: int, deliveries: int) -> str:
    return f"{ledger_key}\n{short(job_id)} → {ran} effect(s)\n" + ledger(ran, deliveries)


def crashed(k: int, job_id: str, pending_key: str) -> str:
    return (
        f"Delivery {k}: the worker crashed before complete; its lease ran out on the server's clock and "
        f"reap.lua moved {short(job_id)} back to {pending_key}."
    )


def done(n: int, job_id: str, effects: int, effects_key: str, consumer: str) -> str:
    how = "keyed on the JOB id" if consumer == "keyed" else "naive: one per delivery"
    return (
        f"Delivered {short(job_id)} {n} time(s) (claim, effect, crash, reap … then complete): "
        f"{effects_key} counts {effects} effect(s), {how}."
    )


def none_yet() -> str:
    return "No delivery yet: set how many, pick a consumer, press 'deliver'."


NONE_CARD = "No delivery yet: set how many,\npick a consumer, press 'deliver'."


FENCE_RULE = "complete(token) ends the job\nonly if token = the row's token"


def fence_step(step: int, **f: Any) -> str:
    if step == 1:
        return f"1. Worker A claims {short(f['job_id'])}: token {f['token']}, a {f['lease_ms']} ms lease. A stalls."
    if step == 2:
        return f"2. A's lease runs out on the server's clock; reap.lua moves {f['moved']} job back to pending."
    if step == 3:
        return f"3. Worker B claims it: token {f['token']}; the row's token is now {f['token']}. B holds it."
    if step == 4:
        return (
            f"4. A wakes up and completes with token {f['token']}: {f['outcome']}. Refused at the row "
            f"(token = {f['row_token']}), nothing changed: the job is still in {f['place_key']}."
        )
    return f"5. B completes with token {f['token']}: {f['outcome']}. One completion, by the holder."


def fence_idle() -> str:
    return "The fence: press 'fence: next step' to let a stale worker try to complete."
