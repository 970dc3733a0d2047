-- includes/complete_job.lua: complete fenced jobs. Shared by complete.lua (one job) and
-- complete_many.lua (K jobs). The caller bumps the 'completed' counter and trims
-- emq:{q}:done once per call (trim_done), not once per job.
-- `q` (includes/queue_keys keys_by_name) holds active, done, stats and effects, plus q.now.
--- @include "includes/fence"

-- Most ids one call forgets (echoq/limits.py SWEEP_MAX).
local SWEEP_MAX = {{SWEEP_MAX}}

-- Fence each job on its own (row_keys[i] is ids[i]'s row, tokens[i] its caller's
-- fencing token); then complete every job that passed with one command per key, not per job: one
-- ZREM from active, one DEL of the rows, one ZADD into done. Returns outcomes[i] --
-- 'completed', or the fence's refusal reply ({'stale', ...} or {'gone'}) -- and how many
-- completed. An id given twice is completed once; the second copy is 'gone', as it would
-- be after the first had deleted its row.
local function complete_jobs(q, row_keys, ids, tokens)
  local outcomes, done_rows, done_ids, into_done = {}, {}, {}, {}
  for i, id in ipairs(ids) do
    local refused = into_done[id] and {'gone'} or fence(row_keys[i], tokens[i])
    if refused then
      outcomes[i] = refused
    else
      outcomes[i] = 'completed'
      done_rows[#done_rows + 1] = row_keys[i]
      done_ids[#done_ids + 1] = id
      into_done[id] = true
    end
  end
  local n = #done_ids
  if n == 0 then return outcomes, 0 end
  -- The rows, which are the truth, said every one of these jobs was held; an active entry
  -- that had gone missing (something else removed it) is counted in stats 'corrupt'.
  local removed = redis.call('ZREM', q.active, unpack(done_ids))
  if removed < n then redis.call('HINCRBY', q.stats, 'corrupt', n - removed) end
  redis.call('DEL', unpack(done_rows))
  -- Remember recent completions so a late duplicate enqueue of the same id is refused.
  local scored = {}
  for i, id in ipairs(done_ids) do
    scored[2 * i - 1] = q.now
    scored[2 * i] = id
  end
  redis.call('ZADD', q.done, unpack(scored))
  return outcomes, n
end

-- emq:{q}:done's bound: keep the newest `keep_done` ids, forgetting the oldest first (at
-- most 1000 per call: a lowered keep_done takes a few calls to reach). A forgotten job's
-- entry in the effects ledger goes with it -- unless the id has a row again (a stray
-- entry of a live job), whose ledger entry still protects its effect. One EXISTS over all
-- the forgotten ids' rows finds the usual case (none has a row: one HDEL for them all).
local function trim_done(q, keep_done)
  local excess = redis.call('ZCARD', q.done) - keep_done
  if excess <= 0 then return end
  if excess > SWEEP_MAX then excess = SWEEP_MAX end
  local forgotten = redis.call('ZRANGE', q.done, 0, excess - 1)
  local rows = {}
  for i, id in ipairs(forgotten) do rows[i] = q.prefix .. 'job:' .. id end
  if redis.call('EXISTS', unpack(rows)) == 0 then
    redis.call('HDEL', q.effects, unpack(forgotten))
  else
    for i, id in ipairs(forgotten) do
      if redis.call('EXISTS', rows[i]) == 0 then
        redis.call('HDEL', q.effects, id)
      end
    end
  end
  redis.call('ZREMRANGEBYRANK', q.done, 0, excess - 1)
end
