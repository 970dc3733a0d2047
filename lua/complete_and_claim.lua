-- complete_and_claim.lua: finish one job and claim the next in ONE round trip.
--
-- The fast path of a busy worker (BullMQ's moveToFinished does the same): the completion
-- is fenced exactly as in complete.lua, and the next claim is exactly claim.lua's, so no
-- guarantee is weakened; the worker just saves the second round trip per job. The claim
-- happens whatever the completion's outcome: a stale completion changes nothing, and the
-- worker still wants work. Like claim.lua, it first promotes due retries from scheduled
-- to pending, and builds claimed ids' rows from KEYS[1]'s prefix (includes/queue_keys).
--
-- KEYS[1]  emq:{q}:pending     sorted set, score 0
-- KEYS[2]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[3]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[4]  emq:{q}:done        sorted set of recently completed ids
-- KEYS[5]  emq:{q}:stats       hash of counters
-- KEYS[6]  emq:{q}:job:<id>    the row of the job being completed
-- ARGV[1]  job id              the job being completed
-- ARGV[2]  token               its claim's attempts value
-- ARGV[3]  keep done           how many completed ids to remember (-1 = all)
-- ARGV[4]  lease               milliseconds for the next claim, > 0
-- ARGV[5]  count               how many jobs to claim next, 0..1000
--
-- Replies
--   {outcome, id, payload, token, deadline, ...}  outcome is 'completed', 'stale' or
--                                                 'gone'; then four values per claimed job
-- Errors
--   BADARG  lease or count out of range, or KEYS[1..5] not the keys above of one queue
--   BADID   KEYS[6] is not the row of ARGV[1] in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/fence"
--- @include "includes/complete_job"
--- @include "includes/claim_jobs"

local pending_key, active_key, scheduled_key, done_key, stats_key, row_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, token = ARGV[1], ARGV[2]
local keep_done, lease_ms, count = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

local prefix, refused = queue_prefix({'pending', 'active', 'scheduled', 'done', 'stats'}, id)
if not prefix then return refused end

if lease_ms == nil or lease_ms <= 0 then
  return redis.error_reply('BADARG lease must be a number of milliseconds > 0')
end
if count == nil or count < 0 or count > 1000 then
  return redis.error_reply('BADARG count must be between 0 and 1000')
end

local now = server_now_ms()
local reply = {complete_job(active_key, done_key, stats_key, row_key, id, token, keep_done, now)[1]}
if count > 0 then
  promote_due(pending_key, scheduled_key, prefix, now)
  claim_jobs(pending_key, active_key, stats_key, prefix, now, lease_ms, count, reply)
end
return reply
