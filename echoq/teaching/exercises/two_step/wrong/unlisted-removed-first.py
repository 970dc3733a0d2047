# expect: the job is lost
def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return r.zrangebyscore(keys.active, "-inf", now)

def move_back(r, keys, ids) -> None:
    """Step 2: reap.lua's order (out of keys.active, into keys.pending at the row's arrival number, the
    row marked), but as three separate commands."""
    for job_id in ids:
        row = keys.job(job_id)
        arrival = int(r.hget(row, "arrival") or 0)
        r.zrem(keys.active, job_id)
        r.zadd(keys.pending, {job_id: arrival})
        r.hset(row, "state", "pending")

duplicates = 1  # the race gave one crashed job to two live workers, B and C
