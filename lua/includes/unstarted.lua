-- includes/unstarted.lua: a claim whose lease ran out before anyone heard it start.
--
-- A claim made with complete_many.lua's `confirm` 1 (the Worker's) carries 'confirm' = its
-- token until its holder confirms a handler started the job. Should its lease run out
-- before that -- its reply was lost on the way back, or the worker died before its next
-- call -- the job never ran as far as anyone knows: a try counts when a handler starts, so
-- whichever sweep finds it (reap.lua, stalled_check.lua) takes the mark off, gives the try
-- back (the row's 'attempts' goes down by one, as a release's does) and adds one to the
-- row's 'unstarted' count instead, which stalled_check.lua bounds. Claims made by
-- claim.lua, or with `confirm` 0, count as started at once and carry no mark.
-- `confirm`, `token` and `attempts` are the row's fields as read (take_row).

-- The row's new 'unstarted' count when the claim was unconfirmed (its mark taken off, its
-- try given back); nil when it was confirmed, or never needed to be.
local function unstarted_claim(row, confirm, token, attempts)
  if not confirm or confirm ~= token then return nil end
  redis.call('HDEL', row, 'confirm')
  -- (a count echoq wrote, at most 9 digits: HINCRBY would fail half-way on anything else)
  if string.match(attempts or '', '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?$') then
    redis.call('HINCRBY', row, 'attempts', -1)
  end
  return redis.call('HINCRBY', row, 'unstarted', 1)
end
