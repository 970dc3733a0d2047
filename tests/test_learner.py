"""Learner namespaces: names, ids, and the keys a namespaced queue writes; how a learner
attaches another client to a lesson's server."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import redis

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


def test_attach_shows_how_to_reach_the_lessons_server_and_hides_the_password(valkey_client) -> None:
    """Lesson 00's attach: the printed URL and redis-cli line reach this very server; the
    password is in neither unless revealed."""
    from echoq.teaching import course

    lesson = course.Lesson("00", echoq.Queue(fresh_name("attach"), valkey_client))
    password = echoq.server.connection_settings(valkey_client)["password"]
    shown = str(lesson.attach())
    assert password and password not in shown and course.Attach.HIDDEN in shown and ":***@" in shown
    revealed = lesson.attach(reveal=True)
    assert f"password: {password}" in str(revealed)
    lesson.queue.enqueue("seen from elsewhere")
    other = redis.Redis.from_url(revealed.url())
    try:
        assert other.zcard(lesson.queue.keys.pending) == 1
    finally:
        other.close()
    cli = shutil.which("redis-cli") or shutil.which("valkey-cli")
    if cli is None:
        return  # the Python half is checked; no command-line client on this machine
    line = next(ln for ln in shown.splitlines() if "-cli -h" in ln).split()
    argv = [cli, *line[1:]]
    argv.remove("--askpass")  # it reads a terminal; REDISCLI_AUTH is the same password
    env = {**os.environ, "REDISCLI_AUTH": password}
    argv += ["ZCARD", lesson.queue.keys.pending]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    assert out.stdout.strip() == "1", out.stderr
