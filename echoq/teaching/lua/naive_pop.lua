-- naive_pop.lua: THE CAUTIONARY CONTRAST -- pop-and-process. Not part of the real path.
--
-- Takes the oldest pending job and removes it from Valkey entirely: the id leaves the
-- pending set and its row is deleted, in this one script. The caller now holds the only
-- copy of the job, in its own memory. If it crashes before the work is done (a deploy, an
-- OOM kill, a power cut) the job is in no set and has no row: it is lost, and nothing can
-- recover it. Compare claim.lua, which parks the id in the active set under a lease.
-- Like claim.lua it cannot know the popped id's row key beforehand, so it builds it from
-- KEYS[1]'s own prefix (includes/queue_keys): same {q} hash tag, same slot.
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (lua/includes/arrival)
-- KEYS[2]  emq:{q}:stats       hash of counters ('naive_popped' is bumped)
-- (no ARGV)
--
-- Replies
--   {}                          nothing pending
--   {id, payload}               the job, now held nowhere but by the caller
-- Errors
--   BADARG  KEYS not the two keys above of one queue
--- @include "includes/queue_keys"

local pending_key, stats_key = KEYS[1], KEYS[2]
local prefix, refused = queue_prefix({'pending', 'stats'})
if not prefix then return refused end

while true do
  local popped = redis.call('ZPOPMIN', pending_key)
  if #popped == 0 then return {} end
  local id = popped[1]
  local row = prefix .. 'job:' .. id
  local payload = redis.call('HGET', row, 'payload')
  if payload then
    redis.call('DEL', row)
    redis.call('HINCRBY', stats_key, 'naive_popped', 1)
    return {id, payload}
  end
  -- An id without a row: count it and take the next, as claim.lua does.
  redis.call('HINCRBY', stats_key, 'orphans', 1)
end
