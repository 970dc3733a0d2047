-- includes/rows.lua: the row is the truth about a job; a set entry is only its index.
--
-- A job is in exactly one of pending, active, scheduled or dead, and its row's `state`
-- names that set. Data written by something else (a foreign client, a hand-edit, a
-- half-restored backup) can break that: an id with no row, an id in two sets, a row whose
-- state disagrees with its set. A script that took an id out of a set checks the row
-- before it moves or delivers the job, so such an entry is never delivered as a ghost and
-- no row is ever written for an id that has none.
--
-- `q` is a table of the script's keys (includes/queue_keys keys_by_name) holding pending,
-- active, scheduled, dead, done, stats and effects, plus q.now and q.keep_dead.
--- @include "includes/text"
--- @include "includes/job_id"
--- @include "includes/dead_letter"

-- The set each row state lives in. A completed job has no row: its id is in done.
local SET_OF_STATE = {pending = 'pending', active = 'active', scheduled = 'scheduled', dead = 'dead'}

-- A row's state, and what the key holds: 'hash' (a row; state false if it has none),
-- 'none' (no row), or 'other' (not a hash: something else wrote it). The fields named in
-- `...` are read in the same HMGET (one call where a claim needs state, payload, token
-- and attempts) and come back third, as a table: values[1] is the state, values[2] the
-- first extra field, and so on (nil unless the key is a hash).
local function row_state(row, ...)
  local values = redis.pcall('HMGET', row, 'state', ...)
  if values.err then return false, 'other' end
  local state = values[1]
  if state then return state, 'hash', values end
  if redis.call('EXISTS', row) == 1 then return false, 'hash', values end
  return false, 'none'
end

-- `id` was just taken out of the set of state `from` ('pending', 'active', 'scheduled').
-- Returns its row key when the row exists and says `from`: the caller moves the job. The
-- fields named in `...` are read with the state (row_state) and returned second.
-- Otherwise the entry was corrupt; it is counted in stats 'corrupt', dealt with here, and
-- nil is returned:
--   not a JOB id                   dropped: it never was a job
--   no row, id in done             dropped: the job completed, the entry was left over
--   no row otherwise               the id goes to the dead set, with no row written
--   row says S, and id is in S     dropped: a stray copy; the job stays where its row says
--   anything else                  dead-lettered, reason 'corrupt', the row (payload too) kept
local function take_row(q, id, from, ...)
  if not is_job_id(id) then
    redis.call('HINCRBY', q.stats, 'corrupt', 1)
    return nil
  end
  local row = q.prefix .. 'job:' .. id
  local state, kind, values = row_state(row, ...)
  if state == from then return row, values end
  redis.call('HINCRBY', q.stats, 'corrupt', 1)
  if kind == 'none' then
    if not redis.call('ZSCORE', q.done, id) then
      dead_letter(q, id, false, 'corrupt', 'no row')
    end
    return nil
  end
  if kind == 'other' then
    dead_letter(q, id, false, 'corrupt', 'its row key holds something that is not a hash')
    return nil
  end
  local home = state and SET_OF_STATE[state]
  if home and redis.call('ZSCORE', q[home], id) then return nil end
  dead_letter(q, id, true, 'corrupt', state and ('it was in ' .. from .. ' but its row said ' .. printable(state))
    or 'the row has no state')
  return nil
end
