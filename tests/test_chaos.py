"""The chaos lab with real worker processes and real SIGKILLs, kept small."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import echoq
from echoq.teaching.__main__ import main
from echoq.teaching.chaos import run_chaos
from tests.support.servers import fresh_name

QUICK = {"lease_ms": 200, "beat_ms": 50, "work_ms": 1, "timeout_s": 60}


@pytest.mark.server
def test_reliable_path_loses_nothing_and_duplicates_no_effect_under_kills() -> None:
    report = run_chaos(workers=2, jobs=150, kill_rate=0.04, kill_every_s=0.5, seed=11, **QUICK)
    assert report.ok, report.format()
    assert (report.lost, report.duplicate_effects, report.unsettled) == (0, 0, 0)
    # A kill the run finds only once it has settled is not restarted: at most one per worker.
    assert report.kills > 0 and report.restarts >= report.kills - 2
    assert report.completed + report.dead == 150
    # A dead-lettered job may or may not have had its effect; a completed one always did.
    assert report.completed <= report.effects <= 150 and report.deliveries == 150 + report.redeliveries
    assert report.invariant_samples > 0 and report.invariant_violations == 0
    assert report.invariant_check == "per-id" and "each checking every id: 0 with a job" in report.format()
    # a worker SIGKILLed just before the end is a kill, not one the run stopped
    assert report.worker_failures == 0 and report.stopped_at_end <= 2 and report.queue_kept is None
    assert report.settle_p50_ms is not None and report.settle_p50_ms <= report.settle_p99_ms


@pytest.mark.server
def test_after_effect_kills_redeliver_but_the_keyed_effect_runs_once() -> None:
    report = run_chaos(workers=2, jobs=60, kill_rate=0.2, kill_every_s=0, kill_at=("after_effect",), seed=3, **QUICK)
    killed = report.kills_by_point.get("after_effect", 0)
    # every kill after the effect is followed by a redelivery -- unless that stall was the
    # job's max_stalled-th, which dead-letters it instead
    assert killed > 0 and report.redeliveries + report.dead >= killed
    assert report.effects == 60 and report.duplicate_effects == 0 and report.lost == 0, report.format()


@pytest.mark.server
def test_chaos_cli_exit_zero_when_nothing_is_lost(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["chaos", "--workers", "2", "--jobs", "100", "--kill-rate", "0.05", "--seed", "5", "--lease-ms", "200"]
    assert main(argv + ["--no-progress"]) == 0
    out = capsys.readouterr().out
    assert (
        "lost                 0" in out
        and "duplicate effects    0" in out
        and out.rstrip().endswith("no effect duplicated")
    )


@pytest.mark.server
def test_naive_chaos_loses_jobs_and_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    # A kill between the pop and the effect loses the job: 1 in 10 deliveries here.
    argv = ["chaos", "--workers", "2", "--jobs", "100", "--kill-rate", "0.1", "--kill-at", "after_claim,mid_job"]
    assert main(argv + ["--kill-every", "0", "--seed", "5", "--lease-ms", "200", "--naive", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "naive" and data["lost"] > 0 and not data["ok"]
    assert data["effects"] == 100 - data["lost"]  # each lost job is one effect that never happened


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["chaos", "--workers", "0"], "workers must be a whole number between 1 and 64"),
        (["chaos", "--kill-rate", "2"], "kill_rate must be a number between 0.0 and 1.0"),
        (["chaos", "--kill-at", "sideways"], "crash points must be among after_claim, mid_job, after_effect"),
    ],
)
def test_chaos_bad_options_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_worker_process_killed_after_claim_leaves_its_job_leased(valkey_client) -> None:
    queue = echoq.Queue(fresh_name("kill"), valkey_client)
    job_id = queue.enqueue("x").job_id
    argv = [sys.executable, "-m", "echoq.teaching", "worker", "--queue", queue.name, "--kill-rate", "1"]
    argv += ["--kill-at", "after_claim", "--burst", "--lease-ms", "30000"]
    env = dict(os.environ, VALKEY_URL=echoq.server_url())
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    try:
        assert done.returncode == -signal.SIGKILL, done.stderr
        snap = queue.snapshot()
        assert list(snap.active) == [job_id] and snap.rows[job_id].attempts == 1
        assert snap.stats["chaos_kill_after_claim"] == 1
    finally:
        queue.reset()


def test_the_audit_counts_a_job_that_fell_out_of_the_queue_as_lost(valkey_client) -> None:
    # A job whose effect ran but whose row vanished from every set is lost, not "handled".
    from echoq.effects import Effects
    from echoq.teaching.chaos import ChaosReport, _audit

    queue = echoq.Queue(fresh_name("audit"), valkey_client, keep_done=1_000_000)
    kept, vanished = queue.enqueue_many(["kept", "vanished"])
    for claim in queue.claim_many(2, lease_ms=5_000):
        Effects(queue).apply_once(claim.job_id, "done")
        if claim.job_id == kept:
            queue.complete(claim)
    valkey_client.zrem(queue.keys.active, vanished)  # what a broken script would do
    valkey_client.delete(queue.keys.job(vanished))
    report = ChaosReport("reliable", queue.name, 2, 1, 0, 5_000, 1, 0.0, 0.0)
    _audit(queue, [kept, vanished], 0, report)
    assert (report.lost, report.lost_examples, report.effects) == (1, [vanished], 2)
    assert not report.ok and "1 job(s) lost" in report.format()
    queue.reset()


def test_a_run_with_an_invariant_violation_is_not_ok() -> None:
    from echoq.teaching.chaos import ChaosReport

    report = ChaosReport("reliable", "q", 1, 1, 0, 500, 1, 0.0, 0.0, invariant_violations=1)
    assert not report.ok and "with a job in no place or in two" in report.format().splitlines()[-1]


# -- honesty: the run's own shutdown, failures, what was checked, where the queue went --------


def _supervisor(queue: echoq.Queue, workers: int, **config: object):
    from echoq.teaching import chaos
    from echoq.teaching.faults import checkpoints

    report = chaos.ChaosReport("reliable", queue.name, 10, workers, 1, 500, 4, 0.0, 0.0)
    settings = {"work_ms": 0, "beat_ms": 50, "kill_at": checkpoints("after_claim")} | config
    return chaos._Supervisor(queue, echoq.server_url(), settings, report), report


def test_stopping_workers_that_have_only_just_started_is_not_a_failure(valkey_client) -> None:
    """The issue's finding: at shutdown the run SIGTERMed workers that had only just been
    restarted, counted them as failing on their own, and exited 2 with no report."""
    queue = echoq.Queue(fresh_name("shutdown"), valkey_client)
    sup, report = _supervisor(queue, 8)
    for slot in range(8):
        sup.spawn(slot)  # still starting Python: SIGTERM arrives before any handler exists
    sup.shutdown()
    assert (report.stopped_at_end, report.worker_failures, report.kills) == (8, 0, 0)
    queue.reset()


def test_a_worker_that_dies_on_its_own_is_reported_with_its_last_line(valkey_client) -> None:
    queue = echoq.Queue(fresh_name("fails"), valkey_client)
    sup, report = _supervisor(queue, 1, beat_ms=0)  # the worker refuses to start: a real failure
    sup.spawn(0)
    sup.procs[0].wait(timeout=60)
    sup.reap_children(settled=True)
    sup.shutdown()
    assert report.worker_failures == 1 and report.stopped_at_end == 0
    assert report.worker_failure_examples[0].startswith("echoq: beat_ms must be a whole number")
    queue.reset()


def test_a_run_whose_workers_keep_failing_gives_up_with_a_full_report_and_removes_its_queue(
    monkeypatch: pytest.MonkeyPatch, valkey_client
) -> None:
    from echoq.teaching import chaos

    def failing(self: chaos._Supervisor, slot: int) -> None:
        code = "import sys; print('boom: a worker that cannot start', file=sys.stderr); sys.exit(3)"
        log = open(self.logdir / f"worker-{slot}.log", "wb")  # noqa: SIM115
        self.procs[slot] = subprocess.Popen([sys.executable, "-c", code], stderr=log)
        log.close()

    monkeypatch.setattr(chaos._Supervisor, "spawn", failing)
    name = fresh_name("gives-up")
    report = run_chaos(workers=2, jobs=20, kill_rate=0.0, kill_every_s=0, seed=1, queue_name=name, **QUICK)
    assert report.gave_up.endswith("workers died on their own") and report.worker_failures >= 5
    assert not report.ok and report.unsettled == 20
    text = report.format()
    assert "GAVE UP" in text and "boom: a worker that cannot start" in text and f"removed (emq:{{{name}}}:*)" in text
    assert not list(valkey_client.scan_iter(match=f"emq:{{{name}}}:*"))


@pytest.mark.server
def test_above_the_per_id_limit_the_report_says_what_was_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from echoq.teaching import chaos

    monkeypatch.setattr(chaos, "PER_ID_LIMIT", 50)
    report = run_chaos(workers=2, jobs=120, kill_rate=0.02, kill_every_s=0, seed=2, **QUICK)
    assert report.ok and report.invariant_check == "counts" and report.invariant_samples > 0
    assert all(not s.per_id for s in report.timeline)
    line = next(x for x in report.format().splitlines() if "invariant samples" in x)
    assert "ids NOT checked per sample (more than 50 jobs)" in line and "add up to 120" in line


def test_every_run_removes_its_queue_or_says_where_it_is(valkey_client, capsys: pytest.CaptureFixture[str]) -> None:
    name = fresh_name("kept")
    try:
        argv = ["chaos", "--workers", "1", "--jobs", "20", "--kill-rate", "0", "--kill-every", "0", "--keep"]
        assert main(argv + ["--no-progress", "--lease-ms", "200"]) == 0
        out = capsys.readouterr().out
        kept = next(x for x in out.splitlines() if x.strip().startswith("queue"))
        assert "kept: emq:{chaos-" in kept and "(keep_queue)" in kept
        queue_name = kept.split("emq:{")[1].split("}")[0]
        assert list(valkey_client.scan_iter(match=f"emq:{{{queue_name}}}:*"))
        echoq.Queue(queue_name, valkey_client).reset()
        report = run_chaos(workers=1, jobs=20, kill_rate=0.0, kill_every_s=0, seed=3, queue_name=name, **QUICK)
        assert report.queue_kept is None and not list(valkey_client.scan_iter(match=f"emq:{{{name}}}:*"))
    finally:
        echoq.Queue(name, valkey_client).reset()


def test_a_run_that_fails_midway_still_removes_its_queue(monkeypatch: pytest.MonkeyPatch, valkey_client) -> None:
    from echoq.teaching import chaos

    def broken_audit(*_args: object) -> None:
        raise echoq.ServerUnavailable("the audit could not read the queue")

    monkeypatch.setattr(chaos, "_audit", broken_audit)
    name = fresh_name("midway")
    with pytest.raises(echoq.ServerUnavailable):
        run_chaos(workers=1, jobs=10, kill_rate=0.0, kill_every_s=0, seed=4, queue_name=name, **QUICK)
    assert not list(valkey_client.scan_iter(match=f"emq:{{{name}}}:*"))


def test_a_stuck_run_times_out_with_a_report_however_long_a_busy_run_may_take(
    monkeypatch: pytest.MonkeyPatch, valkey_client
) -> None:
    """The timeout is on progress, not on the whole run: a loaded machine may take minutes
    over 20,000 jobs, and only a run where no job settles for timeout_s is given up."""
    from echoq.teaching import chaos

    def idle(self: chaos._Supervisor, slot: int) -> None:  # workers that never take a job
        self.procs[slot] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    monkeypatch.setattr(chaos._Supervisor, "spawn", idle)
    name = fresh_name("stuck")
    report = run_chaos(workers=1, jobs=5, kill_rate=0.0, kill_every_s=0, seed=1, queue_name=name, timeout_s=1.5)
    assert report.timed_out and report.unsettled == 5 and not report.ok
    assert "TIMED OUT: no job settled" in report.format() and report.stopped_at_end == 1
    assert not list(valkey_client.scan_iter(match=f"emq:{{{name}}}:*"))


def test_a_chaos_run_is_honest_on_valkey_and_on_redis_7(server_url: str) -> None:
    report = run_chaos(workers=3, jobs=120, kill_rate=0.05, kill_every_s=0.3, seed=7, url=server_url, **QUICK)
    assert report.ok, report.format()
    assert report.kills > 0 and report.worker_failures == 0 and report.stopped_at_end <= 3
    assert report.invariant_check == "per-id" and report.queue_kept is None
    assert not list(echoq.connect(server_url).scan_iter(match=f"emq:{{{report.queue}}}:*"))


@pytest.mark.parametrize("command", [["chaos"], ["worker", "--queue", "q"]])
def test_a_negative_work_time_is_refused_in_one_line(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    assert main([*command, "--work-ms", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--work-ms must be 0 or more" in err and err.count("\n") == 1
