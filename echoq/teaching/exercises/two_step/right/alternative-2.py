def read_expired(r, keys):
    t = r.time()
    return list(r.zrange(keys.active, "-inf", t[0] * 1000 + t[1] // 1000, byscore=True))

def move_back(r, keys, ids):
    if ids:
        r.zadd(keys.pending, {i: int(r.hget(keys.job(i), "arrival") or 0) for i in ids})
        for i in ids:
            r.hset(keys.job(i), mapping={"state": "pending"})
        r.zrem(keys.active, *ids)  # last: until here every id is still where a sweep finds it

duplicates = 1
