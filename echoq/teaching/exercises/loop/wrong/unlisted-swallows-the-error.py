# expect: its error is recorded nowhere
import time

LEASE_MS, BEAT_MS, MAX_STALLED = 400, 100, 2

def worker_loop(q, work, running):
    last = None
    while running():
        if last is None or time.monotonic() - last > BEAT_MS / 1000:
            last = time.monotonic()
            q.stalled_check(MAX_STALLED)
        job = q.claim(LEASE_MS)
        if not job:
            time.sleep(BEAT_MS / 1000 / 4)
            continue
        try:
            work(job)
            q.complete(job)
        except Exception:
            pass  # its lease runs out and the beat brings it back
