import time

from echoq import Extend

LEASE_MS = 600

def extend_lease(q, claim, work_done):
    deadline_ms = claim.deadline_ms  # on the server's clock
    while True:
        left_s = (deadline_ms - time.time() * 1000) / 1000  # ...read against this machine's clock
        finished = work_done.wait(max(0.0, left_s / 2))  # extend when half of what is left has gone
        kept = q.extend(claim, lease_ms=LEASE_MS) is Extend.EXTENDED
        if not kept or finished:
            return kept
        deadline_ms = q.client.zscore(q.keys.active, claim.job_id) or deadline_ms  # the new deadline, from the server
