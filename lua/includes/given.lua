-- includes/given.lua: the idempotency record, emq:{q}:given: the ids producers gave.
--
-- A producer that may retry gives each job's id itself (job_id=, job_ids=), so a call
-- sent again after a lost reply names the same jobs. Their rows and the newest `keep done`
-- completions are not enough to know them again: a retry of a big batch can come after
-- part of it completed and left done. So every id a producer gave is recorded here,
-- scored by the server time it first arrived, for `keep given` milliseconds: an id the
-- record holds is a duplicate, whatever became of its job meanwhile. An id minted by the
-- library itself (keep given 0) is never sent twice, and is not recorded.
-- Bounded by time: each call forgets the entries older than its `keep given` (at most
-- SWEEP_MAX per call, so a shortened window drains over a few calls, and never holds the
-- server long); an entry past the window that is still there counts as forgotten.

local SWEEP_MAX = {{SWEEP_MAX}}

-- Forget the entries older than `keep_ms` before `now` (at most SWEEP_MAX of them).
local function forget_given(given_key, now, keep_ms)
  local old = redis.call('ZRANGEBYSCORE', given_key, '-inf', '(' .. (now - keep_ms), 'LIMIT', 0, SWEEP_MAX)
  if #old > 0 then redis.call('ZREM', given_key, unpack(old)) end
end

-- True when `id` arrived, given by a producer, within the last `keep_ms` before `now`.
local function was_given(given_key, id, now, keep_ms)
  if keep_ms == 0 then return false end
  local at = redis.call('ZSCORE', given_key, id)
  return at ~= false and tonumber(at) >= now - keep_ms
end
