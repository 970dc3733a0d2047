-- includes/fence.lua: the fencing check shared by complete, retry and extend.
-- A caller holds a job only while the row is 'active' AND its attempts equal the attempt
-- number the caller's claim minted (the fencing token). Any later claim bumps attempts, and
-- a reap re-marks the row 'pending', so a worker whose lease was lost fails this check and
-- changes nothing. Returns nil when the caller holds the job, else the reply to send back.
local function fence(row_key, attempt)
  if redis.call('EXISTS', row_key) == 0 then
    return {'gone'}
  end
  local state, attempts = unpack(redis.call('HMGET', row_key, 'state', 'attempts'))
  if state ~= 'active' or attempts ~= attempt then
    return {'stale', state, tonumber(attempts)}
  end
  return nil
end
