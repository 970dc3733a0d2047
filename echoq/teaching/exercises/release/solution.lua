-- release: give a claimed job back to pending, unstarted, without costing it a try.
-- KEYS[1] = emq:{q}:pending   KEYS[2] = emq:{q}:active   KEYS[3] = emq:{q}:job:<id>
-- ARGV[1] = the job id        ARGV[2] = the fencing token the caller's claim returned
local id, token = ARGV[1], ARGV[2]
local row = redis.call('HMGET', KEYS[3], 'state', 'token')
if row[1] ~= 'active' or tonumber(row[2]) ~= tonumber(token) then
  return {'stale'}
end
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[3], 'state', 'pending')
redis.call('HINCRBY', KEYS[3], 'attempts', -1)
redis.call('ZADD', KEYS[1], redis.call('HGET', KEYS[3], 'arrival') or 0, id)
return 'released'
