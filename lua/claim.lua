-- claim.lua: the recoverable claim. Take the oldest pending job(s) into the active set
-- under a lease, never out of the queue.
--
-- ZPOPMIN takes the byte-smallest id from the all-score-0 pending set, which is the
-- oldest (JOB ids sort in mint order). HINCRBY bumps the row's attempts: the new value is
-- the job's attempt number, the fencing token that complete/retry/extend must present.
-- The lease deadline is the server's TIME plus the lease, so a reap judges it on the same
-- clock. A worker that dies now leaves the job in the active set, where a reap finds it
-- once the lease runs out.
-- Before popping, it promotes due rows: every retry in emq:{q}:scheduled whose backoff has
-- run out (due time <= server now, at most 1000 per call) moves to pending, row state
-- 'pending', so it is claimed in id order with the rest.
-- The one key not in KEYS, a popped id's row emq:{q}:job:<id>, is built from KEYS[1]'s own
-- prefix (includes/queue_keys), so it carries the same {q} tag and lives in the same slot.
--
-- KEYS[1]  emq:{q}:pending     sorted set, score 0
-- KEYS[2]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[3]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[4]  emq:{q}:stats       hash of counters
-- ARGV[1]  lease               milliseconds, 1..86400000
-- ARGV[2]  count               how many jobs to claim at most, 1..1000
--
-- Replies
--   {}                                     nothing pending
--   {id, payload, attempt, deadline, ...}  four values per claimed job; attempt is the
--                                          row's attempts (the fencing token), deadline
--                                          is server ms
-- Errors
--   BADARG  lease or count out of range, or KEYS not the four keys above of one queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/claim_jobs"

local pending_key, active_key, scheduled_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local prefix, refused = queue_prefix({'pending', 'active', 'scheduled', 'stats'})
if not prefix then return refused end
local lease_ms, count
lease_ms, refused = whole(ARGV[1], 'lease', 'lease_ms')
if not lease_ms then return refused end
count, refused = whole(ARGV[2], 'count', 'count')
if not count then return refused end

local now = server_now_ms()
promote_due(pending_key, scheduled_key, prefix, now)
local reply = {}
claim_jobs(pending_key, active_key, stats_key, prefix, now, lease_ms, count, reply)
return reply
