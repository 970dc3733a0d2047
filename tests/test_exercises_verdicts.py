"""Same answer, same verdict: every answer in the exercises' folders (the solution, right/,
wrong/) gets, on every run, the verdict tools/verdicts.py recorded from ten runs of it (in
tools/verdicts.json: passed or not, the misconception named, the ✗ line with JOB ids, scratch
queue names and measured durations, counts and rates masked). tests/test_exercises.py compares
each judgement it makes with that record (once per answer, every test run).

Ten runs of every answer take the tool minutes of both cores (`.venv/bin/python
tools/verdicts.py`), too long for the suite; so the suite makes sure the record is such a run
of today's code instead: each exercise's verdicts recorded from at least RUNS runs, by the
code that judges it now (its folder, the exercises' modules, the process harness:
``exercises.judging_digest``). A change to a check, or to an answer, then fails here until
the tool has judged every answer of that exercise ten times again and found one verdict each
(`tools/verdicts.py --record KEY`); and every test run adds one more judgement per answer,
compared with the record.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from echoq.teaching.exercises import EXERCISES, judging_digest

ROOT = Path(__file__).resolve().parent.parent
RUNS = 10  # judgements of each answer a record is made from


def _tool():
    spec = importlib.util.spec_from_file_location("verdicts", ROOT / "tools" / "verdicts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdicts"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("key", list(EXERCISES))
def test_each_exercises_verdicts_were_recorded_from_ten_runs_of_todays_judging_code(key: str) -> None:
    made = _tool().recorded_runs().get(key)
    assert made is not None, f"tools/verdicts.json has no record of how {key}'s verdicts were made"
    assert made["runs"] >= RUNS, (
        f"{key}: its verdicts were recorded from {made['runs']} runs of each answer, not {RUNS}"
    )
    assert made["date"] and made["commit"], made
    assert made["digest"] == judging_digest(key), (
        f"{key}: its check, its answers or the judging code changed after its verdicts were recorded "
        f"({made['date']}, {made['commit']}): run .venv/bin/python tools/verdicts.py --record {key}"
    )


def test_the_record_holds_every_answer_and_each_is_the_verdict_its_folder_says() -> None:
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
