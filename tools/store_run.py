"""Run benchmarks with --json and store their reports for the site, with when, on which
commit, how they ran and how loaded the machine was.

    .venv/bin/python tools/store_run.py throughput latency   # each with the options it was stored with
    .venv/bin/python tools/store_run.py soak -- --jobs 5000  # options after -- go to the one bench named
    .venv/bin/python tools/store_run.py soak.redis7 -- --binary /usr/bin/redis-server   # a second run of soak
    .venv/bin/python tools/store_run.py --all                # every stored run again, one after another
    .venv/bin/python tools/store_run.py --list               # what is stored: when, the load, the command

A NAME is a bench (bench/NAME.py), or NAME.VARIANT for another stored run of the same bench.
Without options after ``--``, a run already stored is made again with its own options (the
command it records), so one command re-measures a page's figures; a new one runs with the
bench's defaults.

Writes docs/data/bench/<NAME>.json: {"date": UTC time, "commit": the checkout's HEAD,
"command": what ran, "load": the machine's load average (1, 5 and 15 minutes) before and
after, "report": the run's own --json output (a bench's includes its machine facts)}. The
site shows it where a page marks ``<!-- generated: bench-<NAME> -->`` (rendered by the
bench's own render()): a page's figures are always a stored run, dated. The runs go one
after another, never side by side: each bench measures the machine it has. (The mutation
run records itself: tools/mutants.py --record.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORED = ROOT / "docs" / "data" / "bench"


@dataclass(frozen=True)
class Planned:
    name: str  # the stored run's name: a bench, or bench.variant
    script: Path  # bench/<bench>.py
    options: list[str]  # what follows --json
    out: Path  # docs/data/bench/<name>.json


def bench_of(name: str) -> str:
    return name.split(".", 1)[0]


def stored_options(out: Path) -> list[str]:
    """The options a stored run was made with: its command after ``--json``."""
    if not out.is_file():
        return []
    words = shlex.split(json.loads(out.read_text())["command"])
    return words[words.index("--json") + 1 :] if "--json" in words else []


def plan(names: list[str], options: list[str] | None) -> list[Planned]:
    """What to run for each name; a bad name or option is a ValueError saying what to do."""
    if not names:
        raise ValueError("name a bench to store (bench/NAME.py), or --all, or --list")
    if options is not None and len(names) > 1:
        raise ValueError("options after -- go to one bench: name just one")
    found = []
    for name in names:
        script = ROOT / "bench" / f"{bench_of(name)}.py"
        if not script.is_file() or not all(part.replace("_", "").isalnum() for part in name.split(".")):
            raise ValueError(f"no bench/{bench_of(name)}.py for {name!r}: a NAME is a bench, or bench.variant")
        out = STORED / f"{name}.json"
        found.append(Planned(name, script, stored_options(out) if options is None else options, out))
    return found


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def store(run: Planned) -> int:
    command = [sys.executable, str(run.script), "--json", *run.options]
    shown = " ".join(["python", run.script.relative_to(ROOT).as_posix(), "--json", *map(shlex.quote, run.options)])
    print(f"{run.name}: {shown}", flush=True)
    before = load_average()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    after = load_average()
    if done.returncode != 0:
        print(done.stderr.strip() or done.stdout.strip(), file=sys.stderr)
        return done.returncode
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    stored = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": head.stdout.strip() or "unknown",
        "command": shown,
        "load": {"before": before, "after": after},
        "report": json.loads(done.stdout),
    }
    run.out.parent.mkdir(parents=True, exist_ok=True)
    run.out.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n")
    print(f"  stored {run.out.relative_to(ROOT)} (load average {before[0]} before, {after[0]} after)")
    return 0


def listing() -> str:
    lines = []
    for path in sorted(STORED.glob("*.json")):
        stored = json.loads(path.read_text())
        load = stored.get("load", {})
        loads = f"load {load['before'][0]} -> {load['after'][0]}" if load else "load not recorded"
        lines.append(f"{path.stem:<20} {stored['date']}  {loads:<20} {stored['command']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options = argv[argv.index("--") + 1 :] if "--" in argv else None
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("names", nargs="*", help="bench/NAME.py, or NAME.VARIANT")
    parser.add_argument("--all", action="store_true", help="every stored run again, with its own options")
    parser.add_argument("--list", action="store_true", help="print what is stored, and exit")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.list:
        print(listing())
        return 0
    names = sorted(p.stem for p in STORED.glob("*.json")) if args.all else args.names
    try:
        runs = plan(names, options)
    except ValueError as exc:
        parser.error(str(exc))
    for run in runs:
        code = store(run)
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
