import time

LEASE_MS, BEAT_MS, MAX_STALLED = 400, 100, 2

def worker_loop(q, work, running):
    beat_due = time.monotonic()
    while running():
        now = time.monotonic()
        if now >= beat_due:  # busy or idle, the beat comes round
            q.stalled_check(max_stalled=MAX_STALLED)
            beat_due = now + BEAT_MS / 1000
        claim = q.claim(lease_ms=LEASE_MS)
        if claim is None:
            time.sleep(min(0.05, max(0.001, beat_due - time.monotonic())))  # idle: sleep, at most until the beat
            continue
        try:
            work(claim)
        except Exception as exc:  # noqa: BLE001 -- any failure of the job goes back with its words
            q.retry(claim, error=f"{type(exc).__name__}: {exc}")
            continue
        q.complete(claim)
