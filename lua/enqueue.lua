-- enqueue.lua: add one job to the queue, idempotently.
--
-- A job whose id the queue already knows (a live row, or a recent completion in
-- emq:{q}:done) is refused as a duplicate and nothing changes, so a producer that retries
-- an enqueue after a timeout cannot create the job twice.
-- Payloads are text: UTF-8 of at most 1 MiB (1048576 bytes), checked here before any
-- write, so no reader ever meets bytes it cannot decode. The job takes the next arrival
-- number (includes/arrival): it is claimed after every job that reached the server before
-- it, whatever the clock its id was minted on. An id minted more than 60 s ahead of the
-- server's clock is refused (includes/job_id).
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[3]  emq:{q}:done        sorted set of recently completed ids
-- KEYS[4]  emq:{q}:stats       hash of counters ('enqueued' is the arrival count)
-- KEYS[5]  emq:{q}:job:<id>    the new row
-- ARGV[1]  job id              branded JOB id
-- ARGV[2]  payload             UTF-8 text, 0..1048576 bytes
-- ARGV[3]  delay               milliseconds before the job may be claimed, 0..604800000
--
-- Replies
--   {'enqueued', id}              the row exists, id is in pending (or scheduled)
--   {'duplicate', id, state}      refused; state is the row's state, or 'done'
-- Errors
--   BADID       ARGV[1] is not a JOB id, or KEYS[5] is not that id's row key in this queue
--   BADARG      delay out of range, or KEYS[1..4] not the keys above of one queue
--   BADPAYLOAD  the payload is not UTF-8 text, or longer than 1048576 bytes
--   BADCLOCK    the id was minted more than 60000 ms ahead of the server's clock
--- @include "includes/server_now"
--- @include "includes/job_id"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/wake"
--- @include "includes/arrival"

local pending_key, scheduled_key, done_key, stats_key, row_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]

local prefix, refused = queue_prefix({'pending', 'scheduled', 'done', 'stats'}, id)
if not prefix then return refused end
if not is_job_id(id) then
  return redis.error_reply('BADID ' .. printable(id) .. ' is not a JOB id')
end
local argv, refused = checked_args({{'payload', 'payload_bytes', text = true}, {'delay', 'delay_ms'}}, 2)
if not argv then return refused end
local payload, delay_ms = unpack(argv)
local now = server_now_ms()
refused = minted_in_time(id, now)
if refused then return refused end

if redis.call('EXISTS', row_key) == 1 then
  return {'duplicate', id, redis.call('HGET', row_key, 'state') or ''}
end
if redis.call('ZSCORE', done_key, id) then
  return {'duplicate', id, 'done'}
end

local arrival = arrivals(stats_key, 1)
if delay_ms > 0 then
  redis.call('HSET', row_key, 'state', 'scheduled', 'attempts', 0, 'stalled', 0,
    'payload', payload, 'enqueued_ms', now, 'arrival', arrival)
  redis.call('ZADD', scheduled_key, now + delay_ms, id)
else
  redis.call('HSET', row_key, 'state', 'pending', 'attempts', 0, 'stalled', 0,
    'payload', payload, 'enqueued_ms', now, 'arrival', arrival)
  redis.call('ZADD', pending_key, arrival, id)
  wake(prefix, 1)
end
return {'enqueued', id}
