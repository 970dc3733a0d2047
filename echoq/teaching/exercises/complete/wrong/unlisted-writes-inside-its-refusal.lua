-- expect: yet the job changed
-- KEYS[1] = emq:{q}:active   KEYS[2] = emq:{q}:done   KEYS[3] = emq:{q}:job:<id>
-- ARGV[1] = the job id       ARGV[2] = the fencing token the caller's claim returned
local id, token = ARGV[1], ARGV[2]
local state, held = unpack(redis.call('HMGET', KEYS[3], 'state', 'token'))
if state ~= 'active' or held ~= token then
  redis.call('ZREM', KEYS[1], id)  -- "a stale worker's lease is void": but the lease is the new holder's
  return {'stale'}
end
local t = redis.call('TIME')
redis.call('ZREM', KEYS[1], id)
redis.call('DEL', KEYS[3])
redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000), id)
return {'completed'}
