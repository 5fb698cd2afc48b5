-- sliding_log: keeps the time of every admitted hit of the last window.
--
-- Per hit: KEYS: the counter's key. ARGV group (see evaluate.lua), whose spec "code:L:W:B:N" gives limit L,
-- window W µs.
--
-- Semantics (limit.stepSlidingLog): entries with time <= now - W no longer
-- count (removed when the set is written); n is the number of hits left.
-- Allowed iff n + cost <= L; a consuming hit adds cost hits at now.
-- Remaining = max(0, L - n) after the hit; reset = newest + W - now (0 when
-- empty), and the TTL is the same; retry (denied) = e + W - now where e is
-- the time of the (n + cost - L)-th oldest hit. A refund removes the
-- min(cost, n) newest hits.
--
-- Storage: one sorted set, so that Redis Cluster sees one key per counter.
-- Hits of one instant share one entry that carries their count: member
-- "<count>@<time µs>", scored by the time. A member without "@" was written
-- before entries had counts ("<time>:<seq>") and is one hit. One more
-- member, "n<total>" at score -inf, where no entry can be, holds the number
-- of hits of all the entries; the ranges below start at "(-inf" to leave it
-- out. So a call costs the same for 1 hit as for 2,000,000, and the entries
-- of a counter are at most the calls it admitted in a window, so at most L:
-- pkg/rules refuses a sliding_log above 2,000 per window (that cap keeps
-- the worst call, below, near a millisecond).
--
-- Work per call: n is the total less the hits that expired, read from
-- whichever side of the window boundary has fewer entries, so a call reads
-- about what expired since the last write, and never more than half the
-- entries. Finding the i-th oldest hit (retry, reset after a refund, the
-- entry a refund cuts) walks the entries from the nearer end, so at most
-- half of them. At the cap (2,000 entries of one hit, ~118 B each: 236 KB
-- per counter, MEMORY USAGE), the worst calls, every entry expiring at
-- once, a retry or a refund at the middle of the log, ran for 0.2 to 1.2
-- ms inside Redis 7 on a 2-core machine busy with other work (load 6 to
-- 10; BenchmarkSlidingLogWorstCase, TestSlidingLogBoundedWork logs them).
-- Prefix sums in the members would make the walks O(log n), at the cost of
-- rewriting the entries later than now when the clock goes back.
--
-- The working state counts hits in three runs in time order, a (stored,
-- time <= now), m (added by this call, at now) and z (stored, time > now,
-- left by a clock that went back), and finds single hits by walking the
-- entries when it needs their times. Removals take the newest first (z,
-- then m, then a), so the stored hits removed are always the newest ones.
--
-- A charge (force: a usage hit) that does not fit adds its entries all the
-- same, up to count_cap(L) in the log, and writes, denied, with the retry
-- of the same hit on the log after it.
--
-- Receives (see scriptSource in script.go): C, common.lua's helpers; it
-- uses no constant. Returns {load, step, store}.

local int, outcome, expire =
  C.int, C.outcome, C.expire
local count_cap = C.count_cap

-- count_of returns the hits of an entry; a count of one digit, the
-- common case, without making strings.
local byte = string.byte
local function count_of(member)
  local d, at = byte(member, 1, 2)
  if at == 64 then -- "<digit>@"
    return d - 48
  end
  local p = string.find(member, '@', 1, true)
  if p then
    return tonumber(string.sub(member, 1, p - 1))
  end
  return 1
end

-- hits_in returns the hits of the entries scored within min and max
-- (ZRANGEBYSCORE bounds).
local function hits_in(key, min, max)
  local r = redis.call('ZRANGEBYSCORE', key, min, max)
  local s = 0
  for i = 1, #r do
    s = s + count_of(r[i])
  end
  return s
end

local function load(key, h, now)
  local lo, at = int(now - h.window), int(now)
  local st = {key = key, lo = lo, m = 0, seen = {}}
  local card = redis.call('ZCARD', key)
  if card == 0 then
    st.base, st.xe, st.le, st.live, st.a0, st.z0, st.a, st.z = 0, 0, 0, 0, 0, 0, 0, 0
    return st, true
  end
  local t = redis.call('ZRANGEBYSCORE', key, '-inf', '-inf')[1]
  local xe = redis.call('ZCOUNT', key, '(-inf', lo)
  local ze = redis.call('ZCOUNT', key, '(' .. at, '+inf')
  local base = xe
  if t then
    base = base + 1
  end
  local le = card - base
  local live
  if t and xe < le then
    live = tonumber(string.sub(t, 2)) - hits_in(key, '(-inf', lo)
  else
    -- No total (a log written before entries had counts) or more expired
    -- entries than live ones.
    live = hits_in(key, '(' .. lo, '+inf')
  end
  local z = 0
  if ze > 0 then
    if ze <= le - ze then
      z = hits_in(key, '(' .. at, '+inf')
    else
      z = live - hits_in(key, '(' .. lo, at)
    end
  end
  st.total, st.base, st.xe, st.le, st.live = t, base, xe, le, live
  st.a0, st.z0, st.a, st.z = live - z, z, live - z, z
  return st, true
end

-- Walks read FIRST entries per command, then twice as many each time up to
-- MOST: the entry wanted is often at the end a walk starts from (the
-- newest, for the reset).
local FIRST, MOST = 8, 256

-- locate finds the stored entry that holds the i-th oldest stored hit of
-- the window (1 <= i <= st.live), walking from the nearer end. It returns
-- the entry's score (a string, exact), its rank among the window's
-- entries (0 is the oldest), its member and the stored hits before it.
-- The last entry found is remembered (the stored set does not change
-- before store): a refund's reset and its cut are the same entry or
-- neighbours.
local function locate(st, i)
  local key, seen = st.key, st.seen
  if seen.member then
    local c = count_of(seen.member)
    if i > seen.before and i <= seen.before + c then
      return seen.score, seen.rank, seen.member, seen.before
    end
    if i == seen.before + c + 1 then
      local r = redis.call('ZRANGE', key, st.base + seen.rank + 1, st.base + seen.rank + 1, 'WITHSCORES')
      seen.score, seen.rank, seen.member, seen.before = r[2], seen.rank + 1, r[1], seen.before + c
      return seen.score, seen.rank, seen.member, seen.before
    end
  end
  local score, rank, member, before
  local off, size = 0, FIRST
  if i <= st.live - i then
    before = 0
    while not member do
      local r = redis.call('ZRANGE', key, st.base + off, st.base + off + size - 1, 'WITHSCORES')
      for j = 1, #r, 2 do
        local c = count_of(r[j])
        if before + c >= i then
          score, rank, member = r[j + 1], off + (j - 1) / 2, r[j]
          break
        end
        before = before + c
      end
      off, size = off + size, math.min(2 * size, MOST)
    end
  else
    local after = 0
    local want = st.live - i + 1 -- the hit's place from the newest
    while not member do
      local r = redis.call('ZREVRANGE', key, off, off + size - 1, 'WITHSCORES')
      for j = 1, #r, 2 do
        local c = count_of(r[j])
        if after + c >= want then
          score, rank, member, before = r[j + 1], st.le - 1 - (off + (j - 1) / 2), r[j], st.live - after - c
          break
        end
        after = after + c
      end
      off, size = off + size, math.min(2 * size, MOST)
    end
  end
  seen.score, seen.rank, seen.member, seen.before = score, rank, member, before
  return score, rank, member, before
end

-- nth_oldest returns the time of the i-th oldest hit (1-based).
local function nth_oldest(st, now, i)
  if i <= st.a then
    return tonumber((locate(st, i)))
  elseif i <= st.a + st.m then
    return now
  end
  return tonumber((locate(st, st.a0 + (i - st.a - st.m))))
end

local function newest(st, now)
  if st.z > 0 then
    return tonumber((locate(st, st.a0 + st.z)))
  elseif st.m > 0 then
    return now
  end
  return tonumber((locate(st, st.a)))
end

local function step(st, ok, h, now, cost, refund, force)
  local limit, w = h.limit, h.window
  local nst = {}
  for k, v in pairs(st) do
    nst[k] = v
  end
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
  elseif force then
    local add = math.min(cost, count_cap(limit) - n)
    if add > 0 then
      nst.m = nst.m + add
      n = n + add
      o.write = true
    end
    if cost <= limit then
      o.retry = nth_oldest(nst, now, n + cost - limit) + w - now
    end
  else
    o.retry = nth_oldest(nst, now, n + cost - limit) + w - now
  end
  o.remaining, o.debt = math.max(0, limit - n), math.max(0, n - limit)
  if n > 0 then
    o.reset = newest(nst, now) + w - now
  end
  o.ttl = o.reset
  return nst, o
end

local function store(key, st, h, now, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
    return
  end
  -- The newest stored hits a refund removed: whole entries by rank, and
  -- the count of the entry where the cut falls.
  local keep = st.a + st.z
  if keep < st.live then
    local score, rank, member, before = locate(st, keep + 1)
    redis.call('ZREMRANGEBYRANK', key, st.base + rank, st.base + st.le - 1)
    if keep > before then
      redis.call('ZADD', key, score, int(keep - before) .. '@' .. score)
    end
  end
  if st.xe > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '(-inf', st.lo)
  end
  if st.m > 0 then
    local at = int(now)
    local c = st.m
    local same = redis.call('ZRANGEBYSCORE', key, at, at)
    for i = 1, #same do
      if string.find(same[i], '@', 1, true) then
        c = c + count_of(same[i])
        redis.call('ZREM', key, same[i])
        break
      end
    end
    redis.call('ZADD', key, at, int(c) .. '@' .. at)
  end
  local total = 'n' .. int(st.a + st.m + st.z)
  if total ~= st.total then
    if st.total then
      redis.call('ZREM', key, st.total)
    end
    redis.call('ZADD', key, '-inf', total)
  end
  expire(key, now, ttl)
end

return {load = load, step = step, store = store}
