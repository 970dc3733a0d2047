"""Run a benchmark with --json and store its report for the site, with when and how it ran.

    .venv/bin/python tools/store_bench.py startup              # bench/startup.py --json
    .venv/bin/python tools/store_bench.py soak -- --jobs 5000  # options after -- go to the bench

Writes docs/data/bench/<name>.json: {"date": UTC ISO time, "command": what ran, "report": the
bench's own --json output (its machine facts included)}. The site renders it with the bench's
own render() where a page marks ``<!-- generated: bench-<name> -->`` (tools/generated_docs.py),
so a page's table is always a stored run, shown with its date and machine.
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
        print("usage: tools/store_bench.py NAME [-- bench options]", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    options = rest[1:] if rest[:1] == ["--"] else rest
    bench = ROOT / "bench" / f"{name}.py"
    if not bench.is_file():
        print(f"store_bench: no bench/{name}.py", file=sys.stderr)
        return 2
    command = [sys.executable, str(bench), "--json", *options]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        print(done.stderr.strip() or done.stdout.strip(), file=sys.stderr)
        return done.returncode
    stored = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", f"bench/{name}.py", "--json", *options]),
        "report": json.loads(done.stdout),
    }
    out = ROOT / "docs" / "data" / "bench" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n")
    print(f"stored {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
