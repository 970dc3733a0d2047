-- includes/complete_job.lua: retire one fenced job. Shared by complete.lua and
-- complete_many.lua. The caller bumps the 'completed' counter and trims emq:{q}:done
-- once per call (trim_done), not once per job.
-- `q` (includes/queue_keys keys_by_name) holds active, done, stats and effects, plus q.now.
--- @include "includes/fence"

-- Returns 'completed', or the fence's refusal reply ({'stale', ...} or {'gone'}).
local function complete_job(q, row_key, id, attempt)
  local refused = fence(row_key, attempt)
  if refused then return refused end
  note_missing_lease(q.active, q.stats, id)
  redis.call('ZREM', q.active, id)
  redis.call('DEL', row_key)
  -- Remember recent completions so a late duplicate enqueue of the same id is refused.
  redis.call('ZADD', q.done, q.now, id)
  return 'completed'
end

-- emq:{q}:done's bound: keep the newest `keep_done` ids, forgetting the oldest first (at
-- most 1000 per call: a lowered keep_done takes a few calls to reach). A forgotten job's
-- entry in the effects ledger goes with it -- unless the id has a row again (a stray
-- entry of a live job), whose ledger entry still guards its effect.
local function trim_done(q, keep_done)
  local excess = redis.call('ZCARD', q.done) - keep_done
  if excess <= 0 then return end
  if excess > 1000 then excess = 1000 end
  for _, id in ipairs(redis.call('ZRANGE', q.done, 0, excess - 1)) do
    if redis.call('EXISTS', q.prefix .. 'job:' .. id) == 0 then
      redis.call('HDEL', q.effects, id)
    end
  end
  redis.call('ZREMRANGEBYRANK', q.done, 0, excess - 1)
end
