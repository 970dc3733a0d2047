local prefix = KEYS[1]:gsub('active$', '')
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local recovered, dead = {}, {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE')) do
  local row = prefix .. 'job:' .. id
  local n = redis.call('HINCRBY', row, 'stalled', 1)
  redis.call('ZREM', KEYS[1], id)
  local fatal = n >= tonumber(ARGV[1])
  redis.call('ZADD', fatal and KEYS[3] or KEYS[2], fatal and now or 0, id)
  redis.call('HSET', row, 'state', fatal and 'dead' or 'pending')
  table.insert(fatal and dead or recovered, id)
end
return {recovered, dead}
