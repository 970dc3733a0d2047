-- includes/job_id.lua: the server-side check of a branded JOB id (the same rule as
-- echoq/ids.py): 'JOB' + 26 characters of Crockford base 32, the first 10 of which are
-- the millisecond the id was minted at.
local JOB_ID_DIGITS = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
-- How far ahead of the server's clock an id may have been minted (echoq/limits.py
-- CLOCK_AHEAD_MS). Pending ids sort by mint time, so an id from the future would wait
-- behind every job minted before that future moment: its producer would starve itself.
local CLOCK_AHEAD_MS = {{CLOCK_AHEAD_MS}}

local function is_job_id(id)
  return type(id) == 'string' and #id == 29 and string.match(id, '^JOB[0-9A-HJKMNP-TV-Z]+$') ~= nil
end

-- The millisecond (Unix epoch) an id was minted at, as its producer's clock read it.
local function minted_ms(id)
  local ms = 0
  for i = 4, 13 do
    ms = ms * 32 + string.find(JOB_ID_DIGITS, string.sub(id, i, i), 1, true) - 1
  end
  return ms
end

-- nil when `id` was minted no more than CLOCK_AHEAD_MS after the server's `now`, else a
-- BADCLOCK error reply saying by how much its producer's clock runs ahead.
local function minted_in_time(id, now)
  local ahead = minted_ms(id) - now
  if ahead > CLOCK_AHEAD_MS then
    return redis.error_reply('BADCLOCK ' .. id .. ' was minted ' .. string.format('%d', ahead) ..
      ' ms ahead of the server clock (at most ' .. CLOCK_AHEAD_MS .. ' ms allowed)')
  end
  return nil
end
