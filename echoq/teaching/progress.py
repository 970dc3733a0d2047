"""Where a learner is: lessons reached and exercise checks, recorded on the server.

Each learner's record is one hash, ``emq:{<learner>.course}:progress`` (solo:
``emq:{course}:progress``), inside their namespace, so on a shared server only they (and the
instructor) can touch it. Fields:

* ``lesson:<nn>`` -- server ms when the lesson was first started;
* ``check:<nn>:<exercise>:submissions`` -- how many times the check ran;
* ``check:<nn>:<exercise>:passed`` -- ``1`` once it has passed (never goes back to 0);
* ``check:<nn>:<exercise>:passed_at`` -- server ms of the first check that passed;
* ``check:<nn>:<exercise>:misconception`` -- the name of the last misconception it caught
  (empty once it passes);
* ``check:<nn>:<exercise>:at`` -- server ms of the last check;
* ``check:<nn>:<exercise>:miss:<misconception>`` -- how many checks caught that
  misconception (kept after a pass: "passed after 4 tries: code-error x2, ...");
* ``current`` / ``current_at`` -- the lesson started last (the one the learner is in) and when;
* ``connected`` / ``active`` -- when the learner's kernel first reached the class server and
  when they last ran a cell (written by :mod:`echoq.teaching.presence`).

Every submission is also kept, newest first, in a list per exercise,
``emq:{<learner>.course}:submissions:<nn>:<exercise>``: one JSON entry each with the server
time, the verdict, the misconception and the learner's submitted code. The list keeps the
last ``MAX_SUBMISSIONS`` (50) submissions and each code up to ``MAX_CODE_CHARS`` (8,000)
characters (marked ``truncated``), so one learner's record stays under ~0.5 MB per exercise
however often they press Run.

A check's fields and its history entry are written in one MULTI, so a reader never sees an
submission without its verdict. :func:`read` returns a learner's whole record in one call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import redis

from ..clock import server_now_ms
from ..errors import InvalidArgument
from ..keyspace import Keyspace, check_namespace
from . import learner as learners

__all__ = [
    "Submission",
    "CheckRecord",
    "Progress",
    "submissions",
    "submissions_key",
    "key",
    "record_lesson",
    "record_check",
    "read",
    "parse",
]

COURSE = "course"
MAX_SUBMISSIONS = 50
MAX_CODE_CHARS = 8_000
_PART = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def key(learner: str | None = None) -> str:
    """The progress hash of ``learner`` (default: this process's learner, or solo):
    ``emq:{<learner>.course}:progress``, beside the keys of the learner's ``course`` queue."""
    if learner is None:
        return Keyspace(learners.queue_name(COURSE)).prefix + "progress"
    return Keyspace(f"{check_namespace(learner)}.{COURSE}").prefix + "progress"


def submissions_key(lesson: str, exercise: str, learner: str | None = None) -> str:
    """The list of ``learner``'s submissions at one exercise (newest first)."""
    prefix = key(learner)[: -len("progress")]
    return f"{prefix}submissions:{_part('lesson', lesson)}:{_part('exercise', exercise)}"


def _part(what: str, value: str) -> str:
    if not isinstance(value, str) or not _PART.match(value):
        raise InvalidArgument(f"{what} must be 1-64 letters, digits, '_', '-' or '.', got {value!r}")
    return value


@dataclass(frozen=True)
class CheckRecord:
    lesson: str
    exercise: str
    submissions: int
    passed: bool
    misconception: str | None
    at_ms: int
    missed: dict[str, int] = field(default_factory=dict)  # misconception -> checks that caught it
    first_pass_ms: int = 0  # server ms of the first check that passed (0: none, or not recorded)

    @property
    def status(self) -> str:
        """In words: "not started", "passed after 4 tries: code-error x2, ..." or "not yet"."""
        if self.submissions == 0:
            return "not started"
        tries = "try" if self.submissions == 1 else "tries"
        hit = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in self.missed.items())
        verdict = "passed" if self.passed else "not yet"
        return f"{verdict} after {self.submissions} {tries}" + (f": {hit}" if hit else "")


@dataclass(frozen=True)
class Submission:
    at_ms: int
    passed: bool
    misconception: str | None
    code: str | None
    truncated: bool = False


@dataclass
class Progress:
    learner: str | None
    lessons: dict[str, int] = field(default_factory=dict)  # lesson -> first started (server ms)
    checks: dict[tuple[str, str], CheckRecord] = field(default_factory=dict)
    skipped: int = 0  # fields of the kit's shape whose value the kit never writes (not a whole number)
    current: str | None = None  # the lesson started last
    current_at_ms: int = 0
    connected_ms: int = 0  # 0: the kernel never reached the class server
    active_ms: int = 0  # the last cell run (0: none seen)

    @property
    def last_activity_ms(self) -> int:
        """The latest thing the learner did: a cell, a lesson started, a check."""
        return max([self.active_ms, self.current_at_ms, *(c.at_ms for c in self.checks.values())])


def record_lesson(client: redis.Redis, lesson: str) -> None:
    """Note that the learner started ``lesson``: first time (kept), and as the current one.
    Only the record: the lesson's setup (:func:`echoq.teaching.course.start`) starts the
    kernel's presence (:mod:`echoq.teaching.presence`)."""
    now = server_now_ms(client)
    pipe = client.pipeline(transaction=True)
    pipe.hsetnx(key(), f"lesson:{lesson}", now)
    pipe.hset(key(), mapping={"current": lesson, "current_at": now})
    pipe.execute()


def record_check(
    client: redis.Redis,
    lesson: str,
    exercise: str,
    passed: bool,
    misconception: str | None,
    code: str | None = None,
) -> None:
    """One run of an exercise check: submissions + 1, the verdict, the misconception hit, and
    an entry in the exercise's history with ``code``, the learner's submitted answer."""
    k, head = key(), f"check:{lesson}:{exercise}:"
    history = submissions_key(lesson, exercise)
    now = server_now_ms(client)
    text = None if code is None else str(code)
    entry = {
        "at": now,
        "passed": bool(passed),
        "misconception": None if passed else (misconception or None),
        "code": text[:MAX_CODE_CHARS] if text is not None else None,
        "truncated": text is not None and len(text) > MAX_CODE_CHARS,
    }
    pipe = client.pipeline(transaction=True)
    pipe.hincrby(k, head + "submissions", 1)
    if passed:
        pipe.hset(k, mapping={head + "passed": 1, head + "misconception": "", head + "at": now})
        pipe.hsetnx(k, head + "passed_at", now)
    else:
        pipe.hset(k, mapping={head + "misconception": misconception or "", head + "at": now})
        pipe.hsetnx(k, head + "passed", 0)
        if misconception:
            pipe.hincrby(k, f"{head}miss:{misconception}", 1)
    pipe.lpush(history, json.dumps(entry))
    pipe.ltrim(history, 0, MAX_SUBMISSIONS - 1)
    pipe.execute()


def submissions(client: redis.Redis, lesson: str, exercise: str, learner: str | None = None) -> list[Submission]:
    """The kept submissions at one exercise, oldest first (at most ``MAX_SUBMISSIONS``)."""
    return parse_submissions(client.lrange(submissions_key(lesson, exercise, learner), 0, -1))


LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: no submission of the kit is later


def parse_submissions(raw: list) -> list[Submission]:
    """Submissions from the list as LRANGE returns it (newest first), oldest first."""
    found = []
    for item in reversed(raw):
        try:
            data = json.loads(item)
            at = data["at"]
            if type(at) is not int or not 0 <= at <= LATEST_MS:  # Infinity, 1e300, -1, "x": not the kit's
                continue
            found.append(
                Submission(
                    at,
                    bool(data["passed"]),
                    data.get("misconception") or None,
                    data.get("code"),
                    bool(data.get("truncated")),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue  # not an entry this kit wrote: left out rather than guessed
    return found


def read(client: redis.Redis, learner: str | None = None) -> Progress:
    """A learner's whole record, in one read."""
    return parse(client.hgetall(key(learner)), learner if learner is not None else learners.learner_id())


def parse(fields: dict, learner: str | None) -> Progress:
    """A record from the hash's fields as HGETALL returns them (so a reader of many learners,
    the instructor's dashboard, can fetch them all in one round trip)."""
    # The record is the learner's own key: anything may be in it. A lesson or check whose
    # numbers are not whole numbers is skipped and counted, never a reader's crash.
    raw = {str(f): str(v) for f, v in fields.items()}
    progress = Progress(learner)
    found: dict[tuple[str, str], dict[str, str]] = {}
    missed: dict[tuple[str, str], dict[str, int]] = {}
    for name, value in raw.items():
        parts = name.split(":")
        if parts[0] == "lesson" and len(parts) == 2:
            started = _time(value)
            if started is None:
                progress.skipped += 1
            else:
                progress.lessons[parts[1]] = started
        elif parts[0] == "check" and len(parts) in (4, 5) and not (_PART.match(parts[1]) and _PART.match(parts[2])):
            progress.skipped += 1  # a lesson or exercise id the kit never writes: its keys cannot be named
        elif parts[0] == "check" and len(parts) == 4:
            found.setdefault((parts[1], parts[2]), {})[parts[3]] = value
        elif parts[0] == "check" and len(parts) == 5 and parts[3] == "miss":
            hits = _whole(value)
            if hits is None:
                progress.skipped += 1
            else:
                missed.setdefault((parts[1], parts[2]), {})[parts[4]] = hits
    for (lesson, exercise), fields in sorted(found.items()):
        submissions, at = _whole(fields.get("submissions", "0")), _time(fields.get("at", "0"))
        passed_at = _time(fields.get("passed_at", "0"))
        if submissions is None or at is None or passed_at is None:
            progress.skipped += 1
            continue
        hits = missed.get((lesson, exercise), {})
        progress.checks[(lesson, exercise)] = CheckRecord(
            lesson,
            exercise,
            submissions,
            fields.get("passed") == "1",
            fields.get("misconception") or None,
            at,
            dict(sorted(hits.items(), key=lambda kv: (-kv[1], kv[0]))),
            passed_at,
        )
    progress.current = raw.get("current") or None
    progress.current_at_ms = _ms(raw, "current_at", progress)
    progress.connected_ms = _ms(raw, "connected", progress)
    progress.active_ms = _ms(raw, "active", progress)
    return progress


def _ms(raw: dict[str, str], name: str, progress: Progress) -> int:
    """A time field of the record (0 when absent; counted as skipped when not a time the kit
    writes)."""
    value = raw.get(name) or "0"
    found = _time(value)
    if found is None:
        progress.skipped += 1
        return 0
    return found


def _whole(value: str) -> int | None:
    """``value`` as the whole number the kit writes (digits only, at most 18), else None."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None


def _time(value: str) -> int | None:
    """``value`` as a time the kit writes (epoch ms, at most ``LATEST_MS``), else None: a
    reader turns it into a date, and a later one is no date at all."""
    found = _whole(value)
    return found if found is not None and found <= LATEST_MS else None
