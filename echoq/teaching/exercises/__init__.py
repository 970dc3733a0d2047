"""The lessons' exercises: the learner writes the real moves; checks judge them under failure.

Each exercise has a stub (deliberately wrong), a solution, right answers written other
ways, and a catalogue of named misconceptions, each with a plausible wrong answer that its
check rejects with one line naming it. A check runs the learner's code on the real server
under the failures its lesson is about -- worker processes SIGKILLed between any two steps,
a worker frozen (SIGSTOP) past its lease while another takes the job, reapers racing on two
connections, seeded trials -- and judges by what the server holds and how often an effect
ran, never by the code's shape. See :mod:`.core` for the feedback's rules.

====  ==========  ============================================  ============================
 01   lost        which jobs a killed pop-and-process loses     :func:`check_lost_jobs`
 02   claim       the claim script (Lua)                        :func:`check_claim_script`
 03   charge      an effect at another system, charged once     :func:`check_charge_once`
 03   complete    the fenced complete (Lua)                     :func:`check_fenced_complete`
 04   stall       the stall count, the seed's threshold (Lua)   :func:`check_stall_count`
 04   two_step    a two-step reaper, raced; its duplicate       :func:`check_two_step_reaper`
 05   loop        the consumer loop on a beat                   :func:`check_worker_loop`
 06   heartbeat   lease extension that knows when it is lost    :func:`check_keep_lease`
 07   requeue     row keys built in a script, on a cluster      :func:`check_requeue_script`
====  ==========  ============================================  ============================
"""

from __future__ import annotations

from . import lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07
from .core import EXERCISES, GENERIC, Exercise, Feedback, Misconception, reset_hints
from .lesson01 import check_lost_jobs
from .lesson02 import check_claim_script
from .lesson03 import check_charge_once, check_fenced_complete, deliver
from .lesson04 import check_stall_count, check_two_step_reaper, race, race_atomic
from .lesson05 import check_worker_loop
from .lesson06 import check_keep_lease, long_job
from .lesson07 import check_requeue_script

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
    "check_keep_lease",
    "check_lost_jobs",
    "check_requeue_script",
    "check_stall_count",
    "check_two_step_reaper",
    "check_worker_loop",
    "deliver",
    "long_job",
    "race",
    "race_atomic",
    "reset_hints",
    "solution",
]

_ = (lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07)  # each registers its exercises

STUBS = {key: ex.stub for key, ex in EXERCISES.items()}
SOLUTIONS = {key: ex.solution for key, ex in EXERCISES.items()}
CATALOGUE = {key: ex.misconceptions for key, ex in EXERCISES.items()}


def solution(key: str):  # -> IPython.display.HTML
    """The solution of exercise ``key``, folded: the learner opens it on purpose."""
    from ..course import reveal

    ex = EXERCISES[key]
    return reveal(f"Solution: {ex.title}", ex.solution, language="lua" if ex.kind == "lua" else "python")


def catalogue_markdown() -> str:
    """The misconceptions each exercise catches, as the README's Markdown table."""
    rows = ["| lesson | exercise | misconceptions its check catches |", "|---|---|---|"]
    for ex in EXERCISES.values():
        caught = "; ".join(f"*{m.title}*" for m in ex.misconceptions)
        rows.append(f"| {ex.lesson} | {ex.title} (`{ex.check.__name__}`) | {caught} |")
    return "\n".join(rows)
