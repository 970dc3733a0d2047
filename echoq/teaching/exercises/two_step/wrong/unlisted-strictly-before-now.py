# expect: exactly the server's now
def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return r.zrangebyscore(keys.active, "-inf", f"({now}")

def move_back(r, keys, ids) -> None:
    """Step 2: move each id from keys.active to keys.pending (score 0) and mark its row pending."""
    for job_id in ids:
        r.zrem(keys.active, job_id)
        r.zadd(keys.pending, {job_id: 0})
        r.hset(keys.job(job_id), "state", "pending")

duplicates = 1  # the race gave one crashed job to two live workers, B and C
