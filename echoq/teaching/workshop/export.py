"""Every learner's attempts as one CSV: what graders (nbgrader, otter-grader) hand instructors.

One row per kept attempt (:mod:`echoq.teaching.progress` keeps the last 50 per learner and
exercise, code up to 8,000 characters), in one order: learner id, lesson, exercise, time.
Columns: ``learner``, ``hub_user``, ``lesson``, ``exercise``, ``attempt`` (its number among
all the learner's attempts at that exercise, counted even when older ones were dropped),
``time_utc`` (ISO 8601, server time), ``verdict`` (``passed`` / ``not yet``),
``misconception``, ``code``, ``code_truncated``.

``python -m echoq.teaching workshop export --csv FILE`` writes it; the dashboard offers the same
file as a download link.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import redis

from .. import progress

__all__ = ["COLUMNS", "Row", "rows", "to_csv", "write_csv"]

COLUMNS = [
    "learner",
    "hub_user",
    "lesson",
    "exercise",
    "attempt",
    "time_utc",
    "verdict",
    "misconception",
    "code",
    "code_truncated",
]


@dataclass(frozen=True)
class Row:
    learner: str
    hub_user: str
    lesson: str
    exercise: str
    attempt: int
    time_utc: str
    verdict: str
    misconception: str
    code: str
    code_truncated: bool

    def values(self) -> list[object]:
        return [getattr(self, c) for c in COLUMNS]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rows(client: redis.Redis, learners: dict[str, str] | Iterable[str]) -> list[Row]:
    """Every kept attempt of ``learners`` (learner id -> hub user, or ids), read in two
    round trips: the progress records, then every exercise's history."""
    hub = dict(learners) if isinstance(learners, dict) else {name: name for name in learners}
    names = sorted(hub)
    from .board import ask_record, record_of

    pipe = client.pipeline(transaction=False)
    for name in names:
        ask_record(pipe, name)
    replies = pipe.execute(raise_on_error=False)
    records = [record_of(raw, name) for name, raw in zip(names, replies, strict=True)]
    wanted = [(record, check) for record in records for check in record.checks.values()]
    pipe = client.pipeline(transaction=False)
    for record, check in wanted:
        pipe.lrange(progress.attempts_key(check.lesson, check.exercise, record.learner), 0, -1)
    found: list[Row] = []
    for (record, check), raw in zip(wanted, pipe.execute(raise_on_error=False) if wanted else [], strict=True):
        kept = progress.parse_attempts(raw) if isinstance(raw, list) else []  # a key of another type: skipped
        first = max(1, check.attempts - len(kept) + 1)  # older attempts beyond the bound were dropped
        for n, attempt in enumerate(kept):
            found.append(
                Row(
                    str(record.learner),
                    hub[str(record.learner)],
                    check.lesson,
                    check.exercise,
                    first + n,
                    iso(attempt.at_ms),
                    "passed" if attempt.passed else "not yet",
                    attempt.misconception or "",
                    attempt.code or "",
                    attempt.truncated,
                )
            )
    return sorted(found, key=lambda r: (r.learner, r.lesson, r.exercise, r.attempt))


def to_csv(found: list[Row]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    writer.writerows(r.values() for r in found)
    return out.getvalue()


def write_csv(path: str | Path, found: list[Row]) -> Path:
    """The CSV, mode 0600 from its first byte: every learner's code and verdicts are the instructor's."""
    from .admin import write_private

    where = Path(path)
    write_private(where, to_csv(found))
    return where
