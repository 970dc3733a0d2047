"""What every exercise shares: the catalogue entry, the feedback, hints, progress.

A check runs the learner's answer against the real server, under the failures its lesson
is about, and stops at the first thing that goes wrong. Its :class:`Feedback` has

* ✓ lines for what was verified before that point, each about its own property;
* at most one ✗ line: it names the misconception (``[seen set in memory]``), says what
  happened on the server, and what to try -- never the answer;
* a hint under it that grows stronger each time the same mistake comes back (close to the
  code only from the third time); after three wrong tries it says where the solution is
  (shown only when the learner opens it).

A ✗ ends the run, so no line after it claims anything about that run. Every check records
its verdict on the server (:func:`echoq.teaching.progress.record_check`).
"""

from __future__ import annotations

import html
import itertools
import linecache
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from ...errors import EchoqError, PermissionDenied
from ...queue import Queue
from ...server import connect
from .. import evidence, learner, processes, progress
from ..fast_forward import observers as fast_forwarded

__all__ = [
    "Exercise",
    "Feedback",
    "Misconception",
    "Rejected",
    "EXERCISES",
    "GENERIC",
    "load",
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
    # What the run must have shown for this name to be true of it, over the run's evidence (the
    # facts the check recorded with Run.saw, and the details of the ✗ line): named only when it
    # holds; otherwise the ✗ line says what the server held, with the generic hint.
    signature: Callable[[dict[str, Any]], bool] | None = field(default=None, compare=False, repr=False)

    def render(self, **details: Any) -> str:
        return f"[{self.title}] {self.line.format(**details)}"

    def seen_in(self, evidence: dict[str, Any]) -> bool:
        """True when ``evidence`` (a run's, :attr:`Feedback.observed`) shows this misconception."""
        if self.signature is None:
            return True
        try:
            return bool(self.signature(evidence))
        except (KeyError, TypeError, ValueError):  # a fact it needs was not recorded: not seen
            return False


GENERIC = {
    m.name: m
    for m in (
        Misconception(
            "code-error",
            "your code failed",
            "{what} failed with {error}{where}. {so_far}",
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
            "not-yet",
            "not yet right",
            "{what}",
            "The line above says what the server held after your code ran: compare it with what the exercise asks.",
            "Run your code by hand on a small queue and look at the keys it touched (ZRANGE ... WITHSCORES, HGETALL).",
        ),
        Misconception(
            "differs-from-reference",
            "not what the reference move does",
            "{what}",
            "The line above names the first key your move leaves different from the reference move, and what that "
            "key is for: which line of yours writes it?",
            "Build that queue by hand (the line says what it held), run your move on it, and read that key back.",
        ),
        Misconception(
            "key-outside-namespace",
            "a key outside your queue",
            "The server refused your code a key: {error}. Your user may touch only the keys of your own queues, so "
            "a key built or typed in your code named some other queue (or none).",
            "Every key your code touches must start with the queue's own prefix, emq:{{q}}: taken from KEYS.",
            "Print the key your code builds for one job and compare it with the KEYS it was given.",
        ),
        Misconception(
            "could-not-judge",
            "the check could not judge this",
            "While judging your answer the check met something it was not written for ({error}), so it stopped "
            "here, with no verdict on the rest. What your answer had left on the server: {did}.",
            "Compare what your answer left on the server (the line above) with what the exercise asks.",
            "If the server holds what the exercise asks, tell whoever runs the course: the check could not judge "
            "your answer, and that is the check's gap.",
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
    unlisted: list[tuple[str, str]] = field(default_factory=list)  # (file stem, wrong answer) no misconception names
    folder: Path | None = None
    move: Any = None  # a Lua exercise's differential.Move: how its move is called

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
        filename = f"<{self.key} answer {next(_answers)}>"
        # Kept where inspect finds it, as a notebook cell's is: a check may need the text of
        # a function (to run it again in a fresh interpreter).
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), namespace)
        return tuple(namespace.get(n) for n in self.names)

    def judge(self, source: str, **options: Any) -> Feedback:
        return self.check(*self.answer_from(source), **options)


EXERCISES: dict[str, Exercise] = {}
_answers = itertools.count(1)


def register(exercise: Exercise) -> Exercise:
    EXERCISES[exercise.key] = exercise
    return exercise


def load(
    where: str | Path,
    *,
    key: str,
    lesson: str,
    title: str,
    kind: str,
    names: tuple[str, ...],
    misconceptions: list[Misconception],
) -> Exercise:
    """An exercise from its folder (``where``: the folder, or its check.py): ``stub``,
    ``solution``, ``right/*`` (right answers written differently) and ``wrong/<name>`` (a
    plausible wrong answer for each named misconception), each a ``.lua`` file for a Lua
    exercise and ``.py`` otherwise. A ``wrong/`` file no misconception names is a wrong answer
    nobody listed: its check must reject it all the same (tests/test_exercises.py)."""
    folder = Path(where)
    folder = folder.parent if folder.is_file() else folder
    ext = "lua" if kind == "lua" else "py"

    def text(path: Path) -> str:
        if not path.is_file():
            raise FileNotFoundError(f"exercise {key!r} has no {path.relative_to(folder)} in {folder}")
        return path.read_text(encoding="utf-8")

    wrong = {path.stem: text(path) for path in sorted((folder / "wrong").glob(f"*.{ext}"))}
    named = []
    for m in misconceptions:
        if m.name not in wrong:
            raise FileNotFoundError(f"exercise {key!r}: misconception {m.name!r} has no wrong/{m.name}.{ext}")
        named.append(replace(m, example=wrong.pop(m.name)))
    return Exercise(
        key=key,
        lesson=lesson,
        title=title,
        kind=kind,
        names=names,
        stub=text(folder / f"stub.{ext}"),
        solution=text(folder / f"solution.{ext}"),
        alternatives=[text(path) for path in sorted((folder / "right").glob(f"*.{ext}"))],
        misconceptions=named,
        unlisted=sorted(wrong.items()),
        folder=folder,
    )


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
    # What the check read when it wrote the ✗ line (evidence.Sides or evidence.Scene): the
    # feedback's picture is drawn from it, and only when the feedback is shown.
    evidence: Any = field(default=None, repr=False, compare=False)
    # The facts the run recorded and the ✗ line's details: what a misconception's signature reads.
    observed: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

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
        # What the ✓ lines above established still holds; nothing after this line was judged.
        details.setdefault(
            "so_far",
            "The checks above passed; nothing after this was judged: fix the error, then run the check again."
            if self.passed
            else "Nothing about the queue was judged yet: make it run first.",
        )
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

    def _repr_mimebundle_(self, **_kwargs: Any) -> dict[str, Any] | None:
        """With a picture of the run (a rejected answer): the lines, the picture as a PNG with
        its alt text, and the live view where a widget manager runs (:mod:`..lab.judged`)."""
        if self.evidence is None:
            return None  # the lines alone: text/plain and _repr_html_
        from ..lab.judged.notebook import bundle

        return bundle(self)

    def _repr_html_(self) -> str:
        colour = "#1b7837" if self.ok else "#b35806"
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.lines)
        items += "".join(f"<li>· {html.escape(note)}</li>" for note in self.notes)
        hint = f"<p><b>Hint:</b> {html.escape(self.hint)}</p>" if self.hint else ""
        return (
            f'<div style="color:{colour}"><b>{html.escape(self.headline())}</b>'
            f'<ul style="list-style:none">{items}</ul>{hint}</div>'
        )


AGAIN = "The same mistake again: the ✗ line says what the server held after your code ran."


def _hint_for(exercise: Exercise, m: Misconception) -> tuple[str, bool]:
    """The hint grows with the same mistake: a direction, then the direction again with a
    pointer back to what the run showed, and only from the third time the stronger hint
    (close to the code). Before the third try no hint names the solution's code or calls."""
    seen = _same_mistake[(exercise.key, m.name)]
    text = m.hint if seen <= 1 else f"{m.hint} {AGAIN}" if seen == 2 else f"{m.hint} {m.stronger}"
    offer = _wrong_tries[exercise.key] >= 3
    if offer:
        text += " Still stuck? The solution is in the cell below the check: open it when you want it."
    return text, offer


def skew_clock(seconds: float, fn: Callable[..., Any]) -> None:
    """In a child: make this process's wall clock run ``seconds`` fast (behind when negative:
    time.time, time_ns, datetime.now), including the names ``fn``'s module imported from them
    -- another machine's clock, which never agrees with the server's."""
    import datetime as dt
    import time

    real_time, real_ns, real_dt = time.time, time.time_ns, dt.datetime

    class Fast(real_dt):  # type: ignore[misc, valid-type]
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real_dt.now(tz) + dt.timedelta(seconds=seconds)

        @classmethod
        def utcnow(cls) -> Any:
            return real_dt.utcnow() + dt.timedelta(seconds=seconds)

    time.time = lambda: real_time() + seconds  # type: ignore[assignment]
    time.time_ns = lambda: real_ns() + int(seconds * 1e9)  # type: ignore[assignment]
    dt.datetime = Fast  # type: ignore[misc]
    names = getattr(fn, "__globals__", {})
    for name, value in list(names.items()):
        if value is real_time:
            names[name] = time.time
        elif value is real_ns:
            names[name] = time.time_ns
        elif value is real_dt:
            names[name] = Fast


# -- running a check ---------------------------------------------------------------------------

_names = itertools.count(1)


class Run:
    """One run of a check: its feedback, its client, and the scratch queues it made."""

    def __init__(self, exercise: Exercise, client: redis.Redis | None) -> None:
        self.exercise = exercise
        self.feedback = Feedback(exercise)
        # The learner's Lua runs on their own server when the class server allows none;
        # the submission is recorded where the instructor sees it.
        self.client = client if client is not None else learner.own_lua_client()
        self.record_client = client if client is not None else connect()
        self._queues: list[Queue] = []
        self._cleanups: list[Callable[[], object]] = []
        self.server_stuck = False  # a learner's script the server will not stop holds it
        self.code: str | None = None  # the learner's answer as text, for the submission history
        self.watch = evidence.Watch()  # the children it starts and its own moves: the feedback's timeline
        self._shown = False  # the ✗ line's evidence was handed over by the judge (show())
        self.seen: dict[str, Any] = {}  # facts the check recorded (saw()): what signatures read
        self.scene: Queue | None = None  # the queue the check is acting on: a ✗ line's picture is of it

    def queue(self, part: str = "", *, scene: bool = True) -> Queue:
        """An empty scratch queue in the learner's namespace, deleted when the check ends. It is
        the run's scene from now on (:meth:`at`), unless ``scene`` is False (a queue made for a
        comparison, not for the ✗ lines that follow)."""
        name = f"x{self.exercise.lesson}-{self.exercise.key}-{os.getpid()}-{next(_names)}{part}"
        q = Queue(learner.queue_name(name[:64]), self.client)
        q.reset()
        self._queues.append(q)
        if scene:
            self.scene = q
        return q

    def at(self, queue: Queue | None) -> None:
        """The scene the next ✗ line is about: this queue (its sets, rows and timeline are its
        picture), or None (a line about no queue: no picture)."""
        self.scene = queue

    def cleanup(self, action: Callable[[], object]) -> None:
        self._cleanups.append(action)

    def good(self, prop: str, line: str) -> None:
        self.feedback.good(prop, line)

    def saw(self, **facts: Any) -> None:
        """Record what the run showed (the evidence a misconception's signature is judged on)."""
        self.seen.update(facts)

    def fail(self, prop: str, name: str, **details: Any) -> None:
        """The ✗ line. A misconception is named only when its signature is in the run's evidence;
        otherwise the line is ``held`` (what the server held, as the check words it) or what the
        run's queues hold, under the generic 'not yet right'."""
        evidence = {**self.seen, **details}
        if not self.exercise.misconception(name).seen_in(evidence):
            held = details.get("held") or f"After your code ran the server held: {self.left_on_server()}."
            name, details = "not-yet", {"what": held}
            evidence["what"] = held
        self.feedback.observed = evidence
        if not self._shown and name != "no-answer":
            self._keep_scene(name, details)
        self.feedback.fail(prop, name, **details)

    def show(self, seen: evidence.Sides | None) -> None:
        """The evidence of the ✗ line about to be written (the differential judge's reads)."""
        self.feedback.evidence, self._shown = seen, True

    def event(self, actor: str, what: str, queue: Queue | None = None) -> None:
        """A move the check makes itself in a scene ('the reaper', 'reaps'): on the timeline."""
        self.watch.note(actor, what, queue)

    def _keep_scene(self, name: str, details: dict[str, Any]) -> None:
        """The scene the check recorded (:meth:`at`), as the server holds it now, as the ✗ line
        is written; with none, the feedback says it has no picture."""
        self.watch.failed_at = time.monotonic()
        try:
            template = self.exercise.misconception(name).line
            if self.scene is not None:
                self.feedback.evidence = evidence.scene(self.client, self.scene, template, details, self.watch)
        except Exception:  # a picture must never cost the verdict
            self.feedback.evidence = None
        if self.feedback.evidence is None:
            self.feedback.note(NO_PICTURE)

    def note(self, line: str) -> None:
        self.feedback.note(line)

    def one_place_each(self, prop: str, queue: Queue, ids: list[str]) -> None:
        """The contract's invariant over a whole run: every job is in exactly one of the
        queue's sets at the end, and its row agrees (a done job has none). The first job
        that is not is a plain ✗ line."""
        snap = queue.snapshot()
        for job in ids:
            places = [p for p in ("pending", "active", "scheduled", "dead", "done") if job in getattr(snap, p)]
            row = queue.job(job)  # read whole: the snapshot lists no done job's row
            state = row_state(queue, job) if row is not None else None
            if len(places) != 1:
                where = " and ".join(places) or "no set at all"
                self.fail(
                    prop,
                    "not-yet",
                    what=f"At the end of the run {job} was in {where}: a job must be in "
                    "exactly one place, or it is lost (in none) or run twice (in two).",
                )
            if places == ["done"] and row is not None:
                self.fail(
                    prop,
                    "not-yet",
                    what=f"At the end of the run {job} was done but still had a row "
                    f"(state {state!r}): a completed job's row is deleted.",
                )
            if places != ["done"] and state != places[0]:
                self.fail(
                    prop,
                    "not-yet",
                    what=f"At the end of the run {job} was in {places[0]} but its row said "
                    f"state {state!r}: the row and the set must agree.",
                )

    def left_on_server(self, most: int = 3) -> str:
        """What the run's scratch queues hold now (the last ``most`` of them), read from the
        server: how many jobs in each set, and the states their rows say."""
        said = []
        for q in self._queues[-most:]:
            try:
                snap = q.snapshot(limit=20)
                counts = ", ".join(f"{n} {place}" for place, n in snap.counts.items() if n) or "no jobs"
                ids = [j for place in ("pending", "active", "scheduled", "dead") for j in getattr(snap, place)]
                states = Counter(str(row_state(q, j)) for j in ids[:20])
                rows = (
                    "; rows say " + ", ".join(f"state {s!r} ({n})" for s, n in sorted(states.items())) if states else ""
                )
                said.append(f"{counts}{rows}")
            except Exception as exc:  # the server itself may be what went wrong
                said.append(f"unreadable ({type(exc).__name__})")
        return " | ".join(said) or "nothing yet"

    def code_failed(self, prop: str, what: str, child: processes.Child) -> None:
        """The learner's code raised in ``child``: say so, in one line."""
        if self.exercise.kind == "lua" and "Timeout reading from" in (child.error or ""):
            self._stop_or_say()  # the script ran past the client's patience, and may still be running
            self.fail(prop, "too-slow", what=what, seconds=5)
        if is_refusal(child.error):  # the ACL kept the learner's code out of a key that is not its queue's
            self.fail(prop, "key-outside-namespace", error=refusal_words(child.error or ""))
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


NO_PICTURE = "No picture: this ✗ line is about no queue of the run."


def _error_words(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def row_state(queue: Queue, job_id: str) -> str | None:
    """The ``state`` field of a job's row as the server holds it -- what echoq writes, or any
    other text an answer wrote (``'failed'``), which :meth:`Queue.job` reads as None; None
    when the row or the field is missing."""
    value = queue.client.hget(queue.keys.job(job_id), "state")
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def is_refusal(error: str | None) -> bool:
    """An ACL refusal, as a child reports it (its type name and the server's words)."""
    text = error or ""
    return "PermissionDenied" in text or "NOPERM" in text or "No permissions to access a key" in text


def refusal_words(error: str) -> str:
    return error.splitlines()[0].removeprefix("PermissionDenied: ").split(": on @")[0].rstrip(". ")


@contextmanager
def running(exercise: Exercise, client: redis.Redis | None, *, example: bool = False) -> Iterator[Run]:
    run = Run(exercise, client)

    def lease_over(queue: Queue) -> None:
        run.event("the clock", "lease over", queue)

    processes.observers.append(run.watch.child)
    fast_forwarded.append(lease_over)
    try:
        yield run
    except Rejected:
        pass
    finally:
        processes.observers.remove(run.watch.child)
        fast_forwarded.remove(lease_over)
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
    if example:  # the catalogue's answer shown to the learner: nobody's attempt, no hint grows
        return
    if fb.failed is not None and fb.misconception is not None:
        _same_mistake[(exercise.key, fb.misconception.name)] += 1
        _wrong_tries[exercise.key] += 1
        fb.hint, fb.solution_offered = _hint_for(exercise, fb.misconception)
    elif fb.ok:
        _wrong_tries[exercise.key] = 0
    if run.server_stuck:
        return  # the server answers nothing else: this run cannot be recorded in the progress
    if fb.misconception is not None and fb.misconception.name == "no-answer":
        return  # nothing was answered, so nothing was tried: no submission is recorded
    progress.record_check(
        run.record_client,
        exercise.lesson,
        exercise.key,
        fb.ok,
        fb.misconception.name if fb.misconception else None,
        code=run.code,
    )


def _normal_text(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _code_of(fn: Any) -> tuple[Any, ...] | None:
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    consts = tuple(
        c for c in code.co_consts if not isinstance(c, type(code)) and not (isinstance(c, str) and c.strip())
    )
    return (code.co_code, code.co_names, code.co_varnames, consts)


def untouched(exercise: Exercise, answer: tuple[Any, ...]) -> bool:
    """True when the answer is None or the exercise's stub, unchanged: the learner has not
    answered yet (whitespace and docstrings aside)."""
    if all(a is None for a in answer):
        return True
    if exercise.kind == "lua":
        return (
            len(answer) == 1 and isinstance(answer[0], str) and _normal_text(answer[0]) == _normal_text(exercise.stub)
        )
    if exercise.kind == "python":
        stub = exercise.answer_from(exercise.stub)
        if len(stub) != len(answer):
            return False
        return all(
            a is None if s is None else (_code_of(a) is not None and _code_of(a) == _code_of(s))
            for a, s in zip(answer, stub, strict=True)
        )
    if exercise.kind == "value":
        return answer == exercise.answer_from(exercise.stub)
    return False


def answer_text(answer: tuple[Any, ...]) -> str | None:
    """The learner's answer as text, as far as it can be recovered (source of functions)."""
    import inspect

    parts = []
    for a in answer:
        if isinstance(a, str):
            parts.append(a)
        elif callable(a):
            cell = "".join(linecache.getlines(getattr(getattr(a, "__code__", None), "co_filename", "")))
            if cell and cell not in parts:  # the whole cell (or answer) it came from, imports and all
                parts.append(cell)
                continue
            if cell:
                continue  # another function of the same cell
            try:
                parts.append(inspect.getsource(a))
            except (OSError, TypeError):
                parts.append(repr(a))
        else:
            parts.append(repr(a))
    return "\n".join(parts) if parts else None


def check_runner(exercise: Exercise) -> Callable[[Callable[..., None]], Callable[..., Feedback]]:
    """Decorate ``body(run, *answer, **options)`` into the exercise's check, which returns
    the Feedback (never raises on a wrong answer)."""

    def wrap(body: Callable[..., None]) -> Callable[..., Feedback]:
        def check(*answer: Any, client: redis.Redis | None = None, example: bool = False, **options: Any) -> Feedback:
            with running(exercise, client, example=example) as run:
                run.code = answer_text(answer)
                if untouched(exercise, answer):
                    run.fail(
                        "answer",
                        "no-answer",
                        what="This is the exercise's starting point, unchanged (or None): complete the cell, run it, "
                        "then run the check. Nothing was judged, and no submission was recorded.",
                    )
                try:
                    body(run, *answer, **options)
                except Rejected:
                    raise
                except (EchoqError, redis.ResponseError) as exc:
                    if "WRONGTYPE" not in str(exc):
                        run.fail("judged", "could-not-judge", error=_error_words(exc), did=run.left_on_server())
                    # The learner's code left a key holding another type than the queue's
                    # (a row written as a set, a set key used for a row): the kit's own reads
                    # of it are refused. That is the answer's doing, said in one line.
                    run.fail(
                        "keys",
                        "not-yet",
                        what="After your code ran, a key of the queue held another kind of value than the queue "
                        "keeps there (the server said WRONGTYPE when the check read it): a row is a hash, and "
                        "pending, active, dead and done are sorted sets. Check which KEYS each of your writes uses.",
                    )
                except Exception as exc:  # a check never raises on an answer: what it met is said instead
                    run.fail("judged", "could-not-judge", error=_error_words(exc), did=run.left_on_server())
            return run.feedback

        check.__name__ = body.__name__
        check.__doc__ = body.__doc__
        exercise.check = check
        return check

    return wrap
