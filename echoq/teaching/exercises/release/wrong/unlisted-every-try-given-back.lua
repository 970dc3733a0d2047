-- expect: field attempts is 0; the reference move makes it 1
-- every try given back, not the one the claim counted
local id, token = ARGV[1], ARGV[2]
local row = redis.call('HMGET', KEYS[3], 'state', 'token')
if row[1] ~= 'active' or tonumber(row[2]) ~= tonumber(token) then
  return {'stale'}
end
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[3], 'state', 'pending', 'attempts', 0)
redis.call('ZADD', KEYS[1], redis.call('HGET', KEYS[3], 'arrival') or 0, id)
return 'released'
