-- snapshot.lua: one atomic read of a whole queue -- what the lab draws from.
--
-- Because it is one script, no move runs in the middle of it: a picture drawn from it
-- never shows a job in two places, or in none. Listed ids' rows emq:{q}:job:<id> are read
-- at keys built from KEYS[1]'s prefix (includes/queue_keys): same {q} tag, same slot.
-- Whatever something else may have written there, every string it replies with is text:
-- a member that is not a JOB id, and a row's state and reason, are shown with every byte
-- outside printable ASCII escaped (includes/text escaped), and an id with no row (a
-- corrupt entry, see includes/rows) is listed in its set but has no row in the reply.
--
-- KEYS[1]  emq:{q}:pending     KEYS[2]  emq:{q}:active    KEYS[3]  emq:{q}:scheduled
-- KEYS[4]  emq:{q}:dead        KEYS[5]  emq:{q}:done      KEYS[6]  emq:{q}:stats
-- KEYS[7]  emq:{q}:effects
-- ARGV[1]  limit               most members listed per set, 1..10000 (the counts are
--                               always exact)
--
-- Replies
--   {now,
--    {pending count, {id, ...}},
--    {active count, {id, deadline, ...}},
--    {scheduled count, {id, due, ...}},
--    {dead count, {id, died, ...}},
--    {done count, {id, finished, ...}},       newest first
--    {field, value, ...},                     the stats hash
--    {id, state, attempts, stalled, reason, token, unstarted, ...}  one per listed id that
--                                             has a row: attempts are its tries, token its
--                                             fencing token, unstarted its recoveries of a
--                                             claim never confirmed started
--    {id, effects, ...}}                      the effects ledger for listed ids
-- Errors
--   BADARG  limit out of range, or KEYS not the seven keys above of one queue
--- @include "includes/server_now"
--- @include "includes/job_id"
--- @include "includes/queue_keys"
--- @include "includes/args"

local prefix, refused =
  queue_prefix({'pending', 'active', 'scheduled', 'dead', 'done', 'stats', 'effects'})
if not prefix then return refused end

local argv, refused = checked_args({{'limit', 'limit'}})
if not argv then return refused end
local limit = argv[1]
local now = server_now_ms()

local pending = redis.call('ZRANGE', KEYS[1], 0, limit - 1)
local active = redis.call('ZRANGE', KEYS[2], 0, limit - 1, 'WITHSCORES')
local scheduled = redis.call('ZRANGE', KEYS[3], 0, limit - 1, 'WITHSCORES')
local dead = redis.call('ZRANGE', KEYS[4], 0, limit - 1, 'WITHSCORES')
local done = redis.call('ZREVRANGE', KEYS[5], 0, limit - 1, 'WITHSCORES')

local rows, effects = {}, {}
local function add_row(id)
  local f = redis.pcall('HMGET', prefix .. 'job:' .. id, 'state', 'attempts', 'stalled', 'reason', 'token', 'unstarted')
  if f.err or not f[1] then return end  -- no row (a corrupt entry): nothing to show
  rows[#rows + 1] = id
  rows[#rows + 1] = escaped(f[1])
  rows[#rows + 1] = tonumber(f[2]) or 0
  rows[#rows + 1] = tonumber(f[3]) or 0
  rows[#rows + 1] = f[4] and escaped(f[4]) or ''
  rows[#rows + 1] = tonumber(f[5]) or 0
  rows[#rows + 1] = tonumber(f[6]) or 0
end
for _, id in ipairs(pending) do add_row(id) end
for i = 1, #active, 2 do add_row(active[i]) end
for i = 1, #scheduled, 2 do add_row(scheduled[i]) end
for i = 1, #dead, 2 do add_row(dead[i]) end

local function add_effects(id)
  local n = redis.call('HGET', KEYS[7], id)
  if n then
    effects[#effects + 1] = id
    effects[#effects + 1] = n
  end
end
for i = 1, #rows, 7 do add_effects(rows[i]) end
for i = 1, #done, 2 do add_effects(done[i]) end

local function as_text(list, step)
  for i = 1, #list, step do
    if not is_job_id(list[i]) then list[i] = escaped(list[i]) end
  end
end
as_text(pending, 1)
for _, list in ipairs({active, scheduled, dead, done, effects}) do as_text(list, 2) end
as_text(rows, 7)

return {now,
  {redis.call('ZCARD', KEYS[1]), pending},
  {redis.call('ZCARD', KEYS[2]), active},
  {redis.call('ZCARD', KEYS[3]), scheduled},
  {redis.call('ZCARD', KEYS[4]), dead},
  {redis.call('ZCARD', KEYS[5]), done},
  redis.call('HGETALL', KEYS[6]),
  rows,
  effects}
