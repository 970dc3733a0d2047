"""The lessons' exercises: the learner writes the real moves; checks judge them under failure.

Each exercise has a stub (deliberately wrong), a solution, right answers written other
ways, and a catalogue of named misconceptions, each with a plausible wrong answer that its
check rejects with one line naming it. A check runs the learner's code on the real server
under the failures its lesson is about -- worker processes SIGKILLed between any two steps,
a worker frozen (SIGSTOP) past its lease while another takes the job, reapers racing on two
connections, seeded trials -- and judges by what the server holds and how often an effect
ran, never by the code's shape; a move (Lua, or the two-step reaper's Python) is also run against the reference move on
generated states and compared key by key (:mod:`.differential`). See :mod:`.core` for the
feedback's rules.

Each exercise is one folder, found by :func:`discover`: ``stub``, ``solution``, ``right/``
(right answers written differently) and ``wrong/`` (a wrong answer per named misconception,
plus wrong answers nobody listed), as ``.lua`` or ``.py`` files, and ``check.py`` (its
misconceptions and its check).

====  ==========  ============================================  ============================
 01   lost        which jobs a killed pop-and-process loses     :func:`check_lost_jobs`
 02   claim       the claim script (Lua)                        :func:`check_claim_script`
 03   charge      an effect at another system, charged once     :func:`check_charge_once`
 03   complete    the fenced complete (Lua)                     :func:`check_fenced_complete`
 04   stall       the stall count, max_stalled-th fatal (Lua)   :func:`check_stall_count`
 04   two_step    a two-step reaper, raced; its duplicate       :func:`check_two_step_reaper`
 05   loop        the consumer loop on a beat                   :func:`check_worker_loop`
 05   release     a claimed job given back, its try returned    :func:`check_release`
 06   extend      lease extension that knows when it is lost    :func:`check_extend_lease`
 07   requeue     row keys built in a script, on a cluster      :func:`check_requeue_script`
====  ==========  ============================================  ============================
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from .core import EXERCISES, GENERIC, Exercise, Feedback, Misconception, reset_hints

HERE = Path(__file__).resolve().parent


def discover(root: str | Path = HERE) -> list[Exercise]:
    """Import every exercise folder under ``root`` (a folder holding ``check.py``), which
    registers its exercise; returns the exercises found, in lesson order. Adding an
    exercise is adding a folder (and a notebook cell that runs its check)."""
    root = Path(root).resolve()
    found: list[Exercise] = []
    # A folder of Python's own (__pycache__, perhaps unreadable to this user) is no exercise.
    for folder in sorted(p for p in root.iterdir() if not p.name.startswith(("_", ".")) and (p / "check.py").is_file()):
        before = set(EXERCISES)
        if root == HERE:
            importlib.import_module(f"{__name__}.{folder.name}.check")
        else:
            name = f"{__name__}._found.{folder.name}"
            spec = importlib.util.spec_from_file_location(name, folder / "check.py")
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        found += [EXERCISES[key] for key in EXERCISES if key not in before]
    ordered = sorted(EXERCISES.values(), key=lambda ex: (ex.lesson, ex.key))
    EXERCISES.clear()
    EXERCISES.update((ex.key, ex) for ex in ordered)
    return sorted(found, key=lambda ex: (ex.lesson, ex.key))


discover()

from .charge.check import check_charge_once, deliver  # noqa: E402
from .claim.check import check_claim_script  # noqa: E402
from .complete.check import check_fenced_complete  # noqa: E402
from .extend.check import check_extend_lease, long_job  # noqa: E402
from .loop.check import check_worker_loop  # noqa: E402
from .lost.check import check_lost_jobs  # noqa: E402
from .release.check import check_release  # noqa: E402
from .requeue.check import check_requeue_script  # noqa: E402
from .stall.check import check_stall_count  # noqa: E402
from .two_step.check import check_two_step_reaper, race, race_atomic  # noqa: E402

__all__ = [
    "CATALOGUE",
    "EXERCISES",
    "Exercise",
    "Feedback",
    "GENERIC",
    "Misconception",
    "SOLUTIONS",
    "STUBS",
    "catalogue_markdown",
    "check_charge_once",
    "check_claim_script",
    "check_fenced_complete",
    "check_extend_lease",
    "check_lost_jobs",
    "check_release",
    "check_requeue_script",
    "check_stall_count",
    "check_two_step_reaper",
    "check_worker_loop",
    "deliver",
    "discover",
    "example",
    "judging_digest",
    "long_job",
    "race",
    "race_atomic",
    "reset_hints",
    "solution",
]

STUBS = {key: ex.stub for key, ex in EXERCISES.items()}
SOLUTIONS = {key: ex.solution for key, ex in EXERCISES.items()}
CATALOGUE = {key: ex.misconceptions for key, ex in EXERCISES.items()}


def solution(key: str):  # -> IPython.display.HTML
    """The solution of exercise ``key``, folded: the learner opens it on purpose."""
    from ..course import reveal

    ex = EXERCISES[key]
    return reveal(f"Solution: {ex.title}", ex.solution, language="lua" if ex.kind == "lua" else "python")


def example(key: str, misconception: str, *, client: Any = None) -> Feedback:
    """The check of exercise ``key`` run on the catalogue's wrong answer for ``misconception``:
    what the feedback on a rejected answer looks like, its picture included. Nobody's attempt:
    nothing is recorded in the progress, and no hint grows stronger."""
    ex = EXERCISES[key]
    wrong = {m.name: m.example for m in ex.misconceptions} | dict(ex.unlisted)
    if misconception not in wrong:
        raise KeyError(f"exercise {key!r} has no wrong answer {misconception!r}: one of {', '.join(sorted(wrong))}")
    fb = ex.judge(wrong[misconception], client=client, example=True)
    fb.notes.insert(0, EXAMPLE)
    return fb


EXAMPLE = "An example, not your answer: the check run on a wrong answer from the exercise's catalogue (not recorded)."


def catalogue_markdown() -> str:
    """The misconceptions each exercise catches, as docs/course.md's Markdown table."""
    rows = ["| lesson | exercise | misconceptions its check catches |", "|---|---|---|"]
    for ex in EXERCISES.values():
        caught = "; ".join(f"*{m.title}*" for m in ex.misconceptions)
        rows.append(f"| {ex.lesson} | {ex.title} (`{ex.check.__name__}`) | {caught} |")
    return "\n".join(rows)


def judging_digest(key: str) -> str:
    """A digest of the code that judges exercise ``key``: its folder (check, stub, solution,
    the answers in right/ and wrong/), this package's modules (the feedback, the differential
    judge, its fixed time) and the harness its checks run answers in (``processes``). The
    records made from many runs of the checks (tools/verdicts.json, tools/mutants.json) carry
    it, so the suite can tell a record made before that code changed."""
    folder = EXERCISES[key].folder
    assert folder is not None, key
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    # This file only finds the exercises and lists them: adding an exercise changes no judge.
    files += sorted(p for p in HERE.glob("*.py") if p.name != "__init__.py") + [HERE.parent / "processes.py"]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(HERE.parent).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
