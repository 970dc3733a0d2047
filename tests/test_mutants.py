"""tools/mutants.py checked against the code, cheaply (its full run is the tool's: minutes).

Every mutant it calls equivalent must still be made (an entry naming a mutant that is gone
would hide the survivor that took its place), must say why in one line, and -- where the
exercise has a differential move -- must leave every key as the reference does on generated
queues, a crash between any two writes included for a Python move. The run recorded in
tools/mutants.json (the site's score table) must be a run of these mutants: each exercise
with at least 20 non-equivalent ones, none surviving.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from echoq.teaching.exercises import EXERCISES

ROOT = Path(__file__).resolve().parent.parent
CODE = [key for key, ex in EXERCISES.items() if ex.kind != "value"]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


mutants = _load("mutants")


@pytest.mark.parametrize("key", CODE)
def test_every_listed_equivalent_is_still_made_and_says_why(key: str) -> None:
    ex = EXERCISES[key]
    made = {m.name for m in mutants.mutants(ex.solution, ex.kind)}
    for (k, name), why in mutants.EQUIVALENT.items():
        if k != key:
            continue
        assert name in made, f"{key}: the equivalent {name!r} is no longer made: remove it, or name what replaced it"
        assert why.strip() and "\n" not in why, (key, name)
        assert not re.match(r"line \d+", name), f"{key}: {name!r} is named by a line number"


@pytest.mark.parametrize("key", CODE)
def test_the_recorded_run_is_a_run_of_these_mutants(key: str) -> None:
    """tools/mutants.json is what the site shows: a mutant added, renamed or gone since it was
    recorded makes it stale (run `tools/mutants.py --record` again)."""
    record = json.loads(mutants.RECORD.read_text())["exercises"][key]
    ex = EXERCISES[key]
    assert set(record["verdicts"]) == {m.name for m in mutants.mutants(ex.solution, ex.kind)}, (
        f"{key}: tools/mutants.json is stale: run .venv/bin/python tools/mutants.py --record"
    )
    equivalent = {name for name, verdict in record["verdicts"].items() if verdict == "equivalent"}
    assert equivalent == {name for k, name in mutants.EQUIVALENT if k == key}, key
    assert record["gaps"] == [] and "survived" not in record["verdicts"].values(), record["gaps"]
    assert record["made"] - len(record["equivalent"]) >= 20, f"{key}: fewer than 20 non-equivalent mutants"
    assert record["killed"] == record["made"] - len(record["equivalent"])


def test_the_course_page_carries_the_recorded_score_not_a_typed_one() -> None:
    generated = _load("generated_docs")
    page = (ROOT / "docs" / "course.md").read_text()
    assert "<!-- generated: mutation-score -->" in page and "non-equivalent mutants killed" not in page
    built = generated.fill(page)
    record = json.loads(mutants.RECORD.read_text())
    assert mutants.score_markdown(record) in built
    for key in CODE:
        assert f"| {key} | {record['exercises'][key]['made']} |" in built


@pytest.mark.server
def test_each_listed_equivalent_of_a_move_leaves_every_key_as_the_reference_does(valkey_client) -> None:
    """Run on generated queues against the reference (and, for the two-step reaper, killed
    after each of its writes): an entry that differs anywhere is no equivalent."""
    from echoq.teaching.exercises import differential

    checked = 0
    for (key, name), _why in mutants.EQUIVALENT.items():
        ex = EXERCISES[key]
        if ex.move is None:
            continue  # no differential move (the loop, the extension): the full run judges them
        text = next(m.text for m in mutants.mutants(ex.solution, ex.kind) if m.name == name)
        python = ex.move.python is not None
        answer = ex.answer_from(text) if python else text
        reference = ex.answer_from(ex.solution) if python else ex.solution
        verdict = differential.judge(valkey_client, ex.move, answer, reference, ex.lesson)
        assert verdict.difference is None, f"{key}: {name}: {verdict.difference}"
        if python:
            crashed = differential.crash_difference(valkey_client, ex.move, answer, reference, ex.lesson)
            assert crashed is None, f"{key}: {name}, killed after a write: {crashed}"
        checked += 1
    assert checked >= 15


@pytest.mark.server
def test_a_mutant_that_is_not_equivalent_is_told_apart_by_a_crash(valkey_client) -> None:
    """The crash run is what tells the two-step reaper's writes swapped from the reference."""
    from echoq.teaching.exercises import differential

    ex = EXERCISES["two_step"]
    swapped = next(
        m for m in mutants.mutants(ex.solution, ex.kind) if m.name.startswith("writes swapped: r.zrem(keys.active")
    )
    answer, reference = ex.answer_from(swapped.text), ex.answer_from(ex.solution)
    assert differential.judge(valkey_client, ex.move, answer, reference, ex.lesson).difference is None
    assert differential.crash_difference(valkey_client, ex.move, answer, reference, ex.lesson) is not None
