-- complete.lua: complete a job, fenced by the token its claim minted.
--
-- Only the holder may complete: the row must be 'active' with its token equal to the
-- caller's fencing token. A worker whose lease expired (the job was reaped, or claimed again by
-- someone else) is refused and nothing changes -- the job stays where it is for its real
-- holder. On success the row is deleted, the id leaves the active set, and the
-- id is remembered in emq:{q}:done (the newest `keep done` of them) so a duplicate enqueue
-- is refused; a job forgotten by done loses its effects-ledger entry too (its bound). The
-- row is the truth: if the active set had lost the id's entry, the job still completes,
-- and the missing entry is counted in stats 'corrupt'.
--
-- KEYS[1]  emq:{q}:active      sorted set
-- KEYS[2]  emq:{q}:done        sorted set of recently completed ids, score = server ms
-- KEYS[3]  emq:{q}:stats       hash of counters ('completed' is bumped)
-- KEYS[4]  emq:{q}:effects     hash: the effects ledger (entries of forgotten jobs go)
-- KEYS[5]  emq:{q}:job:<id>    the row
-- ARGV[1]  job id
-- ARGV[2]  token               the fencing token the claim returned, 1..2147483647
-- ARGV[3]  keep done           how many completed ids emq:{q}:done keeps, 0..1000000
--
-- Replies
--   {'completed'}               completed: the row is gone, the id is in done
--   {'stale', state, token}     refused: the caller no longer holds the job (the row's
--                               state and token)
--   {'gone'}                    refused: no such row (already completed, or never enqueued)
-- Errors
--   BADARG  token or keep done out of range, or KEYS[1..4] not the keys above of one queue
--   BADID   KEYS[5] is not the row of ARGV[1] in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/complete_job"

local NAMES = {'active', 'done', 'stats', 'effects'}
local row_key = KEYS[5]
local id = ARGV[1]

local prefix, refused = queue_prefix(NAMES, id)
if not prefix then return refused end
local argv, refused = checked_args({{'token', 'token'}, {'keep done', 'keep_done'}}, 2)
if not argv then return refused end
local token, keep_done = unpack(argv)

local q = keys_by_name(prefix, NAMES)
q.now = server_now_ms()
local outcomes = complete_jobs(q, {row_key}, {id}, {token})
if outcomes[1] ~= 'completed' then return outcomes[1] end
trim_done(q, keep_done)
redis.call('HINCRBY', q.stats, 'completed', 1)
return {'completed'}
