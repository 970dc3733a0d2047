-- expect: the script moved 2
-- requeue_dead: give every dead job of one queue another chance.
-- KEYS[1] emq:{q}:dead    KEYS[2] emq:{q}:pending
local prefix = string.sub(KEYS[1], 1, -5)
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for n = 1, #ids - 1 do  -- "the last index is #ids - 1", as in a 0-based language
  local id = ids[n]
  local row = prefix .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], redis.call('HGET', row, 'arrival') or 0, id)
  redis.call('HSET', row, 'state', 'pending', 'stalled', 0, 'attempts', 0)
end
return #ids
