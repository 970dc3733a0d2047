-- claim.lua: the recoverable claim. Take the oldest pending job(s) into the active set
-- under a lease, never out of the queue.
--
-- ZPOPMIN takes the lowest-scored id from the pending set: the one that reached the server
-- first (pending is scored by arrival number, includes/arrival). HINCRBY bumps the row's token: the new value is the
-- fencing token that complete/retry/extend/release must present, never handed out twice.
-- It also bumps the row's attempts, the tries counted toward max attempts: a claim made
-- here counts as started at once (its caller is the handler; a Worker's claims, made with
-- complete_many.lua's confirm, count only once started). A release gives its try back, so
-- attempts may lag the token.
-- The lease deadline is the server's TIME plus the lease, so a reap judges it on the same
-- clock. A worker that dies now leaves the job in the active set, where a reap finds it
-- once the lease runs out.
-- Before popping, it promotes due rows: every retry in emq:{q}:scheduled whose backoff has
-- run out (due time <= server now, at most 1000 per call) moves to pending, row state
-- 'pending', at its arrival number, so it is claimed in arrival order with the rest.
-- Nothing that cannot be worked is handed out (includes/rows, includes/claim_jobs): an
-- entry whose row is missing or disagrees with its set is corrupt (counted in stats
-- 'corrupt'; dead-lettered with reason 'corrupt', or dropped when it was a stray copy),
-- and a payload that is not UTF-8 text of at most 1 MiB is dead-lettered with reason
-- 'bad_payload' the first time (a row whose token or attempts field is not a count, with reason
-- 'corrupt'); the claim goes on to the jobs behind it. After any
-- dead-letter the dead set is trimmed to `keep dead` (includes/dead_letter).
-- The one key not in KEYS, a popped id's row emq:{q}:job:<id>, is built from KEYS[1]'s own
-- prefix (includes/queue_keys), so it carries the same {q} tag and lives in the same slot.
--
-- KEYS[1]  emq:{q}:pending     sorted set, score = arrival number (includes/arrival)
-- KEYS[2]  emq:{q}:active      sorted set, score = lease deadline (server ms)
-- KEYS[3]  emq:{q}:scheduled   sorted set, score = due time (server ms)
-- KEYS[4]  emq:{q}:dead        sorted set, score = time of death (server ms)
-- KEYS[5]  emq:{q}:done        sorted set of recently completed ids
-- KEYS[6]  emq:{q}:stats       hash of counters
-- KEYS[7]  emq:{q}:effects     hash: the effects ledger (an evicted dead job's entry goes)
-- ARGV[1]  lease               milliseconds, 1..86400000
-- ARGV[2]  count               how many jobs to claim at most, 1..1000
-- ARGV[3]  keep dead           how many jobs emq:{q}:dead keeps, 0..1000000
--
-- Replies
--   {}                                     nothing pending
--   {id, payload, token, attempts, deadline, ...}
--                                          five values per claimed job: the row's token
--                                          (the fencing token), its attempts (tries,
--                                          this one included), deadline in server ms
-- Errors
--   BADARG  lease, count or keep dead out of range, or KEYS not the seven keys above of
--           one queue
--- @include "includes/server_now"
--- @include "includes/queue_keys"
--- @include "includes/args"
--- @include "includes/claim_jobs"

local NAMES = {'pending', 'active', 'scheduled', 'dead', 'done', 'stats', 'effects'}
local prefix, refused = queue_prefix(NAMES)
if not prefix then return refused end
local argv, refused = checked_args({{'lease', 'lease_ms'}, {'count', 'count'}, {'keep dead', 'keep_dead'}})
if not argv then return refused end
local lease_ms, count, keep_dead = unpack(argv)

local q = keys_by_name(prefix, NAMES)
q.now, q.keep_dead = server_now_ms(), keep_dead
promote_due(q)
local reply = {}
claim_jobs(q, lease_ms, count, reply)
if q.died then trim_dead(q) end
return reply
