local row_of = function(id) return string.match(KEYS[2], '^(.*:)pending$') .. 'job:' .. id end
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
if #ids == 0 then return 0 end
redis.call('ZREM', KEYS[1], unpack(ids))
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HMSET', row_of(id), 'state', 'pending', 'stalled', '0', 'attempts', '0')
end
return #ids
