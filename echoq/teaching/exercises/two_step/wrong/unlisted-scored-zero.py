# expect: its arrival number
def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return r.zrangebyscore(keys.active, "-inf", now)

def move_back(r, keys, ids) -> None:
    """Step 2: each id to keys.pending with score 0, then its row pending, then out of keys.active."""
    for job_id in ids:
        r.zadd(keys.pending, {job_id: 0})
        r.hset(keys.job(job_id), "state", "pending")
        r.zrem(keys.active, job_id)

duplicates = 1  # the race gave one crashed job to two live workers, B and C
