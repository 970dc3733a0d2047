"""Mutation score of the exercises' checks: small mutations of each reference solution,
each judged by its exercise's check. A check that passes a mutant that behaves differently
under the contract has a gap.

    .venv/bin/python tools/mutants.py                 # every exercise, every mutant
    .venv/bin/python tools/mutants.py claim stall     # some exercises
    .venv/bin/python tools/mutants.py --sample 3      # three mutants per exercise (a quick look)

The mutations: drop a line that calls the server (``redis.call``, ``q.extend``,
``bank.charge``...), a Python ``return`` or ``time.sleep``, swap two KEYS, +1 / -1 on an
integer constant, flip a comparison (``<`` / ``<=``, ``>`` / ``>=``, ``==`` / ``~=``), a fixed
clock for the server's ``TIME``
(what a clock read on the client amounts to inside a script), remove one field from an
``HSET``, swap two adjacent writes, and a catch-all ``except``. A mutant that does not even
compile is not counted. Each survivor is either listed in :data:`EQUIVALENT` with why it
behaves the same under the contract, or reported as a GAP (exit status 1).

The score is in docs/course.md; tests/test_exercises.py keeps a sample killed.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

WRITES = ("ZADD", "ZREM", "HSET", "HINCRBY", "DEL", "HMSET", "ZPOPMIN", "HDEL")

_SUB0 = "Lua's string.sub counts a start of 0 as 1: the same prefix, the same row keys"
_MICROS = (
    "microseconds / 1001 or / 999 instead of / 1000 moves the clock by at most 1 ms: inside the tolerance the "
    "contract allows a time read from TIME (see exercises/differential.py)"
)
_ATOMIC = "two writes swapped inside one script: a script runs whole, and no client can see the order of its writes"
_TWO_STEP = (
    "the two-step reaper is separate commands by design; either order of its writes leaves a window (the id in "
    "both sets, or the row saying pending while the id is still active), which is what the lesson's race shows"
)
_TUNING = "the loop's own tuning (lease, beat, max_stalled): the contract fixes no value, and every check's failure "
_TUNING += "is reached at these as at the solution's"
_BEAT = "the first beat compares with 0.0 and later ones with a deadline the clock passes: > and >= beat alike"
_INTERVAL = (
    "the extension's lease and interval (599-601 ms; an extension every half or quarter lease; 1/1001 s units): "
    "every one keeps extensions well inside the lease and far from a busy loop"
)

# (exercise, mutant name) -> why the mutant behaves the same under the contract.
EQUIVALENT: dict[tuple[str, str], str] = {
    ("claim", "line 7: 1 -> 0 (number 1)"): _SUB0,
    ("claim", "line 13: 1000 -> 1001 (number 2)"): _MICROS,
    ("claim", "line 13: 1000 -> 999 (number 2)"): _MICROS,
    ("claim", "swap lines 9 and 10"): _ATOMIC,
    ("complete", "line 11: 1000 -> 1001 (number 2)"): _MICROS,
    ("complete", "line 11: 1000 -> 999 (number 2)"): _MICROS,
    ("complete", "swap lines 9 and 10"): _ATOMIC,
    ("complete", "swap lines 10 and 11"): _ATOMIC,
    ("stall", "line 3: 1 -> 0 (number 1)"): _SUB0,
    ("stall", "line 5: 1000 -> 1001 (number 2)"): _MICROS,
    ("stall", "line 5: 1000 -> 999 (number 2)"): _MICROS,
    ("stall", "swap lines 10 and 11"): _ATOMIC,
    ("stall", "swap lines 13 and 14"): _ATOMIC,
    ("stall", "swap lines 16 and 17"): _ATOMIC,
    ("two_step", "line 4: 1000 -> 1001 (number 2)"): _MICROS,
    ("two_step", "line 4: 1000 -> 999 (number 2)"): _MICROS,
    ("two_step", "swap lines 10 and 11"): _TWO_STEP,
    ("two_step", "swap lines 11 and 12"): _TWO_STEP,
    ("loop", "line 3: 400 -> 401 (number 1)"): _TUNING,
    ("loop", "line 3: 400 -> 399 (number 1)"): _TUNING,
    ("loop", "line 3: 100 -> 101 (number 2)"): _TUNING,
    ("loop", "line 3: 100 -> 99 (number 2)"): _TUNING,
    ("loop", "line 3: 2 -> 3 (number 3)"): _TUNING,
    ("loop", "line 12: 1000 -> 1001 (number 1)"): _TUNING,
    ("loop", "line 12: 1000 -> 999 (number 1)"): _TUNING,
    ("loop", "line 10: >= -> > (1)"): _BEAT,
    ("extend", "line 3: 600 -> 601 (number 1)"): _INTERVAL,
    ("extend", "line 3: 600 -> 599 (number 1)"): _INTERVAL,
    ("extend", "line 9: 3 -> 4 (number 1)"): _INTERVAL,
    ("extend", "line 9: 3 -> 2 (number 1)"): _INTERVAL,
    ("extend", "line 9: 1000 -> 1001 (number 2)"): _INTERVAL,
    ("extend", "line 9: 1000 -> 999 (number 2)"): _INTERVAL,
    ("extend", "drop line 12: return False  # someone else holds the job now: stop"): (
        "after a STALE answer the loop goes on extending until the work is done: each extend is fenced and "
        "refused, changing nothing, and the last one still answers STALE, so extend_lease returns False and the "
        "effect is not done (the work itself cannot be stopped from extend_lease's thread)"
    ),
    ("requeue", "line 3: 1 -> 0 (number 1)"): _SUB0,
    ("requeue", "swap lines 6 and 7"): _ATOMIC,
    ("requeue", "swap lines 7 and 8"): _ATOMIC,
}


@dataclass(frozen=True)
class Mutant:
    name: str  # what was changed, stable across runs: "drop line 9: redis.call('ZADD', ...)"
    text: str


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


def mutants(source: str, kind: str) -> list[Mutant]:
    """Every mutant of ``source`` (deduplicated, none equal to it)."""
    comment = "--" if kind == "lua" else "#"
    found: list[Mutant] = []
    lines = source.splitlines()
    code = list(_code_lines(source, comment))

    def add(name: str, text: str) -> None:
        if text.strip() != source.strip() and all(m.text != text for m in found):
            found.append(Mutant(name, text))

    calls = re.compile(
        r"redis\.call\(" if kind == "lua" else r"\b(?:(?:q|r|bank)\.\w+|work|time\.sleep)\(|^\s*return\b"
    )
    for n, line in code:
        body, _ = _code_part(line, comment)
        if calls.search(body) and not body.lstrip().startswith("def "):
            indent = line[: len(line) - len(line.lstrip())]
            replacement = None if kind == "lua" else indent + "pass"
            add(f"drop line {n + 1}: {line.strip()[:60]}", _replace_line(source, n, replacement))
    for n, line in code:  # swap two KEYS
        body, rest = _code_part(line, comment)
        used = sorted(set(re.findall(r"KEYS\[(\d+)\]", body)))
        for k in used:
            for other in sorted(set(re.findall(r"KEYS\[(\d+)\]", source)) - {k}):
                add(
                    f"line {n + 1}: KEYS[{k}] -> KEYS[{other}]",
                    _replace_line(source, n, body.replace(f"KEYS[{k}]", f"KEYS[{other}]", 1) + rest),
                )
    for n, line in code:  # +1 / -1 on integer constants (not inside KEYS[...] or names)
        body, rest = _code_part(line, comment)
        for seen, match in enumerate(re.finditer(r"(?<![\w\[.'\"])(\d+)(?![\w\].'\"])", body), start=1):
            value = int(match.group(1))
            for delta in (1, -1):
                if value + delta < 0:
                    continue
                new = body[: match.start()] + str(value + delta) + body[match.end() :]
                add(f"line {n + 1}: {value} -> {value + delta} (number {seen})", _replace_line(source, n, new + rest))
    flips = [("<=", "<"), (">=", ">"), ("<", "<="), (">", ">="), ("~=" if kind == "lua" else "!=", "==")]
    flips.append(("==", "~=" if kind == "lua" else "!="))
    for n, line in code:
        body, rest = _code_part(line, comment)
        for old, new in flips:
            for seen, match in enumerate(re.finditer(re.escape(old), body), start=1):
                before, after = body[match.start() - 1 : match.start()], body[match.end() : match.end() + 1]
                if old in ("<", ">") and (after == "=" or before in "<>-="):
                    continue
                if old in ("<", ">") and kind == "python" and "->" in body[match.start() - 1 : match.end() + 1]:
                    continue
                mutated = body[: match.start()] + new + body[match.end() :]
                add(f"line {n + 1}: {old} -> {new} ({seen})", _replace_line(source, n, mutated + rest))
    if kind == "lua" and "redis.call('TIME')" in source:
        add("a fixed clock for TIME", source.replace("redis.call('TIME')", "{'1700000000', '0'}"))
    if kind == "python" and "r.time()" in source:
        add(
            "the client's clock for TIME",
            source.replace("r.time()", "divmod(int(__import__('time').time() * 1e6), 10**6)"),
        )
    for n, line in code:  # remove one field from an HSET
        body, rest = _code_part(line, comment)
        match = re.search(r"HSET', ([^,]+), ('[a-z_]+', [^,)]+)(, '[a-z_]+', [^,)]+)+\)", body)
        if match:
            pairs = re.findall(r", ('[a-z_]+', [^,)]+)", body[match.start(1) + len(match.group(1)) :])
            for pair in pairs:
                add(
                    f"line {n + 1}: no field {pair.split(',')[0]}",
                    _replace_line(source, n, body.replace(", " + pair, "", 1) + rest),
                )
    writes = [
        n for n, line in code if any(f"'{w}'" in line for w in WRITES) or re.search(r"\.(zadd|zrem|hset)\(", line)
    ]
    for a, b in zip(writes, writes[1:], strict=False):
        if b == a + 1 and _indent(lines[a]) == _indent(lines[b]):
            swapped = lines[:a] + [lines[b], lines[a]] + lines[b + 1 :]
            add(f"swap lines {a + 1} and {b + 1}", "\n".join(swapped) + "\n")
    if kind == "python":  # a catch-all except that swallows what the learner's callbacks raise
        for n, line in code:
            body, _ = _code_part(line, comment)
            if re.search(r"\b(work|bank\.charge)\(", body) and not body.rstrip().endswith(":"):
                pad = line[: _indent(line)]
                wrapped = f"{pad}try:\n{pad}    {line.strip()}\n{pad}except Exception:\n{pad}    pass"
                add(f"line {n + 1}: catch-all except around it", _replace_line(source, n, wrapped))
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


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


@dataclass
class Score:
    key: str
    made: int = 0
    killed: int = 0
    equivalent: list[tuple[str, str]] | None = None
    gaps: list[str] | None = None
    seconds: float = 0.0


def score(key: str, *, sample: int | None = None, client: object = None) -> Score:
    """Judge every mutant (or the first ``sample``) of exercise ``key``'s solution."""
    import echoq
    from echoq.teaching.exercises import EXERCISES, reset_hints

    ex = EXERCISES[key]
    client = client or echoq.connect()
    result = Score(key, equivalent=[], gaps=[])
    started = time.monotonic()
    made = [m for m in mutants(ex.solution, ex.kind) if _compiles(m.text, ex.kind, client)]
    for m in made[:sample] if sample else made:
        reset_hints()
        result.made += 1
        fb = ex.judge(m.text)
        if not fb.ok:
            result.killed += 1
        elif (key, m.name) in EQUIVALENT:
            result.equivalent.append((m.name, EQUIVALENT[(key, m.name)]))  # type: ignore[union-attr]
        else:
            result.gaps.append(m.name)  # type: ignore[union-attr]
    result.seconds = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> int:
    from echoq.teaching.exercises import EXERCISES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("keys", nargs="*", help="exercises to mutate (default: all with code answers)")
    parser.add_argument("--sample", type=int, default=None, help="judge only the first N mutants of each")
    args = parser.parse_args(argv)
    keys = args.keys or [k for k, ex in EXERCISES.items() if ex.kind != "value"]
    print(f"{'exercise':<10} {'made':>5} {'killed':>7} {'equiv.':>7} {'gaps':>5} {'seconds':>8}")
    total = Score("all", equivalent=[], gaps=[])
    for key in keys:
        s = score(key, sample=args.sample)
        print(f"{key:<10} {s.made:>5} {s.killed:>7} {len(s.equivalent):>7} {len(s.gaps):>5} {s.seconds:>8.1f}")
        for name, why in s.equivalent:
            print(f"    equivalent  {name}: {why}")
        for name in s.gaps:
            print(f"    GAP         {name}")
        total.made += s.made
        total.killed += s.killed
        total.equivalent += s.equivalent  # type: ignore[operator]
        total.gaps += s.gaps  # type: ignore[operator]
    equivalent = len(total.equivalent)
    print(
        f"score: {total.killed} of {total.made - equivalent} non-equivalent mutants killed "
        f"({equivalent} equivalent, {len(total.gaps)} gaps)"
    )
    return 1 if total.gaps else 0


if __name__ == "__main__":
    sys.exit(main())
