-- bank_charge.lua: A TEACHING STAND-IN for an external payment service (lesson 03). Not part
-- of the queue.
--
-- The bank is "another system": it knows nothing of leases, attempts or the queue's
-- effects ledger. It keeps its own record, and that record is the only thing that can
-- make a repeated request harmless: a charge may carry an idempotency key, and the bank
-- charges a key once. A second request with a known key charges nothing and replies with
-- the first charge ('replayed'); the same key with another card or amount is refused
-- ('conflict'), as real payment APIs do. A request without a key is charged every time.
-- The charge and the key's record are written in this one script, so they never disagree.
-- Bound: the bank's keys belong to one lesson or one check, which empties them; a bank
-- holds at most 10000 charges (a charge beyond that is refused as 'full').
--
-- KEYS[1]  emq:{b}:charges       list of charges, one "card cents key" entry each
--                                 (key '-' when none was given)
-- KEYS[2]  emq:{b}:idempotency   hash: idempotency key -> "n card cents", n = the charge's
--                                 position in KEYS[1], 1-based
-- ARGV[1]  card                  1 to 32 characters of A-Z, a-z, 0-9 and '-'
-- ARGV[2]  cents                 a whole number, 1..100000000
-- ARGV[3]  idempotency key       '' for none, else 1 to 200 characters
--
-- Replies
--   {'charged', n}                the card was charged; n = the charge's number
--   {'replayed', n}               the key was known: nothing charged; n = the first charge
--   {'conflict', n}               the key was known for another card or amount: refused
--   {'full', n}                   the bank holds 10000 charges already: refused
-- Errors
--   BADARG  card, cents or key malformed, or KEYS not the two keys above of one bank
--- @include "includes/queue_keys"
--- @include "includes/text"

local charges_key, keys_key = KEYS[1], KEYS[2]
local card, cents_text, key = ARGV[1], ARGV[2], ARGV[3]

local prefix, refused = queue_prefix({'charges', 'idempotency'})
if not prefix then return refused end
if type(card) ~= 'string' or #card < 1 or #card > 32 or not string.match(card, '^[%w%-]+$') then
  return redis.error_reply('BADARG card must be 1 to 32 characters of A-Z, a-z, 0-9 and -, got ' ..
    printable(card))
end
local cents = nil
if type(cents_text) == 'string' and string.match(cents_text, '^%d+$') then cents = tonumber(cents_text) end
if cents == nil or cents < 1 or cents > 100000000 then
  return redis.error_reply('BADARG cents must be a whole number between 1 and 100000000, got ' ..
    printable(cents_text))
end
if type(key) ~= 'string' or #key > 200 then
  return redis.error_reply('BADARG an idempotency key is at most 200 characters')
end

if key ~= '' then
  local known = redis.call('HGET', keys_key, key)
  if known then
    local n, known_card, known_cents = string.match(known, '^(%d+) (%S+) (%d+)$')
    if known_card == card and tonumber(known_cents) == cents then
      return {'replayed', tonumber(n)}
    end
    return {'conflict', tonumber(n)}
  end
end
local held = redis.call('LLEN', charges_key)
if held >= 10000 then return {'full', held} end
local n = redis.call('RPUSH', charges_key, card .. ' ' .. cents .. ' ' .. (key ~= '' and key or '-'))
if key ~= '' then
  redis.call('HSET', keys_key, key, n .. ' ' .. card .. ' ' .. cents)
end
return {'charged', n}
