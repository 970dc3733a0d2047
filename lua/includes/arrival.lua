-- includes/arrival.lua: a job's place in emq:{q}:pending is the order it reached the server.
--
-- Every job enqueued gets an arrival number: the queue's count of enqueued jobs (stats
-- 'enqueued') just after it came, so 1, 2, 3, ... in the order the server took them, whoever
-- minted the ids and whatever their producers' clocks read. The row keeps it ('arrival'),
-- and pending is scored by it, so ZPOPMIN takes the job that arrived first: first in,
-- first out. A job that goes back to pending (reaped, recovered, released, retried, or a
-- delay or backoff run out) goes back to its own arrival number, ahead of every job that
-- arrived after it. A row with no arrival number (written before there were any, or by
-- something else) is scored 0: ahead of all, ids in byte order among themselves.

-- The first of `n` fresh arrival numbers (the caller's jobs take it and the n - 1 after it).
local function arrivals(stats_key, n)
  return redis.call('HINCRBY', stats_key, 'enqueued', n) - n + 1
end

-- The pending score of the job whose row is `row_key`: its arrival number, or 0.
local function arrival_of(row_key)
  local value = redis.call('HGET', row_key, 'arrival')
  if value and string.match(value, '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?$') then
    return tonumber(value)
  end
  return 0
end
