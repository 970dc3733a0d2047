-- effect.lua: perform a job's side effect and record it in the effects ledger, atomically.
--
-- The ledger is what makes at-least-once delivery safe: the idempotent consumer. The
-- effect is keyed on the branded JOB id, so a redelivery finds the id in the ledger and
-- does nothing -- and it runs only for a job the queue still holds (its row exists:
-- pending, active, scheduled or dead). A stale worker that wakes up after its job was
-- completed by another finds no row and runs nothing, however long ago that was: the
-- ledger's protection does not depend on how long it remembers, so its entries can go
-- when the queue forgets the job (complete.lua and the dead-set trim remove them).
-- The effect itself is a record appended to emq:{q}:outbox, written in the same script as
-- the ledger entry, so the two can never disagree (a transactional outbox: whatever ships
-- the records onward -- the email, the charge -- reads them from there); the outbox keeps
-- its newest `keep outbox` records.
--
-- KEYS[1]  emq:{q}:effects     hash: JOB id -> how many times its effect ran
-- KEYS[2]  emq:{q}:outbox      list of effect records
-- KEYS[3]  emq:{q}:job:<id>    the job's row (read only)
-- ARGV[1]  job id              branded JOB id
-- ARGV[2]  record              text appended to the outbox when the effect runs, UTF-8,
--                               0..4096 bytes
-- ARGV[3]  keep outbox         how many records emq:{q}:outbox keeps, 1..1000000
--
-- Replies
--   {'applied', count}          the effect ran; count = times it has run for this id (1)
--   {'skipped', count}          the id was in the ledger: nothing ran
--   {'gone', 0}                 the job has no row (finished, or never enqueued here):
--                               nothing ran
-- Errors
--   BADID   ARGV[1] is not a JOB id, or KEYS[3] is not its row in this queue
--   BADARG  record or keep outbox out of range, or KEYS[1..2] not the two keys above of one
--           queue
--- @include "includes/job_id"
--- @include "includes/queue_keys"
--- @include "includes/args"

local effects_key, outbox_key, row_key = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]

local prefix, refused = queue_prefix({'effects', 'outbox'}, id)
if not prefix then return refused end
if not is_job_id(id) then
  return redis.error_reply('BADID ' .. printable(id) .. ' is not a JOB id')
end
local argv, refused = checked_args({{'record', 'text_bytes', text = true}, {'keep outbox', 'keep_outbox'}}, 2)
if not argv then return refused end
local record, keep_outbox = unpack(argv)

local seen = redis.call('HGET', effects_key, id)
if seen then return {'skipped', tonumber(seen)} end
if redis.call('EXISTS', row_key) == 0 then return {'gone', 0} end
local count = redis.call('HINCRBY', effects_key, id, 1)
redis.call('RPUSH', outbox_key, id .. ' ' .. record)
redis.call('LTRIM', outbox_key, -keep_outbox, -1)
return {'applied', count}
