-- includes/id_list.lua: the JOB ids a move is handed in ARGV, each with its row in KEYS from
-- a given position on, checked whole before the move writes anything.
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/job_id"

-- nil when ARGV holds 1 to BOUNDS.count[2] JOB ids and KEYS[first], KEYS[first + 1], ... are
-- their rows in the queue at `prefix`; else the error reply (BADARG, BADID) to return.
local function refuse_id_list(prefix, first)
  if #ARGV < 1 or #ARGV > BOUNDS.count[2] then
    return redis.error_reply('BADARG give 1..' .. BOUNDS.count[2] .. ' JOB ids, got ' .. #ARGV)
  end
  for _, id in ipairs(ARGV) do
    if not is_job_id(id) then return redis.error_reply('BADID ' .. printable(id) .. ' is not a JOB id') end
  end
  local ok, refused = rows_match(prefix, first, ARGV)
  if not ok then return refused end
  return nil
end
