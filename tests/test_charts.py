"""The lessons' result charts are pure functions of a report: what they draw is the data."""

from __future__ import annotations

import pytest

import echoq
from echoq.teaching.chaos import ChaosReport, Sample
from echoq.teaching.lab.charts import chaos_timeline, persistence_bars
from echoq.teaching.persistence import RestartReport


def test_chaos_timeline_draws_every_place_from_the_samples() -> None:
    report = ChaosReport("reliable", "q", 3, 1, 0, 500, 1, 0.0, 0.0, kills=2)
    report.timeline = [
        Sample(0.0, 3, 0, 0, 0, 0, 0, 0),
        Sample(0.5, 1, 1, 0, 1, 0, 0, 0),
        Sample(1.0, 0, 0, 0, 3, 0, 0, 0),
    ]
    ax = chaos_timeline(report).axes[0]
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines == {"pending": [3, 1, 0], "active": [0, 1, 0], "done": [0, 1, 3], "dead": [0, 0, 0]}
    assert "lost 0, duplicate effects 0" in ax.get_title(loc="left")


def test_persistence_bars_stack_survived_and_lost() -> None:
    reports = [RestartReport("none", 10, 0, 0, 0), RestartReport("aof", 10, 10, 8, 2)]
    ax = persistence_bars(reports).axes[0]
    heights = [round(p.get_height()) for p in ax.patches]
    assert heights == [0, 10, 10, 0]  # survived bars, then lost bars
    assert [t.get_text() for t in ax.texts] == ["10 lost", "0 lost"]


@pytest.mark.server
def test_job_places_reads_every_bar_from_the_server(queue: echoq.Queue) -> None:
    from echoq.teaching import contrasts
    from echoq.teaching.lab.charts import job_places

    queue.enqueue_many([f"job {n}" for n in range(1, 6)])
    for n in range(3):
        job_id, _payload = contrasts.naive_pop(queue)
        if n < 2:
            contrasts.naive_done(queue, job_id)  # the third one is lost: popped, never done
    snap = queue.snapshot()
    ax = job_places(snap, when="After the kill").axes[0]
    assert ax.get_title(loc="left") == "After the kill: 5 jobs in, 1 in no place"  # read, not typed
    assert [round(p.get_height()) for p in ax.patches] == [2, 0, 2, 1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["pending", "active", "done", "lost"]
    assert [t.get_text() for t in ax.texts] == ["2", "0", "2", "1"]  # the numbers written on the bars
