-- release: give a claimed job back to pending, unstarted, without costing it a try.
-- KEYS[1] = emq:{q}:pending   KEYS[2] = emq:{q}:active   KEYS[3] = emq:{q}:job:<id>
-- ARGV[1] = the job id        ARGV[2] = the fencing token the caller's claim returned
local row = KEYS[3]
if redis.call('HGET', row, 'state') ~= 'active' then return {'stale'} end
if tonumber(redis.call('HGET', row, 'token')) ~= tonumber(ARGV[2]) then return {'stale'} end
local arrival = tonumber(redis.call('HGET', row, 'arrival')) or 0
redis.call('ZADD', KEYS[1], arrival, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', row, 'state', 'pending', 'attempts', (tonumber(redis.call('HGET', row, 'attempts')) or 0) - 1)
return 'released'
