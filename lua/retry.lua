-- retry.lua: a handler failed; give the job back for another try, or dead-letter it.
--
-- Fenced like complete, by the token. If the row's attempts (the tries so far, this one
-- included; a released claim gave its try back) have reached max attempts, the job goes
-- to the dead set with the error kept on its row (the durable floor: nothing is lost, a
-- person can look at it), and the dead set is trimmed to its newest `keep dead` jobs
-- (includes/dead_letter). Otherwise it waits out a backoff measured on the server's clock
-- in the scheduled set (claim.lua promotes it when due), or goes straight back to pending
-- (at its arrival number, includes/arrival) when the backoff is 0. The error text is UTF-8 of at most 4096 bytes (echoq.Queue.retry
-- shortens a longer one). The row is the truth: if the active set had lost the id's
-- entry, the move still happens, and the missing entry is counted in stats 'corrupt'.
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:active      sorted set
-- KEYS[3]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[4]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[5]  emq:{q}:stats       hash of counters ('retried' or 'dead' is bumped)
-- KEYS[6]  emq:{q}:effects     hash: the effects ledger (an evicted dead job's entry goes)
-- KEYS[7]  emq:{q}:job:<id>    the row
-- ARGV[1]  job id
-- ARGV[2]  token               the fencing token the claim returned, 1..2147483647
-- ARGV[3]  error               text kept on the row as 'error', UTF-8, 0..4096 bytes
-- ARGV[4]  backoff             milliseconds before the job may be claimed again,
--                               0..604800000
-- ARGV[5]  max attempts        dead-letter once the row's attempts >= this, 1..1000
-- ARGV[6]  keep dead           how many jobs emq:{q}:dead keeps, 0..1000000
--
-- Replies
--   {'retried', attempts}          back in pending now; attempts: the row's tries so far
--   {'scheduled', attempts, due}   in scheduled until `due` (server ms)
--   {'dead', attempts}             in the dead set, row state 'dead', reason 'max_attempts'
--   {'stale', state, token}        refused: the caller no longer holds the job (the row's
--                                  state and token)
--   {'gone'}                       refused: no such row
-- Errors
--   BADARG  token, error, backoff, max attempts or keep dead out of range, or KEYS[1..6]
--           not the keys above of one queue
--   BADID   KEYS[7] is not the row of ARGV[1] in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/fence"
--- @include "includes/dead_letter"
--- @include "includes/wake"
--- @include "includes/arrival"

local NAMES = {'pending', 'active', 'scheduled', 'dead', 'stats', 'effects'}
local row_key = KEYS[7]
local id = ARGV[1]

local prefix, refused = queue_prefix(NAMES, id)
if not prefix then return refused end
local argv, refused = checked_args({{'token', 'token'}, {'error', 'text_bytes', text = true},
  {'backoff', 'delay_ms'}, {'max attempts', 'max_attempts'}, {'keep dead', 'keep_dead'}}, 2)
if not argv then return refused end
local token, err, backoff_ms, max_attempts, keep_dead = unpack(argv)

refused = fence(row_key, token)
if refused then return refused end
local attempts = tonumber(redis.call('HGET', row_key, 'attempts')) or 0

local q = keys_by_name(prefix, NAMES)
q.now, q.keep_dead = server_now_ms(), keep_dead
note_missing_lease(q.active, q.stats, id)
redis.call('ZREM', q.active, id)
if attempts >= max_attempts then
  dead_letter(q, id, true, 'max_attempts', err)
  trim_dead(q)
  return {'dead', attempts}
end
redis.call('HINCRBY', q.stats, 'retried', 1)
if backoff_ms == 0 then
  redis.call('HSET', row_key, 'state', 'pending', 'error', err)
  redis.call('ZADD', q.pending, arrival_of(row_key), id)
  wake(prefix, 1)
  return {'retried', attempts}
end
redis.call('HSET', row_key, 'state', 'scheduled', 'error', err)
redis.call('ZADD', q.scheduled, q.now + backoff_ms, id)
return {'scheduled', attempts, q.now + backoff_ms}
