-- extend.lua: extend the lease of a long job, fenced by its token.
--
-- The holder pushes its lease deadline to server now + lease, so a job that is still
-- being worked is not reaped. A worker that lost the job (reaped, or claimed by another)
-- is refused and the other holder's lease is left alone. The row is the truth: if the
-- active set had lost the holder's entry, it is written again (a lease nobody could see
-- would never be reaped), and the missing entry is counted in stats 'corrupt'.
--
-- KEYS[1]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[2]  emq:{q}:stats       hash of counters ('corrupt' is bumped, rarely)
-- KEYS[3]  emq:{q}:job:<id>    the row
-- ARGV[1]  job id
-- ARGV[2]  token               the fencing token the claim returned, 1..2147483647
-- ARGV[3]  lease               milliseconds from the server's now, 1..86400000
--
-- Replies
--   {'extended', deadline}      new deadline in server ms
--   {'stale', state, token}     refused: the caller no longer holds the job (the row's
--                               state and token)
--   {'gone'}                    refused: no such row
-- Errors
--   BADARG  token or lease out of range, or KEYS[1..2] not the keys above of one queue
--   BADID   KEYS[3] is not the row of ARGV[1] in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/fence"

local active_key, stats_key, row_key = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]

local prefix, refused = queue_prefix({'active', 'stats'}, id)
if not prefix then return refused end
local argv, refused = checked_args({{'token', 'token'}, {'lease', 'lease_ms'}}, 2)
if not argv then return refused end
local token, lease_ms = unpack(argv)
refused = fence(row_key, token)
if refused then return refused end

note_missing_lease(active_key, stats_key, id)
local deadline = server_now_ms() + lease_ms
redis.call('ZADD', active_key, deadline, id)
return {'extended', deadline}
