local prefix = KEYS[1]:gsub('dead$', '')
local moved = 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('HSET', prefix .. 'job:' .. id, 'stalled', 0, 'attempts', 0)
  redis.call('HSET', prefix .. 'job:' .. id, 'state', 'pending')
  moved = moved + 1
end
return moved
