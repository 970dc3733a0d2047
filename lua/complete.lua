-- complete.lua: finish a job, fenced by the attempt number its claim minted.
--
-- Only the holder may complete: the row must be 'active' with attempts equal to the
-- caller's attempt. A worker whose lease expired (the job was reaped, or claimed again by
-- someone else) is refused and nothing changes -- the job stays where it is for its real
-- holder. On success the row is deleted (retired), the id leaves the active set, and the
-- id is remembered in emq:{q}:done (the newest `keep done` of them) so a duplicate enqueue
-- is refused.
--
-- KEYS[1]  emq:{q}:active      sorted set
-- KEYS[2]  emq:{q}:done        sorted set of recently completed ids, score = server ms
-- KEYS[3]  emq:{q}:stats       hash of counters ('completed' is bumped)
-- KEYS[4]  emq:{q}:job:<id>    the row
-- ARGV[1]  job id
-- ARGV[2]  attempt             the attempt number (fencing token) the claim returned
-- ARGV[3]  keep done           how many completed ids emq:{q}:done keeps, 0..1000000
--
-- Replies
--   {'completed'}               retired
--   {'stale', state, attempts}  refused: the caller no longer holds the job
--   {'gone'}                    refused: no such row (already completed, or never enqueued)
-- Errors
--   BADARG  keep done out of range, or KEYS[1..3] not the keys above of one queue
--   BADID   KEYS[4] is not the row of ARGV[1] in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/complete_job"

local active_key, done_key, stats_key, row_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, attempt = ARGV[1], ARGV[2]

local prefix, refused = queue_prefix({'active', 'done', 'stats'}, id)
if not prefix then return refused end
local keep_done
keep_done, refused = whole(ARGV[3], 'keep done', 'keep_done')
if not keep_done then return refused end

local outcome = complete_job(active_key, done_key, row_key, id, attempt, server_now_ms())
if outcome ~= 'completed' then return outcome end
trim_done(done_key, keep_done)
redis.call('HINCRBY', stats_key, 'completed', 1)
return {'completed'}
