-- stalled_check.lua: the count-thresholded reaper. Recover a stalled job, unless it has
-- stalled too often, in which case dead-letter it.
--
-- A job is stalled when its lease deadline is at or before the server's now: no live
-- worker holds it. Each time this sweep finds a job stalled it adds 1 to the row's
-- 'stalled' count, and compares the new count with max_stalled: below it, the job is
-- recovered to pending; at or above it, the job is dead-lettered. So max_stalled = N
-- means the N-th stall is fatal: with 2, the first stall is recovered and the second goes
-- to the dead set; with 1, the first stall is fatal. (BullMQ's maxStalledCount counts the
-- recoveries instead: it is N - 1.) A poison job that kills every worker that touches it
-- thus lands on the durable floor instead of looping forever.
-- Detect and move happen in one script, like reap.lua; at most `limit` jobs per call.
-- Each stalled id's row emq:{q}:job:<id> is built from KEYS[1]'s prefix
-- (includes/queue_keys): same {q} tag, same slot.
--
-- KEYS[1]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[2]  emq:{q}:pending     sorted set, score 0
-- KEYS[3]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[4]  emq:{q}:stats       hash of counters ('stalled' and 'dead' are bumped)
-- ARGV[1]  max stalled         the stall count that is fatal, 1..1000
-- ARGV[2]  limit               most jobs to handle in this call, 1..10000
--
-- Replies
--   {now, {recovered id, ...}, {dead id, ...}}
-- Errors
--   BADARG  max stalled or limit out of range, or KEYS not the four keys above of one queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/wake"

local active_key, pending_key, dead_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local prefix, refused = queue_prefix({'active', 'pending', 'dead', 'stats'})
if not prefix then return refused end
local max_stalled, limit
max_stalled, refused = whole(ARGV[1], 'max stalled', 'max_stalled')
if not max_stalled then return refused end
limit, refused = whole(ARGV[2], 'limit', 'limit')
if not limit then return refused end

local now = server_now_ms()
local recovered, dead = {}, {}
local expired = redis.call('ZRANGEBYSCORE', active_key, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  local row = prefix .. 'job:' .. id
  local stalled = redis.call('HINCRBY', row, 'stalled', 1)
  redis.call('ZREM', active_key, id)
  if stalled >= max_stalled then
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
wake(prefix, #recovered)
return {now, recovered, dead}
