-- includes/queue_keys.lua: a script's queue prefix, read off its declared KEYS, never ARGV.
--
-- Every key of queue q is 'emq:{q}:' .. name (echoq/keyspace.py). A script that must build
-- a key it cannot be handed in KEYS (the row of an id it pops or moves) builds it from the
-- prefix of its own KEYS[1], so the built key carries the same {q} hash tag -- it lives in
-- the same cluster slot and belongs to the same queue as the keys the caller declared. The
-- other KEYS must carry that prefix too, so one call can never mix two queues' keys.

-- names[i] is the expected name of KEYS[i] ('pending', 'active', ...). Returns 'emq:{q}:'
-- when every KEYS[i] is exactly that prefix .. names[i]; else nil and a BADARG error reply.
local function queue_prefix(names)
  local first, name = KEYS[1], names[1]
  local prefix
  if type(first) == 'string' and #first > #name and string.sub(first, -#name) == name then
    prefix = string.sub(first, 1, #first - #name)
  end
  if prefix == nil or string.match(prefix, '^emq:{[%w_%-]+}:$') == nil then
    return nil, redis.error_reply('BADARG KEYS[1] ' .. tostring(first) ..
      ' is not a queue key emq:{q}:' .. name)
  end
  for i = 2, #names do
    if KEYS[i] ~= prefix .. names[i] then
      return nil, redis.error_reply('BADARG KEYS[' .. i .. '] ' .. tostring(KEYS[i]) ..
        ' is not ' .. prefix .. names[i] .. ', the same queue as KEYS[1]')
    end
  end
  return prefix
end

-- The row key a script was handed must be the row of the id it was handed, in the same
-- queue: else the script would check one job and move another. Returns nil when it is,
-- else a BADID error reply.
local function check_row_key(prefix, row_key, id)
  if row_key ~= prefix .. 'job:' .. tostring(id) then
    return redis.error_reply('BADID row key ' .. tostring(row_key) .. ' does not belong to ' ..
      tostring(id) .. ' in ' .. prefix)
  end
  return nil
end
