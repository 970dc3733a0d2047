"""The latency benches run at a tiny size and keep their invariants: every job started
exactly once and nothing was left behind (each bench refuses to report otherwise). No
timing is asserted: figures belong to bench/, and a loaded machine must not fail a test."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(script: str, *args: str, timeout: float = 240) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_latency_measures_each_worker_at_each_level_with_the_round_trip_beside_it() -> None:
    report = run_bench("latency.py", "--quick", "--levels", "idle")
    systems = {"echoq", "bullmq"} if shutil.which("node") else {"echoq"}
    rows = {(r["level"], r["system"], r["concurrency"]): r for r in report["rows"]}
    assert set(rows) == {(level, s, c) for level in ("idle",) for s in systems for c in (1, 8)}
    for (level, _system, _c), row in rows.items():
        assert row["n"] == report["jobs"][level]  # every job started once: the bench checks it
        assert row["p50"] <= row["p99"] <= row["max"] and math.isfinite(row["max"])
    assert 0 < report["round_trip_p50_ms"] < report["idle_round_trip_ms"]["max"] + 1000
    targets = report["targets"]
    assert {"idle_p50_vs_round_trip", "idle_p50_vs_idle_round_trip", "idle_p99_ms"} <= set(targets)
    for target in targets.values():
        assert target["met"] is (target["value"] <= target["at_most"])
    if "bullmq" in systems:
        mine, theirs = rows[("idle", "echoq", 8)], rows[("idle", "bullmq", 8)]
        assert targets["p99_idle_c8_vs_bullmq"]["value"] == mine["p99"] / theirs["p99"]
        assert report["machine"]["clock_check_bracket_us"] > 0  # node's clock proved to be Python's
