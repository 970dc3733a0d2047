-- KEYS[1] = emq:{q}:active   KEYS[2] = emq:{q}:pending   KEYS[3] = emq:{q}:dead
-- ARGV[1] = max_stalled: the stall count that is fatal
local prefix = string.sub(KEYS[1], 1, -7)  -- 'emq:{q}:active' minus 'active'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_stalled = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(expired) do
  local row = prefix .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  -- TODO: count this stall on the row; then (the max_stalled-th stall is fatal) a count below max_stalled
  --       is recovered (as below) and a count at or above it is dead-lettered:
  --       ZADD it to KEYS[3] scored by now, and HSET the row's state to 'dead'
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', row, 'state', 'pending')
end
return expired
