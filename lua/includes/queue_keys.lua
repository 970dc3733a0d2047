-- includes/queue_keys.lua: a script's queue prefix, read off its declared KEYS, never ARGV.
--
-- Every key of queue q is 'emq:{q}:' .. name (echoq/keyspace.py). A script that must build
-- a key it cannot be handed in KEYS (the row of an id it pops or moves) builds it from the
-- prefix of its own KEYS[1], so the built key carries the same {q} hash tag -- it lives in
-- the same cluster slot and belongs to the same queue as the keys the caller declared. The
-- other KEYS must carry that prefix too, so one call can never mix two queues' keys.

-- What each named key holds. A key of another type (written by something other than
-- echoq) would fail a command half-way through a script, after its first writes -- a
-- script's writes are not undone by a later error -- and could leave a job in no set; so
-- every named key's type is checked before anything is written, and such a call is
-- refused whole (BADKEY), changing nothing.
local KEY_TYPES = {pending = 'zset', active = 'zset', scheduled = 'zset', dead = 'zset', done = 'zset',
  given = 'zset', stats = 'hash', effects = 'hash', outbox = 'list'}

-- names[i] is the expected name of KEYS[i] ('pending', 'active', ...). Returns 'emq:{q}:'
-- when every KEYS[i] is exactly that prefix .. names[i] and holds its type (or nothing);
-- else nil and a BADARG (or BADKEY) error reply.
-- It looks at those keys only: queue_prefix and rows_match check what follows them.
local function named_prefix(names)
  local first, name = KEYS[1], names[1]
  local prefix
  if type(first) == 'string' and #first > #name and string.sub(first, -#name) == name then
    prefix = string.sub(first, 1, #first - #name)
  end
  -- 'emq:{q}:', or 'emq:{namespace.q}:' (echoq/keyspace.py): one name, or one namespace and a name.
  if prefix == nil or (string.match(prefix, '^emq:{[%w_%-]+}:$') == nil and
      string.match(prefix, '^emq:{[%w_%-]+%.[%w_%-]+}:$') == nil) then
    return nil, redis.error_reply('BADARG KEYS[1] ' .. tostring(first) ..
      ' is not a queue key emq:{q}:' .. name)
  end
  for i = 2, #names do
    if KEYS[i] ~= prefix .. names[i] then
      return nil, redis.error_reply('BADARG KEYS[' .. i .. '] ' .. tostring(KEYS[i]) ..
        ' is not ' .. prefix .. names[i] .. ', the same queue as KEYS[1]')
    end
  end
  for i = 1, #names do
    local want = KEY_TYPES[names[i]]
    local held = redis.call('TYPE', KEYS[i])['ok']
    if want and held ~= want and held ~= 'none' then
      return nil, redis.error_reply('BADKEY ' .. KEYS[i] .. ' holds a ' .. held .. ', not a ' .. want ..
        ': something other than echoq wrote it; rename or delete that key (nothing changed)')
    end
  end
  return prefix
end

-- named_prefix, and then: with `row_of_id`, the key after the named ones, KEYS[#names + 1],
-- must be that id's row in the same queue (else the script would fence one job and move
-- another), else nil and a BADID reply; without it, no key may follow the named ones.
local function queue_prefix(names, row_of_id)
  local prefix, refused = named_prefix(names)
  if not prefix then return nil, refused end
  local expected = #names
  if row_of_id ~= nil then
    expected = expected + 1
    local row_key = KEYS[#names + 1]
    if row_key ~= prefix .. 'job:' .. tostring(row_of_id) then
      return nil, redis.error_reply('BADID row key ' .. tostring(row_key) .. ' does not belong to ' ..
        tostring(row_of_id) .. ' in ' .. prefix)
    end
  end
  if #KEYS ~= expected then
    return nil, redis.error_reply('BADARG expected ' .. expected .. ' KEYS, got ' .. #KEYS)
  end
  return prefix
end

-- For the batch scripts: after the named keys come one row key per id. KEYS[first + i - 1]
-- must be ids[i]'s row in the queue `prefix`, and there must be exactly one per id.
-- Returns true, or nil and a BADID / BADARG error reply.
local function rows_match(prefix, first, ids)
  if #KEYS ~= first - 1 + #ids then
    return nil, redis.error_reply('BADARG expected ' .. (first - 1 + #ids) .. ' KEYS (the queue keys and one row per job), got ' .. #KEYS)
  end
  for i, id in ipairs(ids) do
    if KEYS[first + i - 1] ~= prefix .. 'job:' .. id then
      return nil, redis.error_reply('BADID row key ' .. tostring(KEYS[first + i - 1]) ..
        ' does not belong to ' .. tostring(id) .. ' in ' .. prefix)
    end
  end
  return true
end

-- The named keys as a table, once named_prefix or queue_prefix accepted them: q.pending is
-- KEYS[i] for names[i] == 'pending', and so on; q.prefix is 'emq:{q}:'. The shared pieces
-- (includes/rows, includes/claim_jobs, ...) take this table instead of long key lists.
local function keys_by_name(prefix, names)
  local q = {prefix = prefix}
  for i, name in ipairs(names) do q[name] = KEYS[i] end
  return q
end
