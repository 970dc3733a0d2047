-- includes/complete_job.lua: retire a fenced job. Shared by complete.lua and
-- complete_and_claim.lua.
local function complete_job(active_key, done_key, stats_key, row_key, id, token, keep_done, now)
  local refused = fence(row_key, token)
  if refused then return refused end
  redis.call('ZREM', active_key, id)
  redis.call('DEL', row_key)
  -- Remember recent completions so a late duplicate enqueue of the same id is refused.
  redis.call('ZADD', done_key, now, id)
  if keep_done >= 0 then
    redis.call('ZREMRANGEBYRANK', done_key, 0, -(keep_done + 1))
  end
  redis.call('HINCRBY', stats_key, 'completed', 1)
  return {'completed'}
end
