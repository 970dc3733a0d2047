from echoq import Extend

LEASE_MS = 600

def extend_lease(q, claim, work_done) -> bool:
    """Beside the work, in a thread: extend the claim's lease until work_done is set.
    Return True if this worker still held the job when the work was done, False if it
    lost the lease (then it must not do its effect)."""
    while not work_done.wait(LEASE_MS / 3 / 1000):
        if q.extend(claim, lease_ms=LEASE_MS) is not Extend.EXTENDED:
            claim = q.claim(lease_ms=LEASE_MS)  # lost it: take a job again and carry on
            if claim is None:
                return False
    return q.extend(claim, lease_ms=LEASE_MS) is Extend.EXTENDED
