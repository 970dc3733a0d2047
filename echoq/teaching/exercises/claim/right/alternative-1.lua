local oldest = redis.call('ZRANGE', KEYS[1], 0, 0)
if oldest[1] == nil then return {} end
local id = oldest[1]
redis.call('ZREM', KEYS[1], id)
local row = string.gsub(KEYS[1], 'pending$', 'job:') .. id
local t = redis.call('TIME')
local deadline = t[1] * 1000 + t[2] / 1000 + ARGV[1]
redis.call('ZADD', KEYS[2], deadline, id)
local token = redis.call('HINCRBY', row, 'token', 1)
redis.call('HINCRBY', row, 'attempts', 1)
redis.call('HSET', row, 'state', 'active')
return {id, token, math.floor(deadline)}
