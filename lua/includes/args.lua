-- includes/args.lua: check a script's arguments before any write, against the library's bounds.
--
-- The bounds are echoq/limits.py's BOUNDS, the one source: the registry writes them in
-- below (echoq/scripts/registry.py), so the script the server runs shows the table itself.
-- A script checks every argument it takes with ONE call of checked_args() (or, for a list
-- of (id, token) pairs, id_token_pairs()), before its first write, so a refused call
-- changes nothing; each returns the values, or nil and the refusal to return. whole()
-- refuses what tonumber() would let through: NaN, +-inf, fractions, hexadecimal and
-- exponent forms, empty strings, and anything outside the bound.
--- @include "includes/text"

local BOUNDS = {{BOUNDS}}

-- Returns the number, or nil and a BADARG error reply naming the argument and its range.
-- `bound` names a row of BOUNDS; `low` and `high` override its ends (count 0 where "claim
-- none" makes sense, 0..1 for a flag).
local function whole(value, name, bound, low, high)
  local range = BOUNDS[bound]
  low = low or range[1]
  high = high or range[2]
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

-- The arguments of a script, checked in one call: spec[i] describes ARGV[first + i - 1]
-- (first: 1 unless given) as {name, bound, low, high} -- a whole number within BOUNDS[bound],
-- low and high overriding its ends when given -- or, with text = true, {name, bound, text =
-- true}: UTF-8 text of at most BOUNDS[bound][2] bytes (refused as BADPAYLOAD for a payload,
-- else BADARG). `name` is the argument's name in the refusal. Returns the values as a
-- table in spec's order (unpack it), or nil and the refusal of the first bad one.
local function checked_args(spec, first)
  first = first or 1
  local values = {}
  for i, arg in ipairs(spec) do
    local value, refused
    if arg.text then
      value, refused = text(ARGV[first + i - 1], arg[1], arg[2], arg[2] == 'payload_bytes' and 'BADPAYLOAD' or nil)
    else
      value, refused = whole(ARGV[first + i - 1], arg[1], arg[2], arg[3], arg[4])
    end
    if value == nil then return nil, refused end
    values[i] = value
  end
  return values
end

-- ARGV[first..last] (last: the final ARGV unless given) read as (id, token) pairs, as the
-- batch moves take them: at_least..1000 pairs, each fencing token a whole number in its
-- bound (the ids are checked by rows_match).
-- Returns ids, tokens; or nil and the BADARG refusal. `after` says what comes before the
-- pairs, for the message.
local function id_token_pairs(first, at_least, after, last)
  last = last or #ARGV
  local given = last - first + 1
  if given < 2 * at_least or given % 2 ~= 0 or given / 2 > BOUNDS.count[2] then
    return nil, redis.error_reply('BADARG give ' .. at_least .. '..' .. BOUNDS.count[2] .. ' (id, token) pairs' ..
      after .. ', got ' .. given .. ' values')
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
