-- sliding_window: estimates the hits of the last window from N sub-window
-- counters (N = precision; 1 is the classic two-window estimate).
--
-- Per hit: KEYS: the counter's key, a hash {sub-window index -> count} with
-- counts > 0. ARGV group (see evaluate.lua), whose spec "code:L:W:B:N" gives limit L, window W µs,
-- precision N.
--
-- Semantics (limit.stepSlidingWindow): g = floor(W/N) µs, k = floor(now/g),
-- x = now - k*g. Indices < k - N no longer count (deleted when the hash is
-- written). full = sum of cnt[i] for k-N < i <= k, old = cnt[k-N],
-- est = full + ((old*(g-x))/g). Allowed iff est + cost <= L; a consuming hit
-- adds cost to cnt[k]. Remaining = max(0, floor(L - (est + cost))) when
-- allowed, max(0, floor(L - est)) when denied, and for a refund the same on
-- the estimate after it. reset = (m + N + 1)*g - now for the newest stored
-- index m (0 when none); the TTL is the same. retry (denied): the first
-- instant the estimate plus cost fits, found by walking only the stored
-- sub-windows (see retry_after). A refund takes cost from cnt[k], then from
-- older counted sub-windows (down to k - N) newest first, never below 0.
--
-- A charge (force: a usage hit) that does not fit adds cost to cnt[k] all
-- the same, up to count_cap(L) there, and writes, denied, with the retry of
-- the same hit on the counts after it.
--
-- Receives (see scriptSource in script.go): C, common.lua's helpers; it
-- uses no constant. Returns {load, step, store}.

local int, outcome, expire =
  C.int, C.outcome, C.expire
local count_cap = C.count_cap

local function load(key, h, now)
  local flat = redis.call('HGETALL', key)
  local cnt = {}
  for i = 1, #flat, 2 do
    local idx = tonumber(flat[i])
    if idx == nil then
      return error('floodgate: key ' .. key .. ' holds no sliding window (field ' .. flat[i] .. ')')
    end
    cnt[idx] = tonumber(flat[i + 1])
  end
  return {cnt = cnt, stored = cnt}, true
end

-- sorted returns the indices of cnt with a count > 0, ascending.
local function sorted(cnt)
  local idx = {}
  for i, c in pairs(cnt) do
    if c > 0 then
      idx[#idx + 1] = i
    end
  end
  table.sort(idx)
  return idx
end

local function estimate(cnt, k, n, g, now)
  local full, old = 0, 0
  for i, c in pairs(cnt) do
    if i == k - n then
      old = c
    elseif i <= k then
      full = full + c
    end
  end
  local x = now - k * g
  return full + old * (g - x) / g
end

-- retry_after mirrors limit.slidingWindowRetryAfter: the smallest d >= 1 µs
-- after which, with no further hits, est + cost <= limit.
local function retry_after(cnt, k, n, g, limit, cost, now)
  local counted = {}
  for _, i in ipairs(sorted(cnt)) do
    if i <= k then
      counted[#counted + 1] = i
    end
  end
  local total = 0
  for _, i in ipairs(counted) do
    total = total + cnt[i]
  end
  local gone, nxt = 0, 1
  local j = k
  while true do
    while nxt <= #counted and counted[nxt] < j - n do
      gone = gone + cnt[counted[nxt]]
      nxt = nxt + 1
    end
    local old = 0
    if nxt <= #counted and counted[nxt] == j - n then
      old = cnt[counted[nxt]]
    end
    local full = total - gone - old
    if full + cost <= limit then
      if old == 0 or full + old + cost <= limit then
        return math.max(now + 1, j * g) - now
      end
      local t = j * g + math.ceil(g - (limit - cost - full) * g / old)
      return math.max(1, t - now)
    end
    if old ~= 0 then
      nxt = nxt + 1
      gone = gone + old
    end
    j = counted[nxt] + n
  end
end

local function step(st, ok, h, now, cost, refund, force)
  local limit, n = h.limit, h.precision
  local g = math.floor(h.window / n)
  local k = math.floor(now / g)
  local cnt = {}
  for i, c in pairs(st.cnt) do
    if i >= k - n and c > 0 then
      cnt[i] = c
    end
  end
  local est = estimate(cnt, k, n, g, now)
  local o = outcome(false, 0, 0, 0, false, 0)
  if refund then
    o.allowed = true
    local idx = sorted(cnt)
    local taken = 0
    for p = #idx, 1, -1 do
      local i = idx[p]
      if taken >= cost then
        break
      end
      if i <= k then
        local take = math.min(cost - taken, cnt[i])
        cnt[i] = cnt[i] - take
        taken = taken + take
        if cnt[i] == 0 then
          cnt[i] = nil
        end
      end
    end
    o.write = taken > 0
    est = estimate(cnt, k, n, g, now)
    o.remaining = math.max(0, math.floor(limit - est))
  elseif est + cost <= limit then
    o.allowed = true
    if cost > 0 then
      cnt[k] = (cnt[k] or 0) + cost
      o.write = true
    end
    o.remaining = math.max(0, math.floor(limit - (est + cost)))
  elseif force then
    local add = math.min(cost, count_cap(limit) - (cnt[k] or 0))
    if add > 0 then
      cnt[k] = (cnt[k] or 0) + add
      o.write = true
    end
    est = estimate(cnt, k, n, g, now)
    if cost <= limit then
      o.retry = retry_after(cnt, k, n, g, limit, cost, now)
    end
  else
    o.remaining = math.max(0, math.floor(limit - est))
    o.retry = retry_after(cnt, k, n, g, limit, cost, now)
  end
  o.debt = math.max(0, math.ceil(est - limit))
  local newest = nil
  for i in pairs(cnt) do
    if newest == nil or i > newest then
      newest = i
    end
  end
  if newest ~= nil then
    o.reset = (newest + n + 1) * g - now
  end
  o.ttl = o.reset
  return {cnt = cnt, stored = st.stored}, o
end

-- store writes only the differences from the hash as loaded: dropped and
-- emptied sub-windows are deleted, changed ones set.
local function store(key, st, h, now, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
    return
  end
  local del, set = {}, {}
  for i in pairs(st.stored) do
    if st.cnt[i] == nil then
      del[#del + 1] = int(i)
    end
  end
  for i, c in pairs(st.cnt) do
    if st.stored[i] ~= c then
      set[#set + 1] = int(i)
      set[#set + 1] = int(c)
    end
  end
  -- Several thousand fields at once would exceed Lua's C stack in unpack.
  for p = 1, #del, 1000 do
    redis.call('HDEL', key, unpack(del, p, math.min(p + 999, #del)))
  end
  for p = 1, #set, 2000 do
    redis.call('HSET', key, unpack(set, p, math.min(p + 1999, #set)))
  end
  expire(key, now, ttl)
end

return {load = load, step = step, store = store}
