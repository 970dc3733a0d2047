"""The learner's progress record on the server."""

from __future__ import annotations

import pytest

from echoq.teaching import progress


@pytest.fixture
def learner(monkeypatch, valkey_client):
    monkeypatch.setenv("ECHOQ_LEARNER", "progress-test")
    valkey_client.delete(progress.key())
    yield "progress-test"
    valkey_client.delete(progress.key())


def test_a_check_is_recorded_with_its_attempts_verdict_and_misconception(learner, valkey_client) -> None:
    progress.record_lesson(valkey_client, "03")
    progress.record_check(valkey_client, "03", "handler", False, "seen-set-in-memory")
    progress.record_check(valkey_client, "03", "handler", False, "check-then-act")
    mid = progress.read(valkey_client).checks[("03", "handler")]
    assert (mid.attempts, mid.passed, mid.misconception) == (2, False, "check-then-act")
    progress.record_check(valkey_client, "03", "handler", True, None)
    progress.record_check(valkey_client, "03", "handler", False, "check-then-act")  # a later slip
    record = progress.read(valkey_client, learner)
    done = record.checks[("03", "handler")]
    assert (done.attempts, done.passed) == (4, True)  # passed once: stays passed
    assert "03" in record.lessons and record.learner == learner
    assert progress.key() == "emq:{progress-test.course}:progress"


def test_a_lesson_is_reached_once(learner, valkey_client) -> None:
    progress.record_lesson(valkey_client, "02")
    first = progress.read(valkey_client).lessons["02"]
    progress.record_lesson(valkey_client, "02")
    assert progress.read(valkey_client).lessons["02"] == first
