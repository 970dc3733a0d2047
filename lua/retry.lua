-- retry.lua: a handler failed; give the job back for another try, or dead-letter it.
--
-- Fenced like complete. If the attempts so far have reached max attempts, the job goes
-- to the dead set with the error kept on its row (the durable floor: nothing is lost, a
-- person can look at it). Otherwise it waits out a backoff measured on the server's clock
-- in the scheduled set (claim.lua promotes it when due), or goes straight back to pending
-- when the backoff is 0.
--
-- KEYS[1]  emq:{q}:active      sorted set
-- KEYS[2]  emq:{q}:pending     sorted set, score 0
-- KEYS[3]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[4]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[5]  emq:{q}:stats       hash of counters ('retried' or 'dead' is bumped)
-- KEYS[6]  emq:{q}:job:<id>    the row
-- ARGV[1]  job id
-- ARGV[2]  attempt             the attempt number (fencing token) the claim returned
-- ARGV[3]  error               text kept on the row as 'error'
-- ARGV[4]  backoff             milliseconds before the job may be claimed again,
--                               0..604800000
-- ARGV[5]  max attempts        dead-letter once attempts >= this, 1..1000
--
-- Replies
--   {'retried', attempts}          back in pending now
--   {'scheduled', attempts, due}   in scheduled until `due` (server ms)
--   {'dead', attempts}             in the dead set, row state 'dead', reason 'max_attempts'
--   {'stale', state, attempts}     refused: the caller no longer holds the job
--   {'gone'}                       refused: no such row
-- Errors
--   BADARG  backoff or max attempts out of range, or KEYS[1..5] not the keys above of one
--           queue
--   BADID   KEYS[6] is not the row of ARGV[1] in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/fence"
--- @include "includes/wake"

local active_key, pending_key, scheduled_key, dead_key, stats_key, row_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, attempt, err = ARGV[1], ARGV[2], ARGV[3]

local prefix, refused = queue_prefix({'active', 'pending', 'scheduled', 'dead', 'stats'}, id)
if not prefix then return refused end
local backoff_ms, max_attempts
backoff_ms, refused = whole(ARGV[4], 'backoff', 'delay_ms')
if not backoff_ms then return refused end
max_attempts, refused = whole(ARGV[5], 'max attempts', 'max_attempts')
if not max_attempts then return refused end

refused = fence(row_key, attempt)
if refused then return refused end

local now = server_now_ms()
local attempts = tonumber(attempt)
redis.call('ZREM', active_key, id)
if attempts >= max_attempts then
  redis.call('HSET', row_key, 'state', 'dead', 'error', err, 'reason', 'max_attempts',
    'dead_ms', now)
  redis.call('ZADD', dead_key, now, id)
  redis.call('HINCRBY', stats_key, 'dead', 1)
  return {'dead', attempts}
end
redis.call('HINCRBY', stats_key, 'retried', 1)
if backoff_ms == 0 then
  redis.call('HSET', row_key, 'state', 'pending', 'error', err)
  redis.call('ZADD', pending_key, 0, id)
  wake(prefix, 1)
  return {'retried', attempts}
end
redis.call('HSET', row_key, 'state', 'scheduled', 'error', err)
redis.call('ZADD', scheduled_key, now + backoff_ms, id)
return {'scheduled', attempts, now + backoff_ms}
