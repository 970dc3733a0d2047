def read_expired(r, keys):
    now_s, now_us = r.time()
    now = now_s * 1000 + now_us / 1000
    return [i for i, deadline in r.zrange(keys.active, 0, -1, withscores=True) if deadline <= now]

def move_back(r, keys, ids):
    # reap.lua's own move, in its order (out of active, into pending at the row's arrival number,
    # the row marked), made one step as the script is: one MULTI per id, which no crash splits.
    for i in ids:
        arrival = r.hget(keys.job(i), "arrival")
        with r.pipeline() as p:  # each move is atomic; the read-then-move is not
            p.zrem(keys.active, i).zadd(keys.pending, {i: int(arrival or 0)}).hset(keys.job(i), "state", "pending")
            p.execute()

duplicates = 2 - 1
