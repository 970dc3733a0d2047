-- extend.lua: the lease heartbeat of a long job, fenced.
--
-- The holder pushes its lease deadline to server now + lease, so a job that is still
-- being worked is not reaped. A worker that lost the job (reaped, or claimed by another)
-- is refused and the other holder's lease is left alone.
--
-- KEYS[1]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[2]  emq:{q}:job:<id>    the row
-- ARGV[1]  job id
-- ARGV[2]  attempt             the attempt number (fencing token) the claim returned
-- ARGV[3]  lease               milliseconds from the server's now, 1..86400000
--
-- Replies
--   {'extended', deadline}      new deadline in server ms
--   {'stale', state, attempts}  refused: the caller no longer holds the job
--   {'gone'}                    refused: no such row
-- Errors
--   BADARG  lease out of range, or KEYS[1] not a queue's active set
--   BADID   KEYS[2] is not the row of ARGV[1] in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/fence"

local active_key, row_key = KEYS[1], KEYS[2]
local id, attempt = ARGV[1], ARGV[2]

local prefix, refused = queue_prefix({'active'}, id)
if not prefix then return refused end
local lease_ms
lease_ms, refused = whole(ARGV[3], 'lease', 'lease_ms')
if not lease_ms then return refused end
refused = fence(row_key, attempt)
if refused then return refused end

local deadline = server_now_ms() + lease_ms
redis.call('ZADD', active_key, 'XX', deadline, id)
return {'extended', deadline}
