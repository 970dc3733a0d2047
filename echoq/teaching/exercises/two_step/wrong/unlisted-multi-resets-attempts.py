# expect: field attempts is 0
def read_expired(r, keys) -> list[str]:
    """Step 1: the server's now and the leases in one round trip, then those at or before now."""
    (seconds, micros), leases = r.pipeline(transaction=False).time().zrange(keys.active, 0, -1, withscores=True).execute()
    now = seconds * 1000 + micros // 1000
    return [job_id for job_id, deadline in leases if deadline <= now]

def move_back(r, keys, ids) -> None:
    """Step 2: each id moved in one MULTI: out of keys.active, into keys.pending at its arrival number, its row pending."""
    for job_id in ids:
        arrival = int(r.hget(keys.job(job_id), "arrival") or 0)
        with r.pipeline() as p:
            p.zrem(keys.active, job_id).zadd(keys.pending, {job_id: arrival})
            p.hset(keys.job(job_id), mapping={"state": "pending", "attempts": 0}).execute()

duplicates = 1  # the race gave one crashed job to two live workers, B and C
