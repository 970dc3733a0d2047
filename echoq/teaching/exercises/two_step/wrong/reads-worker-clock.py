import time

def read_expired(r, keys):
    return r.zrangebyscore(keys.active, "-inf", int(time.time() * 1000))

def move_back(r, keys, ids) -> None:
    """Step 2: put each id back in keys.pending at its arrival number (its row keeps it), then mark its
    row pending, and only then take it out of keys.active."""
    for job_id in ids:
        row = keys.job(job_id)
        r.zadd(keys.pending, {job_id: int(r.hget(row, "arrival") or 0)})
        r.hset(row, "state", "pending")
        r.zrem(keys.active, job_id)

duplicates = 1
