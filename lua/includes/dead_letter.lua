-- includes/dead_letter.lua: the durable floor, and its bound.
--
-- `q` is a table of the script's keys (includes/queue_keys keys_by_name) holding at least
-- dead, stats and effects, plus q.now (the server's ms) and q.keep_dead (how many jobs the
-- dead set keeps, 0..1000000).

-- Most dead jobs one call evicts (echoq/limits.py SWEEP_MAX).
local SWEEP_MAX = {{SWEEP_MAX}}

-- Send `id` to the dead set. When it has a row (`has_row`), the row says dead, why
-- (`reason`) and what went wrong (`err`), and keeps its payload, so a person can read it
-- and enqueue it again. An id with no row gets no row: a row holding only a reason would
-- be a partial row, and no script writes one.
local function dead_letter(q, id, has_row, reason, err)
  if has_row then
    redis.call('HSET', q.prefix .. 'job:' .. id, 'state', 'dead', 'reason', reason, 'error', err,
      'dead_ms', q.now)
  end
  redis.call('ZADD', q.dead, q.now, id)
  redis.call('HINCRBY', q.stats, 'dead', 1)
  q.died = (q.died or 0) + 1
end

-- The dead set's bound: keep the newest keep_dead dead jobs. The longest-dead go first, at
-- most 1000 per call (a lowered keep_dead takes a few calls to reach); each evicted job's
-- row and ledger entry go with it, and stats 'dead_evicted' counts them. A row that does
-- not say dead belongs to a live job with a stray entry in the dead set: it stays.
local function trim_dead(q)
  local excess = redis.call('ZCARD', q.dead) - q.keep_dead
  if excess <= 0 then return 0 end
  if excess > SWEEP_MAX then excess = SWEEP_MAX end
  for _, id in ipairs(redis.call('ZRANGE', q.dead, 0, excess - 1)) do
    local row = q.prefix .. 'job:' .. id
    local state = redis.pcall('HGET', row, 'state')
    if state == false or state == 'dead' then
      redis.call('DEL', row)
      redis.call('HDEL', q.effects, id)
    end
  end
  redis.call('ZREMRANGEBYRANK', q.dead, 0, excess - 1)
  redis.call('HINCRBY', q.stats, 'dead_evicted', excess)
  return excess
end
