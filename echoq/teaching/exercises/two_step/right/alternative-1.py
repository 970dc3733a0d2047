def read_expired(r, keys):
    now_s, now_us = r.time()
    now = now_s * 1000 + now_us / 1000
    return [i for i, deadline in r.zrange(keys.active, 0, -1, withscores=True) if deadline <= now]

def move_back(r, keys, ids):
    for i in ids:
        with r.pipeline() as p:  # one MULTI per id: each move is atomic, the read-then-move is not
            p.zrem(keys.active, i).zadd(keys.pending, {i: 0}).hset(keys.job(i), "state", "pending").execute()

duplicates = 2 - 1
