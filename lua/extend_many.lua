-- extend_many.lua: extend the leases of K held jobs in ONE call, each fenced by its own
-- token (BullMQ's extendLocks does the same for its locks).
--
-- A Worker sends every job it holds once per extension: the jobs its handlers are running AND
-- the prefetched ones waiting in its buffer, so a job that waits is never reaped while it
-- waits. Each extension is fenced exactly as in extend.lua: a job the caller no longer holds
-- (reaped, or claimed again by someone else) is refused on its own, its new holder's lease
-- left alone, and the others are still extended. Every extended lease gets the same
-- deadline: the server's now plus the lease. The row is the truth, as in extend.lua: a
-- held job whose active entry had gone missing gets it back (a lease nobody could see would
-- never be reaped), and the missing entry is counted in stats 'corrupt'.
--
-- KEYS[1]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[2]  emq:{q}:stats       hash of counters ('corrupt' is bumped, rarely)
-- KEYS[3..2+K]  emq:{q}:job:<id>   the row of each job, in ARGV's order
-- ARGV[1]  lease               milliseconds from the server's now, 1..86400000
-- ARGV[2..]  id, token, id, token, ...   1..1000 jobs; token is the fencing token the
--                              claim returned, 1..2147483647
--
-- Replies
--   {deadline, {outcome, ...}}  the new deadline (server ms), then one outcome per job in
--                               order: 'extended', 'stale' (the caller no longer holds it)
--                               or 'gone' (no such row)
-- Errors
--   BADARG  lease or a token out of range, no jobs or more than 1000, an odd number of
--           id/token values, or KEYS[1..2] not the keys above of one queue
--   BADID   a row key that is not the row of its id in that queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/fence"

local active_key, stats_key = KEYS[1], KEYS[2]

local prefix, refused = named_prefix({'active', 'stats'})
if not prefix then return refused end
local argv, refused = checked_args({{'lease', 'lease_ms'}})
if not argv then return refused end
local lease_ms = argv[1]
local ids, tokens = id_token_pairs(2, 1, ' after the lease')
if not ids then return tokens end
local ok
ok, refused = rows_match(prefix, 3, ids)
if not ok then return refused end

local deadline = server_now_ms() + lease_ms
local outcomes = {}
for i, id in ipairs(ids) do
  local refusal = fence(KEYS[2 + i], tokens[i])
  if refusal then
    outcomes[i] = refusal[1]
  else
    note_missing_lease(active_key, stats_key, id)
    redis.call('ZADD', active_key, deadline, id)
    outcomes[i] = 'extended'
  end
end
return {deadline, outcomes}
