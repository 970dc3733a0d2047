import time

LEASE_MS = 600

def extend_lease(q, claim, work_done):
    next_extend = time.monotonic()
    while True:
        finished = work_done.is_set()  # read BEFORE extending: then this extend vouches for the end
        kept = q.extend(claim, lease_ms=LEASE_MS).value == "extended"
        if not kept or finished:
            return kept
        next_extend += LEASE_MS * 0.4 / 1000  # two fifths: an extension a third of a lease late still lands in time
        work_done.wait(max(0, next_extend - time.monotonic()))
