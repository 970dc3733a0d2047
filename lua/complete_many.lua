-- complete_many.lua: complete K held jobs, each fenced by its own token, and claim up to
-- `count` more -- all in ONE call.
--
-- The busy worker's round trip (BullMQ's moveToFinished does the same for one job): each
-- completion is fenced exactly as in complete.lua, and the claim is exactly claim.lua's,
-- so no guarantee is weakened; the worker only saves round trips. The completions are
-- independent: a stale one is refused on its own and the others still complete. The claim
-- happens whatever the completions' outcomes (a worker that lost a lease still wants
-- work); count 0 claims nothing. Like claim.lua, it first promotes due retries, never
-- hands out a corrupt entry or a bad payload (includes/rows, includes/claim_jobs), and
-- builds claimed ids' rows from KEYS[1]'s prefix (includes/queue_keys). The rows of the
-- jobs being completed are passed in KEYS: the caller knows them. emq:{q}:done keeps the
-- newest `keep done` ids (with their ledger entries), emq:{q}:dead the newest `keep dead`.
--
-- Confirmed starts. A claim's reply can be lost on the way back (a cut connection): the
-- job is then leased to nobody who knows it, and it stalls without ever being started.
-- With `confirm` 1 the claimed rows carry 'confirm' = their token until the holder
-- confirms the start, fenced, in a later call's `started` pairs (the field goes); a
-- stalled check recovers a job whose current claim is unconfirmed without counting a
-- stall on it and gives its try back (lua/stalled_check.lua), so a lost reply spends none
-- of the stall budget and none of max attempts.
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[3]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[4]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[5]  emq:{q}:done        sorted set of recently completed ids
-- KEYS[6]  emq:{q}:stats       hash of counters
-- KEYS[7]  emq:{q}:effects     hash: the effects ledger
-- KEYS[8..7+S+K]  emq:{q}:job:<id>   the row of each job confirmed started, then of each
--                               job being completed, in ARGV's order
-- ARGV[1]  keep done           how many completed ids emq:{q}:done keeps, 0..1000000
-- ARGV[2]  lease               milliseconds for the jobs claimed, 1..86400000
-- ARGV[3]  count               how many jobs to claim, 0..1000
-- ARGV[4]  keep dead           how many jobs emq:{q}:dead keeps, 0..1000000
-- ARGV[5]  confirm             1: the caller will confirm each claimed job's start (below);
--                               0: its claims count as started at once, as claim.lua's, 0..1
-- ARGV[6]  started             S, how many (id, token) pairs of held jobs whose handler
--                               started follow, 0..1000
-- ARGV[7..]  id, token, ...    the S jobs confirmed started, then the K jobs to complete,
--                               0..1000 of each; each token (the fencing token the claim
--                               returned) 1..2147483647
--
-- Replies
--   {{outcome, ...}, {id, payload, token, attempts, deadline, ...}}
--       one outcome per completed job, in order: 'completed', 'stale' or 'gone'; then five
--       values per claimed job, as claim.lua
-- Errors
--   BADARG  an argument out of range, an odd number of id/token values, or KEYS not the
--           keys above of one queue
--   BADID   a row key that is not the row of its id in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/complete_job"
--- @include "includes/claim_jobs"

local NAMES = {'pending', 'active', 'scheduled', 'dead', 'done', 'stats', 'effects'}
local prefix, refused = named_prefix(NAMES)
if not prefix then return refused end
local argv, refused = checked_args({{'keep done', 'keep_done'}, {'lease', 'lease_ms'}, {'count', 'count', 0},
  {'keep dead', 'keep_dead'}, {'confirm', 'count', 0, 1}, {'started', 'count', 0}})
if not argv then return refused end
local keep_done, lease_ms, count, keep_dead, confirm, started = unpack(argv)
if #ARGV < 6 + 2 * started then
  return redis.error_reply('BADARG started says ' .. started .. ' (id, token) pairs, but only ' ..
    (#ARGV - 6) .. ' values follow it')
end
local started_ids, started_tokens = id_token_pairs(7, 0, ' of started jobs', 6 + 2 * started)
if not started_ids then return started_tokens end
local ids, tokens = id_token_pairs(7 + 2 * started, 0, ' to complete after the started ones')
if not ids then return tokens end
local all_ids = {}
for _, id in ipairs(started_ids) do all_ids[#all_ids + 1] = id end
for _, id in ipairs(ids) do all_ids[#all_ids + 1] = id end
local ok
ok, refused = rows_match(prefix, #NAMES + 1, all_ids)
if not ok then return refused end

local q = keys_by_name(prefix, NAMES)
q.now, q.keep_dead = server_now_ms(), keep_dead
-- A start confirmed by the job's holder (the fence): its stalls count from now on.
for i = 1, #started_ids do
  local row_key = KEYS[#NAMES + i]
  if not fence(row_key, started_tokens[i]) then redis.call('HDEL', row_key, 'confirm') end
end
local row_keys = {}
for i = 1, #ids do row_keys[i] = KEYS[#NAMES + #started_ids + i] end
local outcomes, completed = complete_jobs(q, row_keys, ids, tokens)
for i, outcome in ipairs(outcomes) do
  if outcome ~= 'completed' then outcomes[i] = outcome[1] end
end
if completed > 0 then
  trim_done(q, keep_done)
  redis.call('HINCRBY', q.stats, 'completed', completed)
end
local claims = {}
if count > 0 then
  promote_due(q)
  claim_jobs(q, lease_ms, count, claims, confirm == 1)
  if q.died then trim_dead(q) end
end
return {outcomes, claims}
