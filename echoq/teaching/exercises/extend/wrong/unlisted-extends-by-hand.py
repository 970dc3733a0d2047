# expect: wrote the finished job back
LEASE_MS = 600

def extend_lease(q, claim, work_done):
    r = q.client
    while not work_done.wait(0.2):
        if r.zscore(q.keys.active, claim.job_id) is None:
            return False  # it is no longer active: lost
        seconds, micros = r.time()
        r.zadd(q.keys.active, {claim.job_id: seconds * 1000 + micros // 1000 + LEASE_MS})
    return r.zscore(q.keys.active, claim.job_id) is not None
