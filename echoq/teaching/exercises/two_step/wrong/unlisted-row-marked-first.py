# expect: reap.lua, sweeping next
def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return r.zrangebyscore(keys.active, "-inf", now)

def move_back(r, keys, ids) -> None:
    """Step 2: the row marked first, then into keys.pending at its arrival number, then out of keys.active."""
    for job_id in ids:
        row = keys.job(job_id)
        r.hset(row, "state", "pending")
        r.zadd(keys.pending, {job_id: int(r.hget(row, "arrival") or 0)})
        r.zrem(keys.active, job_id)

duplicates = 1  # the race gave one crashed job to two live workers, B and C
