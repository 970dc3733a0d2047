from echoq import Extend

LEASE_MS = 600

def extend_lease(q, claim, work_done):
    ok = True
    while ok:
        finished = work_done.wait(0.15)
        ok = q.extend(claim.job_id, claim.token, lease_ms=LEASE_MS) == Extend.EXTENDED
        if finished:
            break
    return ok
