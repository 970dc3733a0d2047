local now_s, now_us = unpack(redis.call('TIME'))
local now_ms = now_s * 1000 + math.floor(now_us / 1000)
local pop = redis.call('ZPOPMIN', KEYS[1], 1)
if not pop[1] then return {} end
local prefix = KEYS[1]:sub(1, #KEYS[1] - #'pending')
local job = pop[1]
local n = redis.call('HINCRBY', prefix .. 'job:' .. job, 'token', 1)
local tries = redis.call('HINCRBY', prefix .. 'job:' .. job, 'attempts', 1)
redis.call('HSET', prefix .. 'job:' .. job, 'state', 'active', 'claimed_ms', now_ms)
redis.call('ZADD', KEYS[2], now_ms + ARGV[1], job)
return {job, n, now_ms + ARGV[1]}
