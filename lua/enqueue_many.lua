-- enqueue_many.lua: add up to 1000 jobs in ONE call, each exactly as enqueue.lua would.
--
-- Every id, payload and row key is checked before the first write, so a refused call adds
-- nothing: one payload that is not UTF-8 text of at most 1 MiB, or one id minted more than
-- 60 s ahead of the server's clock, refuses the whole call (see enqueue.lua). An id the
-- queue already knows (a live row, a recent completion, an id a producer gave within the
-- last `keep given` ms: includes/given) -- or one given twice in the same call -- is a
-- duplicate and is
-- skipped on its own; the others are enqueued, taking arrival numbers in the order given
-- (includes/arrival): each is claimed after every job that reached the server before it.
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[3]  emq:{q}:done        sorted set of recently completed ids
-- KEYS[4]  emq:{q}:given       sorted set: ids producers gave, score = first arrival (server ms)
-- KEYS[5]  emq:{q}:stats       hash of counters ('enqueued' is the arrival count)
-- KEYS[6..5+N]  emq:{q}:job:<id>   the row of each job, in ARGV's order
-- ARGV[1]  delay               milliseconds before the jobs may be claimed, 0..604800000
-- ARGV[2]  keep given          milliseconds the ids are remembered in emq:{q}:given,
--                              0..604800000; 0: the library minted them, none is recorded
-- ARGV[3..]  id, payload, id, payload, ...   1..1000 jobs; each payload UTF-8 text,
--                               0..1048576 bytes
--
-- Replies
--   {outcome, ...}              one per job, in order: 'enqueued' or 'duplicate'
-- Errors
--   BADID       an id that is not a JOB id, or a row key not its id's row in this queue
--   BADARG      delay out of range, no jobs or more than 1000, an odd number of id/payload
--               values, or KEYS[1..4] not the keys above of one queue
--   BADPAYLOAD  a payload that is not UTF-8 text, or longer than 1048576 bytes; or the
--               payloads together more than CALL_PAYLOAD_BYTES (a server with a payload
--               cap: 16 times the cap; echoq/limits.py)
--   BADCLOCK    an id minted more than 60000 ms ahead of the server's clock
--- @include "includes/server_now"
--- @include "includes/job_id"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/wake"
--- @include "includes/arrival"
--- @include "includes/given"

-- The most payload bytes one call may carry (echoq/limits.py).
local CALL_PAYLOAD_BYTES = {{CALL_PAYLOAD_BYTES}}

local pending_key, scheduled_key, done_key, given_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local prefix, refused = named_prefix({'pending', 'scheduled', 'done', 'given', 'stats'})
if not prefix then return refused end
local argv, refused = checked_args({{'delay', 'delay_ms'}, {'keep given', 'keep_given_ms'}})
if not argv then return refused end
local delay_ms, keep_given = unpack(argv)
local given = #ARGV - 2
if given < 2 or given % 2 ~= 0 or given / 2 > BOUNDS.count[2] then
  return redis.error_reply('BADARG give 1..' .. BOUNDS.count[2] .. ' (id, payload) pairs after the delay and ' ..
    'keep given, got ' .. given .. ' values')
end
local bytes = 0
for i = 4, #ARGV, 2 do bytes = bytes + #ARGV[i] end
if bytes > CALL_PAYLOAD_BYTES then
  return redis.error_reply('BADPAYLOAD the payloads come to ' .. bytes .. ' bytes, more than the ' ..
    CALL_PAYLOAD_BYTES .. ' one call may carry to this server; enqueue them in smaller batches')
end
local now = server_now_ms()
local ids = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if not is_job_id(id) then
    return redis.error_reply('BADID ' .. printable(id) .. ' is not a JOB id')
  end
  refused = minted_in_time(id, now)
  if refused then return refused end
  local ok
  ok, refused = text(ARGV[i + 1], 'payload of ' .. id, 'payload_bytes', 'BADPAYLOAD')
  if not ok then return refused end
  ids[#ids + 1] = id
end
local ok
ok, refused = rows_match(prefix, 6, ids)
if not ok then return refused end

-- Which are new (an id given twice is new once), so that their arrival numbers are taken
-- in one HINCRBY before the first write.
local outcomes, added, given_here = {}, 0, {}
for i, id in ipairs(ids) do
  if given_here[id] or redis.call('EXISTS', KEYS[5 + i]) == 1 or redis.call('ZSCORE', done_key, id)
      or was_given(given_key, id, now, keep_given) then
    outcomes[i] = 'duplicate'
  else
    given_here[id] = true
    added = added + 1
    outcomes[i] = 'enqueued'
  end
end
if added == 0 then return outcomes end
local arrival = arrivals(stats_key, added)
local state = delay_ms > 0 and 'scheduled' or 'pending'
if keep_given > 0 then forget_given(given_key, now, keep_given) end
for i, id in ipairs(ids) do
  if outcomes[i] == 'enqueued' then
    redis.call('HSET', KEYS[5 + i], 'state', state, 'attempts', 0, 'stalled', 0,
      'payload', ARGV[2 + 2 * i], 'enqueued_ms', now, 'arrival', arrival)
    if keep_given > 0 then redis.call('ZADD', given_key, now, id) end
    if delay_ms > 0 then
      redis.call('ZADD', scheduled_key, now + delay_ms, id)
    else
      redis.call('ZADD', pending_key, arrival, id)
    end
    arrival = arrival + 1
  end
end
if delay_ms == 0 then wake(prefix, added) end
return outcomes
