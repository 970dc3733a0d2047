-- requeue_dead: give every dead job of one queue another chance.
-- KEYS[1] emq:{q}:dead    KEYS[2] emq:{q}:pending
local prefix = string.sub(KEYS[1], 1, -5)  -- 'emq:{q}:' : KEYS[1] without 'dead', the tag kept
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', prefix .. 'job:' .. id, 'state', 'pending', 'stalled', 0, 'attempts', 0)
  redis.call('HDEL', prefix .. 'job:' .. id, 'reason')  -- no longer dead: why it died is history
end
return #ids
