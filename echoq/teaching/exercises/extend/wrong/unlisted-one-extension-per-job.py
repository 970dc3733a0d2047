# expect: its first one arrived after the lease had run out
LEASE_MS = 600

def extend_lease(q, claim, work_done) -> bool:
    """Beside the work, in a thread: extend the claim's lease until work_done is set.
    Return True if this worker still held the job when the work was done, False if it
    lost the lease (then it must not do its effect)."""
    every = LEASE_MS * 0.85 / 1000  # just before the lease runs out: as few extensions as can be
    while not work_done.wait(every):
        if q.extend(claim, lease_ms=LEASE_MS).value != "extended":
            return False  # someone else holds the job now: stop
    row = q.job(claim.job_id)  # at the end, ask the row instead of extending once more
    return row is not None and row.state == "active" and row.token == claim.token
