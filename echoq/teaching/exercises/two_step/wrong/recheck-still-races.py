def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return r.zrangebyscore(keys.active, "-inf", now)

def move_back(r, keys, ids):
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    for job_id in ids:
        deadline = r.zscore(keys.active, job_id)
        if deadline is not None and deadline <= now:  # still expired?
            row = keys.job(job_id)
            r.zadd(keys.pending, {job_id: int(r.hget(row, "arrival") or 0)})
            r.hset(row, "state", "pending")
            r.zrem(keys.active, job_id)

duplicates = 0
