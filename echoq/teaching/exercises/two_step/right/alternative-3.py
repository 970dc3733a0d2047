def read_expired(r, keys) -> list[str]:
    seconds, micros = r.time()
    return r.zrangebyscore(keys.active, "-inf", seconds * 1000 + micros // 1000)

def move_back(r, keys, ids) -> None:
    # Into pending first (a claim that meets it there while its row still says 'active' drops that
    # copy and leaves the job to the sweep), then the row, then out of active.
    for job_id in ids:
        (arrival,) = r.hmget(keys.job(job_id), ["arrival"])
        r.zadd(keys.pending, {job_id: float(arrival) if arrival else 0.0})
        r.hset(keys.job(job_id), "state", "pending")
        r.zrem(keys.active, job_id)

duplicates = 1
