"""What every exercise shares: the catalogue entry, the feedback, hints, progress.

A check runs the learner's answer against the real server, under the failures its lesson
is about, and stops at the first thing that goes wrong. Its :class:`Feedback` has

* ✓ lines for what was verified before that point, each about its own property;
* at most one ✗ line: it names the misconception (``[seen set in memory]``), says what
  happened on the server, and what to try -- never the answer;
* a hint under it that grows stronger each time the same mistake comes back; after three
  wrong tries it says where the solution is (shown only when the learner opens it).

A ✗ ends the run, so no line after it claims anything about that run. Every check records
its verdict on the server (:func:`echoq.teaching.progress.record_check`).
"""

from __future__ import annotations

import html
import itertools
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.cluster import RedisCluster

from ...errors import PermissionDenied
from ...queue import Queue
from ...server import connect
from .. import learner, processes, progress

__all__ = [
    "Exercise",
    "Feedback",
    "Misconception",
    "Rejected",
    "EXERCISES",
    "GENERIC",
    "register",
    "reset_hints",
]


@dataclass(frozen=True)
class Misconception:
    """A named wrong idea, and how a check tells the learner about it."""

    name: str  # 'seen-set-in-memory': what progress records
    title: str  # 'seen set in memory': what the ✗ line shows in brackets
    line: str  # the ✗ line after the title; {fields} filled in by the check from the run
    hint: str  # the first hint: a direction
    stronger: str  # the second hint: close to the code, still not the code
    example: str = ""  # a plausible wrong answer this check rejects with this line

    def render(self, **details: Any) -> str:
        return f"[{self.title}] {self.line.format(**details)}"


GENERIC = {
    m.name: m
    for m in (
        Misconception(
            "code-error",
            "your code failed",
            "{what} failed with {error}{where}. Nothing about the queue was judged yet: make it run first.",
            "Read the error's last line: it names what went wrong.",
            "Run your cell again after fixing it; then run the check.",
        ),
        Misconception(
            "no-answer",
            "no answer yet",
            "{what}",
            "Complete the exercise cell (its TODOs, or the None), run it, then run the check.",
            "Start from the stub: every TODO is one or two lines.",
        ),
        Misconception(
            "too-slow",
            "it did not finish",
            "{what} did not finish within {seconds:g} s, so the check gave up on it. Is there a loop that never ends?",
            "Every wait in your code needs a way out.",
            "Print nothing and sleep little: the check runs your code many times.",
        ),
    )
}


@dataclass
class Exercise:
    """One exercise: what the learner starts from, how it is checked, what it catches."""

    key: str  # 'charge'
    lesson: str  # '03'
    title: str  # 'charge once'
    kind: str  # 'lua' (a script's text), 'python' (functions), 'value' (an answer)
    names: tuple[str, ...]  # what the learner's cell defines, that the check takes
    stub: str
    solution: str
    alternatives: list[str]  # right answers written differently from the solution
    misconceptions: list[Misconception]
    check: Callable[..., Feedback] = field(repr=False, default=None)  # type: ignore[assignment]

    def misconception(self, name: str) -> Misconception:
        for m in self.misconceptions:
            if m.name == name:
                return m
        if name in GENERIC:
            return GENERIC[name]
        raise KeyError(f"{self.key} has no misconception {name!r}")

    def answer_from(self, source: str) -> tuple[Any, ...]:
        """What the check takes, from the text of a learner's cell (for tests and tools)."""
        if self.kind == "lua":
            return (source,)
        namespace: dict[str, Any] = {}
        exec(compile(source, f"<{self.key} answer>", "exec"), namespace)
        return tuple(namespace.get(n) for n in self.names)

    def judge(self, source: str, **options: Any) -> Feedback:
        return self.check(*self.answer_from(source), **options)


EXERCISES: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    EXERCISES[exercise.key] = exercise
    return exercise


# -- feedback ----------------------------------------------------------------------------------


class Rejected(Exception):
    """Raised inside a check by :meth:`Feedback.fail`: the run stops here."""


_same_mistake: Counter[tuple[str, str]] = Counter()  # (exercise, misconception) -> times seen
_wrong_tries: Counter[str] = Counter()  # exercise -> wrong tries since the last pass


def reset_hints() -> None:
    """Forget how often each mistake was made (hints start gentle again)."""
    _same_mistake.clear()
    _wrong_tries.clear()


@dataclass
class Feedback:
    exercise: Exercise
    passed: list[tuple[str, str]] = field(default_factory=list)  # (property, ✓ line)
    failed: tuple[str, str] | None = None  # (property, ✗ line)
    misconception: Misconception | None = None
    hint: str | None = None
    solution_offered: bool = False
    notes: list[str] = field(default_factory=list)  # plain facts measured, neither ✓ nor ✗

    @property
    def ok(self) -> bool:
        return self.failed is None and bool(self.passed)

    @property
    def lines(self) -> list[str]:
        """The ✓ and ✗ lines, in the order they were established."""
        out = [f"✓ {line}" for _, line in self.passed]
        if self.failed is not None:
            out.append(f"✗ {self.failed[1]}")
        return out

    def good(self, prop: str, line: str) -> None:
        if self.failed is not None:
            raise RuntimeError("a check may not claim anything after it failed")
        if any(p == prop for p, _ in self.passed):
            raise RuntimeError(f"property {prop!r} was already judged")
        self.passed.append((prop, line))

    def note(self, line: str) -> None:
        self.notes.append(line)

    def fail(self, prop: str, name: str, **details: Any) -> None:
        """Stop the run: one ✗ line naming misconception ``name``."""
        if any(p == prop for p, _ in self.passed):
            raise RuntimeError(f"property {prop!r} passed already; it cannot also fail")
        m = self.exercise.misconception(name)
        self.misconception = m
        self.failed = (prop, m.render(**details))
        raise Rejected(name)

    def headline(self) -> str:
        title = f"Lesson {self.exercise.lesson} · {self.exercise.title}"
        if self.ok:
            return f"{title}: all {len(self.passed)} checks pass. Well done."
        return f"{title}: not yet ({len(self.passed)} right so far, then one thing to fix)."

    def __str__(self) -> str:
        lines = [self.headline()] + [f"  {line}" for line in self.lines]
        lines += [f"  · {note}" for note in self.notes]
        if self.hint:
            lines.append(f"  Hint: {self.hint}")
        return "\n".join(lines)

    __repr__ = __str__  # what a notebook stores as text/plain (GitHub, nbviewer, a terminal)

    def _repr_html_(self) -> str:
        colour = "#1b7837" if self.ok else "#b35806"
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.lines)
        items += "".join(f"<li>· {html.escape(note)}</li>" for note in self.notes)
        hint = f"<p><b>Hint:</b> {html.escape(self.hint)}</p>" if self.hint else ""
        return (
            f'<div style="color:{colour}"><b>{html.escape(self.headline())}</b>'
            f'<ul style="list-style:none">{items}</ul>{hint}</div>'
        )


def _hint_for(exercise: Exercise, m: Misconception) -> tuple[str, bool]:
    seen = _same_mistake[(exercise.key, m.name)]
    text = m.hint if seen <= 1 else f"{m.hint} {m.stronger}"
    offer = _wrong_tries[exercise.key] >= 3
    if offer:
        text += " Still stuck? The solution is in the cell below the check: open it when you want it."
    return text, offer


# -- running a check ---------------------------------------------------------------------------

_names = itertools.count(1)


class Run:
    """One run of a check: its feedback, its client, and the scratch queues it made."""

    def __init__(self, exercise: Exercise, client: redis.Redis | None) -> None:
        self.exercise = exercise
        self.feedback = Feedback(exercise)
        self.client = client if client is not None else connect()
        self._queues: list[Queue] = []
        self._cleanups: list[Callable[[], object]] = []
        self.server_stuck = False  # a learner's script the server will not stop holds it

    def queue(self, part: str = "") -> Queue:
        """An empty scratch queue in the learner's namespace, deleted when the check ends."""
        name = f"x{self.exercise.lesson}-{self.exercise.key}-{os.getpid()}-{next(_names)}{part}"
        q = Queue(learner.queue_name(name[:64]), self.client)
        q.reset()
        self._queues.append(q)
        return q

    def cleanup(self, action: Callable[[], object]) -> None:
        self._cleanups.append(action)

    def good(self, prop: str, line: str) -> None:
        self.feedback.good(prop, line)

    def fail(self, prop: str, name: str, **details: Any) -> None:
        self.feedback.fail(prop, name, **details)

    def note(self, line: str) -> None:
        self.feedback.note(line)

    def code_failed(self, prop: str, what: str, child: processes.Child) -> None:
        """The learner's code raised in ``child``: say so, in one line."""
        if self.exercise.kind == "lua" and "Timeout reading from socket" in (child.error or ""):
            self._stop_or_say()  # the script ran past the client's patience, and may still be running
            self.fail(prop, "too-slow", what=what, seconds=5)
        if not child.theirs:  # never blame the learner for the kit's own failure
            raise RuntimeError(f"the check itself failed in {child.name} (not your code): {child.error}")
        where = f" ({child.where})" if child.where else ""
        self.fail(prop, "code-error", what=what, error=child.error, where=where)

    def waited(self, prop: str, what: str, child: processes.Child, seconds: float) -> processes.Child:
        """Wait for ``child`` to end; a child that does not is a 'too-slow' failure."""
        try:
            return child.wait(seconds)
        except processes.ChildTimeout:
            if self.exercise.kind == "lua":
                self._stop_or_say()
            self.fail(prop, "too-slow", what=what, seconds=seconds)
            raise  # not reached

    def stop_script(self) -> str:
        """A learner's script that never ends keeps the server busy after its caller died:
        once the server reports it busy (lua-time-limit), SCRIPT KILL stops it. Returns
        ``"stopped"`` (nothing runs any more), ``"not-allowed"`` (a script still runs that this
        user may not stop: a workshop's learner may not SCRIPT KILL, it could stop another
        learner's script) or ``"unkillable"`` (the script wrote before it looped: the server
        refuses to stop it, and answers nothing else until it is restarted)."""
        # On a cluster (lesson 07) the script ran on one master: ask each (SCRIPT KILL has no key).
        if isinstance(self.client, RedisCluster):
            nodes = [self.client.get_redis_connection(n) for n in self.client.get_primaries()]
        else:
            nodes = [self.client]
        outcome = "stopped"
        for node in nodes:
            give_up = time.monotonic() + 10
            while time.monotonic() < give_up:
                try:
                    node.ping()
                    break  # the server answers: no script holds it
                except redis.ResponseError as exc:
                    if "BUSY" not in str(exc):
                        break
                except redis.ConnectionError:
                    break  # a node that is gone runs no script
                try:
                    node.script_kill()
                    break
                except (PermissionDenied, redis.exceptions.NoPermissionError):
                    outcome = "not-allowed"
                    break
                except redis.ResponseError as exc:
                    if "UNKILLABLE" in str(exc):  # it wrote: stopping it now would leave half a move
                        outcome = "unkillable"
                        break
                    if "NOTBUSY" in str(exc):  # it ended by itself meanwhile
                        break
                except redis.ConnectionError:
                    break
                time.sleep(0.1)
        self.server_stuck = self.server_stuck or outcome == "unkillable"
        return outcome

    def _stop_or_say(self) -> None:
        outcome = self.stop_script()
        said = {
            "not-allowed": "Your script is still running on the server, and this user may not stop it: ask whoever "
            "runs the server (your instructor) to send SCRIPT KILL.",
            "unkillable": "Your script wrote to the server and then never ended. Valkey does not stop a script "
            "that has written (SCRIPT KILL answers UNKILLABLE: a script runs whole or not at all), so the server "
            "answers nothing else until it is restarted without saving (SHUTDOWN NOSAVE), which drops what it "
            "holds; this check could not be recorded in your progress either. If the course started this server "
            "for you (VALKEY_URL not set), restart the kernel: the server goes with it, and a fresh one starts. "
            "Otherwise ask whoever runs it.",
        }.get(outcome)
        if said is not None and said not in self.feedback.notes:
            self.note(said)


@contextmanager
def running(exercise: Exercise, client: redis.Redis | None) -> Iterator[Run]:
    run = Run(exercise, client)
    try:
        yield run
    except Rejected:
        pass
    finally:
        processes.stop_all()
        if exercise.kind == "lua":
            run._stop_or_say()  # a learner's script still running would keep the server busy
        for action in run._cleanups:
            try:
                action()
            except Exception:  # cleaning up must never hide the verdict
                pass
        for q in run._queues:
            try:
                q.reset()
            except Exception:
                pass
    fb = run.feedback
    if fb.failed is not None and fb.misconception is not None:
        _same_mistake[(exercise.key, fb.misconception.name)] += 1
        _wrong_tries[exercise.key] += 1
        fb.hint, fb.solution_offered = _hint_for(exercise, fb.misconception)
    elif fb.ok:
        _wrong_tries[exercise.key] = 0
    if run.server_stuck:
        return  # the server answers nothing else: this run cannot be recorded in the progress
    progress.record_check(
        run.client, exercise.lesson, exercise.key, fb.ok, fb.misconception.name if fb.misconception else None
    )


def check_runner(exercise: Exercise) -> Callable[[Callable[..., None]], Callable[..., Feedback]]:
    """Decorate ``body(run, *answer, **options)`` into the exercise's check, which returns
    the Feedback (never raises on a wrong answer)."""

    def wrap(body: Callable[..., None]) -> Callable[..., Feedback]:
        def check(*answer: Any, client: redis.Redis | None = None, **options: Any) -> Feedback:
            with running(exercise, client) as run:
                body(run, *answer, **options)
            return run.feedback

        check.__name__ = body.__name__
        check.__doc__ = body.__doc__
        exercise.check = check
        return check

    return wrap
