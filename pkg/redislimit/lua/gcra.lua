-- gcra: the generic cell rate algorithm; one theoretical arrival time (TAT)
-- gives the token bucket's decisions in a single number.
--
-- Per hit: KEYS: the counter's key, a string "<tat>:<L>": TAT as a whole
-- number of grid units since 2024-01-01T00:00:00Z (twin.GCRAEpoch), and
-- the limit L it was written with, which fixes the unit. A plain number
-- (written before units existed) is a TAT in µs. ARGV group (see
-- evaluate.lua), whose spec "code:L:W:B:N" gives limit L, window W µs,
-- capacity B.
--
-- Semantics (limit.stepGCRA): T = W/L µs per hit; with T = f*2^e, f in
-- [1/2, 1) (frexp), a grid unit is T/s µs where s = 2^max(e, 0), so T is
-- exactly s units and a unit is at most 1 µs (see grid). n = now - epoch,
-- u(m) = floor(m*s/T), nu = u(n). tat = stored (carried over from another
-- L by its time ahead of now, rounded up to a unit; see carry), or nu;
-- t0 = max(tat, nu); nt = t0 + cost*s; tau = B*s, all exact integers.
-- Allowed iff nt - tau <= nu; a consuming hit writes tat = nt. With after
-- the TAT after the hit (max(nu, t0 - cost*s) for a refund):
-- Remaining = max(0, floor((tau - (after - nu))/s)); reset = the smallest
-- d >= 0 with u(n + d) >= after, TTL the same; retry (denied) = the
-- smallest d >= 1 with u(n + d) >= nt - tau. A refund writes only a stored
-- state that changes. A charge (force: a usage hit) that does not fit moves
-- the TAT to min(nt, max(t0, nu + tau + u(MAX_DEBT))) all the same and
-- writes, denied, with the retry of the same hit on the state after it.
--
-- Receives (see scriptSource in script.go): C, common.lua's helpers, and K,
-- the generated constants; it reads GCRA_EPOCH and MAX_DEBT. Returns {load,
-- step, store}.

local num, int, outcome, expire_at, first_pass =
  C.num, C.int, C.outcome, C.expire_at, C.first_pass
local epoch = K.GCRA_EPOCH

-- grid returns T and s for a limit; limit 0 stands for a TAT in µs.
local function grid(limit, window)
  if limit == 0 then
    return 1, 1
  end
  local period = window / limit
  local _, e = math.frexp(period)
  return period, 2 ^ math.max(e, 0)
end

local function units(m, period, s)
  return math.floor(m * s / period)
end

local function load(key, h, now)
  local v = redis.call('GET', key)
  if not v then
    return {tat = 0, limit = 0}, false
  end
  local sep = string.find(v, ':', 1, true)
  if not sep then
    return {tat = tonumber(v), limit = 0}, true
  end
  return {tat = tonumber(string.sub(v, 1, sep - 1)), limit = tonumber(string.sub(v, sep + 1))}, true
end

local function carry(st, window, n, nu, period, s)
  local op, os = grid(st.limit, window)
  local debt = st.tat - units(n, op, os)
  if debt <= 0 then
    return nu
  end
  return nu + math.ceil(debt * op / os * s / period)
end

-- reach returns the smallest d >= 1 with u(n + d) >= target.
local function reach(target, n, period, s)
  local guess = math.ceil(target * period / s - n)
  return first_pass(guess, function(d) return units(n + d, period, s) >= target end)
end

local function step(st, ok, h, now, cost, refund, force)
  local period, s = grid(h.limit, h.window)
  local n = now - epoch
  local nu = units(n, period, s)
  local tat = nu
  if ok then
    tat = st.tat
    if st.limit ~= h.limit then
      tat = carry(st, h.window, n, nu, period, s)
    end
  end
  local t0 = math.max(tat, nu)
  local inc = cost * s
  local tau = h.cap * s
  local nt = t0 + inc
  local after = t0
  local o = outcome(false, 0, 0, 0, false, 0)
  if refund then
    o.allowed = true
    after = math.max(nu, t0 - inc)
    o.write = ok and (after ~= st.tat or h.limit ~= st.limit)
  elseif nt - tau <= nu or force then
    o.allowed = nt - tau <= nu
    if cost > 0 then
      after = math.min(nt, math.max(t0, nu + tau + units(K.MAX_DEBT, period, s)))
      o.write = true
    end
    if not o.allowed and cost <= h.cap then
      o.retry = reach(after + inc - tau, n, period, s)
    end
  else
    o.retry = reach(nt - tau, n, period, s)
  end
  o.remaining = math.max(0, math.floor((tau - (after - nu)) / s))
  o.debt = math.max(0, math.ceil((after - nu - tau) / s))
  if after > nu then
    o.reset = reach(after, n, period, s)
  end
  o.ttl = o.reset
  return {tat = after, limit = h.limit}, o
end

local function store(key, st, h, now, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, num(st.tat) .. ':' .. int(st.limit), 'PXAT', expire_at(now, ttl))
  end
end

return {load = load, step = step, store = store}
