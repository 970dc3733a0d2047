"""A real server SIGKILLed and restarted on its own data folder, per persistence setting."""

from __future__ import annotations

import pytest

import echoq
from echoq.teaching.persistence import crash_and_restart


@pytest.mark.server
def test_without_persistence_every_acknowledged_job_is_lost() -> None:
    report = crash_and_restart("none", jobs=40, claimed=5)
    assert report.acknowledged == 40 and report.survived == 0 and report.lost == 40


@pytest.mark.server
def test_a_snapshot_keeps_only_what_was_written_before_it() -> None:
    report = crash_and_restart("snapshot", jobs=40, claimed=5)
    assert report.survived == 20 and report.lost == 20 and report.active_after == 0


@pytest.mark.server
def test_the_append_only_file_keeps_every_acknowledged_job_and_every_lease() -> None:
    report = crash_and_restart("aof", jobs=40, claimed=5)
    assert report.lost == 0 and report.pending_after == 35 and report.active_after == 5


def test_bad_settings_are_refused() -> None:
    with pytest.raises(echoq.InvalidArgument, match="persistence must be one of"):
        crash_and_restart("tape")  # type: ignore[arg-type]
    with pytest.raises(echoq.InvalidArgument, match="jobs >= 2"):
        crash_and_restart("none", jobs=1)
