def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return r.zrangebyscore(keys.active, "-inf", now)

def move_back(r, keys, ids):
    for job_id in ids:
        r.zadd(keys.pending, {job_id: int(r.hget(keys.job(job_id), "arrival") or 0)})
        r.zrem(keys.active, job_id)

duplicates = 1
