-- includes/job_id.lua: the server-side check of a branded JOB id (the same rule as
-- echoq/ids.py): 'JOB' + 26 characters of Crockford base 32.
local function is_job_id(id)
  return type(id) == 'string' and #id == 29 and string.match(id, '^JOB[0-9A-HJKMNP-TV-Z]+$') ~= nil
end
