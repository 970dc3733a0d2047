-- includes/args.lua: check a numeric ARGV before any write, against the library's bounds.
--
-- The bounds are echoq/limits.py's BOUNDS, written again here (tests/test_limits.py keeps
-- them equal). A script calls whole() for every number it takes, all before its first
-- write, so a refused call changes nothing. whole() refuses what tonumber() would let
-- through: NaN, +-inf, fractions, hexadecimal and exponent forms, and anything outside the
-- bound.
local BOUNDS = {
  lease_ms = {1, 86400000},
  delay_ms = {0, 604800000},
  count = {1, 1000},
  limit = {1, 10000},
  max_attempts = {1, 1000},
  max_stalled = {1, 1000},
  keep_done = {0, 1000000},
}

-- Returns the number, or nil and a BADARG error reply naming the argument and its range.
-- `bound` names a row of BOUNDS; `low` overrides its lower end (count 0 where "claim none"
-- makes sense).
local function whole(value, name, bound, low)
  local range = BOUNDS[bound]
  low = low or range[1]
  local high = range[2]
  local text = tostring(value)
  local n = nil
  if type(value) == 'string' and string.match(value, '^%-?%d+$') then n = tonumber(value) end
  if n == nil or n < low or n > high then
    return nil, redis.error_reply('BADARG ' .. name .. ' must be a whole number between ' .. low ..
      ' and ' .. high .. ', got ' .. string.sub(text, 1, 40))
  end
  return n
end
