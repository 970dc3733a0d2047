-- reap.lua: the bare reaper. Move every job whose lease has expired back to pending.
--
-- Detect and move happen in ONE script: no other command runs between reading the
-- expired members and moving them, so two overlapping reapers can never both move the
-- same job (the two-step check-then-move in echoq/contrasts.py can). "Expired" means a
-- deadline at or before the server's now -- the same clock claim.lua wrote it with.
-- At most `limit` jobs move per call, so one call never holds the server for long; the
-- caller calls again while a full batch came back. Each moved id's row emq:{q}:job:<id> is
-- built from KEYS[1]'s prefix (includes/queue_keys): same {q} tag, same slot.
--
-- KEYS[1]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[2]  emq:{q}:pending     sorted set, score 0
-- KEYS[3]  emq:{q}:stats       hash of counters ('reaped' is bumped)
-- ARGV[1]  limit               most jobs to move in this call, 1..10000
--
-- Replies
--   {now, id, ...}              the server's now (ms), then the ids moved (maybe none)
-- Errors
--   BADARG  limit out of range, or KEYS not the three keys above of one queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/wake"

local active_key, pending_key, stats_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, refused = queue_prefix({'active', 'pending', 'stats'})
if not prefix then return refused end

local limit
limit, refused = whole(ARGV[1], 'limit', 'limit')
if not limit then return refused end

local now = server_now_ms()
local expired = redis.call('ZRANGEBYSCORE', active_key, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  redis.call('ZREM', active_key, id)
  redis.call('ZADD', pending_key, 0, id)
  redis.call('HSET', prefix .. 'job:' .. id, 'state', 'pending')
end
if #expired > 0 then redis.call('HINCRBY', stats_key, 'reaped', #expired) end
wake(prefix, #expired)
local reply = {now}
for _, id in ipairs(expired) do reply[#reply + 1] = id end
return reply
