"""The Lua scripts of :class:`joinlib.adapters.redis_store.RedisWindowStore`: insert, purge, remove_oldest,
add_index and first_seq_at_or_after, each ONE round trip (``register_script`` -> EVALSHA).

Why a module of its own: the scripts are a program in another language, read and changed on their own; the
key layout and the blob format they work on are described in :mod:`joinlib.adapters.redis_store`
(``KEYS[1]`` = ``B:s``, ``KEYS[2]`` = ``B:x``, ``ARGV[1]`` = the base ``B``).
"""
from __future__ import annotations

__all__ = ["INSERT", "PURGE", "REMOVE_OLDEST", "ADD_INDEX", "FIRST"]

_PRELUDE = r"""
local S, X = KEYS[1], KEYS[2]
local CHUNK = 4000

local function comps_of(b)
  local L = #b
  local n = struct.unpack('>I4', b, L - 3)
  return string.sub(b, L - 19 - n, L - 20)
end

local function seq_of(b)
  return (struct.unpack('>i8', b, #b - 19))
end

local function ts_of(b)
  return (struct.unpack('>i8', b, #b - 11))
end

local function parse_specs(list, base)
  local out = {}
  for _, sp in ipairs(list) do
    local pos = {}
    for p in string.gmatch(sp, '[^,]+') do pos[#pos + 1] = tonumber(p) + 1 end
    out[#out + 1] = {base .. ':i:' .. sp .. ':', pos}
  end
  return out
end

local function split(c)
  local parts, start = {}, 1
  while true do
    local j = string.find(c, '\31', start, true)
    if not j then parts[#parts + 1] = string.sub(c, start); return parts end
    parts[#parts + 1] = string.sub(c, start, j - 1)
    start = j + 1
  end
end

-- index key names of a tuple with components c, one per spec, into out
local function names(c, sps, out)
  local parts = nil
  for i = 1, #sps do
    local sp = sps[i]
    local pos = sp[2]
    local name
    if #pos == 1 and not string.find(c, '\31', 1, true) then
      name = c  -- a one-attribute key (memory store: projector of one position)
    else
      parts = parts or split(c)
      if #pos == #parts then
        local same = true
        for k = 1, #pos do if pos[k] ~= k then same = false; break end end
        if same then name = c end
      end
      if not name then
        local sel = {}
        for k = 1, #pos do
          local v = parts[pos[k]]
          if v == nil then error('index position out of range of the key') end
          sel[k] = v
        end
        name = table.concat(sel, '\31')
      end
    end
    out[i] = sp[1] .. name
  end
end

local function group_add(groups, order, name, a, b)
  local g = groups[name]
  if not g then g = {}; groups[name] = g; order[#order + 1] = name end
  g[#g + 1] = a
  if b ~= nil then g[#g + 1] = b end
end

local function chunked(cmd, key, args)
  for i = 1, #args, CHUNK do
    redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
  end
end

-- number of stored tuples with ts < bound (bisection over the seq order)
local function bisect_ts(bound)
  local lo, hi = 0, redis.call('ZCARD', S)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if ts_of(redis.call('ZRANGE', S, mid, mid)[1]) < bound then lo = mid + 1 else hi = mid end
  end
  return lo
end
"""

# ARGV: base, blob...   -> number of tuples added
INSERT = _PRELUDE + r"""
local n = #ARGV - 1
if n <= 0 then return 0 end
local seqs, inorder = {}, true
for i = 1, n do
  seqs[i] = seq_of(ARGV[i + 1])
  if i > 1 and seqs[i] <= seqs[i - 1] then inorder = false end
end
if inorder then
  local last = redis.call('ZRANGE', S, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= seqs[1] then inorder = false end
end
local zs, groups, order, nm = {}, {}, {}, {}
local sps = parse_specs(redis.call('SMEMBERS', X), ARGV[1])
local seen, added = {}, 0
for i = 1, n do
  local q = seqs[i]
  if inorder or (not seen[q] and redis.call('ZCOUNT', S, q, q) == 0) then
    seen[q] = true
    local b = ARGV[i + 1]
    zs[#zs + 1] = q; zs[#zs + 1] = b
    if #sps > 0 then
      names(comps_of(b), sps, nm)
      for k = 1, #sps do group_add(groups, order, nm[k], q, b) end
    end
    added = added + 1
  end
end
if added > 0 then
  chunked('ZADD', S, zs)
  for _, name in ipairs(order) do chunked('ZADD', name, groups[name]) end
end
return added
"""

# ARGV: base, 'ts'|'seq', bound [, 'n']  -> purged blobs in seq order (with 'n': their number)
PURGE = _PRELUDE + r"""
local bs
if ARGV[2] == 'ts' then
  local r = bisect_ts(tonumber(ARGV[3]))
  if r == 0 then return ARGV[4] == 'n' and 0 or {} end
  bs = redis.call('ZRANGE', S, 0, r - 1)
else
  bs = redis.call('ZRANGEBYSCORE', S, '-inf', '(' .. ARGV[3])
  if #bs == 0 then return ARGV[4] == 'n' and 0 or {} end
end
local sps = parse_specs(redis.call('SMEMBERS', X), ARGV[1])
if #sps > 0 then
  local groups, order, nm = {}, {}, {}
  for k = 1, #bs do
    names(comps_of(bs[k]), sps, nm)
    for i = 1, #sps do group_add(groups, order, nm[i], bs[k]) end
  end
  for _, name in ipairs(order) do chunked('ZREM', name, groups[name]) end
end
redis.call('ZREMRANGEBYRANK', S, 0, #bs - 1)
if ARGV[4] == 'n' then return #bs end
return bs
"""

# ARGV: base, seq...  -> number removed; errors NOTSTORED i / NOTOLDEST i
REMOVE_OLDEST = _PRELUDE + r"""
local sps = parse_specs(redis.call('SMEMBERS', X), ARGV[1])
local nm, gone = {}, {}
for i = 2, #ARGV do
  local b = redis.call('ZRANGEBYSCORE', S, ARGV[i], ARGV[i])[1]
  if not b then
    if #sps > 0 then return redis.error_reply('NOTSTORED ' .. (i - 2)) end
  else
    if #sps > 0 then
      names(comps_of(b), sps, nm)
      for k = 1, #sps do
        if redis.call('ZRANGE', nm[k], 0, 0)[1] ~= b then return redis.error_reply('NOTOLDEST ' .. (i - 2)) end
        redis.call('ZREMRANGEBYRANK', nm[k], 0, 0)
      end
    end
    redis.call('ZREM', S, b)
    gone[#gone + 1] = b
  end
end
return gone
"""

# ARGV: base, spec  -> 1 if the index is new
ADD_INDEX = _PRELUDE + r"""
if redis.call('SADD', X, ARGV[2]) == 0 then return 0 end
local all = redis.call('ZRANGE', S, 0, -1, 'WITHSCORES')
local sps = parse_specs({ARGV[2]}, ARGV[1])
local groups, order, nm = {}, {}, {}
for k = 1, #all, 2 do
  names(comps_of(all[k]), sps, nm)
  group_add(groups, order, nm[1], all[k + 1], all[k])
end
for _, name in ipairs(order) do chunked('ZADD', name, groups[name]) end
return 1
"""

# ARGV: ts  -> the blob of the oldest tuple with ts >= ARGV[1], or nil
FIRST = _PRELUDE + r"""
local r = bisect_ts(tonumber(ARGV[1]))
return redis.call('ZRANGE', S, r, r)[1]
"""
