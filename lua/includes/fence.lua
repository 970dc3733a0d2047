-- includes/fence.lua: the fencing check shared by complete, retry, extend and release.
-- A caller holds a job only while the row is 'active' AND its token equals the fencing
-- token the caller's claim returned. Every claim bumps the row's token, and a reap re-marks
-- the row 'pending', so a worker whose lease was lost fails this check and changes
-- nothing. (The row's attempts, the tries counted toward max attempts, is not the fence: a
-- release gives a try back, and a token must never be handed out twice.)
-- Returns nil when the caller holds the job, else the reply to send back.
-- A key at the row's name that is not a hash was not written by echoq: it is no row of
-- ours, so the caller gets 'gone' and nothing is touched.
local function fence(row_key, token)
  local row = redis.pcall('HMGET', row_key, 'state', 'token')
  if type(row) ~= 'table' or row.err then return {'gone'} end
  local state, held = row[1], row[2]
  -- A field read means the row exists: EXISTS is asked only when both came back empty.
  if state == false and held == false and redis.call('EXISTS', row_key) == 0 then
    return {'gone'}
  end
  if state ~= 'active' or tonumber(held) ~= tonumber(token) then
    return {'stale', state or '', tonumber(held) or 0}
  end
  return nil
end

-- After fence() passed: the row, which is the truth, says the caller holds the job. If the
-- active set lost its entry (something else removed it), the caller's move puts the id
-- where the row says it goes next; the missing entry is counted in stats 'corrupt'.
local function note_missing_lease(active_key, stats_key, id)
  if not redis.call('ZSCORE', active_key, id) then
    redis.call('HINCRBY', stats_key, 'corrupt', 1)
  end
end
