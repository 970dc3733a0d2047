-- effect.lua: perform a job's side effect and record it in the effects ledger, atomically.
--
-- The ledger is what makes at-least-once delivery safe. Mode 'once' is the idempotent
-- consumer: the effect is keyed on the branded JOB id, so a redelivery finds the id in
-- the ledger and does nothing. Mode 'every' is the naive consumer (a cautionary
-- contrast): it performs the effect on every delivery. The effect itself here is an
-- append to emq:{q}:outbox -- standing in for "charge the card" or "send the email" --
-- written in the same script as the ledger entry, so the two can never disagree.
--
-- KEYS[1]  emq:{q}:effects     hash: JOB id -> how many times its effect ran
-- KEYS[2]  emq:{q}:outbox      list of effect records (the stand-in side effect)
-- ARGV[1]  job id              branded JOB id
-- ARGV[2]  mode                'once' (keyed on the JOB id) or 'every' (naive)
-- ARGV[3]  record              text appended to the outbox when the effect runs
--
-- Replies
--   {'applied', count}          the effect ran; count = times it has run for this id
--   {'skipped', count}          mode 'once' and the id was in the ledger: nothing ran
-- Errors
--   BADID   ARGV[1] is not a JOB id
--   BADARG  ARGV[2] is not 'once' or 'every', or KEYS not the two keys above of one queue
--- @include "includes/job_id"
--- @include "includes/queue_keys"

local effects_key, outbox_key = KEYS[1], KEYS[2]
local id, mode, record = ARGV[1], ARGV[2], ARGV[3]

local prefix, refused = queue_prefix({'effects', 'outbox'})
if not prefix then return refused end
if not is_job_id(id) then
  return redis.error_reply('BADID ' .. tostring(id) .. ' is not a JOB id')
end
if mode ~= 'once' and mode ~= 'every' then
  return redis.error_reply("BADARG mode must be 'once' or 'every'")
end

if mode == 'once' then
  local seen = redis.call('HGET', effects_key, id)
  if seen then return {'skipped', tonumber(seen)} end
end
local count = redis.call('HINCRBY', effects_key, id, 1)
redis.call('RPUSH', outbox_key, id .. ' ' .. record)
return {'applied', count}
