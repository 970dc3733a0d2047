local row = KEYS[3]
if redis.call('HGET', row, 'state') ~= 'active' then return {'stale'} end
if tonumber(redis.call('HGET', row, 'token')) ~= tonumber(ARGV[2]) then return {'stale'} end
local now = redis.call('TIME')
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], now[1] * 1000 + math.floor(now[2] / 1000), ARGV[1])
redis.call('DEL', row)
return 'completed'
