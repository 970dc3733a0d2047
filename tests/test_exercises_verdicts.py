"""Same answer, same verdict: every answer in the exercises' folders (the solution, right/,
wrong/) is judged several times, in parallel processes of its own (tools/verdicts.py), and
any change of verdict, of the misconception named or of the ✗ line fails the test (with JOB
ids, scratch queue names and measured durations, counts and rates masked: see the tool).

How often: the judges of lessons 05 and 06 (loop, extend) play scenes on real time -- beats,
leases, extensions, a worker's pace when idle -- so each of their answers is judged
TIMED_REPEATS times. The others are deterministic by construction: kills and freezes at
named steps, the server's clock fast-forwarded, the differential judge's states from a fixed
seed, verdicts read from the server; each of their answers is judged twice. The full run, 10
times every answer, is the tool's (`.venv/bin/python tools/verdicts.py`, about 6 minutes on
4 processes): too long for `make test`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMED = ("loop", "extend")
TIMED_REPEATS = 2
REPEATS = 2


def _tool():
    spec = importlib.util.spec_from_file_location("verdicts", ROOT / "tools" / "verdicts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdicts"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.server
def test_every_answer_gets_the_same_verdict_every_time() -> None:
    import echoq
    from echoq.teaching.exercises import EXERCISES

    verdicts = _tool()
    times = {key: TIMED_REPEATS if key in TIMED else REPEATS for key in EXERCISES}
    seen = verdicts.repeat(times=times, jobs=6, url=echoq.server_url())
    assert {key for key, _ in seen} == set(EXERCISES)
    for (key, label), got in seen.items():
        assert len(got) == times[key], (key, label, got)
    changed = verdicts.changed(seen)
    assert not changed, "verdicts that changed between runs:\n" + "\n".join(
        f"{key} {label}:\n    " + "\n    ".join(map(str, vs)) for (key, label), vs in changed.items()
    )
    for (key, label), got in seen.items():  # and each is the verdict its folder says it is
        ok, name, _ = got[0]
        assert ok == (label == "solution" or label.startswith("right/")), (key, label, got[0])


def test_the_mask_hides_only_what_no_two_runs_share() -> None:
    mask = _tool().mask
    line = (
        "A worker was killed holding JOB01M92NQXQMDACADB09V6DAWJNE on emq:{x05-loop-123-4-crash}: 1.5 s later, "
        "sent 992 commands, about 49,329 per second; its deadline 5000 was at the server's now 1796460415912, "
        "charged 2 time(s)"
    )
    assert mask(line) == (
        "A worker was killed holding <id> on emq:{<queue>}: <time> later, sent <n> commands, about <n> per "
        "second; its deadline 5000 was at the server's now <server ms>, charged 2 time(s)"
    )
