-- includes/complete_job.lua: retire one fenced job. Shared by complete.lua and
-- complete_many.lua. The caller bumps the 'completed' counter and trims emq:{q}:done
-- once per call (trim_done), not once per job.
--- @include "includes/fence"

-- Returns 'completed', or the fence's refusal reply ({'stale', ...} or {'gone'}).
local function complete_job(active_key, done_key, row_key, id, attempt, now)
  local refused = fence(row_key, attempt)
  if refused then return refused end
  redis.call('ZREM', active_key, id)
  redis.call('DEL', row_key)
  -- Remember recent completions so a late duplicate enqueue of the same id is refused.
  redis.call('ZADD', done_key, now, id)
  return 'completed'
end

-- Keep only the newest `keep_done` ids in emq:{q}:done: its bound.
local function trim_done(done_key, keep_done)
  redis.call('ZREMRANGEBYRANK', done_key, 0, -(keep_done + 1))
end
