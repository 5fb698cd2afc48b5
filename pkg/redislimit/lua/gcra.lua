-- gcra: the generic cell rate algorithm; one theoretical arrival time (TAT)
-- gives the token bucket's decisions in a single number.
--
-- Per hit: KEYS: the counter's key, a string holding TAT in µs since
-- 2024-01-01T00:00:00Z (limit.GCRAEpoch), 17 digits; the offset keeps µs
-- fractions exact. ARGV group (see evaluate.lua): limit L, window W µs,
-- capacity B.
--
-- Semantics (limit.stepGCRA): n = now - epoch; T = W/L µs per hit;
-- tau = T*B; tat = stored, or n; t0 = max(tat, n); nt = t0 + cost*T;
-- allowAt = nt - tau. Allowed iff allowAt <= n; a consuming hit writes
-- tat = nt. With after the TAT after the hit (max(n, t0 - cost*T) for a
-- refund): Remaining = max(0, floor((tau - (after - n))/T)),
-- reset = ceil(after - n), TTL the same; retry (denied) = ceil(allowAt - n).
-- A refund writes only a stored TAT that changes.

local epoch = 1704067200000000

local function load(key, h, now)
  local v = redis.call('GET', key)
  if not v then
    return {tat = 0}, false
  end
  return {tat = tonumber(v)}, true
end

local function step(st, ok, h, now, cost, refund)
  local n = now - epoch
  local period = h.window / h.limit
  local tau = period * h.cap
  local tat = st.tat
  if not ok then
    tat = n
  end
  local t0 = math.max(tat, n)
  local nt = t0 + cost * period
  local allow_at = nt - tau
  local after = t0
  local o = outcome(false, 0, 0, 0, false, 0)
  if refund then
    o.allowed = true
    after = math.max(n, t0 - cost * period)
    o.write = ok and after ~= tat
  elseif allow_at <= n then
    o.allowed = true
    if cost > 0 then
      after = nt
      o.write = true
    end
  else
    o.retry = math.ceil(allow_at - n)
  end
  o.remaining = math.max(0, math.floor((tau - (after - n)) / period))
  o.reset = math.ceil(after - n)
  o.ttl = o.reset
  return {tat = after}, o
end

local function store(key, st, h, now, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, num(st.tat), 'PXAT', expire_at(now, ttl))
  end
end

return {load = load, step = step, store = store}
