"""Every sentence the lab says: readouts, titles, captions, alt text. One place, so the
wording stays consistent and can be read (and corrected) as a whole.

Functions take facts (job ids, counts, outcomes, key names) and return plain text; no
function here reads a server or a widget. A readout names the keys it talks about, says
what the last move did, and never shows a number it did not get from the frame's snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ...queue import Snapshot

# -- small pieces -----------------------------------------------------------------------------

NOW = "server now"
EXPIRED_ZONE = "expired"


def short(job_id: str) -> str:
    """``JOB…WXYZ``: the last four characters are random, so they tell a handful apart."""
    return f"JOB…{job_id[-4:]}"


def tag(job_id: str) -> str:
    """The four characters a token's label shows."""
    return job_id[-4:]


def seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s"


def seconds_ahead(ms: float) -> str:
    return f"+{ms / 1000:g} s"


def token(job_id: str, ms_left: int, extra: str = "", extra_line: bool = False) -> str:
    """A leased token's label: its id, then its lease (time left, or time since it ran out),
    then ``extra`` after the lease or, with ``extra_line``, on a line of its own."""
    lease = f"{ms_left / 1000:.1f}s" if ms_left > 0 else f"-{-ms_left / 1000:.1f}s"
    if extra and extra_line:
        return f"{tag(job_id)}\n{lease}\n{extra}"
    return "\n".join(part for part in (tag(job_id), lease if not extra else f"{lease} {extra}") if part)


def fit(text: str, room: int) -> str:
    """``text`` in at most ``room`` characters, cut in the middle (key names keep both ends)."""
    if len(text) <= room or room < 8:
        return text
    keep = room - 1
    return text[: keep - keep // 2] + "…" + text[-(keep // 2) :]


def title_queue(queue: str) -> str:
    """A queue's name in a figure's title: whole up to 24 characters, else cut in the middle."""
    return fit(queue, 24)


def count(n: int, noun: str = "job") -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def more(n: int) -> str:
    return f"+{n} more"


def listed(ids: Sequence[str], total: int | None = None, at_most: int = 3) -> str:
    total = len(ids) if total is None else total
    names = ", ".join(short(j) for j in list(ids)[:at_most])
    return names + (", …" if total > at_most else "")


def where(keys: Callable[[str], str], snap: Snapshot, places: Iterable[str] = ("pending", "active", "dead")) -> str:
    """Where the jobs are now, naming the keys; a place is left out when empty (dead) or unlisted."""
    parts = []
    for place in places:
        n = snap.counts[place]
        if place in ("dead", "done", "scheduled") and n == 0:
            continue
        members = list(getattr(snap, place))
        parts.append(f"{keys(place)} holds {n}" + (f" ({listed(members, n)})" if n else ""))
    return "Now " + "; ".join(parts) + "." if parts else ""


# -- every panel -------------------------------------------------------------------------------


def unopened(queue: str) -> str:
    return f"Not connected yet: the panel connects to Valkey (queue {queue!r}) when it is shown or at its first move."


def connected(where_: str, queue: str) -> str:
    return f"Connected to Valkey at {where_}; queue {queue!r}, emptied for a clean start."


def gone(where_: str, error: str) -> str:
    return (
        f"Valkey went away: cannot reach {where_} ({error}). The buttons are off and the picture shows the "
        "last read; press reconnect once the server is back."
    )


def not_connected(move: str) -> str:
    return f"{move}: not connected to Valkey. Press reconnect."


def refused(move: str, error: BaseException) -> str:
    said = str(error).rstrip()
    return f"{move} refused: {said}{'' if said.endswith(('.', '!', '?')) else '.'} Nothing changed."


def reset(deleted: int, queue: str) -> str:
    return f"reset: deleted {deleted} keys of queue {queue!r}; every setting is back to its default."


def sampled() -> str:
    return "Re-read the queue."


SETTING_WORDS: dict[str, dict[str, Callable[[Any], str]]] = {
    "claim": {
        "crash": lambda v: (
            "crash mid-job is ON: 'finish' kills the worker instead of completing."
            if v
            else "crash mid-job is off: 'finish' completes the job."
        ),
        "lease_ms": lambda v: f"Lease set to {seconds(v)}: the next claim leases for that long.",
    },
    "delivery": {
        "deliveries": lambda v: f"Deliveries set to {v}: press 'deliver' to deliver one job {v} time(s).",
        "consumer": lambda v: (
            "Consumer: keyed on the JOB id (one effect per job). Press 'deliver'."
            if v == "keyed"
            else "Consumer: naive (one effect per delivery). Press 'deliver'."
        ),
    },
    "reap": {
        "max_stalled": lambda v: f"max_stalled = {v}: the next sweep dead-letters a job at its stall number {v}.",
        "lease_ms": lambda v: f"First worker's lease: {seconds(v)} (the others get 2x, 3x ...).",
        "workers": lambda v: f"'start workers' now starts {v} worker(s).",
    },
    "fleet": {
        "job_ms": lambda v: f"Pace: each job takes {seconds(v)} of work.",
        "rate": lambda v: (
            f"Producer: {v} new job(s) per second while the fleet runs." if v else "Producer: off (0 jobs per second)."
        ),
        "path": lambda v: (
            "Path: reliable (claim under a lease, keyed effects)."
            if v == "reliable"
            else "Path: NAIVE pop-and-process (the contrast)."
        ),
        "lease_ms": lambda v: f"Lease: {seconds(v)}; a live worker extends it, a killed one cannot.",
        "beat_ms": lambda v: f"Beat: every {seconds(v)} each worker runs the stalled check.",
    },
}


def setting(kind: str, name: str, value: Any) -> str:
    say = SETTING_WORDS.get(kind, {}).get(name)
    return say(value) if say else f"{name} = {value}."


def status_live(running: bool) -> str:
    return "live · animating" if running else "live"


def status_held(index: int, last: int, clock: str) -> str:
    newer = last - index
    later = f"; {newer} newer frame{'s' if newer != 1 else ''} recorded" if newer > 0 else ""
    return f"paused at {clock} (frame {index + 1} of {last + 1}{later}) · read-only: press live to return"


def banner_held(clock: str) -> str:
    return f"recorded {clock} · read-only"


def alt(title: str, snap: Snapshot | None, extra: str = "") -> str:
    """Alt text for a still picture of a panel: its title and where the jobs are."""
    if snap is None:
        return f"{title}. No read of the queue yet."
    parts = []
    for place in ("pending", "active", "done", "dead", "scheduled"):
        n = snap.counts.get(place, 0)
        if n or place in ("pending", "active"):
            parts.append(f"{place} {n}" + (f" ({listed(list(getattr(snap, place)), n)})" if n else ""))
    return f"{title}. Job tokens by place: " + "; ".join(parts) + "." + (f" {extra}" if extra else "")


# -- the Claim lab -----------------------------------------------------------------------------


def claim_title(queue: str, crash: bool, lease_ms: int) -> str:
    crash_words = "ON" if crash else "off"
    queue = title_queue(queue)
    return f"The recoverable claim · queue {queue!r} · lease {seconds(lease_ms)} · crash mid-job {crash_words}"


def claim_enqueued(job_id: str, pending_key: str) -> str:
    return f"enqueue.lua added {short(job_id)} to {pending_key}."


def claim_still_holding(job_id: str) -> str:
    return f"The worker already holds {short(job_id)}: finish it (or crash) first. Nothing changed."


def claim_empty(pending_key: str) -> str:
    return f"claim.lua found {pending_key} empty: enqueue a job first. Nothing changed."


def claim_claimed(job_id: str, active_key: str, lease_ms: int, deadline_ms: int, attempt: int) -> str:
    return (
        f"claim.lua moved {short(job_id)} from pending to {active_key} under a {seconds(lease_ms)} lease "
        f"(deadline {deadline_ms} on the server's clock); its fencing token = {attempt}."
    )


def claim_nothing_held() -> str:
    return "The worker holds no job: claim one first. Nothing changed."


def claim_crashed(job_id: str, active_key: str, ms_left: int | None) -> str:
    """``ms_left``: the lease's time left on the server's clock at this read (None: not in active)."""
    crashed = "The worker crashed mid-job: no complete ran"
    if ms_left is None:
        return f"{crashed}; {short(job_id)} is no longer in {active_key}."
    if ms_left <= 0:
        return (
            f"{crashed}. {short(job_id)} is still in {active_key}, but its lease ran out {seconds(-ms_left)} ago "
            "on the server's clock: it is past its deadline, and the next reap returns it to pending."
        )
    return (
        f"{crashed}, so {short(job_id)} stays leased in {active_key} for {seconds(ms_left)} more, until its "
        "lease runs out; then a reap returns it to pending."
    )


def claim_completed(job_id: str, attempt: int, active_key: str, done_key: str) -> str:
    return (
        f"complete.lua (token {attempt}) took {short(job_id)} out of {active_key}: the row is retired, "
        f"the id remembered in {done_key}."
    )


def claim_stale(job_id: str, attempt: int, outcome: str) -> str:
    return (
        f"complete.lua refused {short(job_id)} as {outcome}: token {attempt} no longer holds it (the lease "
        "ran out and it was reaped). Nothing changed."
    )


def reap_moved(ids: Sequence[str], active_key: str, pending_key: str) -> str:
    return (
        f"reap.lua moved {listed(ids, at_most=5)} from {active_key} back to {pending_key}: the lease ran out "
        "on the server's clock."
    )


def reap_empty(active_key: str) -> str:
    return f"reap.lua found {active_key} empty: nothing to recover."


def reap_too_early(job_id: str, ms_left: int) -> str:
    return (
        f"reap.lua moved nothing: the lease of {short(job_id)} runs {seconds(ms_left)} more on the server's "
        "clock. Wait, or fast-forward."
    )


def fast_forwarded(moved: int, how: str) -> str:
    return f"fast_forward.lua (a teaching script; the clock is untouched) moved {moved} lease deadline(s) {how}."


def claim_worker(worker: str, held: Mapping[str, Any] | None) -> str:
    if worker == "holding" and held:
        return f"worker: holds {short(held['job_id'])} · token {held['attempt']}"
    if worker == "crashed":
        return "worker: crashed mid-job (a new one claims next)"
    return "worker: idle"


CRASH_SCRIPT = (
    "-- A crash runs no script: that is the point. The worker dies between claim.lua and\n"
    "-- complete.lua, so nothing moves the job: it stays in {active}, scored\n"
    "-- by its lease deadline, until reap.lua finds the lease expired."
)


# -- the Delivery lab --------------------------------------------------------------------------


def delivery_title(queue: str, consumer: str, deliveries: int) -> str:
    how = "keyed" if consumer == "keyed" else "naive"
    return f"At-least-once delivery · queue {title_queue(queue)!r} · {how} consumer · {deliveries} deliveries"


def fence_title(queue: str) -> str:
    return f"The fence: a stale worker's complete is refused · queue {title_queue(queue)!r}"


def delivery_start(job_id: str, n: int, consumer: str) -> str:
    how = "keyed on the JOB id" if consumer == "keyed" else "naive: one effect per delivery"
    return f"Delivering {short(job_id)} {n} time(s), consumer {how}: enqueue.lua put it in pending."


def delivery_claimed(k: int, n: int, job_id: str, attempt: int, effects: int, effects_key: str, ran: bool) -> str:
    if ran:
        did = f"the worker ran the effect: {effects_key} now counts {effects} for it."
    else:
        did = (
            f"the ledger already held this JOB id, so effect.lua SKIPPED the effect: {effects_key} "
            f"still counts {effects} for it."
        )
    return f"Delivery {k} of {n}: claim.lua leased {short(job_id)} (token {attempt}); {did}"


def delivery_hand(ran: bool) -> str:
    return "holds it, ran the effect" if ran else "holds it, effect SKIPPED"


def delivery_crashed_hand(ran: bool) -> str:
    return "ran the effect, crashed" if ran else "effect SKIPPED, crashed"


def delivery_ledger(effects: int, deliveries: int) -> str:
    """The ledger's count against the deliveries (each delivery ran its effect or skipped it)."""
    skipped = max(0, deliveries - effects)
    return f"deliveries so far: {deliveries}\neffect ran {effects} · skipped {skipped}"


def delivery_crashed(k: int, job_id: str, pending_key: str) -> str:
    return (
        f"Delivery {k}: the worker crashed before complete; its lease ran out on the server's clock and "
        f"reap.lua moved {short(job_id)} back to {pending_key}."
    )


def delivery_done(n: int, job_id: str, effects: int, effects_key: str, consumer: str) -> str:
    how = "keyed on the JOB id" if consumer == "keyed" else "naive: one per delivery"
    return (
        f"Delivered {short(job_id)} {n} time(s) (claim, effect, crash, reap … then complete): "
        f"{effects_key} counts {effects} effect(s), {how}."
    )


def delivery_none() -> str:
    return "No delivery yet: set how many, pick a consumer, press 'deliver'."


DELIVERY_NONE_CARD = "No delivery yet: set how many,\npick a consumer, press 'deliver'."
FENCE_RULE = "complete(token) completes the job\nonly if token = the row's token"


def fence_step(step: int, **f: Any) -> str:
    if step == 1:
        return f"1. Worker A claims {short(f['job_id'])}: token {f['attempt']}, a {f['lease_ms']} ms lease. A stalls."
    if step == 2:
        return f"2. A's lease runs out on the server's clock; reap.lua moves {f['moved']} job back to pending."
    if step == 3:
        return f"3. Worker B claims it: token {f['attempt']}; the row's token is now {f['attempt']}. B holds it."
    if step == 4:
        return (
            f"4. A wakes up and completes with token {f['attempt']}: {f['outcome']}. Refused at the row "
            f"(token = {f['row_token']}), nothing changed: the job is still in {f['place_key']}."
        )
    return f"5. B completes with token {f['attempt']}: {f['outcome']}. One completion, by the holder."


def fence_idle() -> str:
    return "The fence: press 'fence: next step' to let a stale worker try to complete."


# -- the Reap lab ------------------------------------------------------------------------------


def reap_title(queue: str, max_stalled: int) -> str:
    return (
        f"Stalled recovery · queue {title_queue(queue)!r} · max_stalled = {max_stalled}: stall {max_stalled} is fatal"
    )


def reap_started(n: int, pending_key: str) -> str:
    return f"enqueue.lua added {n} job(s) to {pending_key}; {n} worker(s) will claim them."


def reap_workers_crashed(n: int, active_key: str) -> str:
    return (
        f"{n} worker(s) claimed a job each into {active_key} (staggered leases) and crashed; each job sits at "
        "its lease deadline on the time axis."
    )


def reap_nothing_pending(pending_key: str) -> str:
    return f"{pending_key} is empty: nothing to claim. Nothing changed."


def reap_claimed_again(n: int) -> str:
    return f"{n} job(s) claimed again by new workers, which crashed too."


def sweep_nothing() -> str:
    return "stalled_check.lua found no expired lease: every worker's lease still runs. Wait, or fast-forward."


def sweep(recovered: Sequence[str], dead: Sequence[str], pending_key: str, dead_key: str, max_stalled: int) -> str:
    parts = []
    if recovered:
        parts.append(f"moved {listed(recovered, at_most=5)} back to {pending_key}")
    if dead:
        parts.append(
            f"dead-lettered {listed(dead, at_most=5)} into {dead_key} "
            f"(its stall count reached max_stalled={max_stalled})"
        )
    return f"stalled_check.lua {' and '.join(parts)}."


def race(racy_deliveries: int, racy_dups: int, atomic_deliveries: int, atomic_dups: int) -> str:
    return (
        f"Race: two overlapping two-step sweeps (check, then move) gave one crashed job {racy_deliveries} "
        f"deliveries, {racy_dups} duplicate: two workers hold it at once. The atomic reap.lua gave "
        f"{atomic_deliveries} deliveries, {atomic_dups} duplicate."
    )


def stalled_label(stalled: int) -> str:
    return f"st {stalled}" if stalled else ""


# -- the Fleet lab -----------------------------------------------------------------------------


def fleet_title(queue: str, path: str, job_ms: int, rate: int, producing: bool) -> str:
    producer = f"{rate} new jobs/s" if producing else "no producer"
    return f"The worker path · queue {title_queue(queue)!r} · {path} · {seconds(job_ms)} per job · {producer}"


def fleet_started(n: int, path: str, beat_ms: int, job_ms: int) -> str:
    if path == "naive":
        return (
            f"started {n} NAIVE workers (threads in this kernel): each pops a job out of Valkey (naive_pop.lua) "
            f"and works on it for {seconds(job_ms)}; the job is then only in the worker's memory."
        )
    return (
        f"started {n} workers (threads in this kernel), each on a {seconds(beat_ms)} beat: stalled check, then "
        f"drain, {seconds(job_ms)} per job; the consumer is keyed on the JOB id."
    )


def fleet_added(n: int, pending_key: str) -> str:
    return f"enqueue_many.lua added {n} jobs to {pending_key}."


def fleet_no_worker(slot: int) -> str:
    return f"no worker {slot}: start the fleet first (workers are numbered from 1)"


def fleet_not_working(slot: int, state: str) -> str:
    return f"worker {slot} is already {state}. Nothing changed."


def fleet_killed(
    slot: int, job_id: str | None, attempt: int | None, active_key: str, path: str, ms_left: int | None = None
) -> str:
    """``ms_left``: on the reliable path, the killed worker's lease left at the frame's read
    (None: the job is no longer in the active set)."""
    if job_id is None:
        return f"killed worker {slot} (simulated: worker.abandon()) between jobs: it held none."
    if path == "naive":
        return (
            f"killed worker {slot} mid-job: it had popped {short(job_id)}, so the only copy was in its memory. "
            "That job is LOST: no set holds it, no row is left. (Valkey cannot know; the lab counts it because "
            "the lab did the killing.)"
        )
    killed = f"killed worker {slot} mid-job (worker.abandon(), as a killed process): {short(job_id)} (token {attempt})"
    if ms_left is None:
        return f"{killed}: by the time of this read it is no longer in {active_key}."
    if ms_left <= 0:
        return (
            f"{killed} is in {active_key} past its lease deadline ({seconds(-ms_left)} ago): the next live "
            "worker's beat returns it."
        )
    return (
        f"{killed} stays leased in {active_key} for {seconds(ms_left)} more, until its lease runs out; then a "
        "live worker's beat returns it."
    )


def fleet_restarted(slot: int) -> str:
    return f"restarted worker {slot}: its first beat recovers any expired lease, then it drains."


def fleet_still_working(slot: int) -> str:
    return f"worker {slot} is still working. Nothing changed."


def fleet_stopped(n: int, workers: int) -> str:
    if n == 0:
        return "no worker was running: stopped the producer. Nothing else changed."
    whom = f"all {n} running worker(s)" if n == workers else f"the {n} running worker(s) of {workers}"
    return f"stopped {whom} and the producer: each finished the job in its hand and claims no more."


def fleet_path_pending(chosen: str, running: str, alive: bool) -> str:
    if alive:
        return f"(Path set to {chosen}; the fleet still runs {running}: press 'start' to switch.)"
    return f"(Path set to {chosen}: the next 'start' uses it.)"


def fleet_tally(snap: Snapshot, t: Any, path: str, alive: int, workers: int, keys: Callable[[str], str]) -> str:
    """``t``: the frame's :class:`~echoq.teaching.lab.fleet.model.Tally` (this run's numbers)."""
    c = snap.counts
    dups = "n/a on the naive path (nothing is delivered twice)" if t.duplicates is None else str(t.duplicates)
    run = (
        f"This run: enqueued {t.enqueued}, completed {t.completed}"
        if path == "reliable"
        else f"This run: enqueued {t.enqueued}, popped {t.popped}"
    )
    return (
        f"{alive} of {workers} workers alive. {keys('pending')} {c['pending']}, active {c['active']}, "
        f"done {c['done']}, dead {c['dead']}. {run}. Lost: {t.lost}. Duplicate effects: {dups}."
    )


def fleet_worker(
    slot: int, state: str, job_id: str | None, attempt: int | None, path: str, killed_job: str | None = None
) -> str:
    mark = {"working": "●", "killed": "✕", "stopped": "○", "failed": "!"}.get(state, "?")
    if state == "working" and job_id:
        hand = (
            f"holds {tag(job_id)} (popped: only copy)" if path == "naive" else f"holds {tag(job_id)} · token {attempt}"
        )
    elif state == "working":
        hand = "idle, waiting for a job"
    elif state == "killed":
        left = "it held none" if not killed_job else ("lost " if path == "naive" else "left ") + tag(killed_job)
        hand = f"killed (simulated): {left}"
    else:
        hand = state
    return f"{mark} w{slot}  {hand}"


def fleet_verdict(lost: int, duplicates: int | None) -> str:
    if duplicates is None:
        return f"lost {lost} · naive path"  # nothing is delivered twice there: no duplicates to count
    return f"lost {lost} · duplicate effects {duplicates}"
