-- waiting.lua: what an idle worker needs to know, in one atomic read on the server's clock.
--
-- How many jobs are pending, how many wait out a retry backoff in the scheduled set and how
-- soon the earliest of them is due, and how many leases in the active set have run out
-- (jobs of dead workers, waiting for a stalled check). A worker in burst mode stops only
-- when all of these are 0; an idle worker sleeps no longer than the next due time. Writes
-- nothing.
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[3]  emq:{q}:scheduled   sorted set, score = due time (server ms)
--
-- Replies
--   {pending, scheduled, due in, expired, now}
--                                           counts; due in is the milliseconds until the
--                                           earliest scheduled job is due (0 if it is due
--                                           now), -1 when none is scheduled; now is the
--                                           server's clock (ms) the counts were read on
-- Errors
--   BADARG  KEYS not the three keys above of one queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"

local pending_key, active_key, scheduled_key = KEYS[1], KEYS[2], KEYS[3]

local prefix, refused = queue_prefix({'pending', 'active', 'scheduled'})
if not prefix then return refused end

local now = server_now_ms()
local first = redis.call('ZRANGE', scheduled_key, 0, 0, 'WITHSCORES')
local due_in = -1
if #first > 0 then due_in = math.max(0, tonumber(first[2]) - now) end
return {redis.call('ZCARD', pending_key), redis.call('ZCARD', scheduled_key), due_in,
  redis.call('ZCOUNT', active_key, '-inf', now), now}
