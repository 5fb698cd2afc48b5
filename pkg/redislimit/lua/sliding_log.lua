-- sliding_log: keeps the time of every admitted hit of the last window.
--
-- Per hit: KEYS: the counter's key, a sorted set of entries scored by their
-- time in µs; members are "<time>:<seq>" with seq written as its digit count
-- then its digits, so that members of one time sort by seq and stay unique
-- across calls and refunds. ARGV group (see evaluate.lua): limit L,
-- window W µs.
--
-- Semantics (limit.stepSlidingLog): entries with time <= now - W no longer
-- count (removed when the set is written); n is the number of entries left.
-- Allowed iff n + cost <= L; a consuming hit adds cost entries at now.
-- Remaining = max(0, L - n) after the hit; reset = newest + W - now (0 when
-- empty), and the TTL is the same; retry (denied) = e + W - now where e is
-- the time of the (n + cost - L)-th oldest entry. A refund removes the
-- min(cost, n) newest entries.
--
-- The set is never copied into Lua: the working state counts entries in
-- three runs in time order, a (stored, time <= now), m (added by this call,
-- at now) and z (stored, time > now, left by a clock that went back), and
-- reads single entries by rank when it needs their times. Removals take the
-- newest first (z, then m, then a), so the stored entries removed are always
-- the highest ranks.

local function load(key, h, now)
  local lo = now - h.window
  local expired = redis.call('ZCOUNT', key, '-inf', int(lo))
  local a = redis.call('ZCOUNT', key, '(' .. int(lo), int(now))
  local z = redis.call('ZCOUNT', key, '(' .. int(now), '+inf')
  return {key = key, expired = expired, a0 = a, z0 = z, a = a, m = 0, z = z}, true
end

local function score_at(key, rank)
  local r = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
  return tonumber(r[2])
end

-- nth_oldest returns the time of the i-th oldest entry (1-based).
local function nth_oldest(key, st, now, i)
  if i <= st.a then
    return score_at(key, st.expired + i - 1)
  elseif i <= st.a + st.m then
    return now
  end
  return score_at(key, st.expired + st.a0 + (i - st.a - st.m) - 1)
end

local function newest(key, st, now)
  if st.z > 0 then
    return score_at(key, st.expired + st.a0 + st.z - 1)
  elseif st.m > 0 then
    return now
  end
  return score_at(key, st.expired + st.a - 1)
end

local function step(st, ok, h, now, cost, refund)
  local limit, w = h.limit, h.window
  local nst = {key = st.key, expired = st.expired, a0 = st.a0, z0 = st.z0, a = st.a, m = st.m, z = st.z}
  local n = nst.a + nst.m + nst.z
  local o = outcome(false, 0, 0, 0, false, 0)
  if refund then
    o.allowed = true
    local left = math.min(cost, n)
    local take = math.min(left, nst.z)
    nst.z, left = nst.z - take, left - take
    take = math.min(left, nst.m)
    nst.m, left = nst.m - take, left - take
    nst.a = nst.a - left
    local taken = math.min(cost, n)
    n = n - taken
    o.write = taken > 0
  elseif n + cost <= limit then
    o.allowed = true
    if cost > 0 then
      nst.m = nst.m + cost
      n = n + cost
      o.write = true
    end
  else
    o.retry = nth_oldest(nst.key, nst, now, n + cost - limit) + w - now
  end
  o.remaining = math.max(0, limit - n)
  if n > 0 then
    o.reset = newest(nst.key, nst, now) + w - now
  end
  o.ttl = o.reset
  return nst, o
end

-- member_seq returns the seq of a member written by this script.
local function member_seq(member)
  local tail = string.match(member, ':(%d+)$')
  if not tail then
    return 0
  end
  return tonumber(string.sub(tail, 2))
end

local function store(key, st, h, now, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
    return
  end
  if st.expired > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - h.window))
  end
  local removed = (st.a0 - st.a) + (st.z0 - st.z)
  if removed > 0 then
    redis.call('ZREMRANGEBYRANK', key, -removed, -1)
  end
  if st.m > 0 then
    local at = int(now)
    local seq = 0
    local top = redis.call('ZREVRANGEBYSCORE', key, at, at, 'LIMIT', 0, 1)
    if top[1] then
      seq = member_seq(top[1]) + 1
    end
    local args = {}
    for i = 1, st.m do
      local s = string.format('%d', seq)
      args[#args + 1] = at
      args[#args + 1] = at .. ':' .. #s .. s
      seq = seq + 1
      if #args >= 2000 or i == st.m then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
  end
  expire(key, now, ttl)
end

return {load = load, step = step, store = store}
