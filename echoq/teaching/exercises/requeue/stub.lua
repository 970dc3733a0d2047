-- requeue_dead: give every dead job of one queue another chance.
-- KEYS[1] emq:{q}:dead    KEYS[2] emq:{q}:pending
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  local row = 'job:' .. id  -- the job's row: which key is it?
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], redis.call('HGET', row, 'arrival') or 0, id)  -- its place in line
  redis.call('HSET', row, 'state', 'pending', 'stalled', 0, 'attempts', 0)  -- fresh tries
end
return #ids
