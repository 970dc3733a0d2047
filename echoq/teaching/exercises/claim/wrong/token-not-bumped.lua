-- KEYS[1] = emq:{q}:pending   KEYS[2] = emq:{q}:active
-- ARGV[1] = lease in milliseconds
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then return {} end
local id = popped[1]
-- the row's key is built from KEYS[1] ('emq:{q}:pending' minus 'pending'): same queue, same {q}
local row = string.sub(KEYS[1], 1, -8) .. 'job:' .. id

-- TODO 1: bump the row's token by 1; the new value is the fencing token, new on every claim
local token = 0
redis.call('HINCRBY', row, 'attempts', 1)  -- one more try, counted toward max_attempts (not the fence)

-- TODO 2: read the server's clock, in milliseconds (hint: TIME gives seconds and microseconds)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)

redis.call('HSET', row, 'state', 'active')
return {id, token, now + tonumber(ARGV[1])}
