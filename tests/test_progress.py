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


def test_a_check_is_recorded_with_its_submissions_verdict_and_misconception(learner, valkey_client) -> None:
    progress.record_lesson(valkey_client, "03")
    progress.record_check(valkey_client, "03", "handler", False, "seen-set-in-memory")
    progress.record_check(valkey_client, "03", "handler", False, "check-then-act")
    mid = progress.read(valkey_client).checks[("03", "handler")]
    assert (mid.submissions, mid.passed, mid.misconception) == (2, False, "check-then-act")
    progress.record_check(valkey_client, "03", "handler", True, None)
    progress.record_check(valkey_client, "03", "handler", False, "check-then-act")  # a later slip
    record = progress.read(valkey_client, learner)
    done = record.checks[("03", "handler")]
    assert (done.submissions, done.passed) == (4, True)  # passed once: stays passed
    assert "03" in record.lessons and record.learner == learner
    assert progress.key() == "emq:{progress-test.course}:progress"


def test_a_lesson_is_reached_once(learner, valkey_client) -> None:
    progress.record_lesson(valkey_client, "02")
    first = progress.read(valkey_client).lessons["02"]
    progress.record_lesson(valkey_client, "02")
    assert progress.read(valkey_client).lessons["02"] == first


def test_every_submission_is_kept_with_its_time_verdict_misconception_and_code_up_to_the_bound(
    learner, valkey_client
) -> None:
    history = progress.submissions_key("02", "claim")
    valkey_client.delete(history)
    try:
        progress.record_check(valkey_client, "02", "claim", False, "deadline-in-the-past", code="local t = 1")
        progress.record_check(valkey_client, "02", "claim", True, None, code="x" * (progress.MAX_CODE_CHARS + 5))
        first, second = progress.submissions(valkey_client, "02", "claim")
        assert (first.passed, first.misconception, first.code, first.truncated) == (
            False,
            "deadline-in-the-past",
            "local t = 1",
            False,
        )
        assert second.passed and second.truncated and len(second.code) == progress.MAX_CODE_CHARS
        assert first.at_ms <= second.at_ms
        for n in range(progress.MAX_SUBMISSIONS + 3):
            progress.record_check(valkey_client, "02", "claim", False, "code-error", code=f"try {n}")
        kept = progress.submissions(valkey_client, "02", "claim", learner)
        assert len(kept) == progress.MAX_SUBMISSIONS and kept[-1].code == f"try {progress.MAX_SUBMISSIONS + 2}"
        record = progress.read(valkey_client).checks[("02", "claim")]
        assert record.submissions == progress.MAX_SUBMISSIONS + 5  # the count is never trimmed
        assert record.missed == {"code-error": progress.MAX_SUBMISSIONS + 3, "deadline-in-the-past": 1}
    finally:
        valkey_client.delete(history)


def test_the_current_lesson_is_the_one_started_last(learner, valkey_client) -> None:
    progress.record_lesson(valkey_client, "04")
    progress.record_lesson(valkey_client, "02")
    record = progress.read(valkey_client)
    assert record.current == "02" and set(record.lessons) >= {"02", "04"}
