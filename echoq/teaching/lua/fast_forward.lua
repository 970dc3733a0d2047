-- fast_forward.lua: A TEACHING AFFORDANCE, NOT PART OF THE QUEUE. Pull lease deadlines
-- earlier so a learner need not sit through a 30-second lease to watch the reaper work.
--
-- It does not touch any clock. The reaper still asks the server's TIME and still judges
-- "expired" as a deadline at or before that now; this script only rewrites the scores in
-- the active set, exactly as if each lease had been taken `advance` milliseconds earlier.
-- A deadline is never pulled earlier than the server's now, and a lease already expired is
-- left alone. Only the teaching kit (echoq/teaching) runs it; no worker path does.
--
-- KEYS[1]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- ARGV[1]  advance             milliseconds to pull each live deadline earlier,
--                               0..86400000 (the longest lease)
--
-- Replies
--   {now, moved}                the server's now (ms), how many deadlines were moved
-- Errors
--   BADARG  advance out of range, or KEYS[1] not a queue's active set
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"

local active_key = KEYS[1]

local prefix, refused = queue_prefix({'active'})
if not prefix then return refused end
local argv, refused = checked_args({{'advance', 'lease_ms', 0}})
if not argv then return refused end
local advance = argv[1]

local now = server_now_ms()
local live = redis.call('ZRANGEBYSCORE', active_key, '(' .. now, '+inf', 'WITHSCORES')
local moved = 0
for i = 1, #live, 2 do
  local deadline = tonumber(live[i + 1])
  local earlier = math.max(now, deadline - advance)
  if earlier < deadline then
    redis.call('ZADD', active_key, 'XX', earlier, live[i])
    moved = moved + 1
  end
end
return {now, moved}
