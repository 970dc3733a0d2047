-- purge_dead.lua: forget dead jobs for good: their rows are deleted.
--
-- For each id given: a row that says 'dead' is deleted, with the id's entries in
-- emq:{q}:dead and in the effects ledger ('purged'); an entry in the dead set with no row (a
-- corrupt one, includes/rows) is removed too ('purged'). A row that says anything else is a
-- live job and is left alone, and so is its entry anywhere ('not_dead'); an id that is
-- neither a row nor in the dead set is 'gone'. At most 1000 ids per call: Queue.purge_dead
-- calls again for more.
--
-- KEYS[1]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[2]  emq:{q}:stats       hash of counters ('purged' is bumped)
-- KEYS[3]  emq:{q}:effects     hash: the effects ledger (a purged job's entry goes)
-- KEYS[4..3+K]  emq:{q}:job:<id>   the row of each job, in ARGV's order
-- ARGV[1..K]  id, ...          1..1000 JOB ids
--
-- Replies
--   {outcome, ...}              one per id, in order: 'purged', 'not_dead' (its row says
--                               another state: nothing changed) or 'gone' (nothing to purge)
-- Errors
--   BADARG  no ids or more than 1000, or KEYS not the keys above of one queue
--   BADID   an id that is not a JOB id, or a row key that is not the row of its id in that queue
--- @include "includes/queue_keys"
--- @include "includes/id_list"

local dead_key, stats_key, effects_key = KEYS[1], KEYS[2], KEYS[3]

local prefix, refused = named_prefix({'dead', 'stats', 'effects'})
if not prefix then return refused end
refused = refuse_id_list(prefix, 4)
if refused then return refused end

local outcomes, purged = {}, 0
for i, id in ipairs(ARGV) do
  local row_key = KEYS[3 + i]
  local state = redis.pcall('HGET', row_key, 'state')
  local has_row = type(state) ~= 'table' and (state ~= false or redis.call('EXISTS', row_key) == 1)
  if has_row and state ~= 'dead' then
    outcomes[i] = 'not_dead'
  elseif has_row or redis.call('ZSCORE', dead_key, id) then
    if has_row then redis.call('DEL', row_key) end
    redis.call('ZREM', dead_key, id)
    redis.call('HDEL', effects_key, id)
    purged = purged + 1
    outcomes[i] = 'purged'
  else
    outcomes[i] = 'gone'
  end
end
if purged > 0 then redis.call('HINCRBY', stats_key, 'purged', purged) end
return outcomes
