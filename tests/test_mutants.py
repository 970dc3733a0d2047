"""tools/mutants.py checked against the code, cheaply (its full run is the tool's: minutes).

Every mutant it calls equivalent must still be made (an entry naming a mutant that is gone
would hide the survivor that took its place), must say why in one line, and must be proved
so: a move's (the exercise has a differential move) leaves every key as the reference does
on generated queues, a crash between any two writes included for a Python move; the loop's
and the extension's tuning stays well inside every bound their checks judge by; the others
do what their reason says, on the server (a complete after a retry is refused and changes
nothing; an extend_lease that goes on after a refusal still answers False and changes
nothing), in the library (the default the dropped argument leaves) or in the solution's code
(the beat's comparison). An equivalent with none of these proofs fails. The run recorded in
tools/mutants.json (the site's score table) must be a run of these mutants by today's checks
(the digest of their code): each exercise with at least 20 non-equivalent ones, none surviving.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from echoq.teaching.exercises import EXERCISES, judging_digest
from tests.support.helpers import dump

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
def test_the_recorded_run_is_a_run_of_these_mutants_by_todays_check(key: str) -> None:
    """tools/mutants.json is what the site shows: a mutant added, renamed or gone since it was
    recorded, or a change to the code that judged them, makes it stale (run
    `tools/mutants.py --record` again)."""
    whole = json.loads(mutants.RECORD.read_text())
    assert whole["date"] and whole["commit"], "tools/mutants.json says neither when nor from which commit it was run"
    record = whole["exercises"][key]
    ex = EXERCISES[key]
    assert set(record["verdicts"]) == {m.name for m in mutants.mutants(ex.solution, ex.kind)}, (
        f"{key}: tools/mutants.json is stale: run .venv/bin/python tools/mutants.py --record"
    )
    assert record["digest"] == judging_digest(key), (
        f"{key}: its check (or the judging code it runs on) changed after tools/mutants.json was recorded: run "
        ".venv/bin/python tools/mutants.py --record"
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


def _proof(key: str, name: str, why: str) -> str:
    """Which test below proves the equivalent ``name`` of exercise ``key`` ('' for none)."""
    if EXERCISES[key].move is not None:
        return "differential"
    if why in (mutants._TUNING, mutants._INTERVAL):
        return "bounds"
    if why == mutants._BEAT:
        return "beat"
    if (key, name) == ("loop", "line dropped: continue (#2)"):
        return "fence"
    if (key, name) == ("loop", "argument dropped: q.stalled_check(max_stalled=MAX_STALLED) => q.stalled_check()"):
        return "default"
    if (key, name) == ("extend", "line dropped: return False"):
        return "lost"
    return ""


def _equivalents(proof: str) -> list[tuple[str, Any]]:
    """(exercise, mutant) of every listed equivalent that ``proof`` proves."""
    found = [
        (key, next(m for m in mutants.mutants(EXERCISES[key].solution, EXERCISES[key].kind) if m.name == name))
        for (key, name), why in mutants.EQUIVALENT.items()
        if _proof(key, name, why) == proof
    ]
    assert found, f"no equivalent is proved by {proof!r}: remove its test, or the entries lost their proof"
    return found


def test_every_listed_equivalent_has_a_proof() -> None:
    unproved = [(key, name) for (key, name), why in mutants.EQUIVALENT.items() if not _proof(key, name, why)]
    assert not unproved, (
        f"equivalents listed with no test that proves them (add one to tests/test_mutants.py): {unproved}"
    )


@pytest.mark.server
def test_each_listed_equivalent_of_a_move_leaves_every_key_as_the_reference_does(valkey_client) -> None:
    """Run on generated queues against the reference (and, for the two-step reaper, killed
    after each of its writes): an entry that differs anywhere is no equivalent."""
    from echoq.teaching.exercises import differential

    for key, mutant in _equivalents("differential"):
        ex = EXERCISES[key]
        python = ex.move.python is not None
        answer = ex.answer_from(mutant.text) if python else mutant.text
        reference = ex.answer_from(ex.solution) if python else ex.solution
        verdict = differential.judge(valkey_client, ex.move, answer, reference, ex.lesson)
        assert verdict.difference is None, f"{key}: {mutant.name}: {verdict.difference}"
        if python:
            crashed = differential.crash_harm(valkey_client, ex.move, answer, reference, ex.lesson)
            assert crashed is None, f"{key}: {mutant.name}, killed after a write: {crashed}"


def _tuning(text: str) -> dict[str, float]:
    """The tuning of a loop or extend_lease: its module's constants, the beat (s) its next_beat
    is set ahead by, the interval (s) between its extensions."""
    names: dict[str, Any] = {}
    exec(compile(text, "<mutant>", "exec"), names)
    found = {k: v for k, v in names.items() if k in ("LEASE_MS", "BEAT_MS", "MAX_STALLED")}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
            if target == "next_beat" and isinstance(value, ast.BinOp):  # time.monotonic() + the beat
                found["beat_s"] = eval(compile(ast.Expression(value.right), "<beat>", "eval"), names)
            if target == "every":
                found["every_s"] = eval(compile(ast.Expression(value), "<every>", "eval"), names)
    return found


# How far inside each bound a value must be: the checks measure on a busy machine.
MARGIN = 1.5


def test_the_loops_and_the_extensions_tuning_stays_well_inside_every_bound_of_its_check() -> None:
    """A tuning equivalent is one that no check can fail: the loop's lease longer than the long
    job's work and far shorter than a lease nobody waits out, its beat between a sweep on every
    pass and one too slow (the check's bounds, half a beat and three); the extension's lease
    within what a killed worker may leave, its interval far from a busy loop, and a late
    extension (a third of a lease) landing with a tenth of the lease to spare."""
    from echoq.teaching.exercises.extend import check as extend
    from echoq.teaching.exercises.loop import check as loop

    changed = 0
    for key, mutant in _equivalents("bounds"):
        got, solution = _tuning(mutant.text), _tuning(EXERCISES[key].solution)
        changed += got != solution
        if key == "loop":
            assert got["MAX_STALLED"] == loop.MAX_STALLED, mutant.name  # the contract fixes it: no tuning
            lease, beat = got["LEASE_MS"], got["beat_s"] * 1000
            assert loop.LONG_WORK_MS * MARGIN <= lease <= loop.LONGEST_LEASE_MS / MARGIN, (mutant.name, lease)
            assert loop.BEAT_MS / 2 * MARGIN <= beat <= 3 * loop.BEAT_MS / MARGIN, (mutant.name, beat)
            assert beat * MARGIN <= loop.RECOVERY_MS, (mutant.name, beat)
        else:
            lease, every = got["LEASE_MS"], got["every_s"] * 1000
            assert lease <= extend.LEASE_MS + extend.LEASE_SLACK_MS / MARGIN, (mutant.name, lease)
            assert every >= extend.WORK_MS / extend.SPIN_EXTENDS * MARGIN, (mutant.name, every)
            assert every + extend.LATE_MS <= lease * 0.9, (mutant.name, every, lease)
    assert changed == len(_equivalents("bounds")), "a tuning equivalent that changes no value is no mutant"


def test_the_beats_comparison_is_the_same_either_way() -> None:
    """'>' for '>=': next_beat starts at 0.0, which the monotonic clock is past, and is then
    only ever set to the clock plus a positive beat, which a later read passes: the two differ
    only when two reads of the clock are exactly equal."""
    ((key, mutant),) = _equivalents("beat")
    tree = ast.parse(EXERCISES[key].solution)
    sets = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "next_beat"]
    assert [ast.unparse(v) for v in sets] == ["0.0", "time.monotonic() + BEAT_MS / 1000"], [
        ast.unparse(v) for v in sets
    ]
    assert _tuning(EXERCISES[key].solution)["beat_s"] > 0 and time.monotonic() > 0.0
    (test,) = [n for n in ast.walk(tree) if isinstance(n, ast.Compare) and "next_beat" in ast.unparse(n)]
    assert ast.unparse(test) == "time.monotonic() >= next_beat" and "time.monotonic() > next_beat" in mutant.text


def test_a_dropped_argument_that_is_the_librarys_default_changes_nothing() -> None:
    from echoq import Queue

    ((key, _mutant),) = _equivalents("default")
    default = inspect.signature(Queue.stalled_check).parameters["max_stalled"].default
    assert default == _tuning(EXERCISES[key].solution)["MAX_STALLED"]


@pytest.mark.server
def test_a_complete_after_a_retry_is_refused_and_changes_nothing(valkey_client) -> None:
    """The loop without its continue after q.retry goes on to q.complete(claim): refused,
    whether the job waits in pending, was dead-lettered by that retry, or another worker has
    claimed it since -- and no key of the queue changes."""
    from echoq import Complete, Queue

    _equivalents("fence")
    queue = Queue(f"fence-{id(valkey_client)}", valkey_client)
    queue.reset()
    try:
        for last_try, claimed_again in ((False, False), (True, False), (False, True)):
            queue.enqueue("work")
            claim = queue.claim(lease_ms=400)
            queue.retry(claim, error="it failed", max_attempts=1 if last_try else 3)
            if claimed_again:
                assert queue.claim(lease_ms=400) is not None
            before = dump(queue)
            assert queue.complete(claim) is Complete.STALE, (last_try, claimed_again)
            assert dump(queue) == before, (last_try, claimed_again)
            queue.reset()
    finally:
        queue.reset()


def _after_a_lost_lease(client: Any, name: str, extend_lease: Any) -> tuple[list[object], list[Any], bool]:
    """extend_lease beside a job whose lease was lost (the other worker took it over, then
    completed it after the first refusal): what it returned, each extension's answer, and
    whether any key of the queue changed after the completion."""
    from echoq import Queue
    from echoq.teaching.fast_forward import fast_forward

    asked: list[Any] = []

    class Counting(Queue):
        def extend(self, *args: Any, **options: Any) -> Any:
            asked.append(outcome := super().extend(*args, **options))
            return outcome

    queue = Queue(name, client)
    queue.reset()
    try:
        queue.enqueue("a long report")
        mine = queue.claim(lease_ms=600)
        fast_forward(queue)  # its lease ran out: the other worker's sweep takes the job
        queue.reap()
        theirs = queue.claim(lease_ms=30_000)
        done, said = threading.Event(), []
        keeper = threading.Thread(target=lambda: said.append(extend_lease(Counting(name, client), mine, done)))
        keeper.start()
        give_up = time.monotonic() + 5
        while not asked and time.monotonic() < give_up:
            time.sleep(0.01)
        queue.complete(theirs)
        before = dump(queue)
        while len(asked) < 2 and keeper.is_alive() and time.monotonic() < give_up:
            time.sleep(0.01)
        done.set()
        keeper.join(5)
        return said, asked, dump(queue) != before
    finally:
        queue.reset()


@pytest.mark.server
def test_an_extend_lease_that_goes_on_after_a_refusal_still_says_lost_and_changes_nothing(valkey_client) -> None:
    """Without its 'return False', extend_lease keeps extending after the lease was lost: each
    extension is refused (the job taken over, then completed by the other worker), nothing
    changes, and it returns False at the end, as the solution does at once."""
    ((key, mutant),) = _equivalents("lost")
    ex = EXERCISES[key]
    for label, source in (("mutant", mutant.text), ("solution", ex.solution)):
        (extend_lease,) = ex.answer_from(source)
        said, asked, changed = _after_a_lost_lease(valkey_client, f"lost-{label}", extend_lease)
        assert said == [False] and not changed, (label, said, changed)
        assert asked and all(outcome.value != "extended" for outcome in asked), (label, asked)
        assert len(asked) >= (2 if label == "mutant" else 1), (label, asked)  # it went on after the refusal


@pytest.mark.server
def test_a_mutant_that_is_not_equivalent_is_told_apart_by_a_crash(valkey_client) -> None:
    """The crash run is what tells a two-step reaper whose order can strand a job (the row marked before the
    job is in pending: cut there, reap.lua dead-letters it) from the reference, whose whole moves agree."""
    from echoq.teaching.exercises import differential

    ex = EXERCISES["two_step"]
    swapped = next(
        m for m in mutants.mutants(ex.solution, ex.kind) if m.name.startswith("writes swapped: r.zadd(keys.pending")
    )
    answer, reference = ex.answer_from(swapped.text), ex.answer_from(ex.solution)
    assert differential.judge(valkey_client, ex.move, answer, reference, ex.lesson).difference is None
    assert differential.crash_harm(valkey_client, ex.move, answer, reference, ex.lesson) is not None
