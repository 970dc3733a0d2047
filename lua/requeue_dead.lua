-- requeue_dead.lua: give dead jobs a fresh chance: each goes back to pending, at its place.
--
-- For each id given whose row says 'dead': the id leaves emq:{q}:dead and goes back to
-- pending at its own arrival number (includes/arrival), ahead of every job that arrived
-- after it, as a reaped job does; its row says 'pending' with fresh tries (attempts and
-- stalled back to 0) and no longer says why it died (reason, dead_ms go; its last error
-- stays, for a person to read). Its count of unstarted recoveries is kept: it bounds a job
-- no worker ever starts (a lost reply each time), which a requeue does not cure. Its token is kept: a token is never handed out twice,
-- so a worker that held the job before it died is still refused by the fence. Idle workers
-- are woken (includes/wake). An id whose row says anything else is left alone ('not_dead':
-- a live job, whatever a stray entry in the dead set says), and one with no row cannot be
-- requeued ('gone': a dead entry with no row has no payload; Queue.purge_dead removes it).
-- This is lesson 07's requeue script (echoq/teaching/exercises/requeue), bounded and with
-- each row in KEYS: at most 1000 ids per call; Queue.requeue_dead calls again for more.
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[3]  emq:{q}:stats       hash of counters ('requeued' is bumped)
-- KEYS[4..3+K]  emq:{q}:job:<id>   the row of each job, in ARGV's order
-- ARGV[1..K]  id, ...          1..1000 JOB ids
--
-- Replies
--   {outcome, ...}              one per id, in order: 'requeued', 'not_dead' (its row says
--                               another state: nothing changed) or 'gone' (no row: nothing
--                               changed). An id given twice is requeued once, then 'not_dead'.
-- Errors
--   BADARG  no ids or more than 1000, or KEYS not the keys above of one queue
--   BADID   an id that is not a JOB id, or a row key that is not the row of its id in that queue
--- @include "includes/queue_keys"
--- @include "includes/id_list"
--- @include "includes/wake"
--- @include "includes/arrival"

local pending_key, dead_key, stats_key = KEYS[1], KEYS[2], KEYS[3]

local prefix, refused = named_prefix({'pending', 'dead', 'stats'})
if not prefix then return refused end
refused = refuse_id_list(prefix, 4)
if refused then return refused end

local outcomes, requeued = {}, 0
for i, id in ipairs(ARGV) do
  local row_key = KEYS[3 + i]
  local state = redis.pcall('HGET', row_key, 'state')
  if type(state) == 'table' or (state == false and redis.call('EXISTS', row_key) == 0) then
    outcomes[i] = 'gone'  -- no row, or a key that is not a hash (no row of ours)
  elseif state ~= 'dead' then
    outcomes[i] = 'not_dead'
  else
    redis.call('ZREM', dead_key, id)
    redis.call('HSET', row_key, 'state', 'pending', 'attempts', 0, 'stalled', 0)
    redis.call('HDEL', row_key, 'reason', 'dead_ms', 'confirm')
    redis.call('ZADD', pending_key, arrival_of(row_key), id)
    requeued = requeued + 1
    outcomes[i] = 'requeued'
  end
end
if requeued > 0 then redis.call('HINCRBY', stats_key, 'requeued', requeued) end
wake(prefix, requeued)
return outcomes
