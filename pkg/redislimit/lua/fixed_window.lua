-- fixed_window: counts hits in the window [start, end) that holds now.
--
-- Per hit: KEYS: the counter's key. A plain window's counter is the
-- integer tag * COUNT_SPAN + count (common.lua: the tag names the window),
-- a calendar window's the string "<window start µs>:<count>", whose start
-- tells months and years apart where a tag could not; each reads the
-- other's layout, and a plain window reads the string of earlier releases
-- and the hash {s = window start, n = count} before it (see pair_of).
-- ARGV group (see evaluate.lua), whose spec "code:L:W:B:N" gives limit L, window W µs, and, for calendar
-- windows, four boundaries b1 < b2 < b3 < b4 (µs) computed in Go around its
-- own clock; the window is the one of [b1,b2), [b2,b3), [b3,b4) holding
-- Redis's now, and it is an error if none does. Without a calendar,
-- start = floor(now/W)*W and end = start + W.
--
-- Semantics (limit.stepFixedWindow): n is the stored count if the stored
-- window is this one, else 0. Allowed iff n + cost <= L; a consuming hit
-- sets n = n + cost and writes (start, n) with TTL end - now.
-- Remaining = max(0, L - n) after the hit; reset = end - now; retry
-- (denied) = end - now. A refund sets n = max(0, n - cost), writing only if
-- the stored window is this one and n > 0. A charge (force: a usage hit)
-- that does not fit sets n = max(n, min(n + cost, count_cap(L))) and
-- writes, denied.
--
-- Receives (see scriptSource in script.go): C, common.lua's helpers; it
-- uses no constant. Returns {load, step, store}.

local int, outcome, pair_of, store_pair = C.int, C.outcome, C.pair_of, C.store_pair
local COUNT_SPAN, LIMIT_MAX, window_tag, fixed_of = C.COUNT_SPAN, C.LIMIT_MAX, C.window_tag, C.fixed_of
local count_cap = C.count_cap

local function window(h, now)
  if h.cal then
    for i = 1, #h.cal - 1 do
      if h.cal[i] <= now and now < h.cal[i + 1] then
        return h.cal[i], h.cal[i + 1]
      end
    end
    return error('floodgate: Redis time ' .. int(now) .. ' is outside the calendar windows ' ..
      int(h.cal[1]) .. '..' .. int(h.cal[#h.cal]) .. ' computed by the server: their clocks disagree')
  end
  local start = math.floor(now / h.window) * h.window
  return start, start + h.window
end

-- A state's expires flag says that its key is a string already set to
-- expire at the end of the state's window: every write in a window sets
-- the same instant (ceil(end/1000) ms, see expire_at), so a later write in
-- it keeps the key's TTL (KEEPTTL) instead of setting it again. A state
-- holds its window's tag (an integer counter) or its start (a string).
local function load(key, h, now)
  local v = redis.pcall('GET', key)
  local tag, n = fixed_of(v)
  if tag then
    return {tag = tag, count = n, expires = true}, true
  end
  local start, count, str = pair_of(key, v, 's', 'n')
  if not start then
    return {start = 0, count = 0}, false
  end
  return {start = start, count = count, expires = str}, true
end

local function step(st, ok, h, now, cost, refund, force)
  local start, stop = window(h, now)
  local limit = h.limit
  if limit > LIMIT_MAX and not h.cal then
    return error('floodgate: fixed window limit ' .. int(limit) .. ' above ' .. int(LIMIT_MAX))
  end
  local tag = not h.cal and window_tag(start, h.window) or nil
  -- The stored window is this one: a counter of the same tag, or a string
  -- of the same start.
  local same = false
  if ok and st.tag then
    same = st.tag == tag
  elseif ok then
    same = st.start == start
  end
  local n = 0
  if same then
    n = st.count
  end
  local o = outcome(false, 0, stop - now, 0, false, stop - now)
  local fits = n + cost <= limit
  if refund then
    o.allowed = true
    if n > 0 and cost > 0 then
      n = math.max(0, n - cost)
      o.write = true
    end
  elseif fits then
    o.allowed = true
    if cost > 0 then
      n = n + cost
      o.write = true
    end
  elseif force then
    n, o.write = math.max(n, math.min(n + cost, count_cap(limit))), true
  end
  if not o.allowed then
    o.retry = stop - now
  end
  o.remaining, o.debt = math.max(0, limit - n), math.max(0, n - limit)
  return {start = start, tag = tag, count = n, expires = same and st.expires}, o
end

local function store(key, st, h, now, ttl)
  local v
  if st.tag then
    v = st.tag * COUNT_SPAN + st.count
  else
    v = string.format('%d:%d', st.start, st.count)
  end
  if st.expires then
    redis.call('SET', key, v, 'KEEPTTL')
  else
    store_pair(key, v, now, ttl)
  end
end

return {load = load, step = step, store = store}
