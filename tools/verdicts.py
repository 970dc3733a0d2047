"""Same answer, same verdict: judge every answer in the exercises' folders (the solution,
``right/``, ``wrong/``) many times, in parallel processes, and report every answer whose
verdict or ✗ line changed between runs.

    .venv/bin/python tools/verdicts.py                    # every answer 10 times, 4 processes
    .venv/bin/python tools/verdicts.py loop extend        # some exercises
    .venv/bin/python tools/verdicts.py --times 3 --jobs 2
    .venv/bin/python tools/verdicts.py --record           # 10 times; the verdicts to tools/verdicts.json
    .venv/bin/python tools/verdicts.py --record loop      # the same for one exercise (the others kept)

A verdict is: passed or not, the misconception named, and the ✗ line with what no two runs can
share masked -- JOB ids (minted afresh each run), scratch queue names, and quantities the run
measured rather than fixed (a time on the server's clock, a duration in ms or s, a count of
commands, a rate). Everything
else of the line must be the same on every run. With ``--record`` each answer's verdict is
written to tools/verdicts.json (only when no answer's verdict changed), with how many times
each exercise's answers were judged and the digest of the code that judged them
(``exercises.judging_digest``): the suite compares every judgement it makes with the record
(tests/test_exercises.py), and fails when the record was made from fewer than 10 runs, or
before that code last changed (tests/test_exercises_verdicts.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORD = Path(__file__).resolve().parent / "verdicts.json"  # each answer's verdict, as --record last found it

Verdict = tuple[bool, str | None, str | None]  # passed, misconception, ✗ line (masked)

_MASKS = (
    (re.compile(r"JOB[0-9A-Z]{26}"), "<id>"),
    (re.compile(r"\b1\d{12}\b"), "<server ms>"),  # a time on the server's clock
    (re.compile(r"\{[^{}]*?x\d\d-[a-z_]+-\d+-\d+[^{}]*\}"), "{<queue>}"),
    (re.compile(r"\b[dx]\d\d-[a-z_]*-?\d+-\d+[a-z0-9-]*"), "<queue>"),
    (re.compile(r"\d[\d,]*(?:\.\d+)? ?(?:ms|s|days|years)\b"), "<time>"),
    (re.compile(r"sent \d[\d,]* commands"), "sent <n> commands"),
    (re.compile(r"after \d[\d,]* of its \d[\d,]* replies"), "after <n> of its <n> replies"),
)


def mask(line: str) -> str:
    for pattern, shown in _MASKS:
        line = pattern.sub(shown, line)
    return line


def answers(keys: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
    """(exercise, label, source) of every answer in the exercises' folders."""
    from echoq.teaching.exercises import EXERCISES

    found = []
    for key, ex in EXERCISES.items():
        if keys and key not in keys:
            continue
        found.append((key, "solution", ex.solution))
        found += [(key, f"right/alternative-{n + 1}", a) for n, a in enumerate(ex.alternatives)]
        found += [(key, f"wrong/{m.name}", m.example) for m in ex.misconceptions]
        found += [(key, f"wrong/{name}", source) for name, source in ex.unlisted]
    return found


def verdict_of(key: str, source: str) -> Verdict:
    from echoq.teaching.exercises import EXERCISES, reset_hints

    reset_hints()
    fb = EXERCISES[key].judge(source)
    return fb.ok, fb.misconception.name if fb.misconception else None, mask(fb.failed[1]) if fb.failed else None


def _judge_all(todo: list[tuple[str, str]]) -> None:
    """The worker: judge each (exercise, label); one JSON verdict a line out."""
    sources = {(k, label): s for k, label, s in answers()}
    for key, label in todo:
        print(json.dumps([key, label, *verdict_of(key, sources[(key, label)])]), flush=True)


def repeat(
    keys: Iterable[str] | None = None, *, times: dict[str, int] | int = 10, jobs: int = 4, url: str | None = None
) -> dict[tuple[str, str], list[Verdict]]:
    """Judge each answer ``times`` times (per exercise, or for all), spread over ``jobs``
    processes of their own; the verdicts of each answer, in no particular order."""
    from echoq.server import server_url

    env = dict(os.environ, VALKEY_URL=url or server_url(), PYTHONPATH=str(ROOT))
    todo = [
        (key, label)
        for key, label, _ in answers(keys)
        for _ in range(times if isinstance(times, int) else times.get(key, 1))
    ]
    # The longest exercises first, dealt round the processes, so they end together.
    todo.sort(key=lambda item: item[0] not in ("extend", "loop"))
    shares = [todo[n::jobs] for n in range(jobs)]
    workers = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps(share)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for share in shares
        if share
    ]
    seen: dict[tuple[str, str], list[Verdict]] = defaultdict(list)
    for worker in workers:
        out, _ = worker.communicate()
        if worker.returncode:
            raise RuntimeError(f"a judging process ended with status {worker.returncode}")
        for line in out.splitlines():
            key, label, ok, name, failed = json.loads(line)
            seen[(key, label)].append((ok, name, failed))
    return dict(seen)


def changed(seen: dict[tuple[str, str], list[Verdict]]) -> dict[tuple[str, str], list[Verdict]]:
    """The answers that got more than one verdict, with each different one."""
    return {answer: list(dict.fromkeys(verdicts)) for answer, verdicts in seen.items() if len(set(verdicts)) > 1}


def label_of(key: str, source: str) -> str:
    """The label of an answer of exercise ``key`` by its text: 'solution', 'right/...', 'wrong/...'."""
    return next(label for k, label, text in answers([key]) if text == source)


def recorded() -> dict[tuple[str, str], Verdict]:
    """The verdicts --record wrote: (exercise, label) -> (passed, misconception, ✗ line masked)."""
    return {
        (key, label): (ok, name, failed) for key, label, ok, name, failed in json.loads(RECORD.read_text())["verdicts"]
    }


def recorded_runs() -> dict[str, dict[str, Any]]:
    """How each exercise's verdicts were recorded: exercise -> {runs, digest, date, commit}."""
    return json.loads(RECORD.read_text())["exercises"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("keys", nargs="*", help="exercises (default: all)")
    parser.add_argument("--times", type=int, default=10, help="runs of each answer (default 10)")
    parser.add_argument("--jobs", type=int, default=4, help="judging processes (default 4)")
    parser.add_argument("--record", action="store_true", help=f"write the verdicts to {RECORD.name}")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _judge_all(json.loads(args.worker))
        return 0
    started = time.monotonic()
    seen = repeat(args.keys or None, times=args.times, jobs=args.jobs)
    moved = changed(seen)
    for (key, label), verdicts in sorted(seen.items()):
        ok, name, _ = verdicts[0]
        state = "CHANGED" if (key, label) in moved else "same"
        print(f"{key:<9} {label:<48} {len(verdicts):>3}x {state:<8} {'pass' if ok else name}")
        for v in moved.get((key, label), []):
            print(f"    {v}")
    print(
        f"{len(seen)} answers, {sum(map(len, seen.values()))} judgements in {time.monotonic() - started:.0f} s: "
        f"{len(moved)} changed verdict"
    )
    if args.record and not moved:
        from echoq.teaching.exercises import judging_digest

        keep = bool(args.keys) and RECORD.exists()  # the other exercises' verdicts stay
        kept = {answer: v for answer, v in (recorded() if keep else {}).items() if answer[0] not in args.keys}
        kept.update({answer: verdicts[0] for answer, verdicts in seen.items()})
        runs = {key: info for key, info in (recorded_runs() if keep else {}).items() if key not in args.keys}
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        made = {
            "runs": args.times,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": head.stdout.strip() or "unknown",
        }
        runs.update({key: {**made, "digest": judging_digest(key)} for key in sorted({k for k, _ in seen})})
        rows = [[key, label, *verdict] for (key, label), verdict in sorted(kept.items())]
        record = {"exercises": dict(sorted(runs.items())), "verdicts": rows}
        RECORD.write_text(json.dumps(record, indent=0, ensure_ascii=False) + "\n")
        print(f"recorded in {RECORD}")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
