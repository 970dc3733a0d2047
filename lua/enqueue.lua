-- enqueue.lua: add one job to the queue, idempotently.
--
-- A job whose id the queue already knows (a live row, a recent completion in emq:{q}:done,
-- or an id a producer gave within the last `keep given` ms, includes/given) is refused as a
-- duplicate and nothing changes, so a producer that retries an enqueue after a timeout
-- cannot create the job twice.
-- Payloads are text: UTF-8 of at most 1 MiB (1048576 bytes), checked here before any
-- write, so no reader ever meets bytes it cannot decode. The job takes the next arrival
-- number (includes/arrival): it is claimed after every job that reached the server before
-- it, whatever the clock its id was minted on. An id minted more than 60 s ahead of the
-- server's clock is refused (includes/job_id).
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[3]  emq:{q}:done        sorted set of recently completed ids
-- KEYS[4]  emq:{q}:given       sorted set: ids producers gave, score = first arrival (server ms)
-- KEYS[5]  emq:{q}:stats       hash of counters ('enqueued' is the arrival count)
-- KEYS[6]  emq:{q}:job:<id>    the new row
-- ARGV[1]  job id              branded JOB id
-- ARGV[2]  payload             UTF-8 text, 0..1048576 bytes
-- ARGV[3]  delay               milliseconds before the job may be claimed, 0..604800000
-- ARGV[4]  keep given          milliseconds the id is remembered in emq:{q}:given, 0..604800000;
--                              0: the id was minted by the library, and is not recorded
--
-- Replies
--   {'enqueued', id}              the row exists, id is in pending (or scheduled)
--   {'duplicate', id, state}      refused; state is the row's state, 'done', or '' (the id
--                                 was given within keep given and its job is gone)
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
--- @include "includes/given"

local pending_key, scheduled_key, done_key, given_key, stats_key, row_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id = ARGV[1]

local prefix, refused = queue_prefix({'pending', 'scheduled', 'done', 'given', 'stats'}, id)
if not prefix then return refused end
if not is_job_id(id) then
  return redis.error_reply('BADID ' .. printable(id) .. ' is not a JOB id')
end
local argv, refused = checked_args({{'payload', 'payload_bytes', text = true}, {'delay', 'delay_ms'},
  {'keep given', 'keep_given_ms'}}, 2)
if not argv then return refused end
local payload, delay_ms, keep_given = unpack(argv)
local now = server_now_ms()
refused = minted_in_time(id, now)
if refused then return refused end

if redis.call('EXISTS', row_key) == 1 then
  return {'duplicate', id, redis.call('HGET', row_key, 'state') or ''}
end
if redis.call('ZSCORE', done_key, id) then
  return {'duplicate', id, 'done'}
end
if was_given(given_key, id, now, keep_given) then
  return {'duplicate', id, ''}
end

local arrival = arrivals(stats_key, 1)
if keep_given > 0 then
  forget_given(given_key, now, keep_given)
  redis.call('ZADD', given_key, now, id)
end
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
