"""The exercise checks: the stubs the learner starts from are reported wrong, in words, and
the solutions pass. A check that passed everything would teach nothing."""

from __future__ import annotations

import pytest

from echoq.teaching import exercises


def define(source: str, name: str):
    """Run a learner's cell (a stub or a solution) and return what it defines under ``name``."""
    namespace: dict = {}
    exec(source, namespace)
    return namespace[name]


def test_claim_stub_is_wrong_and_says_the_job_would_be_lost() -> None:
    feedback = exercises.check_claim_script(exercises.CLAIM_STUB)
    assert not feedback.ok
    assert any("would be lost" in line for line in feedback.failed)
    assert any("HINCRBY" in line for line in feedback.failed)


def test_claim_solution_passes() -> None:
    feedback = exercises.check_claim_script(exercises.CLAIM_SOLUTION)
    assert feedback.ok, str(feedback)


def test_claim_on_the_callers_clock_is_caught() -> None:
    wrong = exercises.CLAIM_SOLUTION.replace(
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)", "local now = 0"
    )
    feedback = exercises.check_claim_script(wrong)
    assert not feedback.ok and any("read TIME" in line for line in feedback.failed)


def test_claim_that_does_not_parse_is_reported_not_raised() -> None:
    feedback = exercises.check_claim_script("this is not lua")
    assert not feedback.ok and feedback.failed[0].startswith("Valkey refused the script")


def test_handler_stub_charges_every_delivery() -> None:
    feedback = exercises.check_handler(define(exercises.HANDLER_STUB, "handle"))
    assert not feedback.ok
    assert any("4 deliveries made 4 effects" in line for line in feedback.failed)


def test_handler_solution_passes() -> None:
    feedback = exercises.check_handler(define(exercises.HANDLER_SOLUTION, "handle"))
    assert feedback.ok, str(feedback)


def test_handler_that_does_nothing_or_raises_is_caught() -> None:
    assert not exercises.check_handler(lambda job_id, payload, effects: None).ok

    def boom(job_id, payload, effects):
        raise RuntimeError("card declined")

    feedback = exercises.check_handler(boom)
    assert not feedback.ok and "card declined" in feedback.failed[0]


def test_reap_stub_reaps_a_live_lease() -> None:
    feedback = exercises.check_reap_script(exercises.REAP_STUB)
    assert not feedback.ok
    assert any("live lease was reaped" in line for line in feedback.failed)
    assert any("set its state to pending" in line for line in feedback.failed)


def test_reap_solution_passes() -> None:
    feedback = exercises.check_reap_script(exercises.REAP_SOLUTION)
    assert feedback.ok, str(feedback)


@pytest.mark.parametrize("answer", [0, 2, 5, "one", True])
def test_wrong_loss_predictions_are_wrong(answer: object) -> None:
    pytest.importorskip("echoq.teaching.contrasts")
    assert not exercises.check_lost_prediction(answer).ok


def test_right_loss_prediction_is_right() -> None:
    pytest.importorskip("echoq.teaching.contrasts")
    feedback = exercises.check_lost_prediction(1)
    assert feedback.ok, str(feedback)


def test_feedback_renders_in_words() -> None:
    feedback = exercises.check_reap_script(exercises.REAP_STUB)
    text, page = str(feedback), feedback._repr_html_()
    assert text.startswith("Lesson 04 reap script: 3 thing(s) to fix") and "✗" in text and "✓" in text
    assert "<li>✗" in page


def test_loop_stub_misses_the_stalled_job_and_completes_too_early() -> None:
    feedback = exercises.check_worker_loop(define(exercises.LOOP_STUB, "my_worker_loop"))
    assert not feedback.ok
    assert any("never handled: run a stalled check" in line for line in feedback.failed)
    assert any("Complete a job only after handle() returns" in line for line in feedback.failed)


def test_loop_solution_passes() -> None:
    feedback = exercises.check_worker_loop(define(exercises.LOOP_SOLUTION, "my_worker_loop"))
    assert feedback.ok, str(feedback)


def test_long_job_without_extension_runs_twice() -> None:
    feedback = exercises.check_long_job(0)
    assert not feedback.ok and any("delivered 2 times" in line for line in feedback.failed)


def test_long_job_with_extension_runs_once() -> None:
    feedback = exercises.check_long_job(60)
    assert feedback.ok, str(feedback)


def test_long_job_check_refuses_nonsense() -> None:
    feedback = exercises.check_long_job("often")
    assert not feedback.ok and "whole number" in feedback.failed[0]


def test_long_job_check_explains_an_extension_slower_than_the_lease() -> None:
    feedback = exercises.check_long_job(300)
    assert not feedback.ok and "not often enough" in feedback.failed[0]
