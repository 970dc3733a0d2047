-- release: give a claimed job back to pending, unstarted, without costing it a try.
-- KEYS[1] = emq:{q}:pending   KEYS[2] = emq:{q}:active   KEYS[3] = emq:{q}:job:<id>
-- ARGV[1] = the job id        ARGV[2] = the fencing token the caller's claim returned
local id, token = ARGV[1], ARGV[2]
-- TODO: refuse, changing nothing, unless the caller still holds the job:
--       reply {'stale'} when the row's state is not 'active' or its token is not the caller's token
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[3], 'state', 'pending')
-- TODO: give the try back: the claim counted one in the row's attempts
redis.call('ZADD', KEYS[1], 0, id)  -- TODO: its own place in line, not the front
return 'released'
