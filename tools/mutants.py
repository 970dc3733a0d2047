"""Mutation score of the exercises' checks: mutations of each reference solution, each judged
by its exercise's check. A check that passes a mutant that behaves differently under the
contract has a gap.

    .venv/bin/python tools/mutants.py                 # every exercise, every mutant (about 5 minutes)
    .venv/bin/python tools/mutants.py claim stall     # some exercises
    .venv/bin/python tools/mutants.py --sample 3      # three mutants per exercise (a quick look)
    .venv/bin/python tools/mutants.py --record        # the full run, written to tools/mutants.json
    .venv/bin/python tools/mutants.py --record loop   # some exercises' full runs (the others kept)

Token-level operators: drop a line (in Lua one that calls the server; in Python any line of a
body), swap two KEYS, +1 / -1 on an integer, flip a comparison, a fixed clock for ``TIME``
(what a clock read on the client amounts to inside a script), remove one field of an ``HSET``,
swap two adjacent writes, a catch-all ``except`` around the learner's callback. Learner-shaped
ones: a row field swapped for another of the same row (token, attempts, stalled; a claim's
job_id, token, attempts, payload), a state literal changed, an inclusive range bound made
exclusive, a range capped (``0 -1`` -> ``0 999``, ``LIMIT 0 1000``), a key prefix cut one
character short or long or shifted, a unit slip (ms, s, µs; cents and whole units), an
optional argument dropped, a named constant swapped for another of the module, an id cut to a
part of it or a key made per delivery, the claim passed as parts with its attempts for its
token, a reply taken for another, a verdict turned round, two arguments swapped, a payload
parsed wrongly, a check of ``running()`` or of a reply removed. Ones only a busy queue or a
second waiting job shows (the checks' workload rows, ``exercises/workloads.py``): the loop's
stalled check moved into the branch where the claim found nothing, a refused extension answered
by claiming again, a job other than the one given extended (a fresh claim's), an effect keyed on
the first job the worker saw. A mutant is named by its operator and the code it changed (never
a line number). A mutant that does not compile is not
counted. Each survivor is either listed in :data:`EQUIVALENT` with why it behaves the same
under the contract, or reported as a GAP (exit status 1).

The score per exercise is docs/course.md's table, put in by the site build from the run
recorded in tools/mutants.json; tests/test_mutants.py checks that record and the equivalents
against the code, and tests/test_exercises.py kills a sample on every test run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WRITES = ("ZADD", "ZREM", "HSET", "HINCRBY", "DEL", "HMSET", "ZPOPMIN", "HDEL")

_SUB0 = "Lua's string.sub counts a start of 0 as 1: the same prefix, the same row keys"
_ATOMIC = "two writes swapped inside one script: a script runs whole, and no client can see the order of its writes"
_TUNING = (
    "the loop's own tuning: the contract bounds the lease (longer than the work, short enough to wait out) and the "
    "beat (not every pass, not slower than 3 beats), fixes neither value, and these stay well inside every bound"
)
_BEAT = "the first beat compares with 0.0 and later ones with a deadline the clock passes: > and >= beat alike"
_INTERVAL = (
    "the extension's lease and interval (599-601 ms; an extension every half or quarter lease; 1/1001 s units): "
    "every one keeps a late extension inside the lease, each lease short, and far from a busy loop"
)


def _bumped(line: str, old: str, new: str) -> str:
    return f"number off by one: {line} => {line.replace(old, new)}"


# (exercise, mutant name) -> why the mutant behaves the same under the contract. A name is the
# operator and the code it changed, by its text: tests/test_mutants.py fails when an entry names
# a mutant the tool no longer makes, and proves each one: a move's against the reference on
# generated states (a crash between any two writes included, for a Python move), the loop's and
# the extension's by what its reason says (the values inside the check's bounds, the library's
# default, the fence's refusal, the lost lease's answer), and fails on one it has no proof for.
# (Microseconds divided by 999 or 1001 are no equivalent: the differential judge answers TIME
# with one fixed time, and a slip of a millisecond shows.)
EQUIVALENT: dict[tuple[str, str], str] = {
    ("claim", _bumped("local row = string.sub(KEYS[1], 1, -8) .. 'job:' .. id", "1, -8", "0, -8")): _SUB0,
    (
        "claim",
        "writes swapped: local token = redis.call('HINCRBY', row, 'token', 1) / "
        "redis.call('HINCRBY', row, 'attempts', 1)",
    ): _ATOMIC,
    ("complete", "writes swapped: redis.call('ZREM', KEYS[1], id) / redis.call('DEL', KEYS[3])"): _ATOMIC,
    (
        "complete",
        (
            "writes swapped: redis.call('DEL', KEYS[3]) / "
            "redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000), id)"
        ),
    ): _ATOMIC,
    ("stall", _bumped("local prefix = string.sub(KEYS[1], 1, -7)", "1, -7", "0, -7")): _SUB0,
    (
        "stall",
        "writes swapped: redis.call('ZREM', KEYS[1], id) / local stalled = redis.call('HINCRBY', row, 'stalled', 1)",
    ): _ATOMIC,
    ("stall", "writes swapped: redis.call('ZADD', KEYS[3], now, id) / redis.call('HSET', row, 'state', 'dead')"): (
        _ATOMIC
    ),
    ("stall", "writes swapped: redis.call('ZADD', KEYS[2], 0, id) / redis.call('HSET', row, 'state', 'pending')"): (
        _ATOMIC
    ),
    ("requeue", _bumped("local prefix = string.sub(KEYS[1], 1, -5)", "1, -5", "0, -5")): _SUB0,
    (
        "requeue",
        "writes swapped: redis.call('ZREM', KEYS[1], id) / "
        "redis.call('ZADD', KEYS[2], redis.call('HGET', row, 'arrival') or 0, id)",
    ): _ATOMIC,
    (
        "requeue",
        "writes swapped: redis.call('ZADD', KEYS[2], redis.call('HGET', row, 'arrival') or 0, id) / "
        "redis.call('HSET', row, 'state', 'pending', 'stalled', 0, 'attempts', 0)",
    ): _ATOMIC,
    ("release", "writes swapped: redis.call('ZREM', KEYS[2], id) / redis.call('HSET', KEYS[3], 'state', 'pending')"): (
        _ATOMIC
    ),
    (
        "release",
        "writes swapped: redis.call('HSET', KEYS[3], 'state', 'pending') / "
        "redis.call('HINCRBY', KEYS[3], 'attempts', -1)",
    ): _ATOMIC,
    (
        "release",
        "writes swapped: redis.call('HINCRBY', KEYS[3], 'attempts', -1) / "
        "redis.call('ZADD', KEYS[1], redis.call('HGET', KEYS[3], 'arrival') or 0, id)",
    ): _ATOMIC,
    **{
        ("loop", _bumped("LEASE_MS, BEAT_MS, MAX_STALLED = 400, 100, 2", old, new)): _TUNING
        for old, new in (("400", "401"), ("400", "399"), ("100", "101"), ("100", "99"))
    },
    **{
        ("loop", _bumped("next_beat = time.monotonic() + BEAT_MS / 1000", "1000", new)): _TUNING
        for new in ("1001", "999")
    },
    ("loop", "comparison flipped: if time.monotonic() >= next_beat: => if time.monotonic() > next_beat:"): _BEAT,
    ("loop", "line dropped: continue (#2)"): (
        "after q.retry the loop falls through to q.complete(claim), which the fence refuses (the row is no longer "
        "active under this claim's token): nothing changes"
    ),
    ("loop", "argument dropped: q.stalled_check(max_stalled=MAX_STALLED) => q.stalled_check()"): (
        "the library's default max_stalled is 2, MAX_STALLED's value"
    ),
    **{("extend", _bumped("LEASE_MS = 600", "600", new)): _INTERVAL for new in ("601", "599")},
    **{
        ("extend", _bumped("every = LEASE_MS / 3 / 1000", old, new)): _INTERVAL
        for old, new in (("/ 3", "/ 4"), ("/ 3", "/ 2"), ("1000", "1001"), ("1000", "999"))
    },
    ("extend", "line dropped: return False"): (
        "after a STALE answer the loop goes on extending until the work is done: each extend is fenced and "
        "refused, changing nothing, and the last one still answers STALE, so extend_lease returns False and the "
        "effect is not done (the work itself cannot be stopped from extend_lease's thread)"
    ),
}


@dataclass(frozen=True)
class Mutant:
    """One mutant: ``name`` is the operator and the code it changed, by its text (never a line
    number, so an entry of EQUIVALENT names the same mutant after lines move), e.g.
    ``"field swapped: redis.call('HINCRBY', row, 'token', 1) => ... 'attempts', 1)"``."""

    name: str
    text: str
    operator: str = ""


def _code_lines(text: str, comment: str) -> Iterator[tuple[int, str]]:
    in_doc = False
    for n, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if comment == "#" and (in_doc or stripped.startswith('"""')):
            if stripped.count('"""') % 2 == 1:
                in_doc = not in_doc
            continue
        if not stripped or stripped.startswith(comment):
            continue
        yield n, line


def _code_part(line: str, comment: str) -> tuple[str, str]:
    """The code of a line and its trailing comment (a mutation never touches comments)."""
    at = line.find(" " + comment + " ")
    return (line, "") if at < 0 else (line[:at], line[at:])


def _replace_line(text: str, n: int, new: str | None) -> str:
    lines = text.splitlines()
    if new is None:
        del lines[n]
    else:
        lines[n] = new
    return "\n".join(lines) + "\n"


FIELDS = ("token", "attempts", "stalled")  # a row's counts, each easily taken for another
STATES = ("pending", "active", "scheduled", "dead", "done")
CLAIM_FIELDS = ("job_id", "token", "attempts", "payload")


def _kwargs(body: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each ``, name=value`` argument of a call in ``body`` (the comma included,
    or the trailing one when it is the first argument)."""
    for match in re.finditer(r"(\(|,\s*)([a-z_]+)=(?!=)", body):
        depth, at = 0, match.end()
        while at < len(body):
            c = body[at]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif c == "," and depth == 0:
                break
            at += 1
        if match.group(1) == "(":
            end = at + 1 if at < len(body) and body[at] == "," else at
            yield match.start() + 1, end + (1 if body[end : end + 1] == " " else 0)
        else:
            yield match.start(), at


def _learner_edits(body: str, kind: str, constants: list[str]) -> Iterator[tuple[str, str]]:
    """(operator, new body) for each learner-shaped mistake one line can carry."""
    q = "'" if kind == "lua" else "[\"']"
    for operator, words in (("field swapped", FIELDS), ("state changed", STATES)):  # one quoted word for another
        for a in words:
            for match in re.finditer(rf"({q}){a}({q})", body):
                for b in (w for w in words if w != a):
                    yield operator, body[: match.start()] + match.group(1) + b + match.group(2) + body[match.end() :]
    if kind == "python":
        for a in CLAIM_FIELDS:  # claim.token for claim.attempts, claim.job_id for claim.token...
            for match in re.finditer(rf"\bclaim\.{a}\b", body):
                for b in (f for f in CLAIM_FIELDS if f != a):
                    yield "field swapped", body[: match.start()] + f"claim.{b}" + body[match.end() :]
    # an inclusive range bound made exclusive (and an exclusive one inclusive)
    for match in re.finditer(r"(['\"]-inf['\"],\s*)([a-z_]+)\)", body):
        bound = f"'(' .. {match.group(2)}" if kind == "lua" else f'f"({{{match.group(2)}}}"'
        yield "bound made exclusive", body[: match.start(2)] + bound + body[match.end(2) :]
    for match in re.finditer(r"(['\"])\(['\"] \.\. ", body):
        yield "bound made inclusive", body[: match.start()] + body[match.end() :]
    # a range capped
    for match in re.finditer(r"(,\s*)0(,\s*)-1\)", body):
        yield "range capped", body[: match.start()] + f"{match.group(1)}0{match.group(2)}999)" + body[match.end() :]
    for match in re.finditer(r"(['\"]-inf['\"],\s*[^,()]+)\)", body):
        cap = ", 'LIMIT', 0, 1000)" if kind == "lua" else ", start=0, num=1000)"
        yield "range capped", body[: match.end(1)] + cap + body[match.end() :]
    # a key prefix cut one character short or long, or shifted
    for match in re.finditer(r"string\.sub\((KEYS\[\d\]), 1, -(\d+)\)", body):
        for shift in (-1, 1):
            n = int(match.group(2)) + shift
            yield (
                "key prefix cut",
                body[: match.start()] + f"string.sub({match.group(1)}, 1, -{n})" + body[match.end() :],
            )
    for match in re.finditer(r"'job:'", body):
        for shifted in ("':job:'", "'job'"):
            yield "key prefix shifted", body[: match.start()] + shifted + body[match.end() :]
    # a unit slip: milliseconds, seconds and microseconds taken for one another
    for match in re.finditer(r"\s*(//|[*/])\s*1000\b", body):
        yield "unit slip", body[: match.start()] + body[match.end() :]
        yield "unit slip", body[: match.start()] + f" {match.group(1)} 1000000" + body[match.end() :]
    # an optional argument dropped
    if kind == "python":
        for start, end in _kwargs(body):
            yield "argument dropped", body[:start] + body[end:]
    # an id cut to a part of it (its time part, JOB and 7 more), or a key made per delivery
    for match in re.finditer(r"\bclaim\.job_id\b(?!\[)", body):
        for cut in (
            "claim.job_id[:13]",
            "claim.job_id[:10]",
            'f"{claim.job_id}:{claim.token}"',
            "str(hash(claim.job_id))",
        ):
            yield "key cut", body[: match.start()] + cut + body[match.end() :]
    # the claim passed as parts, its attempts for its token
    for match in re.finditer(r"\bq\.(extend|complete|retry)\(claim\b(?!\.)", body):
        yield "field swapped", body[: match.end() - 5] + "claim.job_id, claim.attempts" + body[match.end() :]
    # the payload parsed wrongly: another separator, a number left as text
    for match in re.finditer(r"\.split\(\)", body):
        yield "parse slip", body[: match.start()] + '.split(",")' + body[match.end() :]
    for match in re.finditer(r"\bint\(cents\)", body):
        yield "parse slip", body[: match.start()] + "cents" + body[match.end() :]
    # cents taken for whole units (or the other way)
    for match in re.finditer(r"\bint\(cents\)", body):
        for slip in ("int(cents) * 100", "int(cents) // 100"):
            yield "unit slip", body[: match.start()] + slip + body[match.end() :]
    # an answer's enum member taken for another, a test turned round, a verdict turned round
    for match in re.finditer(r"\bExtend\.(EXTENDED|STALE|GONE)\b", body):
        for other in ("EXTENDED", "STALE", "GONE"):
            if other != match.group(1):
                yield "reply taken for another", body[: match.start()] + f"Extend.{other}" + body[match.end() :]
    for match in re.finditer(r" is not | is ", body):
        flipped = " is " if match.group() == " is not " else " is not "
        yield "comparison flipped", body[: match.start()] + flipped + body[match.end() :]
    match = re.match(r"(\s*return )(True|False)\b(.*)$", body)
    if match:
        yield (
            "verdict turned round",
            match.group(1) + ("False" if match.group(2) == "True" else "True") + match.group(3),
        )
    # two arguments, or two names unpacked, in each other's place
    match = re.match(r"(\s*)([a-z_]+), ([a-z_]+) = (.+)$", body)
    if match:
        yield "arguments swapped", f"{match.group(1)}{match.group(3)}, {match.group(2)} = {match.group(4)}"
    for match in re.finditer(
        r"\b((?:bank|q)\.[a-z_]+)\(([a-z_]+(?:\([a-z_]+\))?), ([a-z_]+(?:\([a-z_]+\))?)([,)])", body
    ):
        call, first, second, end = match.groups()
        yield "arguments swapped", body[: match.start()] + f"{call}({second}, {first}{end}" + body[match.end() :]
    # a named constant swapped for another of the same module
    if re.match(r"\s*[A-Z_]+(?:, [A-Z_]+)* =", body):
        return  # the line that names them
    for a in constants:
        for match in re.finditer(rf"\b{a}\b", body):
            for b in constants:
                if b != a:
                    yield "constant swapped", body[: match.start()] + b + body[match.end() :]
    # a wait that does not wait (a busy loop), a test turned round by a "not" left out
    for match in re.finditer(r"\b(\w+)\.wait\([^()]*\)", body):
        yield "wait removed", body[: match.start()] + f"{match.group(1)}.is_set()" + body[match.end() :]
    for match in re.finditer(r"\b(if|while) not ", body):
        yield "check turned round", body[: match.start()] + f"{match.group(1)} " + body[match.end() :]
    # a check of running() or of a reply removed
    if kind == "python":
        match = re.match(r"(\s*)while (.+):$", body)
        if match and match.group(2) != "True":
            yield "check removed", f"{match.group(1)}while True:"
        match = re.match(r"(\s*)if (.+):(.*)$", body)
        if match:
            yield "check removed", f"{match.group(1)}if False:{match.group(3)}"
        match = re.match(r"(\s*)return (.+ is .+)$", body)
        if match:
            yield "check removed", f"{match.group(1)}return True"
    else:
        match = re.match(r"(\s*)if (.+) then(.*)$", body)
        if match:
            yield "check removed", f"{match.group(1)}if false then{match.group(3)}"


def mutants(source: str, kind: str) -> list[Mutant]:
    """Every mutant of ``source`` (deduplicated, none equal to it), each named by its text."""
    comment = "--" if kind == "lua" else "#"
    found: list[Mutant] = []
    names: set[str] = set()
    lines = source.splitlines()
    code = list(_code_lines(source, comment))
    constants = (
        sorted(
            set(re.findall(r"^([A-Z][A-Z_]+)\b", source, re.M))
            | {
                name
                for line in lines
                for name in re.findall(r"^([A-Z_]+(?:, [A-Z_]+)+) =", line)
                for name in name.split(", ")
            }
        )
        if kind == "python"
        else []
    )

    def add(operator: str, name: str, text: str) -> None:
        if text.strip() == source.strip() or any(m.text == text for m in found):
            return
        full, again = f"{operator}: {name}", 2
        while full in names:  # the same line twice in the source: the second is told apart
            full, again = f"{operator}: {name} (#{again})", again + 1
        names.add(full)
        found.append(Mutant(full, text, operator))

    def changed(n: int, new_line: str, operator: str) -> None:
        was, now = _code_part(lines[n], comment)[0].strip(), _code_part(new_line, comment)[0].strip()
        add(operator, f"{was} => {now}", _replace_line(source, n, new_line))

    # Lua: a line that calls the server; Python: any line of a function's body (an assignment
    # left out, a return forgotten, a call not made)
    calls = re.compile(r"redis\.call\(" if kind == "lua" else r"^\s+\S")
    for n, line in code:
        body, _ = _code_part(line, comment)
        if calls.search(body) and not body.lstrip().startswith("def "):
            indent = line[: len(line) - len(line.lstrip())]
            replacement = None if kind == "lua" else indent + "pass"
            add("line dropped", body.strip(), _replace_line(source, n, replacement))
    for n, line in code:  # swap two KEYS
        body, rest = _code_part(line, comment)
        used = sorted(set(re.findall(r"KEYS\[(\d+)\]", body)))
        for k in used:
            for other in sorted(set(re.findall(r"KEYS\[(\d+)\]", source)) - {k}):
                changed(n, body.replace(f"KEYS[{k}]", f"KEYS[{other}]", 1) + rest, "KEYS swapped")
    for n, line in code:  # +1 / -1 on integer constants (not inside KEYS[...] or names)
        body, rest = _code_part(line, comment)
        for match in re.finditer(r"(?<![\w\[.'\"])(\d+)(?![\w\].'\"])", body):
            value = int(match.group(1))
            for delta in (1, -1):
                if value + delta < 0:
                    continue
                changed(n, body[: match.start()] + str(value + delta) + body[match.end() :] + rest, "number off by one")
    flips = [("<=", "<"), (">=", ">"), ("<", "<="), (">", ">="), ("~=" if kind == "lua" else "!=", "==")]
    flips.append(("==", "~=" if kind == "lua" else "!="))
    for n, line in code:
        body, rest = _code_part(line, comment)
        for old, new in flips:
            for match in re.finditer(re.escape(old), body):
                before, after = body[match.start() - 1 : match.start()], body[match.end() : match.end() + 1]
                if old in ("<", ">") and (after == "=" or before in "<>-="):
                    continue
                if old in ("<", ">") and kind == "python" and "->" in body[match.start() - 1 : match.end() + 1]:
                    continue
                changed(n, body[: match.start()] + new + body[match.end() :] + rest, "comparison flipped")
    for n, line in code:
        body, rest = _code_part(line, comment)
        if body.lstrip().startswith("def "):
            continue
        for operator, new_body in _learner_edits(body, kind, constants):
            changed(n, new_body + rest, operator)
    if kind == "lua" and "redis.call('TIME')" in source:
        add("clock", "a fixed clock for TIME", source.replace("redis.call('TIME')", "{'1700000000', '0'}"))
    if kind == "python" and "r.time()" in source:
        add(
            "clock",
            "the client's clock for TIME",
            source.replace("r.time()", "divmod(int(__import__('time').time() * 1e6), 10**6)"),
        )
    for n, line in code:  # remove one field from an HSET
        body, rest = _code_part(line, comment)
        match = re.search(r"HSET', ([^,]+), ('[a-z_]+', [^,)]+)(, '[a-z_]+', [^,)]+)+\)", body)
        if match:
            pairs = re.findall(r", ('[a-z_]+', [^,)]+)", body[match.start(1) + len(match.group(1)) :])
            for pair in pairs:
                changed(n, body.replace(", " + pair, "", 1) + rest, "field not written")
    writes = [
        n for n, line in code if any(f"'{w}'" in line for w in WRITES) or re.search(r"\.(zadd|zrem|hset)\(", line)
    ]
    for a, b in zip(writes, writes[1:], strict=False):
        if b == a + 1 and _indent(lines[a]) == _indent(lines[b]):
            swapped = lines[:a] + [lines[b], lines[a]] + lines[b + 1 :]
            code_a, code_b = (_code_part(lines[n], comment)[0].strip() for n in (a, b))
            add("writes swapped", f"{code_a} / {code_b}", "\n".join(swapped) + "\n")
    if kind == "python":
        for name, text in _busy_queue_edits(source):
            add(name.split(":", 1)[0], name.split(": ", 1)[1], text)
    if kind == "python":  # a catch-all except that swallows what the learner's callbacks raise
        for n, line in code:
            body, _ = _code_part(line, comment)
            if re.search(r"\b(work|bank\.charge)\(", body) and not body.rstrip().endswith(":"):
                pad = line[: _indent(line)]
                wrapped = f"{pad}try:\n{pad}    {line.strip()}\n{pad}except Exception:\n{pad}    pass"
                add("catch-all except", line.strip(), _replace_line(source, n, wrapped))
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block(lines: list[str], n: int) -> int:
    """The line after the block that line ``n`` opens (its indented body)."""
    end = n + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > _indent(lines[n])):
        end += 1
    return end


def _busy_queue_edits(source: str) -> Iterator[tuple[str, str]]:
    """(name, text) of the learner-shaped mistakes only a busy queue or a second pending job
    shows: the loop's beat moved into the branch where the claim found nothing; an extension
    refused answered by claiming again and carrying on with that claim; a job other than the
    one given extended (a fresh claim's, when one is pending); an effect keyed on the first job
    this worker saw rather than the one given."""
    lines = source.splitlines()
    code = [_code_part(line, "#")[0].rstrip() for line in lines]
    beat = next(
        (
            n
            for n, line in enumerate(code)
            if re.match(r"\s*if .*:$", line)
            and any("stalled_check(" in body for body in lines[n + 1 : _block(lines, n)])
        ),
        None,
    )
    idle = next((n for n, line in enumerate(code) if re.match(r"\s*if claim is None:$", line)), None)
    if beat is not None and idle is not None and idle > beat:
        end = _block(lines, beat)
        shift = _indent(lines[idle]) + 4 - _indent(lines[beat])
        moved = [(" " * shift + line) if line.strip() else line for line in lines[beat:end]]
        rest = lines[:beat] + lines[end:]
        at = rest.index(lines[idle]) + 1
        text = "\n".join(rest[:at] + moved + rest[at:]) + "\n"
        yield f"moved into the idle branch: {code[beat].strip()} => under {code[idle].strip()}", text
    for n, line in enumerate(lines):
        body = code[n].strip()
        if body == "return False" and n and re.search(r"q\.extend\(claim\b", lines[n - 1]):
            pad = line[: _indent(line)]
            again = f"{pad}if (claim := q.claim(lease_ms=LEASE_MS)) is None:  # lost it: claim again, go on\n"
            text = "\n".join(lines[:n]) + "\n" + again + f"{pad}    return False\n" + "\n".join(lines[n + 1 :]) + "\n"
            yield f"claims again when refused: {body} => {again.strip().split('  #')[0]}", text
    for n, line in enumerate(lines):
        if re.search(r"\bq\.extend\(claim\b(?!\.)", code[n]):
            other = line.replace("q.extend(claim", "q.extend(q.claim(lease_ms=LEASE_MS) or claim", 1)
            yield (
                f"another job extended: {code[n].strip()} => {_code_part(other, '#')[0].strip()}",
                "\n".join(lines[:n] + [other] + lines[n + 1 :]) + "\n",
            )
    for n, line in enumerate(lines):
        if "idempotency_key=claim.job_id" in code[n]:
            other = line.replace(
                "idempotency_key=claim.job_id", 'idempotency_key=globals().setdefault("_first_job", claim.job_id)'
            )
            yield (
                f"another job's key: {code[n].strip()} => {_code_part(other, '#')[0].strip()}",
                "\n".join(lines[:n] + [other] + lines[n + 1 :]) + "\n",
            )


def _compiles(text: str, kind: str, client: object) -> bool:
    if kind == "lua":
        try:
            client.script_load(text)  # type: ignore[attr-defined]
        except Exception:
            return False
        return True
    try:
        compile(text, "<mutant>", "exec")
    except SyntaxError:
        return False
    return True


RECORD = Path(__file__).resolve().parent / "mutants.json"  # the last full run (--record); the site's table


@dataclass
class Score:
    key: str
    made: int = 0
    killed: int = 0
    equivalent: list[tuple[str, str]] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    seconds: float = 0.0
    verdicts: dict[str, str] = field(default_factory=dict)  # mutant name -> killed, equivalent, survived, no-compile
    operators: dict[str, int] = field(default_factory=dict)  # operator -> mutants judged
    digest: str = ""  # exercises.judging_digest(key): the code that judged them


def score(key: str, *, sample: int | None = None, client: object = None, jobs: int = 1) -> Score:
    """Judge every mutant (or the first ``sample``) of exercise ``key``'s solution."""
    import echoq
    from echoq.teaching.exercises import EXERCISES, judging_digest, reset_hints

    ex = EXERCISES[key]
    client = client or echoq.connect()
    result = Score(key, digest=judging_digest(key))
    started = time.monotonic()
    made = []
    for m in mutants(ex.solution, ex.kind):
        if _compiles(m.text, ex.kind, client):
            made.append(m)
        else:
            result.verdicts[m.name] = "no-compile"
    for m in made[:sample] if sample else made:
        reset_hints()
        result.made += 1
        result.operators[m.operator] = result.operators.get(m.operator, 0) + 1
        fb = ex.judge(m.text)
        if not fb.ok:
            result.killed += 1
            result.verdicts[m.name] = "killed"
        elif (key, m.name) in EQUIVALENT:
            result.equivalent.append((m.name, EQUIVALENT[(key, m.name)]))
            result.verdicts[m.name] = "equivalent"
        else:
            result.gaps.append(m.name)
            result.verdicts[m.name] = "survived"
    result.seconds = time.monotonic() - started
    return result


def score_markdown(record: dict[str, Any]) -> str:
    """The score per exercise, as docs/course.md shows it (the site build puts it in at
    ``<!-- generated: mutation-score -->``), from a record the tool wrote."""
    rows = [
        "| exercise | mutants | killed | equivalent | survivors | the operators that made them |",
        "|---|---|---|---|---|---|",
    ]
    for key, s in record["exercises"].items():
        ops = ", ".join(f"{op} {n}" for op, n in sorted(s["operators"].items(), key=lambda kv: (-kv[1], kv[0])))
        rows.append(f"| {key} | {s['made']} | {s['killed']} | {len(s['equivalent'])} | {len(s['gaps'])} | {ops} |")
    made = sum(s["made"] for s in record["exercises"].values())
    killed = sum(s["killed"] for s in record["exercises"].values())
    equivalent = sum(len(s["equivalent"]) for s in record["exercises"].values())
    rows.append("")
    rows.append(
        f"In all: {killed} of {made - equivalent} non-equivalent mutants killed ({equivalent} equivalent, each "
        f"listed in `tools/mutants.py` with why), from the run recorded in `tools/mutants.json`."
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from echoq.teaching.exercises import EXERCISES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("keys", nargs="*", help="exercises to mutate (default: all with code answers)")
    parser.add_argument("--sample", type=int, default=None, help="judge only the first N mutants of each")
    parser.add_argument("--record", action="store_true", help=f"write the scores to {RECORD.name} (the site's table)")
    args = parser.parse_args(argv)
    keys = args.keys or [k for k, ex in EXERCISES.items() if ex.kind != "value"]
    print(f"{'exercise':<10} {'made':>5} {'killed':>7} {'equiv.':>7} {'gaps':>5} {'seconds':>8}")
    scores = []
    for key in keys:
        s = score(key, sample=args.sample)
        scores.append(s)
        print(f"{key:<10} {s.made:>5} {s.killed:>7} {len(s.equivalent):>7} {len(s.gaps):>5} {s.seconds:>8.1f}")
        print("    operators   " + ", ".join(f"{op} {n}" for op, n in sorted(s.operators.items())))
        for name, why in s.equivalent:
            print(f"    equivalent  {name}: {why}")
        for name in s.gaps:
            print(f"    GAP         {name}")
    made, killed = sum(s.made for s in scores), sum(s.killed for s in scores)
    equivalent, gaps = sum(len(s.equivalent) for s in scores), sum(len(s.gaps) for s in scores)
    print(
        f"score: {killed} of {made - equivalent} non-equivalent mutants killed ({equivalent} equivalent, {gaps} gaps)"
    )
    if args.record:
        if args.sample:
            parser.error("--record needs every mutant of each exercise it records (no --sample)")
        git = ["git", "rev-parse", "--short", "HEAD"]
        head = subprocess.run(git, capture_output=True, text=True, cwd=RECORD.parent)
        made = {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": head.stdout.strip() or "unknown",
        }
        # Some exercises recorded: the others keep their run, each exercise saying when it was made.
        kept = json.loads(RECORD.read_text())["exercises"] if args.keys and RECORD.exists() else {}
        ran = {s.key: {**asdict(s), "equivalent": [list(e) for e in s.equivalent], **made} for s in scores}
        order = [k for k, ex in EXERCISES.items() if ex.kind != "value"]
        both = {**kept, **ran}
        record = {**made, "exercises": {k: both[k] for k in order if k in both}}
        RECORD.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"recorded in {RECORD}")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
