-- release_many.lua: give K held jobs back to pending before they were started, each fenced
-- by its own token, in ONE call.
--
-- A stopping Worker sends the prefetched jobs still waiting in its buffer, so it holds
-- nothing past its stop and another worker can take them at once. Each job must be held
-- by the caller (the fence of complete.lua); a refused one is left alone. A released job
-- gets its try back: the row's attempts goes down by one, so a give-back never costs a job
-- one of its max attempts. Its token stays -- a token is never handed out twice. It goes
-- back to its arrival number (includes/arrival), so a released job is taken before any
-- younger one. Idle workers are woken (includes/wake). The row is the truth: the fence
-- reads the row, so a held job whose active entry had gone missing is still released (and
-- the missing entry counted in stats 'corrupt', as complete.lua does).
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[3]  emq:{q}:stats       hash of counters ('released' is bumped; 'corrupt', rarely)
-- KEYS[4..3+K]  emq:{q}:job:<id>   the row of each job, in ARGV's order
-- ARGV[1..]  id, token, id, token, ...   1..1000 jobs; token is the fencing token the
--                              claim returned, 1..2147483647
--
-- Replies
--   {outcome, ...}              one per job, in order: 'released', 'stale' (the caller no
--                               longer holds it) or 'gone' (no such row)
-- Errors
--   BADARG  no jobs or more than 1000, an odd number of id/token values, a token out of
--           range, or KEYS not the keys above of one queue
--   BADID   a row key that is not the row of its id in that queue
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/fence"
--- @include "includes/wake"
--- @include "includes/arrival"

local pending_key, active_key, stats_key = KEYS[1], KEYS[2], KEYS[3]

local prefix, refused = named_prefix({'pending', 'active', 'stats'})
if not prefix then return refused end
local ids, tokens = id_token_pairs(1, 1, '')
if not ids then return tokens end
local ok
ok, refused = rows_match(prefix, 4, ids)
if not ok then return refused end

local outcomes, released = {}, 0
for i, id in ipairs(ids) do
  local row_key = KEYS[3 + i]
  local refusal = fence(row_key, tokens[i])
  if refusal then
    outcomes[i] = refusal[1]
  else
    note_missing_lease(active_key, stats_key, id)
    redis.call('ZREM', active_key, id)
    redis.call('HSET', row_key, 'state', 'pending')
    redis.call('HINCRBY', row_key, 'attempts', -1)
    redis.call('ZADD', pending_key, arrival_of(row_key), id)
    released = released + 1
    outcomes[i] = 'released'
  end
end
if released > 0 then redis.call('HINCRBY', stats_key, 'released', released) end
wake(prefix, released)
return outcomes
