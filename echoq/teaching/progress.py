"""Where a learner is: lessons reached and exercise checks, recorded on the server.

Each learner's record is one hash, ``emq:{<learner>.course}:progress`` (solo:
``emq:{course}:progress``), inside their namespace, so on a shared server only they (and the
instructor) can touch it. Fields:

* ``lesson:<nn>`` -- server ms when the lesson was first started;
* ``check:<nn>:<exercise>:attempts`` -- how many times the check ran;
* ``check:<nn>:<exercise>:passed`` -- ``1`` once it has passed (never goes back to 0);
* ``check:<nn>:<exercise>:misconception`` -- the name of the last misconception it caught
  (empty once it passes);
* ``check:<nn>:<exercise>:at`` -- server ms of the last check.

A check's fields are written in one MULTI, so a reader never sees an attempt without its
verdict. :func:`read` returns a learner's whole record in one call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from ..clock import server_now_ms
from ..keyspace import Keyspace, check_namespace
from . import learner as learners

__all__ = ["CheckRecord", "Progress", "key", "record_lesson", "record_check", "read", "parse"]

COURSE = "course"


def key(learner: str | None = None) -> str:
    """The progress hash of ``learner`` (default: this process's learner, or solo)."""
    if learner is None:
        return Keyspace(learners.queue_name(COURSE)).progress
    return Keyspace(f"{check_namespace(learner)}.{COURSE}").progress


@dataclass(frozen=True)
class CheckRecord:
    lesson: str
    exercise: str
    attempts: int
    passed: bool
    misconception: str | None
    at_ms: int


@dataclass
class Progress:
    learner: str | None
    lessons: dict[str, int] = field(default_factory=dict)  # lesson -> first started (server ms)
    checks: dict[tuple[str, str], CheckRecord] = field(default_factory=dict)
    skipped: int = 0  # fields of the kit's shape whose value the kit never writes (not a whole number)


def record_lesson(client: redis.Redis, lesson: str) -> None:
    """Note that the learner started ``lesson`` (the first time only)."""
    client.hsetnx(key(), f"lesson:{lesson}", server_now_ms(client))


def record_check(
    client: redis.Redis,
    lesson: str,
    exercise: str,
    passed: bool,
    misconception: str | None,
    code: str | None = None,
) -> None:
    """One run of an exercise check: attempts + 1, the verdict, the misconception hit.
    ``code`` (the learner's submitted text) is accepted for the attempt history."""
    k, head = key(), f"check:{lesson}:{exercise}:"
    now = server_now_ms(client)
    pipe = client.pipeline(transaction=True)
    pipe.hincrby(k, head + "attempts", 1)
    if passed:
        pipe.hset(k, mapping={head + "passed": 1, head + "misconception": "", head + "at": now})
    else:
        pipe.hset(k, mapping={head + "misconception": misconception or "", head + "at": now})
        pipe.hsetnx(k, head + "passed", 0)
    pipe.execute()


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
    for name, value in raw.items():
        parts = name.split(":")
        if parts[0] == "lesson" and len(parts) == 2:
            started = _whole(value)
            if started is None:
                progress.skipped += 1
            else:
                progress.lessons[parts[1]] = started
        elif parts[0] == "check" and len(parts) == 4:
            found.setdefault((parts[1], parts[2]), {})[parts[3]] = value
    for (lesson, exercise), fields in sorted(found.items()):
        attempts, at = _whole(fields.get("attempts", "0")), _whole(fields.get("at", "0"))
        if attempts is None or at is None:
            progress.skipped += 1
            continue
        progress.checks[(lesson, exercise)] = CheckRecord(
            lesson,
            exercise,
            attempts,
            fields.get("passed") == "1",
            fields.get("misconception") or None,
            at,
        )
    return progress


def _whole(value: str) -> int | None:
    """``value`` as the whole number the kit writes (digits only, at most 18), else None."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None
