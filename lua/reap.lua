-- reap.lua: the bare reaper. Move every job whose lease has expired back to pending.
--
-- Detect and move happen in ONE script: no other command runs between reading the
-- expired members and moving them, so two overlapping reapers can never both move the
-- same job (the two-step check-then-move in echoq/teaching/contrasts.py can). "Expired"
-- means a deadline at or before the server's now -- the same clock claim.lua wrote it with.
-- A job moved goes back to its arrival number (includes/arrival), ahead of younger jobs.
-- At most `limit` jobs move per call, so one call never holds the server for long; the
-- caller calls again while a full batch came back. Each moved id's row emq:{q}:job:<id> is
-- built from KEYS[1]'s prefix (includes/queue_keys): same {q} tag, same slot. An expired
-- entry whose row is missing or does not say 'active' is corrupt: it is not moved to
-- pending, and no row is ever written for it (includes/rows: counted in stats 'corrupt';
-- dead-lettered, or dropped when it was a stray copy).
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[3]  emq:{q}:scheduled   sorted set (read, to recognise a stray copy)
-- KEYS[4]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[5]  emq:{q}:done        sorted set of recently completed ids (read)
-- KEYS[6]  emq:{q}:stats       hash of counters ('reaped' is bumped)
-- KEYS[7]  emq:{q}:effects     hash: the effects ledger (an evicted dead job's entry goes)
-- ARGV[1]  limit               most expired entries to handle in this call, 1..10000
-- ARGV[2]  keep dead           how many jobs emq:{q}:dead keeps, 0..1000000
--
-- Replies
--   {now, {id, ...}, corrupt}   the server's now (ms), the ids moved to pending (maybe
--                               none), and how many expired entries were corrupt (handled,
--                               not moved): a caller loops while moved + corrupt = limit
-- Errors
--   BADARG  limit or keep dead out of range, or KEYS not the seven keys above of one queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/rows"
--- @include "includes/wake"
--- @include "includes/arrival"

local NAMES = {'pending', 'active', 'scheduled', 'dead', 'done', 'stats', 'effects'}
local prefix, refused = queue_prefix(NAMES)
if not prefix then return refused end
local argv, refused = checked_args({{'limit', 'limit'}, {'keep dead', 'keep_dead'}})
if not argv then return refused end
local limit, keep_dead = unpack(argv)

local q = keys_by_name(prefix, NAMES)
q.now, q.keep_dead = server_now_ms(), keep_dead
local expired = redis.call('ZRANGEBYSCORE', q.active, '-inf', q.now, 'LIMIT', 0, limit)
local moved, corrupt = {}, 0
for _, id in ipairs(expired) do
  redis.call('ZREM', q.active, id)
  local row = take_row(q, id, 'active')
  if row then
    redis.call('ZADD', q.pending, arrival_of(row), id)
    redis.call('HSET', row, 'state', 'pending')
    moved[#moved + 1] = id
  else
    corrupt = corrupt + 1
  end
end
if #moved > 0 then redis.call('HINCRBY', q.stats, 'reaped', #moved) end
if q.died then trim_dead(q) end
wake(prefix, #moved)
return {q.now, moved, corrupt}
