"""The benchmarks run, at a tiny size, and say something sane. No timing is asserted here:
figures belong to bench/, and a loaded machine must not fail a test."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import echoq
from tests.support.servers import fresh_name

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=240, check=False
    )


@pytest.fixture(scope="module")
def throughput_report() -> dict[str, Any]:
    done = run_bench("throughput.py", "--jobs", "60", "--rounds", "1", "--batch", "7", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def bench_modules(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    # The benchmarks are scripts that import their neighbour `_common`, as when run as files.
    monkeypatch.syspath_prepend(str(BENCH))
    import startup
    import throughput

    return {"throughput": throughput, "startup": startup}


def test_throughput_reports_every_path_with_sane_figures(throughput_report: dict[str, Any]) -> None:
    report = throughput_report
    assert report["jobs"] == 60 and report["rounds"] == 1 and report["batch"] == 7
    assert report["machine"]["cores"] >= 1 and report["machine"]["server"].startswith(("Valkey", "Redis"))
    assert report["machine"]["hiredis"] != "not installed"  # a core dependency: the bench shows why
    assert all(isinstance(report["machine"][k], float) for k in ("load_before", "load_after"))
    rows = {(r["key"], r["processes"]): r for r in report["rows"]}
    expected = {("ceiling", 1), ("limit", 1), ("shaped", 1), ("shaped_limit", 1), ("rq", 1)} | {
        (path, procs) for path in ("two_call", "complete_and_claim", "batch") for procs in (1, 4)
    }
    assert rows.keys() == expected | {("batch_pure_python", 1), ("two_call_pure_python", 1)}
    for row in [*rows.values(), *report["scaling"]]:
        assert row["seconds"] > 0 and math.isfinite(row["rate"]) and row["rate"] > 0
        assert row["count"] == (120 if row["key"] in ("ceiling", "shaped") else 60)
        if row["key"] not in ("ceiling", "limit", "shaped", "shaped_limit", "bullmq"):
            assert row["ratio"] > 0 and row["ratio_to"]
    assert rows[("limit", 1)]["rate"] == pytest.approx(rows[("ceiling", 1)]["rate"] / 2)
    assert rows[("shaped_limit", 1)]["rate"] == pytest.approx(rows[("shaped", 1)]["rate"] / 2)
    two_call = rows[("two_call", 1)]["rate"]
    assert rows[("complete_and_claim", 1)]["ratio"] == pytest.approx(rows[("complete_and_claim", 1)]["rate"] / two_call)
    headlines = report["headlines"]
    assert headlines["fastest_path"] in ("complete_and_claim", "batch")
    assert headlines["two_call_vs_rq"] == pytest.approx(two_call / rows[("rq", 1)]["rate"])
    assert headlines["hiredis_vs_pure_python"] == pytest.approx(
        rows[("batch", 1)]["rate"] / rows[("batch_pure_python", 1)]["rate"]
    )


def test_the_scaling_table_has_the_worker_at_each_concurrency_and_bullmq_beside_it(
    throughput_report: dict[str, Any],
) -> None:
    scaling = {(r["key"], r["processes"], r["concurrency"]): r for r in throughput_report["scaling"]}
    workers = {(1, c) for c in (1, 2, 4, 8)} | {(2, 1), (4, 1), (4, 8)}
    assert {(p, c) for key, p, c in scaling if key == "worker"} == workers
    targets = throughput_report["targets"]
    if shutil.which("node") is None:  # skipped, and the report says why
        assert "node" in throughput_report["bullmq_skipped"] and not {k for k, *_ in scaling} - {"worker"}
        assert set(targets) == {"worker_c8_vs_worker_c1", "batch_vs_two_call"}
    else:  # BullMQ ran against the same server in the same round, and every ratio is within it
        assert throughput_report["bullmq_skipped"] is None
        assert {(p, c) for key, p, c in scaling if key == "bullmq"} == {(1, 1), (1, 8)}
        assert scaling[("worker", 1, 1)]["ratio_to"] == "BullMQ c1"
        c1_ratio = scaling[("worker", 1, 1)]["rate"] / scaling[("bullmq", 1, 1)]["rate"]
        assert targets["worker_c1_vs_bullmq_c1"]["ratio"] == pytest.approx(c1_ratio)
        assert len(targets) == 5
    for target in targets.values():
        assert target["met"] is (target["ratio"] >= target["at_least"])


def test_the_servers_cpu_per_job_is_reported_for_the_worker_and_bullmq_with_the_date(
    throughput_report: dict[str, Any], bench_modules: dict[str, ModuleType], tmp_path: Path, capsys
) -> None:
    entries = {(e["consumer"], e["concurrency"]): e for e in throughput_report["server_cpu"]}
    scaling = {(r["key"], r["processes"], r["concurrency"]): r for r in throughput_report["scaling"]}
    for (consumer, concurrency), entry in entries.items():
        key = ("worker" if consumer == "echoq.Worker" else "bullmq", 1, concurrency)
        assert entry["server_cpu_us_per_job"] > 0
        assert entry["server_cpu_us_per_job"] == pytest.approx(scaling[key]["server_cpu_us"])
        assert entry["jobs_per_server_core_s"] == pytest.approx(1e6 / entry["server_cpu_us_per_job"])
    if throughput_report["bullmq_skipped"] is None:
        assert set(entries) == {(c, n) for c in ("echoq.Worker", "BullMQ 5 Worker") for n in (1, 8)}
        for n in (1, 8):  # one round: the ratio of the two figures
            mine, theirs = entries[("echoq.Worker", n)], entries[("BullMQ 5 Worker", n)]
            ratio = mine["server_cpu_us_per_job"] / theirs["server_cpu_us_per_job"]
            assert mine["vs_bullmq"] == pytest.approx(ratio)
            assert throughput_report["headlines"][f"worker_c{n}_server_cpu_vs_bullmq_c{n}"] == pytest.approx(ratio)
    else:
        assert set(entries) == {("echoq.Worker", 1), ("echoq.Worker", 8)}
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", throughput_report["machine"]["date"])
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(throughput_report))
    throughput = bench_modules["throughput"]
    assert throughput.main(["--render", str(saved)]) == 0  # the tables again, from the --json output
    assert capsys.readouterr().out.strip() == throughput.render(throughput_report).strip()


def test_without_node_the_bullmq_rows_are_skipped_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, bench_modules: dict[str, ModuleType]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert bench_modules["throughput"].bullmq_ready(print) == "node is not on PATH"


def test_throughput_renders_a_markdown_table(
    throughput_report: dict[str, Any], bench_modules: dict[str, ModuleType]
) -> None:
    text = bench_modules["throughput"].render(throughput_report)
    lines = text.splitlines()
    assert lines[1].startswith("machine: ") and "cores" in lines[1]
    tables: list[list[str]] = [[]]
    for line in lines:  # the scaling table, the server's CPU per job, then the paths table
        if line.startswith("|"):
            tables[-1].append(line)
        elif tables[-1]:
            tables.append([])
    scaling, server_cpu, paths = [table for table in tables if table]
    assert len(scaling) == 2 + len(throughput_report["scaling"])  # header, rule, one line per row
    assert len(server_cpu) == 2 + len(throughput_report["server_cpu"])
    assert len(paths) == 2 + len(throughput_report["rows"])
    for table in (scaling, server_cpu, paths):
        assert {len(line) for line in table} == {len(table[0])}  # columns line up
    assert "claim_many(7) + complete_many" in text and "rq 3 SimpleWorker" in text
    assert "target: >= 1.8x" in text
    assert "echoq.Worker" in text and "Targets, each ratio" in text and "load average" in text


def test_the_benchmark_refuses_to_report_a_run_that_lost_jobs(
    valkey_client, bench_modules: dict[str, ModuleType]
) -> None:
    throughput = bench_modules["throughput"]
    queue = echoq.Queue(fresh_name("bench"), valkey_client)
    try:
        queue.enqueue_many(["a", "b", "c"])
        queue.complete(queue.claim())
        queue.claim()  # one left active, one pending: a loop that stopped early
        with pytest.raises(throughput.BenchmarkMiscounted, match="left over"):
            throughput.verify(queue, 3, 1)
        with pytest.raises(throughput.BenchmarkMiscounted, match="the loops completed 3"):
            throughput.verify(queue, 3, 3)  # the loop's own count cannot vouch for itself
    finally:
        queue.reset()


@pytest.mark.server
def test_throughput_refuses_bad_arguments_in_one_line() -> None:
    for args in (["--jobs", "0"], ["--jobs", "many"], ["--batch", "5000"]):
        done = run_bench("throughput.py", *args)
        assert done.returncode == 2 and done.stdout == ""
        assert "error:" in done.stderr.strip().splitlines()[-1]  # argparse: usage, then one line


@pytest.mark.server
def test_startup_reports_time_to_first_ping() -> None:
    done = run_bench("startup.py", "--runs", "3", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["runs"] == 3 and len(report["samples_s"]) == 3 and report["target_s"] == 0.3
    for key in ("launch_to_first_ping", "start_server_call"):
        summary = report[key]
        assert 0 < summary["min_s"] <= summary["median_s"] <= summary["p95_s"] <= summary["max_s"] < 10
    assert report["launch_to_first_ping"]["max_s"] <= report["start_server_call"]["max_s"]
    assert report["machine"]["server"].startswith(("Valkey", "Redis"))


@pytest.mark.server
def test_soak_reports_used_memory_after_each_run_and_bytes_per_extra_job(monkeypatch: pytest.MonkeyPatch) -> None:
    done = run_bench("soak.py", "--jobs", "300", "--keep", "100", "--concurrency", "2", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    first, run1, run2 = report["rows"]
    assert (first["jobs"], run1["jobs"], run2["jobs"]) == (0, 300, 600) and run2["total"] == 900
    assert all(r["used_memory"] > 0 for r in report["rows"]) and report["keep"] == 100
    assert run2["per_job"] == pytest.approx((run2["used_memory"] - run1["used_memory"]) / 600, abs=0.01)
    assert report["bytes_per_extra_job"] == run2["per_job"] and report["target_bytes_per_extra_job"] == 20
    # What the bench can vouch for without timing anything: each key kept its cap in both runs.
    for run in (run1, run2):
        # No row left behind; the Worker's wakes and its beat's lock may be there too.
        assert {"done", "effects", "outbox", "stats"} <= set(run["keys"])
        assert set(run["keys"]) <= {"done", "effects", "outbox", "stats", "wake", "stalled_lock"}
    monkeypatch.syspath_prepend(str(BENCH))
    import soak

    shown = soak.render(report)  # what the site shows of a stored run: the same report, drawn
    assert "300 then 600 jobs" in shown and f"{run2['used_memory']:,}" in shown and "machine: " in shown


def test_the_soak_refuses_to_report_a_run_that_lost_jobs(valkey_client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import soak

    queue = echoq.Queue(fresh_name("soak"), valkey_client)
    try:
        monkeypatch.setattr(soak, "Worker", lambda *a, **k: type("Idle", (), {"work": lambda self, burst: None})())
        with pytest.raises(soak.SoakMiscounted, match="20 jobs in, 0 completed"):
            soak.run_jobs(queue, echoq.Effects(queue), 20, 1)
    finally:
        queue.reset()


@pytest.mark.server
def test_cluster_scale_runs_tiny_and_reports_every_setup() -> None:
    """bench/cluster_scale.py: two real clusters and one server, the path asked for on each."""
    tiny = ["--queues", "3", "--jobs", "20", "--rounds", "1", "--paths", "worker"]
    done = run_bench("cluster_scale.py", *tiny, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    setups = ("single server (plain client)", "cluster, 1 master", "cluster, 3 masters")
    assert {(r["path"], r["setup"]) for r in report["rows"]} == {("worker", s) for s in setups}
    assert report["masters_used"] == 3 and report["queues_per_master"] == 1
    for row in report["rows"]:
        assert row["jobs"] == 60 and row["rate"] > 0 and math.isfinite(row["ratio_to_one_master"])
        assert all(0 <= row[k] <= 100 * (os.cpu_count() or 1) for k in ("server_cpu_pct", "client_cpu_pct")), row
    assert "worker_three_vs_one_master" in report["headlines"]
    assert run_bench("cluster_scale.py", "--paths", "sideways").returncode == 2  # one line, no clusters started
