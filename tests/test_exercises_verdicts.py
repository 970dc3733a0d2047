"""Same answer, same verdict: every answer in the exercises' folders (the solution, right/,
wrong/) gets, on every run, the verdict tools/verdicts.py recorded from ten runs of it (in
tools/verdicts.json: passed or not, the misconception named, the ✗ line with JOB ids, scratch
queue names and measured durations, counts and rates masked). tests/test_exercises.py compares
each judgement it makes with that record (once per answer, every test run).

The judges of lessons 05 and 06 (loop, extend) play scenes on real time -- beats, leases,
extensions, a worker's pace when idle -- so here each of their answers is judged TIMED_REPEATS
more times, in parallel processes of their own. The other judges are deterministic by
construction (kills and freezes at named steps, the server's clock fast-forwarded, the
differential judge's states from a fixed seed, verdicts read from the server): their one
judgement per test run is compared with the record. The full run, 10 times every answer, is
the tool's (`.venv/bin/python tools/verdicts.py`, about 6 minutes on 4 processes).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMED = ("loop", "extend")
TIMED_REPEATS = 2


def _tool():
    spec = importlib.util.spec_from_file_location("verdicts", ROOT / "tools" / "verdicts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdicts"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.server
def test_every_answer_of_a_timed_judge_gets_the_recorded_verdict_every_time() -> None:
    import echoq

    verdicts = _tool()
    recorded = verdicts.recorded()
    seen = verdicts.repeat(TIMED, times=TIMED_REPEATS, jobs=6, url=echoq.server_url())
    assert {key for key, _ in seen} == set(TIMED)
    differ = {
        answer: [v for v in got if v != recorded.get(answer)]
        for answer, got in seen.items()
        if len(got) != TIMED_REPEATS or any(v != recorded.get(answer) for v in got)
    }
    assert not differ, "verdicts that differ from the recorded ones (tools/verdicts.json):\n" + "\n".join(
        f"{key} {label}: recorded {recorded.get((key, label))}\n    now " + "\n    now ".join(map(str, vs))
        for (key, label), vs in differ.items()
    )


def test_the_record_holds_every_answer_and_each_is_the_verdict_its_folder_says() -> None:
    from echoq.teaching.exercises import EXERCISES

    verdicts = _tool()
    recorded = verdicts.recorded()
    assert set(recorded) == {(key, label) for key, label, _ in verdicts.answers()}, (
        "tools/verdicts.json is stale: run .venv/bin/python tools/verdicts.py --record"
    )
    for (key, label), (ok, name, _line) in recorded.items():
        assert ok == (label == "solution" or label.startswith("right/")), (key, label)
        if label.startswith("wrong/") and not label.startswith("wrong/unlisted-"):
            assert name == label.removeprefix("wrong/"), (key, label, name)
    assert {key for key, _ in recorded} == set(EXERCISES)


def test_the_mask_hides_only_what_no_two_runs_share() -> None:
    mask = _tool().mask
    line = (
        "A worker was killed holding JOB01M92NQXQMDACADB09V6DAWJNE on emq:{x05-loop-123-4-crash}: 1.5 s later, "
        "sent 992 commands, and after 990 of its 991 replies; its deadline 5000 was at the server's now 1796460415912, "
        "charged 2 time(s)"
    )
    assert mask(line) == (
        "A worker was killed holding <id> on emq:{<queue>}: <time> later, sent <n> commands, and after <n> of its <n> "
        "replies; its deadline 5000 was at the server's now <server ms>, charged 2 time(s)"
    )
