import time

LEASE_MS, BEAT_MS, MAX_STALLED = 400, 100, 2

def worker_loop(q, work, running) -> None:
    """Until running() is False: on a beat, bring back stalled jobs; in between, claim a
    job, run work(claim), and complete it, one job at a time."""
    next_beat = 0.0
    while running():
        claim = q.claim(lease_ms=LEASE_MS)
        if claim is None:
            if time.monotonic() >= next_beat:  # nothing to do: a good moment to look for dead workers' jobs
                q.stalled_check(max_stalled=MAX_STALLED)
                next_beat = time.monotonic() + BEAT_MS / 1000
            time.sleep(0.01)
            continue
        try:
            work(claim)
        except Exception as exc:
            q.retry(claim, error=str(exc))  # give it back for another try
            continue
        q.complete(claim)  # only now is it done
