-- naive_effect.lua: THE CAUTIONARY CONTRAST -- the naive consumer's effect. Not part of the
-- queue.
--
-- Performs the effect on every delivery: it appends the record to emq:{q}:outbox and counts
-- the run in the effects ledger, but never asks the ledger first, nor whether the queue
-- still holds the job. A job delivered twice (its worker died after the effect, before
-- completing) has its effect twice: the charge is made again, the email sent again.
-- Compare effect.lua, the idempotent consumer, which skips an id the ledger knows and a job
-- with no row. Only the teaching kit (echoq/teaching) runs it.
--
-- KEYS[1]  emq:{q}:effects     hash: JOB id -> how many times its effect ran
-- KEYS[2]  emq:{q}:outbox      list of effect records
-- ARGV[1]  job id              branded JOB id
-- ARGV[2]  record              text appended to the outbox, UTF-8, 0..4096 bytes
-- ARGV[3]  keep outbox         how many records emq:{q}:outbox keeps, 1..1000000
--
-- Replies
--   {'applied', count}          the effect ran; count = times it has run for this id
-- Errors
--   BADID   ARGV[1] is not a JOB id
--   BADARG  record or keep outbox out of range, or KEYS not the two keys above of one queue
--- @include "includes/job_id"
--- @include "includes/queue_keys"
--- @include "includes/args"

local effects_key, outbox_key = KEYS[1], KEYS[2]
local id = ARGV[1]

local prefix, refused = queue_prefix({'effects', 'outbox'})
if not prefix then return refused end
if not is_job_id(id) then
  return redis.error_reply('BADID ' .. printable(id) .. ' is not a JOB id')
end
local argv, refused = checked_args({{'record', 'text_bytes', text = true}, {'keep outbox', 'keep_outbox'}}, 2)
if not argv then return refused end
local record, keep_outbox = unpack(argv)

local count = redis.call('HINCRBY', effects_key, id, 1)
redis.call('RPUSH', outbox_key, id .. ' ' .. record)
redis.call('LTRIM', outbox_key, -keep_outbox, -1)
return {'applied', count}
