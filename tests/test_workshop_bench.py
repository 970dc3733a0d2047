"""The workshop benchmarks run, at a tiny size, and say something sane. No timing is asserted
(figures belong to bench/ and the README); what is asserted is that they measure what they
claim and that their cross-talk check can fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import echoq

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.server
def test_class_load_runs_learners_as_processes_with_their_own_users_and_finds_no_cross_talk() -> None:
    done = run_bench("class_load.py", "--learners", "3", "--seconds", "1.5", "--think-ms", "50,150", "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    assert report["learners"] == 3 and report["clicks"] >= 6
    assert 0 < report["click_ms"]["median"] <= report["click_ms"]["p95"] <= report["click_ms"]["max"]
    assert report["learner_p95_ms"]["worst_learner"].startswith("learner-")
    assert report["cross_talk_count"] == 0 and report["refused"] == [] and report["errors"] == []
    assert report["dashboard_refresh_ms"]["count"] >= 1


@pytest.mark.server
def test_dashboard_bench_times_refreshes_of_a_seeded_class() -> None:
    done = run_bench(
        "dashboard.py", "--learners", "3", "--refreshes", "3", "--seconds", "1", "--chaos-jobs", "20", "--json"
    )
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    assert report["quiet_ms"]["count"] == 3 and report["under_load_ms"]["count"] >= 1
    assert report["seeded"]["queues_on_board"] >= 3  # every learner reached lesson 00 at least
    assert report["class_chaos"]["lost"] == 0 and report["class_chaos"]["duplicates"] == 0
    assert report["problems"] == []


@pytest.mark.server
def test_the_cross_talk_check_finds_a_job_in_two_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import _workshop

    workshop = _workshop.start_class(2)
    try:
        a, b = (
            echoq.Queue(f"{lid}.lesson-02-lab", echoq.connect(workshop.learner_url(lid))) for lid in workshop.learners
        )
        job = a.enqueue("mine").job_id
        b.enqueue("a copy of someone else's job", job_id=job)  # what cross-talk would look like
        reports = [
            _workshop.LearnerReport("learner-01", seen_ids={job}, queues=[a.name]),
            _workshop.LearnerReport("learner-02", seen_ids=set(), queues=[b.name, "learner-01.lesson-03-lab"]),
        ]
        problems = _workshop.cross_talk(workshop, reports)
        assert any("a job of learner-01" in p for p in problems), problems
        assert any("outside their namespace" in p for p in problems), problems
    finally:
        _workshop.stop_class(workshop)
