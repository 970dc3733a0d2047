import time

LEASE_MS, BEAT_MS, MAX_STALLED = 400, 100, 2

def worker_loop(q, work, running) -> None:
    """Until running() is False: on a beat, bring back stalled jobs; in between, claim a
    job, run work(claim), and complete it, one job at a time."""
    while running():
        claim = q.claim(lease_ms=LEASE_MS)
        if claim is None:
            time.sleep(0.01)  # nothing to do: wait a little
            continue
        q.complete(claim)  # TODO: is this the moment to say "done"?
        work(claim)
        # TODO: the beat -- who brings back the jobs of workers that die?
