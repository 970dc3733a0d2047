import threading

from echoq import Extend

LEASE_MS = 600

def extend_lease(q, claim, work_done: threading.Event) -> bool:
    held = True
    while held:
        stop = work_done.wait(LEASE_MS * 0.3 / 1000)  # three tenths of a lease between extensions
        held = q.extend(claim.job_id, claim.token, lease_ms=LEASE_MS) is Extend.EXTENDED
        if stop:
            return held
    return False  # refused once: the job is another worker's now, whatever else is waiting
