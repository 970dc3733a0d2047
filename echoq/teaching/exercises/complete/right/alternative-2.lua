local fields = redis.call('HGETALL', KEYS[3])
local row = {}
for i = 1, #fields, 2 do row[fields[i]] = fields[i + 1] end
local holds = row.state == 'active' and row.token == ARGV[2]
if not holds then
  return {'stale', row.state or 'gone'}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3])
local t = redis.call('TIME')
redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[1])
return {'completed'}
