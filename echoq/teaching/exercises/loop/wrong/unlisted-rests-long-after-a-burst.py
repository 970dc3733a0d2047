# expect: neither asked running() nor sent Valkey a command
import time

LEASE_MS, BEAT_MS, MAX_STALLED = 400, 100, 2

def worker_loop(q, work, running) -> None:
    next_beat = 0.0
    worked = False
    while running():
        if time.monotonic() >= next_beat:
            q.stalled_check(max_stalled=MAX_STALLED)
            next_beat = time.monotonic() + BEAT_MS / 1000
        claim = q.claim(lease_ms=LEASE_MS)
        if claim is None:
            time.sleep(100 if worked else 0.01)  # the burst is over: rest until the next one
            continue
        worked = True
        try:
            work(claim)
        except Exception as exc:
            q.retry(claim, error=str(exc))
            continue
        q.complete(claim)
