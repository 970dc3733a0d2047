# expect: its extend_lease claimed jobs that were waiting
from echoq import Extend

LEASE_MS = 600

def extend_lease(q, claim, work_done) -> bool:
    held = claim
    while not work_done.wait(LEASE_MS / 3 / 1000):
        held = q.claim(lease_ms=LEASE_MS) or held  # the job this worker holds now
        if q.extend(held, lease_ms=LEASE_MS) is not Extend.EXTENDED:
            return False
    return q.extend(claim, lease_ms=LEASE_MS) is Extend.EXTENDED
