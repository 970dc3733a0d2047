-- stalled_check.lua: the count-thresholded reaper. Recover a stalled job, unless it has
-- stalled too often, in which case dead-letter it.
--
-- A job is stalled when its lease deadline is at or before the server's now: no live
-- worker holds it. Each time this sweep finds a job stalled it adds 1 to the row's
-- 'stalled' count, and compares the new count with max_stalled: below it, the job is
-- recovered to pending (at its arrival number, includes/arrival); at or above it, the job
-- is dead-lettered. So max_stalled = N
-- means the N-th stall is fatal: with 2, the first stall is recovered and the second goes
-- to the dead set; with 1, the first stall is fatal. (BullMQ's maxStalledCount counts the
-- recoveries instead: it is N - 1.) A poison job that kills every worker that touches it
-- thus lands on the durable floor instead of looping forever; the dead set then keeps its
-- newest `keep dead` jobs (includes/dead_letter).
-- A stall is counted only on a claim whose start was confirmed. A claim made with
-- complete_many.lua's `confirm` 1 (the Worker's) carries 'confirm' = its token until its
-- holder confirms the handler started it; should it expire before that -- its reply was
-- lost on the way back, or the worker died before its next call -- the job never ran
-- here as far as anyone knows: it goes back to pending with no stall counted, its try
-- given back (the row's 'attempts' goes down by one, as a release's does: a try counts when
-- a handler starts, so a lost reply never costs a job one of its max attempts), and the
-- row's 'unstarted' count goes up instead (stats 'unstarted'). That count is bounded
-- apart: at UNSTARTED_MAX such recoveries the job is dead-lettered with reason
-- 'unstarted', so a job whose claims never reach a worker (or that kills each worker
-- before the start is confirmed) cannot loop forever. Claims made by claim.lua, or with
-- `confirm` 0, count as started at once.
-- Detect and move happen in one script, like reap.lua; at most `limit` jobs per call.
-- Each stalled id's row emq:{q}:job:<id> is built from KEYS[1]'s prefix
-- (includes/queue_keys): same {q} tag, same slot. An expired entry whose row is missing or
-- does not say 'active' is corrupt: no stall is counted on it and no row is written for it
-- (includes/rows: counted in stats 'corrupt'; dead-lettered, or dropped when a stray copy).
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[3]  emq:{q}:scheduled   sorted set (read, to recognise a stray copy)
-- KEYS[4]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[5]  emq:{q}:done        sorted set of recently completed ids (read)
-- KEYS[6]  emq:{q}:stats       hash of counters ('stalled', 'unstarted', 'dead' are bumped)
-- KEYS[7]  emq:{q}:effects     hash: the effects ledger (an evicted dead job's entry goes)
-- ARGV[1]  max stalled         the stall count that is fatal, 1..1000
-- ARGV[2]  limit               most expired entries to handle in this call, 1..10000
-- ARGV[3]  keep dead           how many jobs emq:{q}:dead keeps, 0..1000000
--
-- Replies
--   {now, {recovered id, ...}, {dead id, ...}, corrupt}
--       corrupt: how many expired entries were corrupt (handled, neither recovered nor
--       stalled-dead)
-- Errors
--   BADARG  max stalled, limit or keep dead out of range, or KEYS not the seven keys above
--           of one queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/rows"
--- @include "includes/wake"
--- @include "includes/arrival"

local NAMES = {'pending', 'active', 'scheduled', 'dead', 'done', 'stats', 'effects'}
local prefix, refused = queue_prefix(NAMES)
if not prefix then return refused end
local argv, refused = checked_args({{'max stalled', 'max_stalled'}, {'limit', 'limit'}, {'keep dead', 'keep_dead'}})
if not argv then return refused end
local max_stalled, limit, keep_dead = unpack(argv)

-- Recoveries of a job whose claims were never confirmed started, before it is dead-lettered
-- (echoq/limits.py UNSTARTED_MAX says why this many).
local UNSTARTED_MAX = {{UNSTARTED_MAX}}

local q = keys_by_name(prefix, NAMES)
q.now, q.keep_dead = server_now_ms(), keep_dead
local recovered, dead, corrupt, stalls, unstarted = {}, {}, 0, 0, 0
-- Back to pending while ``count`` is below ``most``; at ``most`` the job is dead-lettered.
local function recover_or_bury(id, count, most, reason, why)
  if count >= most then
    dead_letter(q, id, true, reason, why)
    dead[#dead + 1] = id
  else
    local row = q.prefix .. 'job:' .. id
    redis.call('HSET', row, 'state', 'pending')
    redis.call('ZADD', q.pending, arrival_of(row), id)
    recovered[#recovered + 1] = id
  end
end

local expired = redis.call('ZRANGEBYSCORE', q.active, '-inf', q.now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  redis.call('ZREM', q.active, id)
  local row, values = take_row(q, id, 'active', 'confirm', 'token', 'attempts')
  if not row then
    corrupt = corrupt + 1
  elseif values[2] and values[2] == values[3] then
    redis.call('HDEL', row, 'confirm')
    -- (a count echoq wrote, at most 9 digits: HINCRBY would fail half-way on anything else)
    if string.match(values[4] or '', '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?$') then
      redis.call('HINCRBY', row, 'attempts', -1)
    end
    local lost = redis.call('HINCRBY', row, 'unstarted', 1)
    unstarted = unstarted + 1
    recover_or_bury(id, lost, UNSTARTED_MAX, 'unstarted', 'claimed ' .. lost .. ' times and never confirmed ' ..
      'started (each claim reply lost, or each worker gone before its next call)')
  else
    stalls = stalls + 1
    local stalled = redis.call('HINCRBY', row, 'stalled', 1)
    recover_or_bury(id, stalled, max_stalled, 'stalled',
      'stalled ' .. stalled .. ' times (max_stalled ' .. max_stalled .. ')')
  end
end
if stalls > 0 then redis.call('HINCRBY', q.stats, 'stalled', stalls) end
if unstarted > 0 then redis.call('HINCRBY', q.stats, 'unstarted', unstarted) end
if q.died then trim_dead(q) end
wake(prefix, #recovered)
return {q.now, recovered, dead, corrupt}
