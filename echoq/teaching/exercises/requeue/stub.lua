-- requeue_dead: give every dead job of one queue another chance.
-- KEYS[1] emq:{q}:dead    KEYS[2] emq:{q}:pending
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)  -- score 0: a second chance goes ahead of every waiting job
  -- the job's row: which key is it? (state pending, and a fresh stall count)
  redis.call('HSET', 'job:' .. id, 'state', 'pending', 'stalled', 0)
end
return #ids
