-- complete.lua: finish a job, fenced by the token its claim minted.
--
-- Only the holder may complete: the row must be 'active' with attempts equal to the
-- token. A worker whose lease expired (the job was reaped, or claimed again by someone
-- else) is refused and nothing changes -- the job stays where it is for its real holder.
-- On success the row is deleted (retired), the id leaves the active set, and the id is
-- remembered in emq:{q}:done (capped) so a duplicate enqueue is refused.
--
-- KEYS[1]  emq:{q}:active      sorted set
-- KEYS[2]  emq:{q}:done        sorted set of recently completed ids, score = server ms
-- KEYS[3]  emq:{q}:stats       hash of counters ('completed' is bumped)
-- KEYS[4]  emq:{q}:job:<id>    the row
-- ARGV[1]  job id
-- ARGV[2]  token               the attempts value the claim returned
-- ARGV[3]  keep done           how many completed ids to remember (-1 = all)
--
-- Replies
--   {'completed'}               retired
--   {'stale', state, attempts}  refused: the caller no longer holds the job
--   {'gone'}                    refused: no such row (already completed, or never enqueued)
-- Errors
--   BADARG  KEYS[1..3] not the keys above of one queue
--   BADID   KEYS[4] is not the row of ARGV[1] in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/fence"
--- @include "includes/complete_job"

local active_key, done_key, stats_key, row_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, token, keep_done = ARGV[1], ARGV[2], tonumber(ARGV[3] or '10000')

local prefix, refused = queue_prefix({'active', 'done', 'stats'}, id)
if not prefix then return refused end

return complete_job(active_key, done_key, stats_key, row_key, id, token, keep_done, server_now_ms())
