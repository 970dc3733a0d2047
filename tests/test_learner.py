"""Learner namespaces: names, ids, and the keys a namespaced queue writes."""

from __future__ import annotations

import pytest

import echoq
from echoq.teaching import learner
from tests.support.servers import fresh_name


def test_solo_mode_leaves_names_alone(monkeypatch) -> None:
    monkeypatch.delenv("ECHOQ_LEARNER", raising=False)
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    assert learner.learner_id() is None and learner.queue_name("lesson-02") == "lesson-02"


def test_echoq_learner_wins_over_the_hub_user(monkeypatch) -> None:
    monkeypatch.setenv("ECHOQ_LEARNER", "alice")
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    assert learner.queue_name("lesson-02") == "alice.lesson-02"


def test_a_bad_learner_id_is_a_one_line_error(monkeypatch) -> None:
    monkeypatch.setenv("ECHOQ_LEARNER", "Alice Smith")
    with pytest.raises(echoq.InvalidQueueName, match="not a valid namespace") as caught:
        learner.queue_name("lesson-02")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("user", ["Ada.Lovelace@uni.edu", "ada lovelace", "ÅSA", "x" * 80])
def test_hub_user_names_become_distinct_valid_namespaces(user: str) -> None:
    made = learner.from_hub_user(user)
    assert echoq.keyspace.NAMESPACE_RE.match(made), made
    assert made != learner.from_hub_user(user + "2")


def test_a_namespaced_queue_keeps_every_key_in_one_tag(valkey_client) -> None:
    name = f"ns{fresh_name('x').replace('-', '')}"[:30] + ".lesson-02"
    queue = echoq.Queue(name, valkey_client)
    assert queue.keys.namespace == name.split(".")[0]
    queue.enqueue("a")
    claim = queue.claim()
    assert queue.complete(claim) is echoq.Complete.COMPLETED
    keys = list(queue.keys_in_use())
    assert keys and all(k.startswith(f"emq:{{{name}}}:") for k in keys)
    queue.reset()


@pytest.mark.parametrize("bad", ["a.b.c", ".lesson", "Alice.lesson", "alice.", "a" * 33 + ".q"])
def test_bad_namespaced_names_are_refused(bad: str) -> None:
    with pytest.raises(echoq.InvalidQueueName):
        echoq.Keyspace(bad)
