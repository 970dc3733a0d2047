import threading, time

LEASE_MS, BEAT_MS, MAX_STALLED = 400, 100, 2

def worker_loop(q, work, running):
    def beat():
        while running():
            q.stalled_check(max_stalled=MAX_STALLED)
            time.sleep(BEAT_MS / 1000)
    threading.Thread(target=beat, daemon=True).start()
    while running():
        claim = q.claim(lease_ms=LEASE_MS)
        if claim is None:
            time.sleep(0.02)
        else:
            try:
                work(claim)
            except Exception as e:
                q.retry(claim, error=repr(e), backoff_ms=50)
            else:
                q.complete(claim)
