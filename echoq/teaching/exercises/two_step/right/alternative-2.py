def read_expired(r, keys):
    t = r.time()
    return list(r.zrange(keys.active, "-inf", t[0] * 1000 + t[1] // 1000, byscore=True))

def move_back(r, keys, ids):
    if ids:
        r.zrem(keys.active, *ids)
        r.zadd(keys.pending, dict.fromkeys(ids, 0))
        for i in ids:
            r.hset(keys.job(i), mapping={"state": "pending"})

duplicates = 1
