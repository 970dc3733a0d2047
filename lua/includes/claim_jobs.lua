-- includes/claim_jobs.lua: promote due retries, then claim up to `count` jobs under a lease.
-- Shared by claim.lua and complete_many.lua so both claim in exactly the same way.
-- `prefix` is 'emq:{q}:' as queue_prefix (includes/queue_keys) read it off the caller's
-- KEYS, never an argument: every row key built here stays in the declared keys' slot.

-- Move retries whose backoff has run out (scheduled score <= now) into pending.
local function promote_due(pending_key, scheduled_key, prefix, now)
  local due = redis.call('ZRANGEBYSCORE', scheduled_key, '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(due) do
    redis.call('ZREM', scheduled_key, id)
    redis.call('ZADD', pending_key, 0, id)
    redis.call('HSET', prefix .. 'job:' .. id, 'state', 'pending')
  end
end

-- Pop the oldest pending ids into active. Appends id, payload, attempt, deadline per job
-- to `reply`. The id moves pending -> active inside this one script: it is never in
-- neither.
local function claim_jobs(pending_key, active_key, stats_key, prefix, now, lease_ms, count, reply)
  local claimed = 0
  while claimed < count do
    local popped = redis.call('ZPOPMIN', pending_key)
    if #popped == 0 then break end
    local id = popped[1]
    local row = prefix .. 'job:' .. id
    if redis.call('EXISTS', row) == 1 then
      local attempt = redis.call('HINCRBY', row, 'attempts', 1)
      local deadline = now + lease_ms
      redis.call('HSET', row, 'state', 'active', 'claimed_ms', now)
      redis.call('ZADD', active_key, deadline, id)
      reply[#reply + 1] = id
      reply[#reply + 1] = redis.call('HGET', row, 'payload')
      reply[#reply + 1] = attempt
      reply[#reply + 1] = deadline
      claimed = claimed + 1
    else
      -- An id without a row cannot be worked; count it rather than hand out a ghost.
      redis.call('HINCRBY', stats_key, 'orphans', 1)
    end
  end
  if claimed > 0 then redis.call('HINCRBY', stats_key, 'claimed', claimed) end
  return claimed
end
