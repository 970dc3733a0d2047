import time

def read_expired(r, keys):
    return r.zrangebyscore(keys.active, "-inf", int(time.time() * 1000))

def move_back(r, keys, ids) -> None:
    """Step 2: move each id from keys.active to keys.pending (score 0) and mark its row pending."""
    for job_id in ids:
        r.zrem(keys.active, job_id)
        r.zadd(keys.pending, {job_id: 0})
        r.hset(keys.job(job_id), "state", "pending")

duplicates = 1
