from echoq import Extend

LEASE_MS = 600

def extend_lease(q, claim, work_done) -> bool:
    """Beside the work, in a thread: extend the claim's lease until work_done is set.
    Return True if this worker still held the job when the work was done, False if it
    lost the lease (then it must not do its effect)."""
    every = LEASE_MS / 3 / 1000  # a third of the lease: one late extension still arrives in time
    while not work_done.wait(every):
        if q.extend(claim.job_id, claim.attempts, lease_ms=LEASE_MS) is not Extend.EXTENDED:
            return False  # someone else holds the job now: stop
    return q.extend(claim.job_id, claim.attempts, lease_ms=LEASE_MS) is Extend.EXTENDED  # still ours, at the very end?
