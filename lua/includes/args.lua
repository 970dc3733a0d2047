-- includes/args.lua: check a script's arguments before any write, against the library's bounds.
--
-- The bounds are echoq/limits.py's BOUNDS, written again here (tests/test_layers.py keeps
-- them equal). A script calls whole() for every number it takes and text() for every text
-- it stores, all before its first write, so a refused call changes nothing. whole()
-- refuses what tonumber() would let through: NaN, +-inf, fractions, hexadecimal and
-- exponent forms, empty strings, and anything outside the bound.
--- @include "includes/text"

local BOUNDS = {
  lease_ms = {1, 86400000},
  delay_ms = {0, 604800000},
  count = {1, 1000},
  limit = {1, 10000},
  max_attempts = {1, 1000},
  max_stalled = {1, 1000},
  keep_done = {0, 1000000},
  keep_dead = {0, 1000000},
  keep_outbox = {1, 1000000},
  token = {1, 2147483647},
  payload_bytes = {0, 1048576},
  text_bytes = {0, 4096},
}

-- Returns the number, or nil and a BADARG error reply naming the argument and its range.
-- `bound` names a row of BOUNDS; `low` overrides its lower end (count 0 where "claim none"
-- makes sense).
local function whole(value, name, bound, low)
  local range = BOUNDS[bound]
  low = low or range[1]
  local high = range[2]
  local n = nil
  if type(value) == 'string' and #value <= 20 and string.match(value, '^%-?%d+$') then n = tonumber(value) end
  if n == nil or n < low or n > high then
    return nil, redis.error_reply('BADARG ' .. name .. ' must be a whole number between ' .. low ..
      ' and ' .. high .. ', got ' .. printable(value))
  end
  return n
end

-- Returns the text, or nil and an error reply: `code` (BADARG, or BADPAYLOAD for a job's
-- payload) when it is not UTF-8 or longer than the bound's bytes.
local function text(value, name, bound, code)
  local high = BOUNDS[bound][2]
  local problem = text_problem(value, high)
  if problem then
    return nil, redis.error_reply((code or 'BADARG') .. ' ' .. name .. ' ' .. problem)
  end
  return value
end

-- ARGV[first..last] (last: the final ARGV unless given) read as (id, token) pairs, as the
-- batch moves take them: at_least..1000 pairs, each fencing token a whole number in its
-- bound (the ids are checked by rows_match).
-- Returns ids, tokens; or nil and the BADARG refusal. `after` says what comes before the
-- pairs, for the message.
local function id_token_pairs(first, at_least, after, last)
  last = last or #ARGV
  local given = last - first + 1
  if given < 2 * at_least or given % 2 ~= 0 or given / 2 > 1000 then
    return nil, redis.error_reply('BADARG give ' .. at_least .. '..1000 (id, token) pairs' .. after ..
      ', got ' .. given .. ' values')
  end
  local ids, tokens = {}, {}
  for i = first, last, 2 do
    local token, refused = whole(ARGV[i + 1], 'token', 'token')
    if not token then return nil, refused end
    ids[#ids + 1] = ARGV[i]
    tokens[#tokens + 1] = token
  end
  return ids, tokens
end
