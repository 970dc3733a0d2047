-- requeue_dead: give every dead job of one queue another chance.
-- KEYS[1] emq:{q}:dead    KEYS[2] emq:{q}:pending
local prefix = string.sub(KEYS[1], 1, -5)  -- 'emq:{q}:' : KEYS[1] without 'dead', the tag kept
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)  -- score 0: a second chance goes ahead of every waiting job
  redis.call('HSET', prefix .. 'job:' .. id, 'state', 'pending', 'stalled', 0)
end
return #ids
