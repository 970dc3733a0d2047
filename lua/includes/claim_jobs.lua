-- includes/claim_jobs.lua: promote due retries, then claim up to `count` jobs under a lease.
-- Shared by claim.lua and complete_many.lua so both claim in exactly the same way.
-- `q` is the script's keys by name (includes/queue_keys keys_by_name: pending, active,
-- scheduled, dead, done, stats, effects), plus q.now and q.keep_dead. Row keys are built
-- from q.prefix, read off the caller's KEYS, never an argument: every row key built here
-- stays in the declared keys' slot.
--- @include "includes/args"
--- @include "includes/rows"
--- @include "includes/arrival"

-- The most payload bytes one call hands out beyond its first job (echoq/limits.py).
local CALL_PAYLOAD_BYTES = {{CALL_PAYLOAD_BYTES}}

-- A row's token or attempts field as echoq writes it: no field yet, or a count of at most 9
-- digits. HINCRBY would refuse anything else that is not an integer and fail the whole call
-- half-way; such a row was written by something else, and is not delivered.
local function plain_count(value)
  return value == false or value == '0' or string.match(value, '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?$') ~= nil
end

-- Move retries whose backoff has run out (scheduled score <= now) into pending, each at
-- its arrival number (includes/arrival), at most 1000 per call. An entry whose row does not say 'scheduled' is corrupt (includes/rows).
local function promote_due(q)
  local due = redis.call('ZRANGEBYSCORE', q.scheduled, '-inf', q.now, 'LIMIT', 0, SWEEP_MAX)
  for _, id in ipairs(due) do
    redis.call('ZREM', q.scheduled, id)
    local row = take_row(q, id, 'scheduled')
    if row then
      redis.call('ZADD', q.pending, arrival_of(row), id)
      redis.call('HSET', row, 'state', 'pending')
    end
  end
end

-- Pop the oldest pending ids into active. Appends id, payload, token, attempts, deadline
-- per job to `reply`: the row's fencing token and its tries, both bumped by this claim. The id moves pending -> active inside this one script: it is never in
-- neither. A popped entry whose row does not say 'pending' is never delivered
-- (includes/rows); a row with no payload is dead-lettered with reason 'corrupt', and one
-- whose payload is not UTF-8 text of at most 1 MiB (written by something other than
-- echoq, which refuses such payloads at enqueue) with reason 'bad_payload': at once, on
-- the first claim, and the claim goes on to the next job. At most
-- count + 1000 ids are popped per call, so a pending set full of corrupt entries cannot
-- hold the server for long. Once the jobs claimed carry CALL_PAYLOAD_BYTES of payload
-- (a server with a payload cap: 16 times it; echoq/limits.py), the next job and the rest
-- popped go back to pending unchanged: a call hands out fewer jobs rather than check
-- megabytes of UTF-8 while everyone waits. The first job is always claimed.
-- The server's cost is mostly per command, so a batch moves with few of them: one ZPOPMIN
-- pops as many ids as are still wanted, and one ZADD parks every claimed id in active;
-- per job, one HMGET reads the row's state, token and attempts, HSTRLEN the payload's length
-- and HGET the payload (only when it fits the cap), one HINCRBY mints the token and one
-- counts the try, one HSET writes the row.
-- With `confirm`, each claimed row also gets 'confirm' = its token, until the holder
-- confirms the start (complete_many.lua): a stall of an unconfirmed claim is counted apart.
local function claim_jobs(q, lease_ms, count, reply, confirm)
  local claimed, popped_ids, bytes, spent = 0, 0, 0, false
  local deadline = q.now + lease_ms
  local leased = {}  -- ZADD's arguments: deadline, id, deadline, id, ...
  while claimed < count and popped_ids < count + SWEEP_MAX and not spent do
    local popped = redis.call('ZPOPMIN', q.pending, math.min(count - claimed, count + SWEEP_MAX - popped_ids))
    if #popped == 0 then break end
    for i = 1, #popped, 2 do
      popped_ids = popped_ids + 1
      local id = popped[i]
      local row, values = take_row(q, id, 'pending', 'token', 'attempts')
      -- The payload's length first (HSTRLEN: constant time), the payload itself only when
      -- it fits: a row swelled past the cap by hand is dead-lettered unread.
      local size = row and redis.call('HSTRLEN', row, 'payload') or 0
      local fits = size <= BOUNDS.payload_bytes[2]
      if row and fits and claimed > 0 and bytes + size > CALL_PAYLOAD_BYTES then
        -- The call's payload budget is spent: this job and the rest popped go back to
        -- pending at their own scores, untouched, for the next call.
        local back = {}
        for j = i, #popped, 2 do
          back[#back + 1] = popped[j + 1]
          back[#back + 1] = popped[j]
        end
        redis.call('ZADD', q.pending, unpack(back))
        spent = true
        break
      end
      if row then
        local payload, bad = false, nil
        if fits then
          payload = redis.call('HGET', row, 'payload')
          bad = text_problem(payload, BOUNDS.payload_bytes[2])
        else
          bad = 'is ' .. size .. ' bytes, more than the ' .. BOUNDS.payload_bytes[2] .. ' allowed'
        end
        if fits and payload == false then
          redis.call('HINCRBY', q.stats, 'corrupt', 1)
          dead_letter(q, id, true, 'corrupt', 'the row has no payload: not delivered')
        elseif bad then
          redis.call('HINCRBY', q.stats, 'bad_payload', 1)
          dead_letter(q, id, true, 'bad_payload', 'payload ' .. bad .. ': not delivered')
        elseif not (plain_count(values[2]) and plain_count(values[3])) then
          redis.call('HINCRBY', q.stats, 'corrupt', 1)
          dead_letter(q, id, true, 'corrupt', 'its token or attempts field is not a count: not delivered')
        else
          local token = redis.call('HINCRBY', row, 'token', 1)
          local attempts = redis.call('HINCRBY', row, 'attempts', 1)
          if confirm then
            redis.call('HSET', row, 'state', 'active', 'claimed_ms', q.now, 'confirm', token)
          else
            redis.call('HSET', row, 'state', 'active', 'claimed_ms', q.now)
          end
          leased[#leased + 1] = deadline
          leased[#leased + 1] = id
          reply[#reply + 1] = id
          reply[#reply + 1] = payload
          reply[#reply + 1] = token
          reply[#reply + 1] = attempts
          reply[#reply + 1] = deadline
          claimed = claimed + 1
          bytes = bytes + #payload
        end
      end
    end
  end
  if claimed > 0 then
    redis.call('ZADD', q.active, unpack(leased))
    redis.call('HINCRBY', q.stats, 'claimed', claimed)
  end
  return claimed
end
