-- expect: your sweep took 1,000
-- KEYS[1] = emq:{q}:active   KEYS[2] = emq:{q}:pending   KEYS[3] = emq:{q}:dead
-- ARGV[1] = max_stalled: the stall count that is fatal
local prefix = string.sub(KEYS[1], 1, -7)  -- 'emq:{q}:active' minus 'active'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_stalled = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)
for _, id in ipairs(expired) do
  local row = prefix .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  local stalled = redis.call('HINCRBY', row, 'stalled', 1)
  if stalled >= max_stalled then
    redis.call('ZADD', KEYS[3], now, id)
    redis.call('HSET', row, 'state', 'dead')
  else
    redis.call('ZADD', KEYS[2], 0, id)
    redis.call('HSET', row, 'state', 'pending')
  end
end
return expired
