-- includes/wake.lua: tell idle workers that jobs just went into pending.
--
-- emq:{q}:wake is a list of at most WAKE_CAP wakes (one byte each). An idle Worker blocks
-- on it (BLPOP with a timeout, Queue.wait_for_work) instead of polling; a script that puts
-- n jobs into pending pushes min(n, WAKE_CAP) wakes, and each wake rouses one blocked
-- worker. A wake is a hint, never a promise: the woken worker claims, and may find that
-- another got there first. Wakes nobody waited for (every worker was busy) stay, but the
-- list is trimmed to WAKE_CAP, so the key never grows and costs at most WAKE_CAP spare
-- wake-ups later.
-- The key is built from the caller's prefix (includes/queue_keys), like a row: same {q}
-- tag, same slot. Needs nothing else.
local WAKE_CAP = {{WAKE_CAP}}

local function wake(prefix, n)
  if n <= 0 then return end
  local key = prefix .. 'wake'
  local wakes = {}
  for i = 1, math.min(n, WAKE_CAP) do wakes[i] = '1' end
  -- A wake key that is not a list (something else wrote it) gets no wake: a wake is a
  -- hint, and failing here would fail the caller after its writes.
  local pushed = redis.pcall('LPUSH', key, unpack(wakes))
  if type(pushed) == 'number' and pushed > WAKE_CAP then
    redis.call('LTRIM', key, 0, WAKE_CAP - 1)
  end
end
