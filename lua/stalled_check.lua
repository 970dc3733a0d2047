-- stalled_check.lua: the count-thresholded reaper. Recover a stalled job, unless it has
-- stalled too often, in which case dead-letter it.
--
-- A job is stalled when its lease deadline is at or before the server's now: no live
-- worker holds it. Each time this sweep finds a job stalled it adds 1 to the row's
-- 'stalled' count. Threshold: max_stalled is how many times a job may be RECOVERED
-- (BullMQ's maxStalledCount). A job is dead-lettered when the count it had BEFORE this
-- sweep is already >= max_stalled -- said the other way, when its new count exceeds
-- max_stalled. So with max_stalled = 1 the first stall is recovered and the second goes to
-- the dead set; with max_stalled = 0 the first stall is fatal. A poison job that kills
-- every worker that touches it thus lands on the durable floor instead of looping forever.
-- Detect and move happen in one script, like reap.lua; at most `limit` jobs per call.
-- Each stalled id's row emq:{q}:job:<id> is built from KEYS[1]'s prefix
-- (includes/queue_keys): same {q} tag, same slot.
--
-- KEYS[1]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[2]  emq:{q}:pending     sorted set, score 0
-- KEYS[3]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[4]  emq:{q}:stats       hash of counters ('stalled' and 'dead' are bumped)
-- ARGV[1]  max stalled         recoveries allowed per job, >= 0
-- ARGV[2]  limit               most jobs to handle in this call, 1..10000
--
-- Replies
--   {now, {recovered id, ...}, {dead id, ...}}
-- Errors
--   BADARG  max stalled or limit out of range, or KEYS not the four keys above of one queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"

local active_key, pending_key, dead_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local max_stalled, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local prefix, refused = queue_prefix({'active', 'pending', 'dead', 'stats'})
if not prefix then return refused end

if max_stalled == nil or max_stalled < 0 then
  return redis.error_reply('BADARG max stalled must be a whole number >= 0')
end
if limit == nil or limit < 1 or limit > 10000 then
  return redis.error_reply('BADARG limit must be between 1 and 10000')
end

local now = server_now_ms()
local recovered, dead = {}, {}
local expired = redis.call('ZRANGEBYSCORE', active_key, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  local row = prefix .. 'job:' .. id
  local stalled = redis.call('HINCRBY', row, 'stalled', 1)
  redis.call('ZREM', active_key, id)
  if stalled > max_stalled then
    redis.call('HSET', row, 'state', 'dead', 'reason', 'stalled',
      'error', 'stalled ' .. stalled .. ' times (max_stalled ' .. max_stalled .. ')',
      'dead_ms', now)
    redis.call('ZADD', dead_key, now, id)
    dead[#dead + 1] = id
  else
    redis.call('HSET', row, 'state', 'pending')
    redis.call('ZADD', pending_key, 0, id)
    recovered[#recovered + 1] = id
  end
end
if #expired > 0 then redis.call('HINCRBY', stats_key, 'stalled', #expired) end
if #dead > 0 then redis.call('HINCRBY', stats_key, 'dead', #dead) end
return {now, recovered, dead}
