-- includes/server_now.lua: the server's clock in milliseconds.
-- Every lease deadline is written and judged against this clock, never the caller's, so
-- a worker whose clock drifts cannot make a lease look alive or expired.
local function server_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
