-- includes/text.lua: is a string UTF-8 text? (Lua 5.1 has no utf8 library.)
--
-- Every text the library stores and hands back (a job's payload, an error, an effect's
-- record) is UTF-8, because every reader decodes it: a byte string that is not text would
-- make a reader fail, far from where it was written. Valid UTF-8 here is exactly what
-- Python's strict decoder accepts: no overlong forms, no surrogates, nothing above U+10FFFF.

-- One pattern per kind of multi-byte sequence. Each lead byte belongs to one kind only and
-- a continuation byte (128-191) never leads, so replacing every valid sequence by an ASCII
-- byte leaves a byte >= 128 exactly when the input was not UTF-8.
local UTF8_SEQUENCES = {
  '[\194-\223][\128-\191]',
  '\224[\160-\191][\128-\191]',
  '[\225-\236\238\239][\128-\191][\128-\191]',
  '\237[\128-\159][\128-\191]',
  '\240[\144-\191][\128-\191][\128-\191]',
  '[\241-\243][\128-\191][\128-\191][\128-\191]',
  '\244[\128-\143][\128-\191][\128-\191]',
}

local function is_utf8(s)
  if not string.find(s, '[\128-\255]') then return true end  -- ASCII: one scan in C
  for _, sequence in ipairs(UTF8_SEQUENCES) do s = string.gsub(s, sequence, '.') end
  return string.find(s, '[\128-\255]') == nil
end

-- Why `value` is not acceptable text of at most `max_bytes`, or nil when it is.
local function text_problem(value, max_bytes)
  if type(value) ~= 'string' then return 'is missing' end
  if #value > max_bytes then
    return 'is ' .. #value .. ' bytes, more than the ' .. max_bytes .. ' allowed'
  end
  if not is_utf8(value) then return 'is not UTF-8 text' end
  return nil
end

-- `s` with every byte that is not printable ASCII written as \ddd: always one line of
-- text that any reader can decode, whatever bytes something else stored.
local function escaped(s)
  return (string.gsub(s, '[^\32-\126]', function(c) return '\\' .. string.byte(c) end))
end

-- A value for an error message: quoted, at most 40 bytes of it, escaped.
local function printable(value)
  if value == nil or value == false then return 'nothing' end
  return "'" .. escaped(string.sub(tostring(value), 1, 40)) .. "'"
end
