"""Run a benchmark with --json and store its report for the site, with
when, on which commit and how it ran.

    .venv/bin/python tools/store_run.py startup              # bench/startup.py --json
    .venv/bin/python tools/store_run.py soak -- --jobs 5000  # options after -- go to the bench

Writes docs/data/bench/<name>.json: {"date": UTC
time, "commit": the checkout's HEAD, "command": what ran, "report": the run's own --json output
(a bench's includes its machine facts)}. The site shows it where a page marks
``<!-- generated: bench-<name> -->`` (rendered by the bench's own render()): a page's figures
are always a stored run, dated. (The mutation run records itself: tools/mutants.py --record.)
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: tools/store_run.py NAME [-- options]", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    options = rest[1:] if rest[:1] == ["--"] else rest
    script = ROOT / "bench" / f"{name}.py"
    out = ROOT / "docs" / "data" / "bench" / f"{name}.json"
    if not script.is_file():
        print(f"store_run: no bench/{name}.py", file=sys.stderr)
        return 2
    command = [sys.executable, str(script), "--json", *options]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        print(done.stderr.strip() or done.stdout.strip(), file=sys.stderr)
        return done.returncode
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    stored = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": head.stdout.strip() or "unknown",
        "command": " ".join(["python", script.relative_to(ROOT).as_posix(), "--json", *options]),
        "report": json.loads(done.stdout),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n")
    print(f"stored {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
