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
local now = 0

-- TODO 3: park the id in the active set, scored by its lease deadline (now + lease)

redis.call('HSET', row, 'state', 'active')
return {id, token, now + tonumber(ARGV[1])}
