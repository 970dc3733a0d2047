"""Lesson 07: a script that builds a key for itself, on a cluster.

The learner's Lua ``requeue_dead`` (KEYS dead, pending) gives every dead job of a queue a
fresh chance: each id leaves ``emq:{q}:dead`` for ``emq:{q}:pending`` and its row says
``state = pending`` with its stall count back to 0. The row's key is not among KEYS: the
script must build it, and on a cluster only a key that carries the queue's ``{tag}`` lives
in the slot the script runs on.

The check runs it (in a child process, on a client of its own) on two fresh queues of the
given client -- the lesson's cluster, where their tags put them in two different slots --
after three jobs of each were dead-lettered by real stalls and one stale worker still holds
an old claim. The verdict comes from the server: the sets, the rows, any key written outside
the queue, and whether that stale worker's complete is still refused afterwards.
"""

from __future__ import annotations

import random
import re
from typing import Any

from redis.cluster import ClusterNode, RedisCluster

from echoq import scripts
from echoq.queue import Complete, Queue, _text
from echoq.teaching import processes
from echoq.teaching.exercises.core import (
    Misconception,
    Run,
    check_runner,
    is_refusal,
    load,
    refusal_words,
    register,
    row_state,
)
from echoq.teaching.exercises.differential import Move, State, contract_step, states
from echoq.teaching.fast_forward import fast_forward

DEAD = 3
# A third queue holds this many dead jobs, dead-lettered by real stalls too: a dead set keeps up to
# 10,000 by default, so a script that reads only part of it (ZRANGE 0 999) leaves jobs behind.
MANY_DEAD = 2_500


LEASE_MS = 5_000


MISCONCEPTIONS = [
    Misconception(
        "row-key-without-the-tag",
        "a row key without the tag",
        "{what} A key a script builds must carry the queue's {{tag}}, or it lands in another slot -- on a "
        "cluster, often on another master.",
        "Where does the queue's tag come from inside the script? Only KEYS carry it.",
        "Cut the name off KEYS[1] ('emq:{q}:dead' minus 'dead') and build the row key on what is left.",
        signature=lambda e: e["untagged"],
    ),
    Misconception(
        "another-queues-tag",
        "another queue's tag typed in",
        "The script wrote {key}: a row of another queue, not of {queue}. A name typed into the script fits one "
        "queue; the check ran it on two.",
        "The script runs for whichever queue's KEYS it is given. Take the prefix from KEYS.",
        "string.sub(KEYS[1], 1, -5) is 'emq:{q}:' for any queue q.",
        signature=lambda e: e["key"].startswith("emq:{") and not e["key"].startswith(e["prefix"]),
    ),
    Misconception(
        "dead-and-pending",
        "in two places",
        "{job} is in {queue}'s pending AND still in its dead set: a job must be in exactly one place, or the "
        "next reader counts it twice.",
        "Moving is two writes: add to one set and remove from the other.",
        "ZREM the id from KEYS[1] as you ZADD it to KEYS[2].",
        signature=lambda e: e["job"] in e["pending"] and e["job"] in e["dead_after"],
    ),
    Misconception(
        "only-the-first",
        "only the first job",
        "{left} of {queue}'s {dead} dead jobs are still in its dead set: the script moved only {moved}.",
        "How many ids does your read of the dead set return?",
        "ZRANGE key 0 -1 is every member; 0 0 is only the first.",
        signature=lambda e: e["moved_ids"] == e["dead_before"][:1],
    ),
    Misconception(
        "row-still-dead",
        "the row still says dead",
        "{job} is in pending but its row {row} still says state = {state}: every reader that trusts the row "
        "(the snapshot, the lab, a person) sees a dead job waiting to be claimed.",
        "The sets are half of a job's place; the row's state is the other half.",
        "HSET the row's 'state' to 'pending' as you move it.",
        signature=lambda e: e["state"] == "dead",
    ),
    Misconception(
        "stall-count-kept",
        "the stall count kept",
        "{job} came back with its stall count at {stalled}: with max_stalled 1 its very next stall is fatal, "
        "so the 'second chance' is no chance at all.",
        "A fresh chance starts the stall count again.",
        "HSET the row's 'stalled' field to 0 as well.",
        signature=lambda e: e["stalled"] == e["stalled_before"],
    ),
    Misconception(
        "token-reset",
        "the fencing token reset",
        "The script set {job}'s token back to {token}. The token fences: the next claim hands out token "
        "{next}, which a stale worker already holds -- and its complete was accepted.",
        "The token only ever grows: it is how a stale worker is told apart from the current one.",
        "Reset 'stalled' only; leave 'token' as it is.",
        signature=lambda e: e["next"] <= e["stale_token"] and e["late"] == "completed",
    ),
]


EXERCISE = register(
    load(
        __file__,
        key="requeue",
        lesson="07",
        title="requeue the dead, on a cluster",
        kind="lua",
        names=(),
        misconceptions=MISCONCEPTIONS,
    )
)


REFUSED_ON_A_CLUSTER = ("non local key", "hash to the same slot", "crossslot", "undeclared")


def _own_client(client: Any) -> Any:
    """A new client to the same server or cluster: a child never shares its parent's sockets."""
    if isinstance(client, RedisCluster):
        kwargs = client.nodes_manager.connection_kwargs
        return RedisCluster(
            startup_nodes=[ClusterNode(node.host, node.port) for node in client.get_primaries()],
            username=kwargs.get("username"),
            password=kwargs.get("password"),
            decode_responses=kwargs.get("decode_responses", False),
            require_full_coverage=False,
            socket_timeout=5,
        )
    return processes.counting_client(client)


def _requeue_in_child(source: str, client: Any, keys: list[str]) -> None:
    scripts.run_text(_own_client(client), source, keys, [], name="your requeue_dead")


def _words(error: str) -> str:
    """The server's refusal without the Lua frame it names ('... script: on @user_script:8.')."""
    return error.split(": on @")[0].removeprefix("ResponseError: ").rstrip(". ")


def _dead_letter(queue: Queue, count: int = DEAD) -> tuple[list[str], Any]:
    """``count`` jobs dead by a real stall each (max_stalled 1); returns their ids and one
    claim a stale worker still holds for the first of them."""
    ids = queue.enqueue_many([f"job {n}" for n in range(1, count + 1)])
    claims = [c for start in range(0, count, 1000) for c in queue.claim_many(min(1000, count - start), LEASE_MS)]
    fast_forward(queue, LEASE_MS)  # the workers died: their leases run out (on the server's clock)
    queue.stalled_check(max_stalled=1, limit=1000)
    return ids, claims[0]


def _tag(queue: Queue) -> str:
    """The queue's hash tag, braces and all: ``{q}`` of ``emq:{q}:``."""
    prefix = queue.keys.prefix
    return prefix[prefix.index("{") : prefix.rindex("}") + 1]


def _shown(key: str, queue: Queue) -> str:
    """A key as the lesson writes it: the queue's prefix as emq:{q}:, a job's id as <id>."""
    return re.sub(r"JOB[0-9A-Z]{26}", "<id>", key.replace(queue.keys.prefix, "emq:{q}:"))


def _stray(client: Any, queue: Queue, ids: list[str]) -> list[str]:
    """Keys holding one of ``ids`` in their name that are not that job's row in this queue
    (``emq:{q}:job:<id>``): another queue's, no queue's, or one under this queue's prefix
    that the queue does not have (a prefix cut a character short: ``emq:{q}:djob:<id>``)."""
    found = []
    for job_id in ids:
        for key in client.scan_iter(match=f"*{job_id}*"):
            text = key.decode() if isinstance(key, bytes) else str(key)
            if text != queue.keys.job(job_id):
                found.append(text)
    return found


def _where_it_ran(client: Any, queues: list[Queue]) -> str:
    """The ✓ line of a script that ran on both queues: where it ran, as the client routed it."""
    if not isinstance(client, RedisCluster):
        return "Your script ran on both queues, on one server (not a cluster: every slot is on it)."
    masters = {client.get_node_from_key(queue.keys.dead).name for queue in queues}
    if len(masters) > 1:
        return "Your script ran on both queues, each on the master that serves its slot."
    return "Your script ran on both queues, on the one master that serves both their slots."


@check_runner(EXERCISE)
def check_requeue_script(run: Run, source: str) -> None:
    """Run ``requeue_dead`` on two queues whose jobs were dead-lettered by real stalls, and
    judge what the server holds afterwards (see the module docstring)."""
    if not isinstance(source, str) or not source.strip():
        run.fail("runs", "not-yet", what="Pass your script (the string requeue_dead).")
    scenes = []
    for part in ("-a", "-b"):
        queue = run.queue(part)
        ids, stale = _dead_letter(queue)
        row = queue.job(ids[0])
        if queue.snapshot().counts["dead"] != DEAD or row is None or row.stalled != 1:  # the scene itself
            raise RuntimeError(f"the lesson 07 scene did not play out on {queue.name}")
        scenes.append((queue, ids, stale))
    run.cleanup(lambda: [run.client.delete(key) for q, ids, _ in scenes for key in _stray(run.client, q, ids)])
    dead_before = {q.name: [_text(j) for j in q.client.zrange(q.keys.dead, 0, -1)] for q, _ids, _s in scenes}
    for queue, _ids, _stale in scenes:
        run.at(queue)
        k = queue.keys
        child = run.waited(
            "runs",
            "Your requeue_dead",
            processes.spawn(_requeue_in_child, source, run.client, [k.dead, k.pending], name="your script"),
            15,
        )
        if child.error is not None:
            if is_refusal(child.error):
                said = f"The server refused your script a key outside your queues ({refusal_words(child.error)})."
                run.fail("tag", "row-key-without-the-tag", what=said, untagged=None, held=said)
            if any(words in child.error.lower() for words in REFUSED_ON_A_CLUSTER):
                run.fail(
                    "tag",
                    "row-key-without-the-tag",
                    what=f"The cluster refused your script on {queue.name}'s master ({_words(child.error)}).",
                    untagged=True,  # a key in another slot than KEYS[1]'s: not on the queue's tag
                )
            run.code_failed("runs", "Your requeue_dead", child)
    run.good("runs", _where_it_ran(run.client, [queue for queue, _ids, _stale in scenes]))
    for queue, ids, _stale in scenes:
        run.at(queue)
        stray = _stray(run.client, queue, ids)
        others = [key for key in stray if key.startswith("emq:{")]
        mine = [key for key in others if key.startswith(queue.keys.prefix)]
        if mine:
            run.fail(
                "tag",
                "not-yet",
                what=f"The script wrote {_shown(mine[0], queue)!r}: under the queue's "
                "prefix emq:{q}:, tag and all, but not a key the queue has -- a job's row is emq:{q}:job:<id>. "
                "Print the prefix your script cuts from KEYS[1]: where does the cut end?",
            )
        if others:
            run.fail("tag", "another-queues-tag", key=others[0], queue=queue.name, prefix=queue.keys.prefix)
        if stray:
            run.fail(
                "tag",
                "row-key-without-the-tag",
                what=f"The script wrote {stray[0]!r}, which is not {queue.keys.prefix}job:<id>.",
                untagged=_tag(queue) not in stray[0],
                held=f"The script wrote {stray[0]!r}, which is not {queue.keys.prefix}job:<id>.",
            )
    run.good(
        "tag",
        f"Every key named after a job of these queues was read after the script ran: each was its own queue's "
        f"row, emq:{{q}}:job:<id> on KEYS[1]'s prefix, tag and all ({sum(len(ids) for _q, ids, _s in scenes)} rows).",
    )
    for queue, ids, _stale in scenes:
        run.at(queue)
        snap = queue.snapshot()
        both = [j for j in ids if j in snap.pending and j in snap.dead]
        run.saw(pending=list(snap.pending), dead_after=list(snap.dead))
        if both:
            run.fail("moved", "dead-and-pending", job=both[0], queue=queue.name)
        left = [j for j in ids if j in snap.dead]
        if left:
            moved = DEAD - len(left)
            run.fail(
                "moved",
                "only-the-first",
                left=len(left),
                queue=queue.name,
                dead=DEAD,
                moved=moved,
                moved_ids=[j for j in dead_before[queue.name] if j not in snap.dead],
                dead_before=dead_before[queue.name],
                held=f"{len(left)} of {queue.name}'s {DEAD} dead jobs are still in its dead set: the script moved "
                f"{moved}.",
            )
        if not all(j in snap.pending for j in ids):
            run.fail("moved", "not-yet", what="After your script some dead job was in no set at all: it is lost.")
    many = run.queue("-many")
    _dead_letter(many, MANY_DEAD)
    k = many.keys
    child = run.waited(
        "runs",
        "Your requeue_dead",
        processes.spawn(_requeue_in_child, source, run.client, [k.dead, k.pending], name="your script"),
        15,
    )
    if child.error is not None:
        run.code_failed("runs", "Your requeue_dead", child)
    snap = many.snapshot(limit=1)
    if snap.counts["dead"]:
        run.fail(
            "moved",
            "not-yet",
            what=f"A queue with {MANY_DEAD:,} dead jobs: after your script {snap.counts['dead']:,} of them were still "
            f"in its dead set, and {snap.counts['pending']:,} in pending. A dead set keeps up to 10,000 jobs by "
            "default: does your read of it return them all?",
        )
    if snap.counts["pending"] != MANY_DEAD:
        run.fail(
            "moved",
            "not-yet",
            what=f"A queue with {MANY_DEAD:,} dead jobs: after your script only {snap.counts['pending']:,} were "
            "in its pending set, and none in dead: the others are lost.",
        )
    run.good(
        "moved",
        f"All {DEAD} dead jobs of each queue are in its pending set, and only there; and all {MANY_DEAD:,} of a queue "
        "that held that many.",
    )
    for queue, ids, _stale in scenes:
        run.at(queue)
        for job_id in ids:
            row = queue.job(job_id)
            if row is None:
                run.fail("row", "not-yet", what=f"{job_id}'s row is gone: the next claim would find an orphan.")
            state = row_state(queue, job_id)
            if state != "pending":
                run.fail(
                    "row",
                    "row-still-dead",
                    job=job_id,
                    row=queue.keys.job(job_id),
                    state=state,
                    held=f"{job_id} is in pending but its row {queue.keys.job(job_id)} says state = {state}.",
                )
            if row.stalled != 0:
                run.fail(
                    "row",
                    "stall-count-kept",
                    job=job_id,
                    stalled=row.stalled,
                    stalled_before=1,  # each job was dead-lettered at its first stall (_dead_letter)
                    held=f"{job_id} came back with its stall count at {row.stalled}: a fresh chance starts it at 0.",
                )
    cleared = sum(
        not run.client.hexists(queue.keys.job(job_id), "stalled") for queue, ids, _stale in scenes for job_id in ids
    )
    how = "its stall count back to 0" if not cleared else f"no stall count on {cleared} (a missing count reads as 0)"
    run.good("row", f"Each row says state = pending, {how}.")
    for queue, _ids, stale in scenes:
        run.at(queue)
        fresh = queue.claim(lease_ms=LEASE_MS)
        late = queue.complete(stale)  # the worker that held token 1 wakes up and completes
        if fresh is not None and fresh.token <= stale.token and late is Complete.COMPLETED:
            run.fail(
                "token",
                "token-reset",
                job=stale.job_id,
                token=fresh.token - 1,
                next=fresh.token,
                stale_token=stale.token,
                late=late.value,
            )
        if late is Complete.COMPLETED:
            raise RuntimeError("a stale claim was accepted by the real complete: the check's scene is wrong")
    run.good("token", "The fencing token kept growing: a stale worker's complete of a requeued job is refused.")

    # The whole contract: the script against the reference on generated queues.
    contract_step(run, MOVE, source, what="Your requeue_dead")


def _states(rng: random.Random, size: int) -> State:
    return states(rng, size + 1, places=("dead", "dead", "dead", "pending", "active", "scheduled", "done"))


MOVE = Move(keys=("dead", "pending"), argv=lambda state: [], reply=lambda r: r, generate=_states)

EXERCISE.move = MOVE  # what the differential judge runs (tools/mutants.py too)
