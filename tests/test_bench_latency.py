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

import pytest

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


def test_a_run_that_lost_duplicated_or_left_a_job_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import _latency

    counts = {"completed": 3, "pending": 0, "active": 0, "done": 3}
    ok = {"starts": [[0, 1, 10, 0], [2, 1, 30, 0], [1, 1, 20, 0]], "counts": counts}
    assert _latency.started_once(ok, 3, "w") == {0: 10, 1: 20, 2: 30}
    lost = {"starts": ok["starts"][:2], "counts": counts | {"completed": 2}}
    with pytest.raises(_latency.BenchmarkMiscounted, match=r"2 started \(missing \[1\]\)"):
        _latency.started_once(lost, 3, "w")
    twice = {"starts": [*ok["starts"], [1, 2, 40, 0]], "counts": counts}
    with pytest.raises(_latency.BenchmarkMiscounted, match="job 1 started twice"):
        _latency.started_once(twice, 3, "w")
    left = {"starts": ok["starts"], "counts": counts | {"active": 1}}
    with pytest.raises(_latency.BenchmarkMiscounted, match="left {'active': 1}"):
        _latency.started_once(left, 3, "w")  # every start seen, but the queue still holds one
    uncounted = {"starts": ok["starts"], "counts": counts | {"completed": 2}}
    with pytest.raises(_latency.BenchmarkMiscounted, match="2 completed"):
        _latency.started_once(uncounted, 3, "w")  # the worker's own list cannot vouch for itself


@pytest.mark.server  # the bench starts its own servers and workers
def test_latency_measures_each_worker_at_each_level_with_the_round_trip_beside_it() -> None:
    report = run_bench("latency.py", "--quick", "--levels", "idle")
    systems = {"echoq", "bullmq"} if shutil.which("node") else {"echoq"}
    rows = {(r["level"], r["system"], r["concurrency"]): r for r in report["rows"]}
    assert set(rows) == {(level, s, c) for level in ("idle",) for s in systems for c in (1, 8)}
    for (level, _system, _c), row in rows.items():
        assert row["n"] == report["jobs"][level]  # every job started once: the bench checks it
        assert row["p50"] <= row["p99"] <= row["max"] and math.isfinite(row["max"])
        sent = row["from_sent"]  # from the call: never before it
        assert 0 < sent["p50"] <= sent["p99"] <= sent["max"] and sent["n"] == row["n"]
    assert 0 < report["round_trip_p50_ms"] < report["idle_round_trip_ms"]["max"] + 1000
    targets = report["targets"]
    assert {"idle_p50_vs_round_trip", "idle_p50_vs_idle_round_trip", "idle_p99_ms"} <= set(targets)
    for target in targets.values():
        assert target["met"] is (target["value"] <= target["at_most"])
    if "bullmq" in systems:
        mine, theirs = rows[("idle", "echoq", 8)], rows[("idle", "bullmq", 8)]
        assert targets["p99_idle_c8_vs_bullmq"]["value"] == mine["p99"] / theirs["p99"]
        assert report["machine"]["clock_check_bracket_us"] > 0  # node's clock proved to be Python's


@pytest.mark.server  # the bench starts its own servers and workers
def test_recovery_brings_every_held_job_back_and_completes_after_a_server_restart() -> None:
    report = run_bench("recovery.py", "--quick", "--restarts", "1")
    (crash,) = report["crash"]
    systems = {"echoq", "bullmq"} if shutil.which("node") else {"echoq"}
    assert systems <= set(crash)
    for system in systems:
        result = crash[system]
        assert result["recovery_ms"]["n"] == report["held"]  # each held job started again
        # Not back before its lease ran out: extended every third (echoq) or half (BullMQ) of
        # a lease, each held job had at least 0.5 of one left when the worker was killed.
        assert result["recovery_ms"]["p50"] >= 0.4 * result["settings"]["lease_ms"]
        assert result["met"] is (result["recovery_ms"]["p99"] <= result["bound_ms"])
    restart = report["restart"]
    assert restart["rounds"] == 1 and restart["jobs"] > 0  # and every one of them completed
    assert restart["restart_ms"]["n"] == restart["next_completion_ms"]["n"] == 1
    if "bullmq" in systems:  # the same restart under BullMQ's Worker, every added job started
        assert restart["bullmq"]["next_completion_ms"]["n"] == 1 and restart["bullmq"]["added_twice"] >= 0


@pytest.mark.server  # the bench starts its own servers and workers
def test_ontime_measures_each_delayed_job_and_retry_once() -> None:
    report = run_bench("ontime.py", "--quick", "--jobs", "6")
    systems = {"echoq", "bullmq"} if shutil.which("node") else {"echoq"}
    assert {(r["system"], r["concurrency"]) for r in report["rows"]} == {(s, c) for s in systems for c in (1, 8)}
    for row in report["rows"]:
        assert row["delayed"]["n"] == row["retried"]["n"] == 3
        for kind in ("delayed", "retried"):
            # Not started before it was due (less one round trip of slack for the server's stamp).
            assert row[kind]["p50"] <= row[kind]["p99"] <= row[kind]["max"]
            assert row[kind]["p50"] > -5


def test_endurance_gives_every_tenth_as_many_crashes_and_prices_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import endurance

    marks = endurance.crash_marks(1_000_000, 3)
    assert len(marks) == 30 and marks == sorted(marks)
    assert [sum(1 for m in marks if k * 100_000 <= m < (k + 1) * 100_000) for k in range(10)] == [3] * 10
    assert marks[-1] <= 960_000  # the last crash's jobs come back while others still work
    # Two seconds, 1,000 jobs; the run's processes burn 0.1 CPU s per second, the machine 1.5.
    samples = [
        {
            "t": t,
            "completed": 500 * t,
            "server_cpu": 0.02 * t,
            "effects_cpu": 0.01 * t,
            "workers_cpu": 0.06 * t,
            "producer_cpu": 0.01 * t,
            "calls": 50 * t,
            "machine_busy": 1.5 * t,
            "machine_steal": 0.0,
            "done": 0,
            "active": 0,
        }
        for t in (0, 1, 2)
    ]
    costs = endurance.block_costs(samples, 1_000, [0.05, 1.05])
    assert len(costs) == 10
    for tenth in costs:
        assert tenth["server_us_per_job"] == pytest.approx(40.0)
        assert tenth["us_per_job"] == pytest.approx(200.0)
        assert tenth["calls_per_job"] == pytest.approx(0.1)
        assert tenth["cores_ours"] == pytest.approx(0.1) and tenth["cores_others"] == pytest.approx(1.4)
    assert [tenth["crashes"] for tenth in costs] == [1, 0, 0, 0, 0, 1, 0, 0, 0, 0]


@pytest.mark.server  # the bench starts its own servers and workers
def test_endurance_loses_nothing_through_crashes_and_plots_it(tmp_path: Path) -> None:
    picture = tmp_path / "endurance.png"
    report = run_bench("endurance.py", "--quick", "--jobs", "2000", "--no-progress", "--plot", str(picture))
    # The bench refuses a run that lost a job or repeated an effect beyond the recorded
    # redeliveries; here is what it vouched for.
    assert report["completed"] == report["effects"] == 2000
    assert report["repeated_effects"] <= report["redeliveries"]
    assert 1 <= report["crashes"] <= 10 and len(report["crash_times"]) == report["crashes"]
    assert len(report["block_rates"]) == 10 and all(rate >= 0 for rate in report["block_rates"])
    assert len(report["block_costs"]) == 10 and sum(c["crashes"] for c in report["block_costs"]) == report["crashes"]
    assert report["memory_end"] > 0 and report["rss_first"] > 0
    assert picture.read_bytes().startswith(b"\x89PNG")


@pytest.mark.server  # the bench starts its own servers and workers
def test_cluster_cost_counts_no_cross_slot_call_and_prices_each_master() -> None:
    report = run_bench("cluster_cost.py", "--queues", "3", "--jobs", "40", "--rounds", "1")
    assert set(report["paths"]) == {"worker", "batch"}
    for p in report["paths"].values():
        assert p["crossslot"] == 0  # every script's keys share one queue's hash tag
        assert p["one"]["jobs"] == p["three"]["jobs"] == 120
        assert len(p["three"]["masters"]) == 3 and {m["jobs"] for m in p["three"]["masters"]} == {40}
        # The check compares like with like: each master alone against one master, the same queues.
        one, three = p["alone"]["1"], p["alone"]["3"]
        assert one["jobs"] == three["jobs"] == 120
        assert p["three_vs_one_server_us_ratio"] == three["server_us_per_job"] / one["server_us_per_job"]
        assert p["within_tolerance"] is (abs(p["three_vs_one_server_us_ratio"] - 1) <= report["tolerance"])
        assert [q["masters"] for q in p["predictions"]][:3] == [1, 2, 3]
    assert [s["queues"] for s in report["shares"]][:3] == [1, 2, 3]
    assert all(sum(s["per_master"]) == s["queues"] for s in report["shares"])
