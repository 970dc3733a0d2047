-- release: give a claimed job back to pending, unstarted, without costing it a try.
-- KEYS[1] = emq:{q}:pending   KEYS[2] = emq:{q}:active   KEYS[3] = emq:{q}:job:<id>
-- ARGV[1] = the job id        ARGV[2] = the fencing token the caller's claim returned
local fields = redis.call('HGETALL', KEYS[3])
local row = {}
for i = 1, #fields, 2 do row[fields[i]] = fields[i + 1] end
local holds = row.state == 'active' and tonumber(row.token) == tonumber(ARGV[2])
if not holds then return {'stale', row.state or ''} end
redis.call('HINCRBY', KEYS[3], 'attempts', -1)
redis.call('HSET', KEYS[3], 'state', 'pending')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], tonumber(row.arrival) or 0, ARGV[1])
return 'released'
