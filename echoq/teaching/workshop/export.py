"""The class's gradebook: one row per roster learner and exercise, as CSV and as JSON.

What graders (nbgrader, otter-grader) hand instructors, from what the kit recorded on the
class server (:mod:`echoq.teaching.progress`): every learner on the roster, every exercise
of the course, a learner who never ran a check included ("not started", 0 tries). In one
order: learner id, then the course's order of exercises. Columns:

* ``name`` (as the roster wrote it), ``learner`` (the id), ``hub_user``;
* ``lesson``, ``exercise``;
* ``status`` (``passed`` / ``not yet`` / ``not started``), ``tries`` (every check run,
  never cut), ``misconceptions`` (each the checks caught, with how often);
* ``first_pass`` and ``last_submitted``: this machine's local time with its offset
  (ISO 8601, ``2026-05-04T14:02:03+02:00``);
* ``last_code`` (the code of the newest submission, as recorded: up to 8,000 characters)
  and ``last_code_truncated``;
* ``verified``: that code judged again out of the learner's reach by ``workshop grade``
  (:mod:`.grade`): ``verified passed``, ``verified failed: <the ✗ line>``, ``timed out``,
  ``code changed since graded``, or ``not verified`` (no stored submission, or no grade run
  yet). ``status`` is what the learner's kernel reported, which the learner can write by hand;
* ``disagreement``: where the two differ about a pass, both
  (``reported passed, verified failed: <the ✗ line>``, ``reported passed, not verified``); else empty.

A cell a spreadsheet would read as a formula -- one starting with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return, as a learner's code may (``=HYPERLINK(...)``) -- is
written with a ``'`` before it in the CSV (OWASP's advice against CSV injection); the JSON
holds every value as it is. Both files are written with mode 0600.

``python -m echoq.teaching workshop export --csv FILE [--json FILE]`` writes them; the
dashboard offers the same two files as download links.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

import redis

from .. import progress


class Graded(Protocol):
    """What the gradebook reads of a verified verdict (:class:`.grade.Grade`)."""

    sha256: str
    verdict: str
    line: str | None


__all__ = [
    "COLUMNS",
    "Row",
    "rows",
    "to_csv",
    "to_json",
    "write",
    "local_iso",
    "FORMULA_STARTS",
    "code_digest",
    "verified_cell",
    "disagreement",
]

COLUMNS = [
    "name",
    "learner",
    "hub_user",
    "lesson",
    "exercise",
    "status",
    "tries",
    "misconceptions",
    "first_pass",
    "last_submitted",
    "last_code",
    "last_code_truncated",
    "verified",
    "disagreement",
]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run as a formula


@dataclass(frozen=True)
class Row:
    name: str
    learner: str
    hub_user: str
    lesson: str
    exercise: str
    status: str
    tries: int
    misconceptions: str
    first_pass: str
    last_submitted: str
    last_code: str
    last_code_truncated: bool
    verified: str = "not verified"
    disagreement: str = ""

    def values(self) -> list[object]:
        return [getattr(self, c) for c in COLUMNS]


def local_iso(ms: int) -> str:
    """Epoch ``ms`` as this machine's local time with its offset; "" for none."""
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds") if ms else ""


def rows(
    client: redis.Redis,
    learners: Iterable[tuple[str, str, str]],
    grades: Mapping[tuple[str, str, str], Graded] | None = None,
) -> list[Row]:
    """The gradebook of ``learners`` (each ``(learner id, name, hub user)``), read in two
    round trips: the progress records (a pass's first time among them), then each tried
    exercise's newest submission; beside each, its verified verdict from ``grades``
    (:func:`.grade.load`; none: "not verified")."""
    from .board import ask_record, exercises_of, record_of

    people = sorted(learners)
    pipe = client.pipeline(transaction=False)
    for learner, _name, _hub in people:
        ask_record(pipe, learner)
    replies = pipe.execute(raise_on_error=False)
    records = [record_of(raw, lid) for (lid, _n, _h), raw in zip(people, replies, strict=True)]
    course = exercises_of()
    table: list[tuple[tuple[str, str, str], progress.CheckRecord]] = []
    for person, record in zip(people, records, strict=True):
        steps = sorted(set(course) | set(record.checks))
        for lesson, exercise in steps:
            check = record.checks.get((lesson, exercise)) or progress.CheckRecord(lesson, exercise, 0, False, None, 0)
            table.append((person, check))
    tried = [(person, check) for person, check in table if check.submissions]
    pipe = client.pipeline(transaction=False)
    for (learner, _n, _h), check in tried:
        pipe.lindex(progress.submissions_key(check.lesson, check.exercise, learner), 0)
    replies = pipe.execute(raise_on_error=False)
    newest = dict(zip(((p[0], c.lesson, c.exercise) for p, c in tried), replies, strict=True))
    found = []
    for (learner, name, hub_user), check in table:
        raw = newest.get((learner, check.lesson, check.exercise))
        last = progress.parse_submissions([raw]) if isinstance(raw, str | bytes) else []
        latest = last[0] if last else None
        status = "not started" if not check.submissions else "passed" if check.passed else "not yet"
        verified = verified_cell(
            (grades or {}).get((learner, check.lesson, check.exercise)),
            latest.code if latest and latest.code else None,
            bool(latest and latest.truncated),
        )
        found.append(
            Row(
                name=name,
                learner=learner,
                hub_user=hub_user,
                lesson=check.lesson,
                exercise=check.exercise,
                status=status,
                tries=check.submissions,
                misconceptions=", ".join(f"{m} x{n}" for m, n in check.missed.items()),
                first_pass=local_iso(check.first_pass_ms),
                last_submitted=local_iso(latest.at_ms) if latest else "",
                last_code=(latest.code or "") if latest else "",
                last_code_truncated=bool(latest and latest.truncated),
                verified=verified,
                disagreement=disagreement(status, verified),
            )
        )
    return found


def code_digest(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


def verified_cell(grade: Graded | None, code: str | None, truncated: bool) -> str:
    """The gradebook's ``verified`` cell of one learner at one exercise."""
    if code is None:
        return "not verified"  # no stored submission: nothing was ever there to judge
    if truncated:
        return "not verified: the stored code was cut at 8,000 characters"
    if grade is None:
        return "not verified"
    if grade.sha256 != code_digest(code):
        return "code changed since graded"
    if grade.verdict == "passed":
        return "verified passed"
    if grade.verdict == "failed":
        return f"verified failed: {grade.line}"
    if grade.verdict == "timed out":
        return "timed out"
    return f"{grade.verdict}: {grade.line}" if grade.line else grade.verdict


def disagreement(status: str, verified: str) -> str:
    """The disagreement cell: "reported passed, verified failed: ✗ ..." when the two differ about a pass; else ""."""
    if status == "passed" and verified != "verified passed":
        return f"reported passed, {verified}"
    if status != "passed" and verified == "verified passed":
        return f"reported {status}, verified passed"
    return ""


def safe_cell(value: object) -> str:
    """``value`` as a CSV cell no spreadsheet runs: one that would start a formula gets a ``'``."""
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def to_csv(found: list[Row]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    writer.writerows([safe_cell(v) for v in r.values()] for r in found)
    return out.getvalue()


def to_json(found: list[Row]) -> str:
    return json.dumps([asdict(r) for r in found], ensure_ascii=False, indent=1) + "\n"


def write(path: str | Path, text: str) -> Path:
    """A gradebook file, mode 0600 from its first byte: every learner's code and verdicts are the instructor's."""
    from .admin import write_private

    where = Path(path)
    write_private(where, text)
    return where
